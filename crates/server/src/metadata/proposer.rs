//! The one path by which a node writes to the replicated metadata: [`MetadataProposer`].
//!
//! It owns what every proposal needs and no caller should repeat: a request id unique across
//! nodes and restarts (node id, a nonce drawn at start, a counter), the entry's encoding (JSON
//! while a node of an earlier release is in the cluster, protobuf otherwise), and the retries
//! while no leader is known or a proposal died with its leader, deduplicated by the request id
//! ([`ClusterMeta::was_applied`]). It works over the metadata group's [`LogStream`] handle, the
//! peers' protocol versions ([`PeerVersions`]) and the metadata state this node applies.
//!
//! Callers build the [`MetaCommand`] themselves and propose it here; there is no per-command
//! wrapper (see "Adding a metadata command" in the crate README). Operations with logic of
//! their own stay next to the state they need: topic creation (placement, limits) and the
//! producer id allocation (it reads its result back by request id) are on the node
//! (`node/metadata_proposals.rs`), which knows the members and the open partitions.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;

use super::{ClusterMeta, MetaCommand, MetaEntry, RequestId};
use crate::replication::group::AppendError;
use crate::replication::peer_wire::PeerVersions;
use crate::replication::stream::LogStream;

/// Pause between attempts to propose a metadata command while no leader is known.
pub const METADATA_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// A committed metadata proposal: where it was applied and the id it was stored under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proposed {
    /// The Raft index it was applied at (this node had applied it when the proposal returned).
    pub index: u64,
    /// The request id it was stored with: the key of results it left for the proposer to read
    /// back (e.g. [`ClusterMeta::allocations`]).
    pub request: RequestId,
}

/// Writes metadata commands through the metadata group, from any node (followers forward them
/// to the leader). One per node; shared by everything on the node that changes cluster state.
pub struct MetadataProposer {
    /// This node's id (the first part of every request id).
    node_id: u64,
    /// Drawn at start: with `seq`, makes request ids unique across restarts.
    boot_nonce: u64,
    /// Counts the requests of this process.
    seq: AtomicU64,
    /// The metadata group's handle, while it is open.
    group: Mutex<Option<LogStream>>,
    /// The protocol version each peer last spoke (chooses the entries' encoding).
    peer_versions: Arc<PeerVersions>,
    /// The metadata as applied on this node (answers whether a request was applied).
    meta: Arc<RwLock<ClusterMeta>>,
}

impl MetadataProposer {
    /// A proposer for node `node_id`, whose request ids carry `boot_nonce`; it has no metadata
    /// group until [`MetadataProposer::set_group`] gives it one.
    pub fn new(
        node_id: u64,
        boot_nonce: u64,
        peer_versions: Arc<PeerVersions>,
        meta: Arc<RwLock<ClusterMeta>>,
    ) -> Self {
        MetadataProposer {
            node_id,
            boot_nonce,
            seq: AtomicU64::new(0),
            group: Mutex::new(None),
            peer_versions,
            meta,
        }
    }

    /// The metadata group's handle (`None` before it opened and after the node stopped).
    pub fn group(&self) -> Option<LogStream> {
        self.group.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Sets (when the metadata group opens) or clears (when the node stops) the handle
    /// proposals go through.
    pub fn set_group(&self, group: Option<LogStream>) {
        *self.group.lock().unwrap_or_else(|e| e.into_inner()) = group;
    }

    /// A new request id, unique across nodes and restarts.
    fn next_request_id(&self) -> RequestId {
        RequestId {
            node: self.node_id,
            boot: self.boot_nonce,
            seq: self.seq.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// `cmd` under a new request id, encoded for every node in the cluster: a node of an
    /// earlier release cannot read protobuf entries (it would skip them and its metadata would
    /// diverge), so while one is in the cluster, commands are written in JSON.
    fn entry(&self, cmd: &MetaCommand) -> (RequestId, Bytes) {
        let entry = MetaEntry {
            request: self.next_request_id(),
            command: cmd.clone(),
        };
        let data = if self.peer_versions.any_earlier_release() {
            entry.encode_json()
        } else {
            entry.encode()
        };
        (entry.request, Bytes::from(data))
    }

    /// Commits `cmd` through the metadata group and returns where it was applied and its
    /// request id; by then this node has applied it. Retries until `timeout` while no leader
    /// is known or an attempt was lost with its leader; every retry carries the same request
    /// id, so the command is applied once even when an attempt reported lost committed after
    /// all.
    pub async fn propose(
        &self,
        cmd: &MetaCommand,
        timeout: Duration,
    ) -> Result<Proposed, AppendError> {
        let (request, data) = self.entry(cmd);
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let group = self.group().ok_or(AppendError::Stopped)?;
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match group.append_meta(data.clone(), left).await {
                Ok(appended) => {
                    return Ok(Proposed {
                        index: appended.raft_index,
                        request,
                    })
                }
                // The entry is applied already (an earlier attempt committed after it was
                // reported lost): done.
                Err(_) if self.was_applied(&request) => {
                    let index = self.group().map_or(0, |g| g.visible().applied_index);
                    return Ok(Proposed { index, request });
                }
                // No leader yet (start-up, election) or the proposal died with its leader:
                // try again until the deadline.
                Err(AppendError::NotLeader { .. } | AppendError::Lost)
                    if tokio::time::Instant::now() + METADATA_RETRY_PAUSE < deadline =>
                {
                    tokio::time::sleep(METADATA_RETRY_PAUSE).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Commits `cmd` only while this node leads the metadata group in term `term`: one attempt
    /// on this node's replica, never forwarded to or retried through another leader
    /// ([`AppendError::NotLeader`] when this node does not lead in `term`, [`AppendError::Lost`]
    /// when it was deposed before the entry committed). For writes validated against the group
    /// coordinator's state of that term (a commit checked against the membership of a deposed
    /// coordinator must not land through its successor). Returns once this node applied it.
    pub async fn propose_in_term(
        &self,
        cmd: &MetaCommand,
        term: u64,
        timeout: Duration,
    ) -> Result<Proposed, AppendError> {
        let (request, data) = self.entry(cmd);
        let group = self.group().ok_or(AppendError::Stopped)?;
        let appended = group.append_meta_as_leader(data, term, timeout).await?;
        Ok(Proposed {
            index: appended.raft_index,
            request,
        })
    }

    fn was_applied(&self, request: &RequestId) -> bool {
        self.meta
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .was_applied(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::peer_wire::VERSION_2;

    fn proposer(versions: Arc<PeerVersions>) -> MetadataProposer {
        MetadataProposer::new(
            7,
            42,
            versions,
            Arc::new(RwLock::new(ClusterMeta::default())),
        )
    }

    #[test]
    fn request_ids_carry_the_node_and_nonce_and_never_repeat() {
        let p = proposer(Arc::default());
        let (a, _) = p.entry(&MetaCommand::barrier());
        let (b, _) = p.entry(&MetaCommand::barrier());
        assert_eq!((a.node, a.boot), (7, 42));
        assert_eq!((b.node, b.boot), (7, 42));
        assert_ne!(a, b);
    }

    #[test]
    fn entries_are_json_only_while_an_earlier_release_is_in_the_cluster() {
        let versions = Arc::new(PeerVersions::default());
        let p = proposer(versions.clone());
        let cmd = MetaCommand::AllocateProducerId;
        let (request, data) = p.entry(&cmd);
        let entry = MetaEntry {
            request,
            command: cmd.clone(),
        };
        assert_eq!(data.as_ref(), entry.encode().as_slice());
        assert_eq!(
            MetaEntry::decode(&data).unwrap(),
            (Some(request), cmd.clone())
        );

        versions.heard(2, VERSION_2, "earlier");
        let (request, data) = p.entry(&cmd);
        let entry = MetaEntry {
            request,
            command: cmd.clone(),
        };
        assert_eq!(data.as_ref(), entry.encode_json().as_slice());
        assert_eq!(MetaEntry::decode(&data).unwrap(), (Some(request), cmd));
    }

    #[test]
    fn proposals_without_a_metadata_group_fail_stopped() {
        let p = proposer(Arc::default());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let timeout = Duration::from_millis(200);
        let cmd = MetaCommand::barrier();
        assert!(matches!(
            rt.block_on(p.propose(&cmd, timeout)),
            Err(AppendError::Stopped)
        ));
        assert!(matches!(
            rt.block_on(p.propose_in_term(&cmd, 1, timeout)),
            Err(AppendError::Stopped)
        ));
    }
}
