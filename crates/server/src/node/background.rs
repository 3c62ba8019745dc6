//! The node's background loops: pinging peers and reporting silent ones (liveness), finishing
//! reassignments this node leads, ending rejoin mode once every group caught up, and the
//! scrubber of sealed segments.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use crate::metadata::MetaCommand;
use crate::replication::group::GroupInput;
use crate::replication::router::Registry;
use crate::replication::transport::PeerSender;

use super::{Node, StreamMap};

/// Pings every peer once per heartbeat interval and reports to every group each peer not heard
/// from for an election timeout (see [`crate::replication::liveness`]). Each ping carries this
/// node's leader report when it is due (see [`crate::replication::leaders`]).
pub(super) async fn watch_liveness(
    registry: Arc<Registry>,
    peers: PeerSender,
    streams: Arc<Mutex<StreamMap>>,
    me: u64,
    others: Arc<RwLock<Vec<u64>>>,
    every: Duration,
    timeout: Duration,
) {
    let mut interval = tokio::time::interval(every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut schedule = crate::replication::leaders::ReportSchedule::default();
    let mut led = Vec::new();
    let mut led_as_of = None;
    loop {
        interval.tick().await;
        let now = std::time::Instant::now();
        // The groups' states are read again only after a leadership change, or when the
        // report is sent again anyway (which also drops the groups of deleted streams).
        let changes = registry.leadership.count();
        if led_as_of != Some(changes) || schedule.stale(now) {
            led_as_of = Some(changes);
            led = led_here(&streams, me);
        }
        let report = schedule.due(led.clone(), now);
        let others = others.read().unwrap_or_else(|e| e.into_inner()).clone();
        for peer in &others {
            let mut ping = crate::replication::liveness::ping(me, *peer);
            if let Some(report) = &report {
                ping.context = report.clone();
            }
            peers.send(crate::replication::liveness::LIVENESS_GROUP, ping);
        }
        for peer in registry
            .liveness
            .newly_down(std::time::Instant::now(), timeout)
        {
            tracing::info!(
                peer,
                "peer not heard from for an election timeout: waking its groups"
            );
            registry.tell_all_groups(|| GroupInput::PeerDown(peer));
        }
    }
}

/// Every 200 ms, proposes `FinishReassignment` for each partition this node leads whose Raft
/// group reached its new replicas (see [`crate::replication::membership`]); ends with the node.
pub(super) async fn finish_reassignments(node: std::sync::Weak<Node>) {
    let mut interval = tokio::time::interval(Duration::from_millis(200));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let Some(node) = node.upgrade() else {
            return;
        };
        for (name, incarnation, partition) in node.settled_reassignments() {
            tracing::info!(topic = %name, partition, "reassignment done");
            let cmd = MetaCommand::FinishReassignment {
                name,
                incarnation,
                partition,
            };
            if let Err(e) = node
                .metadata_proposer()
                .propose(&cmd, Duration::from_secs(5))
                .await
            {
                tracing::debug!("finishing a reassignment failed (retried): {e}");
            }
        }
    }
}

/// The groups among `streams` that node `me` leads now, with their terms.
pub(super) fn led_here(streams: &Mutex<StreamMap>, me: u64) -> Vec<(u64, u64)> {
    let streams = streams.lock().unwrap_or_else(|e| e.into_inner());
    streams
        .iter()
        .filter_map(|(_, _, s)| {
            let v = s.visible();
            (v.leader == me).then_some((s.group, v.term))
        })
        .collect()
}

/// While this node is rejoining after a replaced disk, checks every 200 ms whether every group
/// has caught up; then ends rejoin mode and reconnects to the peers so their hellos say so.
pub(super) async fn settle_rejoin(registry: Arc<Registry>, peers: PeerSender) {
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if !registry.directories.rejoin().is_active() {
            continue;
        }
        let groups: Vec<u64> = registry
            .groups
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .copied()
            .collect();
        if registry.directories.maybe_settle(&groups) {
            peers.redial_all();
        }
    }
}

impl Node {
    /// Damaged replicas on this node and the scrubber's and repairs' counters.
    pub fn storage_faults(&self) -> &Arc<crate::storage_faults::StorageFaults> {
        &self.storage_faults
    }

    /// Starts the background scrubber over every stream this node holds (see
    /// [`crate::scrubber`]); does nothing when the configured rate is 0.
    pub(super) fn start_scrubber(&self) {
        let rate = self.config.storage.scrub_bytes_per_second;
        if rate == 0 {
            return;
        }
        let streams = Arc::downgrade(&self.streams);
        let list: crate::scrubber::StreamLister = Box::new(move || {
            let Some(streams) = streams.upgrade() else {
                return Vec::new();
            };
            let map = streams.lock().unwrap_or_else(|e| e.into_inner());
            map.handles()
        });
        match crate::scrubber::Scrubber::start(
            &format!("vdl{}", self.config.id),
            rate,
            self.config.storage.scrub_pass_pause,
            list,
            self.storage_faults.clone(),
        ) {
            Ok(s) => *self.scrubber.lock().unwrap_or_else(|e| e.into_inner()) = Some(s),
            Err(e) => tracing::error!("cannot start the scrubber thread: {e}"),
        }
    }
}
