//! Consumer-group offsets committed inside a transaction (TxnOffsetCommit): pending, by group
//! and producer, until the producer's transaction ends. Only then do they become the group's
//! committed offsets (commit) or vanish (abort), so a consumer never reads an offset of a
//! transaction that may still abort.
//!
//! **Which offset wins.** Kafka keeps, per partition, the offset whose record is later in the
//! offsets log: a transactional offset becomes the committed one at commit only if no commit of
//! that partition was written after it. Here the metadata log is that log: a plain
//! [`MetaCommand::CommitOffsets`] of a partition supersedes every pending offset of it in the
//! group (they were applied before it), and a transaction committing a partition supersedes the
//! other producers' pending offsets of it applied before its own. A superseded offset stays
//! pending (OffsetFetch with `require_stable` still answers UNSTABLE_OFFSET_COMMIT for it until
//! its transaction ends, as Kafka does) but is not written at commit.
//!
//! **The seam for the transaction coordinator.** [`ClusterMeta::end_txn_offsets`] ends a
//! producer's pending offsets; it is deterministic and does no I/O, so the coordinator's own
//! metadata command may call it from its apply when a transaction completes. The command
//! [`MetaCommand::EndTxnOffsets`] applies the same function for callers that propose it alone.

use std::collections::BTreeMap;

use super::*;

/// One partition's pending transactional offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingOffset {
    /// The offset as it would be committed.
    pub offset: CommittedOffset,
    /// The Raft index of the [`MetaCommand::CommitTxnOffsets`] that wrote it (its place in the
    /// offsets log).
    pub index: u64,
    /// A later commit of the partition was applied: at commit this one is not written.
    pub superseded: bool,
}

/// One producer's pending offsets in one group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PendingTxnOffsets {
    /// The producer's epoch at its latest TxnOffsetCommit.
    pub producer_epoch: i16,
    /// The proposer's wall clock at the latest TxnOffsetCommit (ms since the epoch): the
    /// group's activity once committed.
    pub commit_time_ms: i64,
    /// By (topic, partition).
    pub offsets: BTreeMap<(String, i32), PendingOffset>,
}

/// Every pending transactional offset: by (group, producer id).
pub type TxnOffsetsByGroup = BTreeMap<(String, i64), PendingTxnOffsets>;

impl ClusterMeta {
    /// Applies [`MetaCommand::CommitTxnOffsets`] at `index`: the offsets become pending for
    /// `(group, producer_id)`, replacing earlier pending ones of the same partitions.
    pub(super) fn add_txn_offsets(
        &mut self,
        index: u64,
        group: String,
        producer_id: i64,
        producer_epoch: i16,
        offsets: Vec<CommittedOffset>,
        commit_time_ms: i64,
    ) {
        if offsets.is_empty() {
            return;
        }
        let pending = self.txn_offsets.entry((group, producer_id)).or_default();
        pending.producer_epoch = producer_epoch;
        pending.commit_time_ms = pending.commit_time_ms.max(commit_time_ms);
        for o in offsets {
            pending.offsets.insert(
                (o.topic.clone(), o.partition),
                PendingOffset {
                    offset: o,
                    index,
                    superseded: false,
                },
            );
        }
    }

    /// A plain commit of `offsets` in `group` was applied: every pending offset of those
    /// partitions in the group is older and loses to it.
    pub(super) fn supersede_txn_offsets(&mut self, group: &str, offsets: &[CommittedOffset]) {
        for ((_, _), pending) in self.pending_of_group_mut(group) {
            for o in offsets {
                if let Some(p) = pending.offsets.get_mut(&(o.topic.clone(), o.partition)) {
                    p.superseded = true;
                }
            }
        }
    }

    /// Ends producer `producer_id`'s transaction for consumer groups' offsets: in each of
    /// `groups` (`None`: every group it has pending offsets in), with `commit` its pending
    /// offsets become the group's committed offsets, except those superseded by a later commit
    /// of the same partition (see the module documentation); without `commit` they are
    /// dropped. Returns how many offsets were committed.
    ///
    /// Deterministic and free of I/O: meant to be called from the apply of a metadata command,
    /// e.g. the transaction coordinator's when a transaction completes (it is what
    /// [`MetaCommand::EndTxnOffsets`] applies). Ending a producer with nothing pending does
    /// nothing, so calling it for every completed transaction is safe.
    pub fn end_txn_offsets(
        &mut self,
        producer_id: i64,
        groups: Option<&[String]>,
        commit: bool,
    ) -> usize {
        let keys: Vec<(String, i64)> = self
            .txn_offsets
            .keys()
            .filter(|(g, p)| *p == producer_id && groups.is_none_or(|gs| gs.contains(g)))
            .cloned()
            .collect();
        let mut committed = 0;
        for key in keys {
            let Some(pending) = self.txn_offsets.remove(&key) else {
                continue;
            };
            if !commit {
                continue;
            }
            let group = key.0;
            let mut written = Vec::new();
            for (tp, p) in pending.offsets {
                if !p.superseded {
                    written.push((tp, p.index));
                    self.offsets
                        .entry(group.clone())
                        .or_default()
                        .insert((p.offset.topic.clone(), p.offset.partition), p.offset);
                }
            }
            if written.is_empty() {
                continue;
            }
            committed += written.len();
            self.note_activity(&group, pending.commit_time_ms);
            // Other producers' pending offsets of these partitions written before are older.
            for (_, other) in self.pending_of_group_mut(&group) {
                for (tp, index) in &written {
                    if let Some(p) = other.offsets.get_mut(tp) {
                        if p.index < *index {
                            p.superseded = true;
                        }
                    }
                }
            }
        }
        committed
    }

    /// Whether any producer has a pending transactional offset for `(topic, partition)` in
    /// `group` (OffsetFetch with `require_stable` answers UNSTABLE_OFFSET_COMMIT for it).
    pub fn has_pending_txn_offset(&self, group: &str, topic: &str, partition: i32) -> bool {
        let key = (topic.to_owned(), partition);
        self.pending_of_group(group)
            .any(|(_, p)| p.offsets.contains_key(&key))
    }

    /// Whether `group` has pending transactional offsets of any producer.
    pub fn has_pending_txn_offsets(&self, group: &str) -> bool {
        self.pending_of_group(group).next().is_some()
    }

    /// The groups producer `producer_id` has pending transactional offsets in, in name order.
    pub fn pending_txn_groups(&self, producer_id: i64) -> Vec<String> {
        self.txn_offsets
            .keys()
            .filter(|(_, p)| *p == producer_id)
            .map(|(g, _)| g.clone())
            .collect()
    }

    /// The pending offsets of `(group, producer_id)`, if any.
    pub fn pending_txn_offsets(&self, group: &str, producer_id: i64) -> Option<&PendingTxnOffsets> {
        self.txn_offsets.get(&(group.to_owned(), producer_id))
    }

    /// Every pending transactional offset, by (group, producer id).
    pub fn all_pending_txn_offsets(&self) -> &TxnOffsetsByGroup {
        &self.txn_offsets
    }

    /// Deleting a group's offsets (DeleteGroups: `partitions` `None`; OffsetDelete: the listed
    /// partitions) deletes the pending ones too, as Kafka's tombstones do: a transaction that
    /// commits later does not bring them back.
    pub(super) fn drop_group_txn_offsets(
        &mut self,
        group: &str,
        partitions: Option<&[(String, i32)]>,
    ) {
        for (_, pending) in self.pending_of_group_mut(group) {
            match partitions {
                None => pending.offsets.clear(),
                Some(list) => {
                    for key in list {
                        pending.offsets.remove(key);
                    }
                }
            }
        }
        self.txn_offsets.retain(|_, p| !p.offsets.is_empty());
    }

    /// A deleted topic's pending offsets go with it, as its committed ones do.
    pub(super) fn drop_topic_txn_offsets(&mut self, topic: &str) {
        for pending in self.txn_offsets.values_mut() {
            pending.offsets.retain(|(t, _), _| t != topic);
        }
        self.txn_offsets.retain(|_, p| !p.offsets.is_empty());
    }

    fn pending_of_group<'a>(
        &'a self,
        group: &str,
    ) -> impl Iterator<Item = (&'a (String, i64), &'a PendingTxnOffsets)> {
        self.txn_offsets
            .range((group.to_owned(), i64::MIN)..=(group.to_owned(), i64::MAX))
    }

    fn pending_of_group_mut<'a>(
        &'a mut self,
        group: &str,
    ) -> impl Iterator<Item = (&'a (String, i64), &'a mut PendingTxnOffsets)> {
        self.txn_offsets
            .range_mut((group.to_owned(), i64::MIN)..=(group.to_owned(), i64::MAX))
    }
}
