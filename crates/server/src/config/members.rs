//! `initial_cluster`: the members of the cluster.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use super::values::invalid;
use super::ConfigError;

/// One member of `initial_cluster`: `name=id@peer-address`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The member's name.
    pub name: String,
    /// Its Raft id.
    pub id: u64,
    /// Its Raft peer address.
    pub peer_addr: SocketAddr,
}

/// Parses `name=id@host:port`.
pub(super) fn parse_member(s: &str) -> Result<Member, ConfigError> {
    let bad = || ConfigError::Invalid {
        key: "initial_cluster",
        message: format!("`{s}`: expected name=id@ip:port"),
    };
    let (name, rest) = s.split_once('=').ok_or_else(bad)?;
    let (id, peer) = rest.split_once('@').ok_or_else(bad)?;
    let id: u64 = id.parse().map_err(|_| bad())?;
    let peer_addr: SocketAddr = peer.parse().map_err(|_| bad())?;
    if name.is_empty() || id == 0 {
        return Err(bad());
    }
    Ok(Member {
        name: name.to_owned(),
        id,
        peer_addr,
    })
}

pub(super) fn check_members(members: &[Member], id: u64, name: &str) -> Result<(), ConfigError> {
    let mut ids = BTreeSet::new();
    let mut names = BTreeSet::new();
    for m in members {
        if !ids.insert(m.id) {
            return invalid("initial_cluster", &format!("id {} appears twice", m.id));
        }
        if !names.insert(m.name.as_str()) {
            return invalid("initial_cluster", &format!("name {} appears twice", m.name));
        }
    }
    match members.iter().find(|m| m.id == id) {
        None => invalid(
            "initial_cluster",
            &format!("does not list this node (node.id = {id})"),
        ),
        Some(m) if m.name != name => invalid(
            "node.name",
            &format!("`{name}` but initial_cluster calls id {id} `{}`", m.name),
        ),
        Some(_) => Ok(()),
    }
}
