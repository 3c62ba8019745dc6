//! This node's group coordinator as the Kafka handlers reach it: the metadata term it coordinates
//! in (the first call of a term loads the groups stored by the previous coordinator), and the
//! coordinator itself (the first call starts its tasks).

use std::sync::Arc;
use std::time::Instant;

use super::coordinator::Coordinator;
use super::coordinator_tasks::{start_offset_expiry, start_persister, start_ticker};
use crate::node::Node;

/// The metadata term in which this node leads the metadata group (and so coordinates every
/// group); None when it does not lead, or leads but has not applied the metadata through its
/// term's start yet (the groups stored by the previous coordinator are not all known then).
/// The first call in a term loads those groups into the coordinator.
pub(super) fn coordinator_term(node: &Arc<Node>) -> Option<u64> {
    let v = node.metadata_group()?.visible();
    if v.leader == 0 || v.leader != node.config().id || !v.leader_ready {
        return None;
    }
    coordinator(node).load(
        v.term,
        || {
            node.metadata()
                .groups
                .iter()
                .map(|(id, r)| (id.clone(), r.clone()))
                .collect()
        },
        Instant::now(),
    );
    Some(v.term)
}

/// This node's group coordinator; the first call starts its deadline and persisting tasks.
pub(crate) fn coordinator(node: &Arc<Node>) -> &Coordinator {
    let c = node.group_coordinator();
    if c.claim_ticker() {
        start_ticker(Arc::downgrade(node));
        start_persister(Arc::downgrade(node), c.records_waiting());
        start_offset_expiry(Arc::downgrade(node));
    }
    c
}
