//! Cluster membership as a node sees it: live brokers and their addresses, members added and
//! removed at runtime, reconciling the Raft voters with the metadata, finished reassignments,
//! and the admin addresses nodes announce.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::core::membership::{moving_partitions, reassignment_done};
use crate::metadata::MetaCommand;
use crate::replication::group::GroupInput;
use crate::replication::ids::{group_id_for, group_id_for_topic};
use crate::replication::peer_guard::PeerStats;
use crate::replication::router::PeerConnection;

use super::Node;

/// Whether member `id` is this node or among the connected brokers `live`.
pub(super) fn kafka_live_or_self(id: u64, me: u64, live: &[(u64, String)]) -> bool {
    id == me || live.iter().any(|(l, _)| *l == id)
}

impl Node {
    /// The leader of partition `partition` of incarnation `incarnation` of topic `name`, and
    /// its term, as a node that does not host it knows it: from the leaders' reports (see
    /// [`crate::replication::leaders`]). The leader may have died since; callers check it is
    /// connected.
    pub fn reported_leader(
        &self,
        name: &str,
        incarnation: u64,
        partition: u32,
    ) -> Option<(u64, u64)> {
        let group = if incarnation == 0 {
            group_id_for(name)
        } else {
            group_id_for_topic(name, incarnation, partition)
        };
        self.registry.leaders.leader_of(group)
    }

    /// What the peer port refused so far (connections and Raft messages).
    pub fn peer_stats(&self) -> &PeerStats {
        &self.registry.stats
    }

    /// Live brokers: this node and every peer connected to it now, with the Kafka address
    /// each announced (`HOST:PORT`, of its first listener), by node id.
    pub fn live_brokers(&self) -> Vec<(u64, String)> {
        let mut out = vec![(self.config.id, self.config.kafka_advertised.clone())];
        out.extend(self.live_peer_addresses(|c| Some(c.advertised.clone())));
        out.sort();
        out
    }

    /// Live brokers as a client connected to listener `listener` must see them: each node's
    /// address on the listener of that name (as Kafka answers with the client's listener
    /// name), by node id. A peer without such a listener is left out; a peer of an earlier
    /// release (no listeners announced) is listed with its one advertised address.
    pub fn live_brokers_on(&self, listener: &str) -> Vec<(u64, String)> {
        let mut out = Vec::new();
        if let Some(own) = self
            .config
            .kafka_listeners()
            .into_iter()
            .find(|l| l.name == listener)
        {
            out.push((self.config.id, own.advertised));
        }
        out.extend(self.live_peer_addresses(|c| c.address_on(listener).map(str::to_string)));
        out.sort();
        out
    }

    /// Whether every peer connected now has sent this node a leader report since it started
    /// (see [`crate::replication::leaders`]): until then a partition hosted here whose replica
    /// has not heard from its leader yet may have no leader to name.
    pub fn leader_reports_heard(&self) -> bool {
        self.live_peer_addresses(|_| Some(String::new()))
            .iter()
            .all(|(id, _)| self.registry.leaders.has_reported(*id))
    }

    /// Every connected peer that is still a member (not this node), with the address
    /// `address` finds on its newest connection (peers for which it finds none are left out).
    fn live_peer_addresses(
        &self,
        address: impl Fn(&PeerConnection) -> Option<String>,
    ) -> Vec<(u64, String)> {
        let peers = self
            .registry
            .peers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let removed = self.removed_members();
        peers
            .iter()
            .filter(|(id, _)| **id != self.config.id && !removed.contains(id))
            .filter_map(|(id, open)| Some((*id, address(open.last()?)?)))
            .collect()
    }

    /// The members whose removal finished: leaving, and no longer voters of the metadata
    /// group. They are not listed as brokers.
    pub(super) fn removed_members(&self) -> Vec<u64> {
        let voters = self.metadata_voters_now();
        self.metadata()
            .member_records
            .iter()
            .filter(|(id, m)| m.leaving && !voters.contains(id))
            .map(|(id, _)| *id)
            .collect()
    }

    /// The metadata group's voters as this node's replica of it knows them.
    pub(super) fn metadata_voters_now(&self) -> Vec<u64> {
        self.metadata_group()
            .map(|g| {
                g.visible()
                    .voters
                    .iter()
                    .copied()
                    .filter(|id| *id != 0)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The members new replicas may be placed on: those of the replicated member list that
    /// are not leaving (see [`crate::replication::membership`]), ascending.
    pub fn placement_members(&self) -> Vec<u64> {
        self.metadata().active_members()
    }

    /// The configured default replication factor, at most the members new replicas may be
    /// placed on.
    pub fn default_replication_factor(&self) -> usize {
        self.config
            .default_replication_factor()
            .min(self.placement_members().len())
            .max(1)
    }

    /// Every member the replicated metadata knows, with its state (see
    /// [`crate::replication::membership::MemberState`]), ascending by id.
    pub fn members(&self) -> Vec<crate::replication::membership::MemberView> {
        use crate::replication::membership::{MemberState, MemberView};
        let voters = self.metadata_voters_now();
        let live = self.live_brokers();
        let meta = self.metadata();
        meta.member_records
            .iter()
            .map(|(id, m)| {
                let voter = voters.contains(id);
                let state = match (m.leaving, voter) {
                    (false, true) => MemberState::Voter,
                    (false, false) => MemberState::Joining,
                    (true, true) => MemberState::Leaving,
                    (true, false) => MemberState::Removed,
                };
                let configured = self.config.member(*id).map(|c| c.peer_addr.to_string());
                let kafka_live = live.iter().find(|(l, _)| l == id).map(|(_, a)| a.clone());
                MemberView {
                    id: *id,
                    name: m.name.clone(),
                    peer_addr: if m.peer_addr.is_empty() {
                        configured.unwrap_or_default()
                    } else {
                        m.peer_addr.clone()
                    },
                    kafka_addr: kafka_live.unwrap_or_else(|| m.kafka_addr.clone()),
                    state,
                    live: kafka_live_or_self(*id, self.config.id, &live),
                    replicas: meta
                        .topics
                        .values()
                        .map(|t| t.replicas.iter().filter(|r| r.contains(id)).count() as u64)
                        .sum(),
                }
            })
            .collect()
    }

    /// Adds member `id` (see [`crate::replication::membership`]) and waits until it is a voter of
    /// the metadata group: it must be running (started with `join = true`) to catch up.
    pub async fn add_member(
        &self,
        id: u64,
        name: String,
        peer_addr: std::net::SocketAddr,
        kafka_addr: String,
        timeout: Duration,
    ) -> Result<(), crate::replication::membership::MembershipError> {
        use crate::replication::membership::MembershipError;
        let deadline = tokio::time::Instant::now() + timeout;
        if let Some(m) = self.metadata().member_records.get(&id) {
            if m.leaving {
                return Err(MembershipError::Removed(id));
            }
            if m.peer_addr != peer_addr.to_string() && !m.peer_addr.is_empty() {
                return Err(MembershipError::Conflict(id, m.peer_addr.clone()));
            }
        }
        let cmd = MetaCommand::AddMember {
            id,
            name,
            peer_addr: peer_addr.to_string(),
            kafka_addr,
            members: self.metadata().member_records.clone(),
        };
        self.metadata_proposer()
            .propose(&cmd, timeout)
            .await
            .map_err(MembershipError::Propose)?;
        loop {
            if self.metadata_voters_now().contains(&id) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(MembershipError::Timeout("still a learner of the metadata group: is it running with join = true and reachable?"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Removes member `id` (see [`crate::replication::membership`]): its replicas move to other
    /// members, then it leaves the metadata group. Waits until both are done.
    pub async fn remove_member(
        &self,
        id: u64,
        timeout: Duration,
    ) -> Result<(), crate::replication::membership::MembershipError> {
        use crate::replication::membership::MembershipError;
        let deadline = tokio::time::Instant::now() + timeout;
        {
            let meta = self.metadata();
            let Some(m) = meta.member_records.get(&id) else {
                return Err(MembershipError::Unknown(id));
            };
            if !m.leaving {
                let active = meta.active_members();
                if active.len() < 2 {
                    return Err(MembershipError::LastMember);
                }
                // Every replica it holds needs a member without a replica of that partition.
                for (name, t) in &meta.topics {
                    for (p, r) in t.replicas.iter().enumerate() {
                        if r.contains(&id) && !active.iter().any(|a| *a != id && !r.contains(a)) {
                            return Err(MembershipError::NoRoom(format!("{name}-{p}")));
                        }
                    }
                }
            }
        }
        let members = self.metadata().member_records.clone();
        self.metadata_proposer()
            .propose(&MetaCommand::RemoveMember { id, members }, timeout)
            .await
            .map_err(MembershipError::Propose)?;
        loop {
            let hosts = self.metadata().hosts_replicas(id);
            if !hosts && !self.metadata_voters_now().contains(&id) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(MembershipError::Timeout(if hosts {
                    "its replicas are still moving"
                } else {
                    "still a voter of the metadata group"
                }));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Makes this node match the replicated member list and replica lists (see
    /// [`crate::replication::membership`]): admits and dials every member, opens the partitions it
    /// is a new replica of (as a learner), tells the groups being reassigned and the metadata
    /// group their target voters, and drops the partitions whose reassignment away from this
    /// node finished. Only once the metadata replay at start is done: targets from a
    /// partial state could undo later changes.
    pub fn reconcile_membership(&self) {
        let replayed = self
            .retention_allowed
            .load(std::sync::atomic::Ordering::Acquire);
        let (records, metadata_voters, topics) = {
            let meta = self.metadata();
            (
                meta.member_records.clone(),
                meta.membership_changed.then(|| meta.metadata_voters()),
                meta.topics
                    .iter()
                    .map(|(n, t)| (n.clone(), t.clone()))
                    .collect::<Vec<_>>(),
            )
        };
        for (id, m) in &records {
            let Ok(addr) = m.peer_addr.parse::<std::net::SocketAddr>() else {
                continue;
            };
            if *id == self.config.id {
                continue;
            }
            if self.config.member(*id).is_none() {
                self.remember_peer(*id, addr);
            }
            self.guard.add_member(*id, addr);
            self.peers.add_peer(*id, addr);
            self.registry.liveness.add_peer(*id);
            self.registry.leaders.add_peer(*id);
            let mut ping = self.ping_peers.write().unwrap_or_else(|e| e.into_inner());
            if !ping.contains(id) {
                ping.push(*id);
            }
        }
        if !replayed {
            return;
        }
        if let (Some(g), Some(voters)) = (self.metadata_group(), metadata_voters) {
            let _ = g.inbox.try_send(GroupInput::SetVoters(voters));
        }
        crate::core::membership::reconcile_replicas(&mut NodeReplicas(self), &topics);
    }

    /// Saves a runtime member's address in `known_peers` (when new or changed), so a restart
    /// admits and dials it at once.
    pub(super) fn remember_peer(&self, id: u64, addr: std::net::SocketAddr) {
        let mut known = self.known_peers.lock().unwrap_or_else(|e| e.into_inner());
        if known.get(&id) == Some(&addr) {
            return;
        }
        known.insert(id, addr);
        if let Err(e) = crate::replication::known_peers::save(&self.config.data_dir, &known) {
            tracing::warn!(
                peer = id,
                "saving {} failed: {e}",
                crate::replication::known_peers::KNOWN_PEERS_FILE
            );
        }
    }

    /// The partitions this node leads whose reassignment reached its new replicas (see
    /// [`crate::replication::membership`]): (name, incarnation, partition).
    pub(super) fn settled_reassignments(&self) -> Vec<(String, u64, u32)> {
        let moving: Vec<(String, u64, u32, Vec<u64>)> = {
            let meta = self.metadata();
            meta.topics
                .iter()
                .flat_map(|(n, t)| {
                    moving_partitions(t)
                        .into_iter()
                        .map(move |(p, new)| (n.clone(), t.created_at_index, p, new))
                })
                .collect()
        };
        moving
            .into_iter()
            .filter_map(|(name, incarnation, p, new)| {
                let v = self
                    .partition(&name, p)
                    .filter(|s| s.incarnation == incarnation)?
                    .visible();
                reassignment_done(
                    self.config.id,
                    &new,
                    v.leader,
                    v.membership_settled,
                    &v.voters,
                )
                .then_some((name, incarnation, p))
            })
            .collect()
    }

    /// Records node `id`'s admin address (applied from the metadata log).
    pub fn note_admin_address(&self, id: u64, address: String) {
        self.admin_addresses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, address);
    }

    /// Every node's admin address as announced (this node's own once its announcement is
    /// applied).
    pub fn admin_addresses(&self) -> BTreeMap<u64, String> {
        self.admin_addresses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// The node as the host of the core's replica reconciliation
/// ([`crate::core::membership::reconcile_replicas`]).
struct NodeReplicas<'a>(&'a Node);

impl crate::core::membership::ReplicaHost for NodeReplicas<'_> {
    type OpenError = super::NodeError;

    fn me(&self) -> u64 {
        self.0.config.id
    }

    fn open_topic(
        &mut self,
        name: &str,
        incarnation: u64,
        replicas: &[Vec<u64>],
    ) -> Result<(), super::NodeError> {
        self.0.open_topic(name, incarnation, replicas)
    }

    fn open_partitions(&self, name: &str) -> Vec<(u32, u64)> {
        self.0
            .partitions(name)
            .iter()
            .map(|s| (s.partition, s.incarnation))
            .collect()
    }

    fn set_voters(&mut self, name: &str, partition: u32, voters: Vec<u64>) {
        if let Some(stream) = self.0.partition(name, partition) {
            let _ = stream.inbox.try_send(GroupInput::SetVoters(voters));
        }
    }

    fn drop_partition(&mut self, name: &str, incarnation: u64, partition: u32) {
        self.0.drop_partition(name, incarnation, partition);
    }
}
