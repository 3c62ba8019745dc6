//! The marker writer, on every node: for each decided transaction (PrepareCommit or
//! PrepareAbort in the replicated state) it writes the COMMIT or ABORT marker to every
//! partition of it that this node leads, through the partition's Raft group, and once those
//! are committed reports them with [`MetaCommand::TxnMarkersWritten`] through the metadata
//! group; the transaction completes when its last partition is reported.
//!
//! Why the partitions' leaders write the markers, not the coordinator: the decision is in the
//! replicated metadata every node applies, so no new node-to-node path is needed. The only
//! message between nodes is the report, a metadata proposal forwarded to the metadata leader
//! over the peer port, whose sender proved it is a member (peer TLS names its node id; see
//! `crate::metadata::forwarded`); no Kafka listener, SASL credential or admin endpoint is
//! involved. It also survives failures with no resuming step: a new coordinator finds the
//! decided transactions in the state, and a new partition leader finds the partitions still
//! to mark. A marker written twice (the report was lost with its leader) changes nothing: the
//! partition ignores a marker of a producer without an open transaction
//! (`replication::transactions`), and under transaction version 2 refuses one whose epoch is
//! not above the producer's open transaction's (the marker names its version; see
//! `replication::transactions::marker_epoch_allowed`), so a second copy of a decision's marker
//! landing after the producer's next transaction began cannot end that transaction.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, Weak};

use crate::kafka::host::TxnHost;
use crate::kafka::txn_markers::control_batch;
use crate::metadata::{wall_clock_ms, MetaCommand};
use crate::replication::group::AppendError;
use crate::replication::stream::LogStream;
use crate::replication::transactions::TxnMarker;

use super::barrier::metadata_barrier;
use super::limits::{MARKER_ROUND_TIMEOUT, MARKER_SCAN};

/// One decided transaction's markers this node writes in one round: per partition, the
/// stream and the high watermark read before the decision was (the marker's
/// [`TxnMarker::opened_below`]).
struct Round {
    id: String,
    producer_id: i64,
    producer_epoch: i16,
    marker: TxnMarker,
    partitions: Vec<(String, i32, LogStream, u64)>,
}

/// A decided transaction as the state holds it: id, producer id and epoch, its marker, the
/// partitions still to mark.
type Decided = (String, i64, i16, TxnMarker, Vec<(String, i32)>);

/// The transactions with a round in flight here, by (id, producer id, epoch).
type InFlight = Arc<Mutex<HashSet<(String, i64, i16)>>>;

/// As soon as the metadata applied here decides a transaction, and every [`MARKER_SCAN`]
/// besides (for partitions whose leadership moved here, and rounds that failed): when some
/// decided transaction has partitions this node leads and no round in flight, takes a read
/// barrier on the metadata group and starts a round for each such transaction the state
/// shows after it. Ends with the host or the node's shutdown.
///
/// Why the barrier: a marker names only the producer id and epoch, which consecutive
/// transactions of one transactional id share under transaction version 1. A node whose
/// metadata is behind (replaying its log after a restart, or a follower lagging) sees a
/// decision the coordinator completed long ago; its marker, written now, would end the
/// producer's *next* transaction on that partition (a COMMIT making aborted records visible,
/// an ABORT dropping committed ones), and its report would be taken as the next
/// transaction's. Found by `vdl-perf verify --transactional` across a crash of every node.
/// After the barrier the state holds every decision committed before it: a transaction still
/// decided then is not complete, so its producer has not started the next one.
pub(super) fn start_marker_writer<H: TxnHost>(node: Weak<H>) {
    tokio::spawn(async move {
        let in_flight: InFlight = Arc::default();
        let Some(mut work) = node.upgrade().map(|n| n.transaction_work()) else {
            return;
        };
        loop {
            tokio::select! {
                changed = work.changed() => if changed.is_err() { return; },
                () = tokio::time::sleep(MARKER_SCAN) => {}
            }
            let Some(node) = node.upgrade() else {
                return;
            };
            if node.metadata_group().is_none() {
                return;
            }
            let new_round = |r: &Round, in_flight: &InFlight| {
                !in_flight
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains(&(r.id.clone(), r.producer_id, r.producer_epoch))
            };
            if !rounds_here(&node).iter().any(|r| new_round(r, &in_flight)) {
                continue;
            }
            if !metadata_barrier(node.as_ref()).await {
                continue;
            }
            for round in rounds_here(&node) {
                let key = (round.id.clone(), round.producer_id, round.producer_epoch);
                if !in_flight
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key.clone())
                {
                    continue;
                }
                let node = node.clone();
                let in_flight = in_flight.clone();
                tokio::spawn(async move {
                    write_round(&node, round).await;
                    in_flight
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&key);
                });
            }
        }
    });
}

/// The rounds this node should write now: per decided transaction, its partitions still to
/// mark whose replica here leads (and has committed an entry of its term, so its high
/// watermark covers everything committed before).
///
/// Each partition's marker is bounded by the partition's high watermark read here, before
/// the decision is read (a second time, keeping only what is still to mark):
/// `replication::transactions::marker_fence_allows` says why. A batch of the producer's next
/// transaction committed before the watermark was read means that transaction was added,
/// so this one completed, before the second read; then no round starts. Otherwise the next
/// transaction's first batch lies at or above the bound, and the marker, should it be a second
/// copy of a decision another leader already marked, cannot end it.
fn rounds_here<H: TxnHost>(node: &Arc<H>) -> Vec<Round> {
    let me = node.config().id;
    let rounds: Vec<Round> = decided_now(node)
        .into_iter()
        .filter_map(|(id, producer_id, producer_epoch, marker, partitions)| {
            let led: Vec<(String, i32, LogStream, u64)> = partitions
                .into_iter()
                .filter_map(|(topic, p)| {
                    let stream = node.partition(&topic, u32::try_from(p).ok()?)?;
                    let v = stream.visible();
                    (v.leader == me && v.leader_ready).then_some((
                        topic,
                        p,
                        stream,
                        v.high_watermark,
                    ))
                })
                .collect();
            (!led.is_empty()).then_some(Round {
                id,
                producer_id,
                producer_epoch,
                marker,
                partitions: led,
            })
        })
        .collect();
    if rounds.is_empty() {
        return rounds;
    }
    let still: Vec<Decided> = decided_now(node);
    rounds
        .into_iter()
        .filter_map(|mut round| {
            let (_, _, _, marker, partitions) = still.iter().find(|d| {
                (&d.0, d.1, d.2) == (&round.id, round.producer_id, round.producer_epoch)
            })?;
            if *marker != round.marker {
                return None;
            }
            round
                .partitions
                .retain(|(topic, p, _, _)| partitions.iter().any(|(t, q)| t == topic && q == p));
            (!round.partitions.is_empty()).then_some(round)
        })
        .collect()
}

/// The transactions the metadata applied here shows decided, with their partitions still to
/// mark.
fn decided_now<H: TxnHost>(node: &Arc<H>) -> Vec<Decided> {
    // Read under the metadata guard, released before the partitions are looked up.
    let meta = node.metadata();
    let decided: Vec<Decided> = meta
        .deciding_transactions
        .iter()
        .filter_map(|id| {
            let r = meta.transactions.get(id)?;
            let commit = r.status.preparing()?;
            let marker = TxnMarker {
                commit,
                coordinator_epoch: r.coordinator_epoch,
                transaction_version: i8::try_from(r.transaction_version).unwrap_or(0),
                opened_below: None,
            };
            let partitions = r.partitions.iter().cloned().collect();
            Some((
                id.clone(),
                r.producer_id,
                r.producer_epoch,
                marker,
                partitions,
            ))
        })
        .collect();
    drop(meta);
    decided
}

/// Writes one round's markers and reports those committed. A partition that fails is left
/// for a later round (its leader then, this node or another, writes it again).
async fn write_round<H: TxnHost>(node: &Arc<H>, round: Round) {
    let now_ms = wall_clock_ms();
    let mut pending = Vec::with_capacity(round.partitions.len());
    for (topic, p, stream, high_watermark) in round.partitions {
        let marker = TxnMarker {
            opened_below: Some(high_watermark),
            ..round.marker
        };
        let Some(batch) = control_batch(round.producer_id, round.producer_epoch, marker, now_ms)
        else {
            tracing::error!(transactional_id = %round.id, "a transaction marker could not be built");
            return;
        };
        pending.push((topic, p, stream.submit_records(batch, 1)));
    }
    let mut written = Vec::new();
    for (topic, p, append) in pending {
        match append.wait(MARKER_ROUND_TIMEOUT).await {
            Ok(_) => written.push((topic, p)),
            // The partition refused the marker's epoch (Kafka's INVALID_PRODUCER_EPOCH): its
            // producer is past this epoch, or under version 2 has a transaction of this very
            // epoch open, which can only be the next transaction (it began after this one
            // completed, so this marker was written before and its report lost). Nothing of
            // this transaction is open there: counted as written, so the transaction
            // completes and the marker is not retried for ever (Kafka's coordinator also
            // stops sending a transaction's markers on this error). A marker the replicas
            // refuse when they apply it (the second line of the same check) is answered as
            // written, and counted so, for the same reason.
            Err(AppendError::Sequence(e)) => {
                tracing::warn!(transactional_id = %round.id, %topic, partition = p,
                    "marker refused by the partition's producer state ({e:?}); counted as written");
                written.push((topic, p));
            }
            Err(e) => {
                tracing::debug!(transactional_id = %round.id, %topic, partition = p,
                    "writing a marker failed, retried: {e}");
            }
        }
    }
    if written.is_empty() {
        return;
    }
    report(
        node,
        &round.id,
        round.producer_id,
        round.producer_epoch,
        written,
    )
    .await;
}

/// Reports markers written (or partitions that need none) through the metadata group.
pub(super) async fn report<H: TxnHost>(
    node: &Arc<H>,
    id: &str,
    producer_id: i64,
    producer_epoch: i16,
    partitions: Vec<(String, i32)>,
) {
    let command = MetaCommand::TxnMarkersWritten {
        transactional_id: id.to_string(),
        producer_id,
        producer_epoch,
        partitions,
        time_ms: wall_clock_ms(),
    };
    if let Err(e) = node
        .metadata_proposer()
        .propose(&command, MARKER_ROUND_TIMEOUT)
        .await
    {
        tracing::debug!(
            transactional_id = id,
            "reporting markers failed, retried: {e}"
        );
    }
}
