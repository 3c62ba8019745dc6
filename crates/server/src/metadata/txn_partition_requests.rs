//! Transaction version 2's implicit AddPartitions, the metadata side: a partition leader that
//! receives a transactional Produce (v12+) for a partition not yet in the transaction asks the
//! coordinator to add it by committing [`MetaCommand::RequestTxnPartitions`]. Applying it
//! changes no transaction: it only queues the request here ([`TxnPartitionRequest`], the last
//! [`MAX_TXN_PARTITION_REQUESTS`]), where the coordinator (the metadata leader) finds it and
//! carries it out under the transactional id's lock with a
//! [`MetaCommand::PutTransaction`] like every other change (`kafka::txn::implicit_add`). The
//! coordinator stays the one writer of a transaction's state, so an addition can never race
//! with the EndTxn that decides the transaction: it is in the decided partitions (and gets
//! its marker), or it is refused (the produce is refused and retried).
//!
//! The queue is part of the replicated state (snapshots carry it), so every node holds the
//! same requests at the same index.

use super::{ClusterMeta, MetaCommand};

/// At most this many requests are kept, the oldest dropped first (a request dropped before
/// the coordinator handled it times out at its partition leader, whose producer retries).
pub const MAX_TXN_PARTITION_REQUESTS: usize = 1024;

/// A partition leader's request that producer `producer_id` at `producer_epoch` have
/// `partitions` added to the transaction of `transactional_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnPartitionRequest {
    /// The metadata log index the request was committed at.
    pub index: u64,
    /// The transactional id.
    pub transactional_id: String,
    /// The producer id of the batches.
    pub producer_id: i64,
    /// Their producer epoch.
    pub producer_epoch: i16,
    /// The (topic, partition)s to add.
    pub partitions: Vec<(String, i32)>,
}

impl ClusterMeta {
    /// Queues `cmd` (a [`MetaCommand::RequestTxnPartitions`] committed at `index`).
    pub(super) fn queue_txn_partition_request(&mut self, index: u64, cmd: MetaCommand) {
        let MetaCommand::RequestTxnPartitions {
            transactional_id,
            producer_id,
            producer_epoch,
            partitions,
        } = cmd
        else {
            return;
        };
        while self.txn_partition_requests.len() >= MAX_TXN_PARTITION_REQUESTS {
            self.txn_partition_requests.pop_front();
        }
        self.txn_partition_requests.push_back(TxnPartitionRequest {
            index,
            transactional_id,
            producer_id,
            producer_epoch,
            partitions,
        });
    }

    /// The queued requests committed after `index`, oldest first.
    pub fn txn_partition_requests_after(&self, index: u64) -> Vec<TxnPartitionRequest> {
        self.txn_partition_requests
            .iter()
            .filter(|r| r.index > index)
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(partition: i32) -> MetaCommand {
        MetaCommand::RequestTxnPartitions {
            transactional_id: "tx".into(),
            producer_id: 7,
            producer_epoch: 2,
            partitions: vec![("t".into(), partition)],
        }
    }

    /// Requests queue in index order, change no transaction, survive a snapshot, and only
    /// the last [`MAX_TXN_PARTITION_REQUESTS`] are kept.
    #[test]
    fn requests_queue_bounded_and_survive_snapshots() {
        let mut m = ClusterMeta::new(vec![1]);
        m.apply_for_test(3, request(0));
        m.apply_for_test(5, request(1));
        assert!(m.transactions.is_empty());
        let after = m.txn_partition_requests_after(3);
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].index, 5);
        assert_eq!(after[0].partitions, vec![("t".to_string(), 1)]);
        let bytes = crate::metadata::codec::encode_snapshot(&m.to_snapshot(5, 1));
        let wire = crate::metadata::codec::decode_snapshot(&bytes).unwrap();
        let back = ClusterMeta::from_snapshot(vec![1], wire);
        assert_eq!(back.txn_partition_requests, m.txn_partition_requests);
        for i in 0..MAX_TXN_PARTITION_REQUESTS as u64 {
            m.apply_for_test(10 + i, request(2));
        }
        assert_eq!(m.txn_partition_requests.len(), MAX_TXN_PARTITION_REQUESTS);
        assert_eq!(m.txn_partition_requests[0].index, 10);
    }
}
