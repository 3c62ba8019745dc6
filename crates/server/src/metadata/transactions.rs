//! The transaction coordinator's replicated state (issue 36, step 2): one [`TxnRecord`] per
//! transactional id in [`ClusterMeta::transactions`], changed only by
//! [`MetaCommand::PutTransaction`] (written by the coordinator, the metadata leader, while it
//! coordinates in its term) and [`MetaCommand::TxnMarkersWritten`] (written by the partition
//! leaders once their transaction markers are committed). Every node applies both, so every
//! node knows every transaction: a partition leader checks a transactional batch against it,
//! and a new coordinator resumes where the previous one stopped.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::{ClusterMeta, Effect, MetaCommand};

/// Where a transaction stands, with Kafka's names (DescribeTransactions, ListTransactions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TxnStatus {
    /// No transaction since the producer id and epoch were handed out.
    Empty,
    /// Partitions or groups were added: records may be written.
    Ongoing,
    /// EndTxn(commit) was accepted: COMMIT markers are being written.
    PrepareCommit,
    /// EndTxn(abort), a timeout or a new producer epoch: ABORT markers are being written.
    PrepareAbort,
    /// Every COMMIT marker is written.
    CompleteCommit,
    /// Every ABORT marker is written.
    CompleteAbort,
}

impl TxnStatus {
    /// Every status, in code order.
    pub const ALL: [TxnStatus; 6] = [
        TxnStatus::Empty,
        TxnStatus::Ongoing,
        TxnStatus::PrepareCommit,
        TxnStatus::PrepareAbort,
        TxnStatus::CompleteCommit,
        TxnStatus::CompleteAbort,
    ];

    /// Kafka's name of the state (`TransactionState.name()`).
    pub fn kafka_name(self) -> &'static str {
        match self {
            TxnStatus::Empty => "Empty",
            TxnStatus::Ongoing => "Ongoing",
            TxnStatus::PrepareCommit => "PrepareCommit",
            TxnStatus::PrepareAbort => "PrepareAbort",
            TxnStatus::CompleteCommit => "CompleteCommit",
            TxnStatus::CompleteAbort => "CompleteAbort",
        }
    }

    /// The status with Kafka's name `name`, if any.
    pub fn from_kafka_name(name: &str) -> Option<TxnStatus> {
        TxnStatus::ALL.into_iter().find(|s| s.kafka_name() == name)
    }

    /// The status as the metadata log stores it.
    pub fn code(self) -> i32 {
        match self {
            TxnStatus::Empty => 0,
            TxnStatus::Ongoing => 1,
            TxnStatus::PrepareCommit => 2,
            TxnStatus::PrepareAbort => 3,
            TxnStatus::CompleteCommit => 4,
            TxnStatus::CompleteAbort => 5,
        }
    }

    /// The status stored as `code`; None for a code this version does not know.
    pub fn from_code(code: i32) -> Option<TxnStatus> {
        TxnStatus::ALL.into_iter().find(|s| s.code() == code)
    }

    /// Markers are being written (PrepareCommit or PrepareAbort); the commit decision.
    pub fn preparing(self) -> Option<bool> {
        match self {
            TxnStatus::PrepareCommit => Some(true),
            TxnStatus::PrepareAbort => Some(false),
            _ => None,
        }
    }
}

/// One transactional id's state as the coordinator stores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnRecord {
    /// The producer id the transactional id holds.
    pub producer_id: i64,
    /// Its current epoch: batches and requests of older epochs are fenced.
    pub producer_epoch: i16,
    /// The producer's `transaction.timeout.ms`.
    pub timeout_ms: i32,
    /// Where the transaction stands.
    pub status: TxnStatus,
    /// Ongoing: the partitions added (topic, partition). Preparing: those whose marker is not
    /// written yet. Otherwise empty.
    pub partitions: BTreeSet<(String, i32)>,
    /// The consumer groups added (AddOffsetsToTxn) to the ongoing or preparing transaction.
    pub groups: BTreeSet<String>,
    /// When the transaction started (its first partition or group), ms since the epoch on the
    /// coordinator's clock; -1 when none has.
    pub start_ms: i64,
    /// The last change, ms since the epoch on the proposer's clock.
    pub update_ms: i64,
    /// The coordinator's epoch (its metadata term, saturated) when the transaction was ended:
    /// what its markers carry.
    pub coordinator_epoch: i32,
    /// The transaction version (KIP-890) of the transaction's last change, as Kafka's
    /// `TransactionMetadata.clientTransactionVersion`: 2 when it was started by an implicit
    /// addition (Produce v12, TxnOffsetCommit v5) or ended by EndTxn v5, whose producer epoch
    /// is bumped at every EndTxn; 0 (records written before this field) or 1 for the protocol
    /// before, whose epoch changes only with InitProducerId and timeouts.
    #[serde(default)]
    pub transaction_version: i16,
    /// Transaction version 2 when EndTxn found the epoch exhausted: the producer id the
    /// transactional id moves to, at epoch 0, once the markers (written with the old id at
    /// epoch `i16::MAX`) are all written.
    #[serde(default)]
    pub next_producer_id: Option<i64>,
    /// The producer id held before the last such move: a retry of the EndTxn that moved it
    /// (the old id at epoch `i16::MAX - 1`) is answered with the new one.
    #[serde(default)]
    pub previous_producer_id: Option<i64>,
}

impl ClusterMeta {
    /// Applies the transaction commands (see the module documentation). A transaction left
    /// decided, its markers still to write, asks the node for [`Effect::TransactionWork`].
    pub(super) fn apply_transaction(&mut self, cmd: MetaCommand) -> Option<Effect> {
        match cmd {
            MetaCommand::PutTransaction {
                transactional_id,
                mut record,
            } => {
                if let Some(commit) = record.status.preparing() {
                    self.end_pending_transactional_offsets(
                        record.producer_id,
                        &record.groups,
                        commit,
                    );
                    if record.partitions.is_empty() {
                        record.complete(commit);
                    }
                }
                let decided = record.status.preparing().is_some();
                if decided {
                    self.deciding_transactions.insert(transactional_id.clone());
                } else {
                    self.deciding_transactions.remove(&transactional_id);
                }
                self.transactions.insert(transactional_id, record);
                decided.then_some(Effect::TransactionWork)
            }
            MetaCommand::TxnMarkersWritten {
                transactional_id,
                producer_id,
                producer_epoch,
                partitions,
                time_ms,
            } => {
                let record = self.transactions.get_mut(&transactional_id)?;
                let commit = record.status.preparing()?;
                if record.producer_id != producer_id || record.producer_epoch != producer_epoch {
                    return None;
                }
                for p in partitions {
                    record.partitions.remove(&p);
                }
                if record.partitions.is_empty() {
                    record.complete(commit);
                    record.update_ms = time_ms;
                    self.deciding_transactions.remove(&transactional_id);
                }
                None
            }
            MetaCommand::ExpireTransactionalId {
                transactional_id,
                producer_id,
                producer_epoch,
                update_ms,
            } => {
                let unchanged = self.transactions.get(&transactional_id).is_some_and(|r| {
                    r.producer_id == producer_id
                        && r.producer_epoch == producer_epoch
                        && r.update_ms == update_ms
                        && r.may_expire()
                });
                if unchanged {
                    self.transactions.remove(&transactional_id);
                }
                None
            }
            _ => None,
        }
    }

    /// Pending transactional offsets are ended here: the offsets producer `producer_id`
    /// committed in its transaction for each of `groups` (TxnOffsetCommit) become the groups'
    /// committed offsets when `commit`, and are dropped otherwise. Called when the transaction
    /// is decided (its PrepareCommit or PrepareAbort is applied), on every node alike; the
    /// pending offsets are TxnOffsetCommit's (see [`crate::metadata::txn_offsets`]).
    pub(super) fn end_pending_transactional_offsets(
        &mut self,
        producer_id: i64,
        groups: &BTreeSet<String>,
        commit: bool,
    ) {
        let groups: Vec<String> = groups.iter().cloned().collect();
        self.end_txn_offsets(producer_id, Some(&groups), commit);
    }

    /// Whether the transaction state allows producer `producer_id` at `producer_epoch` to
    /// write a transactional batch to `(topic, partition)`: the transactional id holds that
    /// producer and epoch, and its transaction is ongoing with the partition added.
    pub fn transaction_includes(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        topic: &str,
        partition: i32,
    ) -> bool {
        self.transactions.get(transactional_id).is_some_and(|r| {
            r.producer_id == producer_id
                && r.producer_epoch == producer_epoch
                && r.status == TxnStatus::Ongoing
                && r.partitions.contains(&(topic.to_string(), partition))
        })
    }
}

impl TxnRecord {
    /// Completes the decided transaction (`commit` or not) once its last marker is written;
    /// a producer id moved by an exhausted epoch (`next_producer_id`) takes over at epoch 0.
    fn complete(&mut self, commit: bool) {
        self.status = completed(commit);
        self.groups.clear();
        if let Some(next) = self.next_producer_id.take() {
            self.previous_producer_id = Some(self.producer_id);
            self.producer_id = next;
            self.producer_epoch = 0;
        }
    }

    /// Whether the transaction runs under transaction version 2 (see `transaction_version`).
    pub fn bumps_epoch_per_transaction(&self) -> bool {
        self.transaction_version >= 2
    }

    /// Whether the transactional id may be forgotten once unused long enough: no transaction
    /// is ongoing or being decided.
    pub fn may_expire(&self) -> bool {
        matches!(
            self.status,
            TxnStatus::Empty | TxnStatus::CompleteCommit | TxnStatus::CompleteAbort
        )
    }
}

/// The completed status of a transaction decided `commit`.
fn completed(commit: bool) -> TxnStatus {
    if commit {
        TxnStatus::CompleteCommit
    } else {
        TxnStatus::CompleteAbort
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(status: TxnStatus, partitions: &[(&str, i32)]) -> TxnRecord {
        TxnRecord {
            producer_id: 1000,
            producer_epoch: 3,
            timeout_ms: 60_000,
            status,
            partitions: partitions
                .iter()
                .map(|(t, p)| (t.to_string(), *p))
                .collect(),
            groups: ["g".to_string()].into(),
            start_ms: 10,
            update_ms: 20,
            coordinator_epoch: 2,
            transaction_version: 2,
            next_producer_id: None,
            previous_producer_id: Some(7),
        }
    }

    fn put(m: &mut ClusterMeta, index: u64, r: TxnRecord) {
        m.apply_for_test(
            index,
            MetaCommand::PutTransaction {
                transactional_id: "tx".into(),
                record: r,
            },
        );
    }

    fn written(m: &mut ClusterMeta, index: u64, epoch: i16, partitions: &[(&str, i32)]) {
        m.apply_for_test(
            index,
            MetaCommand::TxnMarkersWritten {
                transactional_id: "tx".into(),
                producer_id: 1000,
                producer_epoch: epoch,
                partitions: partitions
                    .iter()
                    .map(|(t, p)| (t.to_string(), *p))
                    .collect(),
                time_ms: 99,
            },
        );
    }

    /// Deciding a transaction with partitions to mark asks the node to write the markers now
    /// ([`Effect::TransactionWork`]); any other state of the record, or a decision with
    /// nothing to mark (completed at once), asks nothing.
    #[test]
    fn a_decision_with_markers_to_write_wakes_the_marker_writers() {
        let mut m = ClusterMeta::new(vec![1]);
        let mut apply = |index, r: TxnRecord| {
            let cmd = MetaCommand::PutTransaction {
                transactional_id: "tx".into(),
                record: r,
            };
            m.apply(index, None, cmd)
        };
        assert_eq!(apply(1, record(TxnStatus::Ongoing, &[("a", 0)])), None);
        assert_eq!(
            apply(2, record(TxnStatus::PrepareAbort, &[("a", 0)])),
            Some(Effect::TransactionWork)
        );
        assert_eq!(apply(3, record(TxnStatus::PrepareCommit, &[])), None);
    }

    /// Reports of markers complete a decided transaction when its last partition is marked;
    /// reports of another epoch, or for a transaction not being decided, change nothing.
    #[test]
    fn markers_complete_a_decided_transaction() {
        let mut m = ClusterMeta::new(vec![1]);
        put(&mut m, 1, record(TxnStatus::Ongoing, &[("a", 0), ("b", 1)]));
        written(&mut m, 2, 3, &[("a", 0)]);
        assert_eq!(
            m.transactions["tx"].partitions.len(),
            2,
            "not decided: ignored"
        );
        assert!(m.transaction_includes("tx", 1000, 3, "a", 0));
        assert!(!m.transaction_includes("tx", 1000, 2, "a", 0));
        assert!(!m.transaction_includes("tx", 1000, 3, "c", 0));

        put(
            &mut m,
            3,
            record(TxnStatus::PrepareCommit, &[("a", 0), ("b", 1)]),
        );
        assert!(
            !m.transaction_includes("tx", 1000, 3, "a", 0),
            "decided: no more batches"
        );
        assert_eq!(m.deciding_transactions, ["tx".to_string()].into());
        written(&mut m, 4, 4, &[("a", 0)]);
        assert_eq!(
            m.transactions["tx"].partitions.len(),
            2,
            "another epoch: ignored"
        );
        written(&mut m, 5, 3, &[("a", 0)]);
        assert_eq!(m.transactions["tx"].status, TxnStatus::PrepareCommit);
        written(&mut m, 6, 3, &[("b", 1), ("a", 0)]);
        let r = &m.transactions["tx"];
        assert_eq!(r.status, TxnStatus::CompleteCommit);
        assert!(m.deciding_transactions.is_empty());
        assert!(r.partitions.is_empty() && r.groups.is_empty());
        assert_eq!(r.update_ms, 99);
        // A late duplicate report changes nothing.
        written(&mut m, 7, 3, &[("a", 0)]);
        assert_eq!(m.transactions["tx"].status, TxnStatus::CompleteCommit);
    }

    /// An expired transactional id is forgotten only if it is still as the coordinator found
    /// it, with no transaction ongoing or being decided.
    #[test]
    fn an_unused_transactional_id_is_forgotten_only_as_found() {
        let expire = |m: &mut ClusterMeta, index: u64, epoch: i16, update_ms: i64| {
            m.apply_for_test(
                index,
                MetaCommand::ExpireTransactionalId {
                    transactional_id: "tx".into(),
                    producer_id: 1000,
                    producer_epoch: epoch,
                    update_ms,
                },
            );
        };
        let mut m = ClusterMeta::new(vec![1]);
        put(&mut m, 1, record(TxnStatus::Ongoing, &[("a", 0)]));
        expire(&mut m, 2, 3, 20);
        assert!(m.transactions.contains_key("tx"), "ongoing: kept");
        put(&mut m, 3, record(TxnStatus::CompleteAbort, &[]));
        expire(&mut m, 4, 2, 20);
        expire(&mut m, 5, 3, 19);
        assert!(
            m.transactions.contains_key("tx"),
            "another epoch or a later change: kept"
        );
        expire(&mut m, 6, 3, 20);
        assert!(!m.transactions.contains_key("tx"));
    }

    /// A transaction decided with no partition to mark (only groups) completes at once.
    #[test]
    fn a_decision_with_nothing_to_mark_completes_at_once() {
        let mut m = ClusterMeta::new(vec![1]);
        put(&mut m, 1, record(TxnStatus::PrepareAbort, &[]));
        assert_eq!(m.transactions["tx"].status, TxnStatus::CompleteAbort);
        assert!(m.transactions["tx"].groups.is_empty());
    }

    /// The state survives a snapshot exactly, and every status keeps its stored code and
    /// Kafka's name.
    #[test]
    fn snapshots_carry_the_transactions() {
        let mut m = ClusterMeta::new(vec![1, 2, 3]);
        put(
            &mut m,
            1,
            record(TxnStatus::PrepareCommit, &[("a", 0), ("b", 7)]),
        );
        m.apply_for_test(
            2,
            MetaCommand::PutTransaction {
                transactional_id: "other".into(),
                record: record(TxnStatus::Empty, &[]),
            },
        );
        let bytes = crate::metadata::codec::encode_snapshot(&m.to_snapshot(2, 1));
        let wire = crate::metadata::codec::decode_snapshot(&bytes).unwrap();
        let back = ClusterMeta::from_snapshot(vec![1, 2, 3], wire);
        assert_eq!(back.transactions, m.transactions);
        assert_eq!(back.deciding_transactions, ["tx".to_string()].into());
        assert_eq!(back, m);
        for s in TxnStatus::ALL {
            assert_eq!(TxnStatus::from_code(s.code()), Some(s));
            assert_eq!(TxnStatus::from_kafka_name(s.kafka_name()), Some(s));
        }
        assert_eq!(TxnStatus::from_code(6), None);
    }
}
