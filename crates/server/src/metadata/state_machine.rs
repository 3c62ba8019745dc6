//! The metadata group's state machine: applying committed entries on the group's thread,
//! writing and installing snapshots, and recovering the newest snapshot at start. What applying
//! asks of the node goes through the [`MetadataHost`] trait, so the state machine needs no
//! node (the deterministic simulation runs it with a recorder).

use std::sync::{Arc, RwLock, Weak};

use crate::replication::state_machine::StateMachine;

use super::*;

/// What the metadata group's state machine asks of the node that hosts the replica. The node
/// implements it; the deterministic simulation (`tests/simulation/`) implements it with a
/// recorder, so the metadata group runs there without a node, a runtime or sockets.
pub trait MetadataHost: Send + Sync {
    /// Carries out what a command applied just now asks of this node (open or drop a topic's
    /// streams, apply its settings, ...). Called on the metadata group's thread, in log order.
    fn carry_out(&self, effect: Effect);
    /// Entry `index` was applied (or skipped as undecodable, as on every node) and its effect
    /// carried out; also called once with the index a start or an installed snapshot begins at.
    fn metadata_applied(&self, index: u64);
    /// A snapshot at `index` received from the leader replaced the state (the entries it covers
    /// are not applied one by one): bring the node in line with the new state.
    fn snapshot_installed(&self, index: u64);
    /// Whether the metadata log may be compacted below a snapshot now (every member can install
    /// one).
    fn compaction_allowed(&self) -> bool;
}

/// Applies metadata commands on the metadata group's thread, and writes and installs the
/// state's snapshots (see [`crate::metadata::snapshot`]).
pub struct MetadataStateMachine {
    state: Arc<RwLock<ClusterMeta>>,
    host: Weak<dyn MetadataHost>,
    /// The metadata group's directory, where snapshot files go.
    dir: std::path::PathBuf,
    /// Applied entries between snapshots (0: none are taken).
    interval_entries: u64,
    /// The newest durable snapshot, shared with the group's Raft storage.
    latest: crate::replication::raft_storage::LatestSnapshot,
    /// The applied index at which the next snapshot is due.
    next_due: u64,
}

impl MetadataStateMachine {
    /// A state machine writing into `state`, asking `host` to carry out what applied commands
    /// ask of the node (open or drop streams, ...), and snapshotting every `interval_entries`
    /// applied entries (0: never) into `dir`. The host is held weakly: once it is gone,
    /// commands still change `state` but their effects are dropped.
    pub fn new(
        state: Arc<RwLock<ClusterMeta>>,
        host: Weak<dyn MetadataHost>,
        dir: std::path::PathBuf,
        interval_entries: u64,
    ) -> MetadataStateMachine {
        MetadataStateMachine {
            state,
            host,
            dir,
            interval_entries,
            latest: crate::replication::raft_storage::LatestSnapshot::default(),
            next_due: interval_entries,
        }
    }

    /// The newest durable snapshot, which the group's Raft storage sends to followers.
    pub fn latest(&self) -> crate::replication::raft_storage::LatestSnapshot {
        self.latest.clone()
    }

    /// The snapshot loaded at start (the newest in the metadata directory): its state replaces
    /// this machine's, and it becomes the one sent to followers. Returns its (index, term).
    pub fn load(
        &mut self,
        wire: crate::metadata::codec::MetaSnapshotWire,
        bytes: Vec<u8>,
    ) -> (u64, u64) {
        let (index, term) = (wire.index, wire.term);
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        let keep = wire
            .members
            .is_empty()
            .then(|| state.member_records.clone());
        *state = ClusterMeta::from_snapshot(state.members.clone(), wire);
        if let Some(records) = keep {
            state.member_records = records;
        }
        drop(state);
        self.latest
            .set(crate::replication::raft_storage::StoredSnapshot {
                index,
                term,
                data: bytes.into(),
            });
        self.next_due = index.saturating_add(self.interval_entries);
        (index, term)
    }
}

/// Why the metadata log and its snapshots could not be brought back at start.
#[derive(Debug, thiserror::Error)]
pub enum MetadataRecoveryError {
    /// The newest snapshot could not be read or is damaged.
    #[error("{0}")]
    Snapshot(#[from] crate::metadata::snapshot::SnapshotFileError),
    /// The log was compacted but no snapshot covers the entries removed.
    #[error(
        "the metadata log in {dir} starts at index {first_index} but the newest snapshot covers \
         only up to {snapshot_index}: the entries between are missing"
    )]
    LogGap {
        /// The metadata directory.
        dir: std::path::PathBuf,
        /// The first entry kept.
        first_index: u64,
        /// The newest snapshot's index (0: none).
        snapshot_index: u64,
    },
    /// The metadata log's store failed.
    #[error("{0}")]
    Store(#[from] logstore::LogStoreError),
}

impl MetadataStateMachine {
    /// At start, before the group opens: loads the newest snapshot in `dir` into this machine
    /// (its state and the snapshot sent to followers) and makes the metadata log `store` start
    /// no later than right after it. Returns the snapshot's index: the group replays the log
    /// from there (None: no snapshot, the log must start at index 1). Does not tell the host:
    /// the caller brings the node in line with the loaded state.
    pub fn recover(
        &mut self,
        dir: &std::path::Path,
        store: &mut logstore::LogStore,
    ) -> Result<Option<u64>, MetadataRecoveryError> {
        let Some((wire, bytes)) = crate::metadata::snapshot::load_newest(dir)? else {
            if store.first_index() > 1 {
                return Err(MetadataRecoveryError::LogGap {
                    dir: dir.to_owned(),
                    first_index: store.first_index(),
                    snapshot_index: 0,
                });
            }
            return Ok(None);
        };
        let (index, term) = self.load(wire, bytes);
        if index + 1 < store.first_index() {
            return Err(MetadataRecoveryError::LogGap {
                dir: dir.to_owned(),
                first_index: store.first_index(),
                snapshot_index: index,
            });
        }
        // The log ends before the snapshot (a snapshot installed from the leader, then a crash
        // before the log was reset), or holds another term at its index (entries never
        // committed): the log restarts right after the snapshot.
        let matches = index <= store.last_index()
            && (index + 1 == store.first_index() || store.term(index).ok() == Some(term));
        if !matches {
            store.install_snapshot(index, term, store.next_offset())?;
        }
        Ok(Some(index))
    }
}

impl StateMachine for MetadataStateMachine {
    fn apply(&mut self, index: u64, data: &[u8]) {
        let host = self.host.upgrade();
        let (request, cmd) = match MetaEntry::decode(data) {
            Ok(c) => c,
            Err(e) => {
                // Every node skips the same undecodable entry, so they stay in agreement.
                tracing::error!(index, "undecodable metadata command skipped: {e}");
                if let Some(host) = host {
                    host.metadata_applied(index);
                }
                return;
            }
        };
        let effect = self
            .state
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .apply(index, request, cmd);
        let Some(host) = host else {
            return;
        };
        if let Some(effect) = effect {
            host.carry_out(effect);
        }
        host.metadata_applied(index);
    }

    fn after_apply(&mut self, index: u64, term: u64) -> u64 {
        if self.interval_entries == 0 || index < self.next_due {
            return self.latest.index();
        }
        // Retried an interval later when it fails.
        self.next_due = index.saturating_add(self.interval_entries);
        let started = std::time::Instant::now();
        let wire = self
            .state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .to_snapshot(index, term);
        let bytes = crate::metadata::codec::encode_snapshot(&wire);
        drop(wire);
        if bytes.len() > crate::metadata::snapshot::MAX_SNAPSHOT_BYTES {
            tracing::error!(
                index,
                bytes = bytes.len(),
                "the metadata state is too large for a snapshot: none written, the log is kept"
            );
            return self.latest.index();
        }
        match crate::metadata::snapshot::write(&self.dir, index, &bytes) {
            Ok(path) => {
                tracing::info!(
                    index,
                    bytes = bytes.len(),
                    took_ms = started.elapsed().as_millis() as u64,
                    path = %path.display(),
                    "metadata snapshot written"
                );
                self.latest
                    .set(crate::replication::raft_storage::StoredSnapshot {
                        index,
                        term,
                        data: bytes.into(),
                    });
            }
            Err(e) => tracing::error!(index, "writing a metadata snapshot failed: {e}"),
        }
        self.latest.index()
    }

    fn newest_snapshot(&self) -> u64 {
        self.latest.index()
    }

    fn compaction_allowed(&self) -> bool {
        self.host.upgrade().is_some_and(|h| h.compaction_allowed())
    }

    fn check_snapshot(&self, index: u64, data: &[u8]) -> Result<(), String> {
        let wire = crate::metadata::codec::decode_snapshot(data).map_err(|e| e.to_string())?;
        if wire.index != index {
            return Err(format!(
                "the state is at index {} but the snapshot claims {index}",
                wire.index
            ));
        }
        Ok(())
    }

    fn install_snapshot(&mut self, index: u64, term: u64, data: &[u8]) {
        let wire = crate::metadata::codec::decode_snapshot(data)
            .unwrap_or_else(|e| panic!("a checked metadata snapshot does not decode: {e}"));
        // Durable before the log is reset after it (a restart then loads this state).
        let path = crate::metadata::snapshot::write(&self.dir, index, data)
            .unwrap_or_else(|e| panic!("persisting a received metadata snapshot failed: {e}"));
        tracing::info!(index, term, path = %path.display(), "metadata snapshot installed from the leader");
        self.load(wire, data.to_vec());
        if let Some(host) = self.host.upgrade() {
            host.snapshot_installed(index);
            host.metadata_applied(index);
        }
    }
}
