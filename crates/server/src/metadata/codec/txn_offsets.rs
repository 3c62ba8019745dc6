//! The transactional offset messages of an entry and a snapshot (`CommitTxnOffsets`,
//! `EndTxnOffsets`, `PendingTxnOffsets`) and their conversions (see
//! [`crate::metadata::txn_offsets`]).

use crate::metadata::{CommittedOffset, PendingOffset, PendingTxnOffsets};

use super::messages::CommittedOffsetWire;
use super::transactions::epoch_from_wire;

/// `CommitTxnOffsets` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CommitTxnOffsetsWire {
    /// Consumer group id.
    #[prost(string, tag = "1")]
    pub group: String,
    /// The transactional producer.
    #[prost(int64, tag = "2")]
    pub producer_id: i64,
    /// Its epoch (an int16 on the Kafka wire).
    #[prost(int32, tag = "3")]
    pub producer_epoch: i32,
    /// One entry per partition.
    #[prost(message, repeated, tag = "4")]
    pub offsets: Vec<CommittedOffsetWire>,
    /// The proposer's wall clock, ms since the epoch.
    #[prost(int64, tag = "5")]
    pub commit_time_ms: i64,
}

/// `EndTxnOffsets` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EndTxnOffsetsWire {
    /// The transactional producer.
    #[prost(int64, tag = "1")]
    pub producer_id: i64,
    /// Every group the producer has pending offsets in (`groups` is then empty).
    #[prost(bool, tag = "2")]
    pub all_groups: bool,
    /// The groups whose pending offsets end.
    #[prost(string, repeated, tag = "3")]
    pub groups: Vec<String>,
    /// Commit (true) or abort.
    #[prost(bool, tag = "4")]
    pub commit: bool,
}

/// One producer's pending offsets in one group, in a snapshot.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PendingTxnOffsetsWire {
    /// Consumer group id.
    #[prost(string, tag = "1")]
    pub group: String,
    /// The transactional producer.
    #[prost(int64, tag = "2")]
    pub producer_id: i64,
    /// Its epoch at its latest commit.
    #[prost(int32, tag = "3")]
    pub producer_epoch: i32,
    /// The proposer's wall clock at the latest commit.
    #[prost(int64, tag = "4")]
    pub commit_time_ms: i64,
    /// One per partition, in (topic, partition) order.
    #[prost(message, repeated, tag = "5")]
    pub offsets: Vec<PendingOffsetWire>,
}

/// One pending offset in a snapshot.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PendingOffsetWire {
    /// The offset.
    #[prost(message, optional, tag = "1")]
    pub offset: Option<CommittedOffsetWire>,
    /// The Raft index of the command that wrote it.
    #[prost(uint64, tag = "2")]
    pub index: u64,
    /// A later commit of the partition was applied.
    #[prost(bool, tag = "3")]
    pub superseded: bool,
}

impl From<(&(String, i64), &PendingTxnOffsets)> for PendingTxnOffsetsWire {
    fn from(((group, producer_id), p): (&(String, i64), &PendingTxnOffsets)) -> Self {
        PendingTxnOffsetsWire {
            group: group.clone(),
            producer_id: *producer_id,
            producer_epoch: i32::from(p.producer_epoch),
            commit_time_ms: p.commit_time_ms,
            offsets: p
                .offsets
                .values()
                .map(|o| PendingOffsetWire {
                    offset: Some(CommittedOffsetWire::from(&o.offset)),
                    index: o.index,
                    superseded: o.superseded,
                })
                .collect(),
        }
    }
}

impl PendingTxnOffsetsWire {
    /// The (group, producer id) key and the pending offsets; entries without an offset (never
    /// written) are skipped.
    pub fn into_pending(self) -> ((String, i64), PendingTxnOffsets) {
        let offsets = self
            .offsets
            .into_iter()
            .filter_map(|o| {
                let offset = CommittedOffset::from(o.offset?);
                Some((
                    (offset.topic.clone(), offset.partition),
                    PendingOffset {
                        offset,
                        index: o.index,
                        superseded: o.superseded,
                    },
                ))
            })
            .collect();
        (
            (self.group, self.producer_id),
            PendingTxnOffsets {
                producer_epoch: epoch_from_wire(self.producer_epoch),
                commit_time_ms: self.commit_time_ms,
                offsets,
            },
        )
    }
}
