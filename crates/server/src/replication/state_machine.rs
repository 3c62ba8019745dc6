//! What a Raft group with replicated state (the metadata group) asks of that state: apply
//! committed entries in log order, snapshot it, and install a snapshot from the leader. The
//! group (`group.rs`) drives it; the metadata (`crate::metadata::state_machine`) implements
//! it, so replication needs nothing of the metadata.

/// Receives committed metadata entries in log order (used by the metadata group).
pub trait StateMachine: Send + 'static {
    /// Applies one committed `Meta` entry.
    fn apply(&mut self, index: u64, data: &[u8]);

    /// Called once the entries through `index` (of term `term`) are applied: writes a durable
    /// snapshot of the state at `index` when one is due. Returns the index of the newest
    /// durable snapshot (0: none); the group may compact its log below it.
    fn after_apply(&mut self, index: u64, term: u64) -> u64;

    /// The index of the newest durable snapshot (0: none), e.g. the one loaded at start.
    fn newest_snapshot(&self) -> u64;

    /// Whether the log may be compacted below the newest snapshot now (every replica can
    /// install snapshots).
    fn compaction_allowed(&self) -> bool;

    /// Checks a snapshot received from the leader before raft-rs takes it: it must decode
    /// and cover `index`. A snapshot refused here is dropped like a bad message.
    fn check_snapshot(&self, index: u64, data: &[u8]) -> Result<(), String>;

    /// Replaces the state with a snapshot received from the leader (checked by
    /// [`StateMachine::check_snapshot`]), durably before it returns, and applies what the
    /// change means for the node. The group then restarts its log after `index`.
    fn install_snapshot(&mut self, index: u64, term: u64, data: &[u8]);
}
