//! The read barrier on the metadata group that the transaction code takes before it acts on
//! the local metadata state where a stale state would do harm: a transactional Produce this
//! node's state does not verify ([`super::produce_check`]), and every round of markers
//! ([`super::markers`]), whose decision must be the transaction's current one.

use super::limits::BARRIER_TIMEOUT;
use crate::kafka::host::ClusterHost;
use crate::metadata::MetaCommand;

/// Waits until this node has applied everything the metadata group committed before the
/// call: on the metadata leader a ReadIndex (no log entry); elsewhere (ReadIndex answers only
/// on the leader) a no-op entry committed through the leader, applied here after everything
/// committed before it. False when the barrier failed (no leader, a timeout): the state here
/// may then be behind.
pub(crate) async fn metadata_barrier<H: ClusterHost + ?Sized>(node: &H) -> bool {
    let Some(group) = node.metadata_group() else {
        return false;
    };
    if group.visible().leader == node.config().id {
        group.read_index(BARRIER_TIMEOUT).await.is_ok()
    } else {
        node.metadata_proposer()
            .propose(&MetaCommand::barrier(), BARRIER_TIMEOUT)
            .await
            .is_ok()
    }
}
