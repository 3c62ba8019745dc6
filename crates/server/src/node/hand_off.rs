//! Leadership moves: handing a partition to its preferred leader, leader transfers asked by an
//! operator, and handing off every group this node leads before it stops.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::metadata::MetaCommand;
use crate::replication::group::AppendError;
use crate::replication::stream::LogStream;

use super::{HandOffReport, Node, TransferError};

impl Node {
    /// Starts a leader transfer of partition `partition` of topic `name` to `preferred` when
    /// this node leads it (ElectLeaders, applied from the replicated metadata on every node).
    /// Does nothing while the metadata log is replayed at start: an old request is not acted on
    /// again.
    pub fn hand_leadership_to(&self, name: &str, incarnation: u64, partition: u32, preferred: u64) {
        if !self
            .retention_allowed
            .load(std::sync::atomic::Ordering::Acquire)
        {
            return;
        }
        if let Some(stream) = self
            .partition(name, partition)
            .filter(|s| s.incarnation == incarnation && s.visible().leader == self.config.id)
        {
            if preferred != self.config.id {
                tracing::info!(stream = %name, partition, to = preferred, "handing leadership to the preferred replica (ElectLeaders)");
                stream.transfer_leader(preferred);
            }
        }
    }

    /// Asks the leader of partition `partition` of incarnation `incarnation` of topic `name`
    /// (0: a stream configured at start), wherever it runs, to hand leadership to the
    /// partition's preferred replica (through the replicated metadata, which reaches every
    /// node). Returns once this node has applied the request; whether leadership
    /// moved shows in the partition's leader.
    pub async fn elect_preferred_leader(
        &self,
        name: &str,
        incarnation: u64,
        partition: u32,
        timeout: Duration,
    ) -> Result<(), AppendError> {
        self.metadata_proposer()
            .propose(
                &MetaCommand::ElectPreferredLeader {
                    name: name.to_owned(),
                    incarnation,
                    partition,
                },
                timeout,
            )
            .await
            .map(|_| ())
    }

    /// Graceful shutdown's first step: hands leadership of every group this node leads (every
    /// partition and the metadata group) to its most caught-up voter; a group still led here an
    /// election timeout later (raft-rs gave the transfer up: the target is down or leaving
    /// too, as when a whole cluster stops) tries the next voter, and when every voter was tried
    /// it is given up on. Returns when no group is led here, every remaining one was given up
    /// on, or `timeout` passes. Every group then refuses to take leadership back. Groups with
    /// no other voter stay led here and are not waited for.
    pub async fn hand_off_leadership(&self, timeout: Duration) -> HandOffReport {
        let me = self.config.id;
        let deadline = Instant::now() + timeout;
        let led_now = |all: &[LogStream]| -> Vec<LogStream> {
            all.iter()
                .filter(|s| s.visible().leader == me)
                .cloned()
                .collect()
        };
        let all = self.all_groups();
        let mut report = HandOffReport {
            led: led_now(&all).len(),
            still_led: 0,
        };
        // Every group refuses leadership from now on, led here or not; those led here with
        // another voter start a transfer (a group of one voter has nobody to hand over to).
        // Per group handed over: the voters tried so far.
        let mut handing: Vec<(LogStream, Vec<u64>)> = Vec::new();
        // Led here with no other voter: nobody to hand over to, not counted as still led.
        let mut alone = HashSet::new();
        for s in &all {
            match s.hand_off(Vec::new()).await {
                Some(to) => handing.push((s.clone(), vec![to])),
                None if s.visible().leader == me => {
                    alone.insert(s.group);
                }
                None => {}
            }
        }
        report.led -= alone.len().min(report.led);
        let retry_every = self.config.raft.election_timeout;
        let mut next_retry = Instant::now() + retry_every;
        loop {
            handing.retain(|(s, _)| s.visible().leader == me);
            report.still_led = led_now(&all)
                .iter()
                .filter(|s| !alone.contains(&s.group))
                .count();
            if handing.is_empty() || Instant::now() >= deadline {
                return report;
            }
            if Instant::now() >= next_retry {
                let mut next = Vec::with_capacity(handing.len());
                for (s, mut tried) in handing.drain(..) {
                    if let Some(to) = s.hand_off(tried.clone()).await {
                        tried.push(to);
                        next.push((s, tried));
                    } else {
                        tracing::warn!(stream = %s.name, partition = s.partition, ?tried, "no voter took leadership; it will be elected anew");
                    }
                }
                handing = next;
                next_retry = Instant::now() + retry_every;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Makes partition `partition` of topic `name` led by replica `to`: through the metadata
    /// log (the current leader, wherever it runs, starts the transfer), then waits until `to`
    /// leads as this node sees it. Errors: no such topic or partition, `to` not a replica,
    /// or not done within `timeout`.
    pub async fn transfer_leader(
        &self,
        name: &str,
        partition: u32,
        to: u64,
        timeout: Duration,
    ) -> Result<(), TransferError> {
        let layout = self
            .topic_layout(name)
            .ok_or_else(|| TransferError::NoPartition(name.to_owned(), partition))?;
        let replicas = layout
            .replicas
            .get(partition as usize)
            .ok_or_else(|| TransferError::NoPartition(name.to_owned(), partition))?;
        if !replicas.contains(&to) {
            return Err(TransferError::NotAReplica {
                to,
                replicas: replicas.clone(),
            });
        }
        let deadline = Instant::now() + timeout;
        let leader = || self.current_leader(name, layout.incarnation, partition);
        if leader() == Some(to) {
            return Ok(());
        }
        let cmd = MetaCommand::TransferLeader {
            name: name.to_owned(),
            incarnation: layout.incarnation,
            partition,
            to,
        };
        let mut next_ask = Instant::now();
        while Instant::now() < deadline {
            if Instant::now() >= next_ask {
                // Asked again every two election timeouts: a transfer raft-rs gave up on (the
                // target was behind) is retried.
                let left = deadline.saturating_duration_since(Instant::now());
                self.metadata_proposer()
                    .propose(&cmd, left)
                    .await
                    .map_err(TransferError::Propose)?;
                next_ask = Instant::now() + 2 * self.config.raft.election_timeout;
            }
            if leader() == Some(to) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(TransferError::Timeout {
            to,
            leader: leader().unwrap_or(0),
        })
    }

    /// The leader of a partition as this node knows it: its own replica's view, or the
    /// leader reports of the other nodes.
    pub fn current_leader(&self, name: &str, incarnation: u64, partition: u32) -> Option<u64> {
        match self
            .partition(name, partition)
            .filter(|s| s.incarnation == incarnation)
        {
            Some(s) => Some(s.visible().leader).filter(|l| *l != 0),
            None => self
                .reported_leader(name, incarnation, partition)
                .map(|(l, _)| l),
        }
    }
}
