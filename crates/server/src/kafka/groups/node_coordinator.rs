//! This node's group coordinator as the Kafka handlers reach it: the metadata term it coordinates
//! in (the first call of a term loads the groups stored by the previous coordinator), the
//! coordinator itself (the first call starts its tasks), whether a group exists, and the read
//! barrier taken before answering from the metadata.

use std::sync::Arc;
use std::time::Instant;

use kafka_proto::error_code::ErrorCode;

use super::coordinator::Coordinator;
use super::coordinator_tasks::{start_offset_expiry, start_persister, start_ticker};
use super::limits::FETCH_BARRIER_TIMEOUT;
use crate::kafka::error_codes::{append_error_code, Proposal};
use crate::kafka::host::GroupsHost;

/// The metadata term in which this node leads the metadata group (and so coordinates every
/// group); None when it does not lead, or leads but has not applied the metadata through its
/// term's start yet (the groups stored by the previous coordinator are not all known then).
/// The first call in a term loads those groups into the coordinator.
pub(super) fn coordinator_term<H: GroupsHost>(node: &Arc<H>) -> Option<u64> {
    let v = node.metadata_group()?.visible();
    if v.leader == 0 || v.leader != node.config().id || !v.leader_ready {
        return None;
    }
    coordinator(node).load(
        v.term,
        || {
            let meta = node.metadata();
            (
                meta.groups
                    .iter()
                    .map(|(id, r)| (id.clone(), r.clone()))
                    .collect(),
                meta.consumer_groups
                    .iter()
                    .map(|(id, r)| (id.clone(), r.clone()))
                    .collect(),
            )
        },
        node.config().kafka.consumer_group_session_timeout,
        Instant::now(),
    );
    Some(v.term)
}

/// This node's group coordinator; the first call starts its deadline and persisting tasks.
pub(crate) fn coordinator<H: GroupsHost>(node: &Arc<H>) -> &Coordinator {
    let c = node.group_coordinator();
    if c.claim_ticker() {
        start_ticker(Arc::downgrade(node));
        start_persister(Arc::downgrade(node), c.records_waiting());
        start_offset_expiry(Arc::downgrade(node));
    }
    c
}

/// A read barrier on the metadata group (Raft's ReadIndex: a quorum confirms this node still
/// leads, no log entry is written): every offset committed before (also through a previous
/// coordinator) is applied here before the read, and a node deposed without knowing it yet
/// does not answer from stale state. None once done.
pub(super) async fn read_barrier<H: GroupsHost>(node: &H) -> Option<ErrorCode> {
    let Some(group) = node.metadata_group() else {
        return Some(ErrorCode::NotCoordinator);
    };
    group
        .read_index(FETCH_BARRIER_TIMEOUT)
        .await
        .err()
        .map(|e| append_error_code(&e, Proposal::ReadBarrier))
}

/// Whether group `group_id` exists for DeleteGroups / OffsetDelete: it has membership state
/// on this coordinator or committed offsets.
pub(super) fn group_exists<H: GroupsHost>(node: &Arc<H>, term: u64, group_id: &str) -> bool {
    coordinator(node).describe(term, group_id).is_some()
        || coordinator(node).is_consumer_group(group_id)
        || node
            .metadata()
            .offsets
            .get(group_id)
            .is_some_and(|o| !o.is_empty())
}
