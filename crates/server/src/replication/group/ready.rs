//! The Ready loop (steps 1 to 7 in the module doc of `group.rs`): sending messages,
//! appending and fsyncing entries, applying committed ones, answering proposals, publishing
//! visibility.
//!
//! A child module of `group.rs`, an `impl Group` of its own.

use super::{proposal_id, AppendError, Appended, Group};
use crate::replication::in_sync::durable_copies;
use crate::replication::producers::{placed_batch_infos, positioned_batch_infos, total_span};
use crate::replication::raft_storage::{
    decode_snapshot_data, from_raft_conf, read, record_count_of, to_store_entry, write, CTX_META,
    CTX_RECORDS,
};
use crate::runtime::timeline::{self, Stage as Hop};
use raft::prelude::{ConfChange, ConfChangeV2, Entry, EntryType, Message};
use raft::StateRole;
use std::time::Instant;

impl Group {
    fn send_all(&self, msgs: Vec<Message>) {
        for mut m in msgs {
            if self.mark_quiesce_heartbeats
                && m.get_msg_type() == raft::prelude::MessageType::MsgHeartbeat
            {
                m.context = crate::runtime::quiesce::QUIESCE_CONTEXT.to_vec().into();
            }
            self.p.peers.send(self.p.id, m);
        }
    }

    pub(super) fn handle_ready(&mut self) {
        // Whatever peers appended is persisted below (or there is nothing unpersisted).
        self.unpersisted = (0, 0);
        if !self.p.node.has_ready() {
            // A follower's acknowledgement that commits nothing new makes no Ready, but may
            // complete a produce that waits for more copies than a majority.
            if self.p.node.raft.state == StateRole::Leader {
                let copies = durable_copies(&self.p.node.raft);
                self.p.durable_copies.send_if_modified(|held| {
                    let changed = *held != copies;
                    *held = copies;
                    changed
                });
            }
            return;
        }
        let mut ready = self.p.node.ready();
        if let Some(ss) = ready.ss() {
            if ss.leader_id != self.visible.leader {
                self.p
                    .metrics
                    .leader_changes
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                // One info line per change, from the new leader; the others at debug.
                if ss.leader_id == self.p.node.raft.id {
                    tracing::info!(
                        stream = %self.p.name,
                        group = self.p.id,
                        from = self.visible.leader,
                        to = ss.leader_id,
                        term = self.p.node.raft.term,
                        "became leader"
                    );
                } else {
                    tracing::debug!(
                        stream = %self.p.name,
                        group = self.p.id,
                        from = self.visible.leader,
                        to = ss.leader_id,
                        "leader changed"
                    );
                }
            }
            self.visible.leader = ss.leader_id;
            if ss.leader_id != 0 {
                self.visible.last_leader = ss.leader_id;
            }
            if let Some(t) = self.p.producers.as_mut() {
                t.clear_pending();
            }
            if ss.raft_state == StateRole::Leader {
                self.leading_since.get_or_insert_with(Instant::now);
                self.mark_unapplied_pending();
            } else {
                self.leading_since = None;
                self.commit_history.clear();
                self.fail_deposed(ss.leader_id);
            }
            self.publish();
        }
        let early = if self.p.pipeline {
            let appends = ready.take_messages();
            if !appends.is_empty() {
                timeline::stamp(Hop::AppendsQueued, self.p.id);
                self.send_all(appends);
            }
            Vec::new()
        } else {
            ready.take_messages()
        };
        if !ready.snapshot().is_empty() {
            let snap = ready.snapshot().clone();
            let meta = snap.get_metadata();
            let next_offset = if let Some(sm) = self.p.state_machine.as_mut() {
                // The state first (durable when this returns), then the log restarts after
                // it: a crash in between finds the snapshot and an older log, which the node
                // reconciles at start.
                sm.install_snapshot(meta.index, meta.term, &snap.data);
                self.snapshot_index = meta.index;
                read(&self.p.store).next_offset()
            } else {
                decode_snapshot_data(&snap.data).unwrap_or(0)
            };
            let mut s = write(&self.p.store);
            if let Err(e) = s.install_snapshot(meta.index, meta.term, next_offset) {
                if self.p.state_machine.is_some() {
                    // Its state was replaced already: the log must follow, or stop here.
                    panic!("installing a snapshot failed: {e}");
                }
                // A full disk: the log is as it was; raft-rs forgets the snapshot and the
                // leader sends another (see `retry_lost_snapshots`) once this one goes
                // unanswered.
                drop(s);
                tracing::error!(stream = %self.p.name, index = meta.index, "installing a snapshot failed: {e}; waiting for the leader to send it again");
                self.rebuild_raft(AppendError::Storage(e.to_string()));
                return;
            }
            s.save_conf_state(&from_raft_conf(meta.get_conf_state()))
                .unwrap_or_else(|e| panic!("persisting conf state failed: {e}"));
            // The snapshot's index is committed and everything up to it is now in place (a
            // state machine's state, or a stream's log start): applied, so a rejoin target at
            // or below it is reached without waiting for later entries.
            if meta.index > self.visible.applied_index {
                self.visible.applied_index = meta.index;
                self.visible.high_watermark = s.next_offset();
                self.visible.log_start_offset = s.first_readable_offset();
                drop(s);
                self.publish();
            }
        }
        self.apply(ready.take_committed_entries());
        let read_states = ready.take_read_states();
        if !ready.entries().is_empty() && !self.append(ready.entries()) {
            // raft-rs was rebuilt without the entries the store could not take; this Ready
            // belonged to the old one.
            return;
        }
        if let Some(hs) = ready.hs() {
            if hs.term != self.persisted_term || hs.vote != self.persisted_vote {
                // The commit index saved is at most what is applied: a restart takes the saved
                // commit as applied (raft-rs delivers only entries after it again), and a
                // configuration change is made durable only when applied (`save_conf_state`).
                // This Ready's own committed entries are applied only after `advance` below; a
                // crash before that, with their commit saved, would skip a configuration
                // change in them for good (two missed changes give majorities that need not
                // overlap). A saved commit below the real one is always safe: raft-rs learns
                // the rest from the leader.
                let state = logstore::HardState {
                    term: hs.term,
                    vote: hs.vote,
                    commit: hs.commit.min(self.visible.applied_index),
                };
                write(&self.p.store)
                    .save_hard_state(&state)
                    .unwrap_or_else(|e| panic!("persisting hard state failed: {e}"));
                self.persisted_term = hs.term;
                self.persisted_vote = hs.vote;
            }
            self.visible.term = hs.term;
            self.fail_stale_proposals(hs.term);
        }
        self.send_all(early);
        let acks = ready.take_persisted_messages();
        if !acks.is_empty() {
            timeline::stamp(Hop::AcksQueued, self.p.id);
            self.send_all(acks);
        }
        let mut light = self.p.node.advance(ready);
        self.send_all(light.take_messages());
        self.apply(light.take_committed_entries());
        self.p.node.advance_apply();
        if !read_states.is_empty() || !self.reads_confirmed.is_empty() {
            self.answer_reads(read_states);
        }
        self.update_in_sync();
        self.check_rejoined();
        self.mark_quiesce_heartbeats = false;
        self.p.metrics.commit_index.store(
            self.p.node.raft.raft_log.committed,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Runs a sync prepared by the store (see [`Group::append`]). The fsync runs without the
    /// store's lock, so consumers keep reading committed data meanwhile; this thread is the
    /// only writer, so nothing changes the log in between.
    fn run_sync(&self, pending: Option<logstore::PendingSync>) {
        if let Some(pending) = pending {
            let started = Instant::now();
            pending.run();
            self.p.node_metrics.fsync.observe(started.elapsed());
            write(&self.p.store)
                .complete_sync(pending)
                .unwrap_or_else(|e| panic!("completing a log sync failed: {e}"));
            timeline::stamp(Hop::FsyncDone, self.p.id);
        }
    }

    /// Under `sync = "interval"`, the fsync that falls due with no append to carry it (the
    /// last appends of a burst). Returns when the next one falls due, if any, so the turn
    /// wakes for it.
    pub(super) fn sync_when_due(&mut self) -> Option<Instant> {
        let due = read(&self.p.store).sync_due_at()?;
        if due > Instant::now() {
            return Some(due);
        }
        let pending = write(&self.p.store)
            .prepare_due_sync()
            .unwrap_or_else(|e| panic!("preparing a log sync failed: {e}"));
        self.run_sync(pending);
        None
    }

    /// Appends entries (truncating a conflicting suffix first) and makes them durable as the
    /// store's sync policy says: with one fsync under `always` (group commit); then records the indexes of this node's proposals. A write the store refuses
    /// with an I/O error (a full disk) leaves nothing in the store (it cuts what it wrote);
    /// raft-rs is then rebuilt from the store, which drops the entries as a crash before
    /// persisting them would, and the proposals waiting here fail with a storage error: false.
    /// (An fsync failure stays fail-stop: see the logstore README.)
    fn append(&mut self, entries: &[Entry]) -> bool {
        let converted: Vec<_> = entries.iter().map(to_store_entry).collect();
        // Entries read from a leader's store carry their record counts (maybe compacted:
        // see `raft_storage`); those are appended with them, the others as before.
        let counts: Vec<Option<u32>> = entries.iter().map(record_count_of).collect();
        let counted = counts.iter().any(Option::is_some);
        let first = entries[0].index;
        let pending = {
            let mut s = write(&self.p.store);
            if first <= s.last_index() {
                if let Err(e) = s.truncate_suffix(first) {
                    // A full disk (the copy of a sealed segment's kept prefix needs space):
                    // nothing was cut; as with a refused append, raft-rs forgets the entries
                    // and the leader sends them again later.
                    drop(s);
                    tracing::error!(stream = %self.p.name, first, "truncating the log failed: {e}; the entries are dropped and sent again later");
                    self.rebuild_raft(AppendError::Storage(e.to_string()));
                    return false;
                }
            }
            let segments_before = s.segment_count();
            let appended = if counted {
                s.append_unsynced_with_counts(&converted, &counts)
            } else {
                s.append_unsynced(&converted)
            };
            if let Err(e) = appended {
                drop(s);
                tracing::error!(stream = %self.p.name, first, "appending to the log failed: {e}; the entries are dropped and their proposals fail");
                self.rebuild_raft(AppendError::Storage(e.to_string()));
                return false;
            }
            if s.segment_count() > segments_before {
                tracing::info!(
                    stream = %self.p.name,
                    group = self.p.id,
                    segments = s.segment_count(),
                    first_index = first,
                    "segment rolled"
                );
            }
            // The store's sync policy (the node's `sync`) decides whether this Ready fsyncs:
            // `always` does, `interval` once the interval has passed, `never` does not.
            s.prepare_due_sync()
                .unwrap_or_else(|e| panic!("preparing a log sync failed: {e}"))
        };
        self.run_sync(pending);
        let durable_at = Instant::now();
        for e in entries {
            let Some(id) = proposal_id(&e.context, self.p.node.raft.id) else {
                continue;
            };
            if let Some(mut w) = self.proposed.remove(&id) {
                if w.term == e.term {
                    if w.records {
                        self.p.node_metrics.observe_request(
                            kafka_proto::api::ApiKey::Produce.as_i16(),
                            crate::metrics::Stage::Local,
                            durable_at.saturating_duration_since(w.proposed_at),
                        );
                    }
                    // From now on: the wait for a majority (the remote stage).
                    w.proposed_at = durable_at;
                    // An entry at this index from an earlier attempt is replaced: it is lost.
                    if let Some(old) = self.appended.insert(e.index, w) {
                        self.pending_count -= old.proposals.len();
                        for (reply, _) in old.proposals {
                            let _ = reply.send(Err(AppendError::Lost));
                        }
                    }
                } else {
                    self.pending_count -= w.proposals.len();
                    for (reply, _) in w.proposals {
                        let _ = reply.send(Err(AppendError::Lost));
                    }
                }
            }
        }
        true
    }

    fn apply(&mut self, committed: Vec<Entry>) {
        let Some(last) = committed.last() else {
            return;
        };
        let last_index = last.index;
        self.producers_unsaved += committed.len() as u64;
        for e in &committed {
            match e.get_entry_type() {
                EntryType::EntryConfChange => {
                    let mut cc = ConfChange::default();
                    if protobuf::Message::merge_from_bytes(&mut cc, &e.data).is_ok() {
                        let cs = self.p.node.apply_conf_change(&cc);
                        self.save_conf_state(cs);
                    }
                }
                EntryType::EntryConfChangeV2 => {
                    let mut cc = ConfChangeV2::default();
                    if protobuf::Message::merge_from_bytes(&mut cc, &e.data).is_ok() {
                        let cs = self.p.node.apply_conf_change(&cc);
                        self.save_conf_state(cs);
                    }
                }
                EntryType::EntryNormal => {
                    if e.context.first() == Some(&CTX_META) && !e.data.is_empty() {
                        if let Some(sm) = self.p.state_machine.as_mut() {
                            sm.apply(e.index, &e.data);
                        }
                    }
                    if e.context.first() == Some(&CTX_RECORDS) {
                        self.apply_producers(e);
                    }
                }
            }
        }
        let s = read(&self.p.store);
        self.visible.applied_index = last_index;
        self.visible.high_watermark = s
            .next_offset_after_index(last_index)
            .unwrap_or_else(|e| panic!("committed index {last_index} not in the log: {e}"));
        self.visible.log_start_offset = s.first_readable_offset();
        drop(s);
        self.publish();
        // Answered only once readers can see the entries: a client that reads (ListOffsets,
        // Fetch) right after its acknowledged write finds it. Answering reads each entry's
        // offsets from the log, so it comes before a snapshot lets the log be compacted below
        // these entries (found by the simulation's metadata group: a proposal committed in the
        // batch that a snapshot covered could not be answered).
        for e in &committed {
            self.answer_committed(e);
        }
        if let Some(sm) = self.p.state_machine.as_mut() {
            let term = read(&self.p.store)
                .term(last_index)
                .unwrap_or_else(|e| panic!("committed index {last_index} not in the log: {e}"));
            let newest = sm.after_apply(last_index, term);
            if newest > self.snapshot_index {
                self.snapshot_index = newest;
                self.compact_below_snapshot();
                let log_start = read(&self.p.store).first_readable_offset();
                if log_start != self.visible.log_start_offset {
                    self.visible.log_start_offset = log_start;
                    self.publish();
                }
            }
        }
        self.save_producers(false);
    }

    /// Updates the producer table with a committed entry's batches.
    fn apply_producers(&mut self, e: &Entry) {
        let Some(table) = self.p.producers.as_mut() else {
            return;
        };
        if record_count_of(e).is_some() {
            // Read from a store (maybe compacted): the batches carry their offsets.
            let placed = placed_batch_infos(&e.data);
            if !placed.is_empty() {
                table.on_committed_placed_at(e.index, &placed);
            }
            return;
        }
        let end = read(&self.p.store)
            .next_offset_after_index(e.index)
            .unwrap_or_else(|err| panic!("committed index {} not in the log: {err}", e.index));
        // Every batch at its own offset, the batches without a producer id counted too (an
        // entry merges several clients' batches).
        let placed = positioned_batch_infos(&e.data, end - total_span(&e.data));
        if !placed.is_empty() {
            table.on_committed_placed_at(e.index, &placed);
        }
    }

    /// Saves the producer table (see [`crate::replication::producer_snapshot`]) when it knows
    /// a producer and [`crate::replication::producer_snapshot::SNAPSHOT_EVERY_ENTRIES`] entries
    /// were applied since the last save, or, with `stopping`, when any were. A failed save (a
    /// full disk) is retried at the next one due; the log still holds what it would say.
    pub(super) fn save_producers(&mut self, stopping: bool) {
        use crate::replication::producer_snapshot;
        let Some(table) = self.p.producers.as_ref() else {
            return;
        };
        let due = if stopping {
            self.producers_unsaved > 0
        } else {
            self.producers_unsaved >= producer_snapshot::SNAPSHOT_EVERY_ENTRIES
        };
        if !due || table.is_empty() {
            return;
        }
        let dir = read(&self.p.store).dir().to_path_buf();
        match producer_snapshot::save(&dir, table) {
            Ok(()) => self.producers_unsaved = 0,
            Err(e) => {
                tracing::warn!(stream = %self.p.name, "saving the producer table failed: {e}")
            }
        }
    }

    /// Persists the configuration a conf change produced (raft-rs rejects invalid ones).
    fn save_conf_state(&mut self, cs: raft::Result<raft::prelude::ConfState>) {
        if let Ok(cs) = cs {
            write(&self.p.store)
                .save_conf_state(&from_raft_conf(&cs))
                .unwrap_or_else(|e| panic!("persisting conf state failed: {e}"));
        }
    }

    /// Answers the proposals waiting on committed entry `e` (and fails those whose index was
    /// taken by another leader's entry).
    fn answer_committed(&mut self, e: &Entry) {
        while let Some((&index, _)) = self.appended.first_key_value() {
            if index > e.index {
                break;
            }
            let Some(w) = self.appended.remove(&index) else {
                break;
            };
            self.pending_count -= w.proposals.len();
            if index == e.index && w.term == e.term {
                if w.records {
                    self.p.node_metrics.observe_request(
                        kafka_proto::api::ApiKey::Produce.as_i16(),
                        crate::metrics::Stage::Remote,
                        w.proposed_at.elapsed(),
                    );
                }
                let next = read(&self.p.store)
                    .next_offset_after_index(index)
                    .unwrap_or_else(|err| panic!("committed index {index} not in the log: {err}"));
                let total: u64 = w.proposals.iter().map(|(_, n)| u64::from(*n)).sum();
                let mut base = next - total;
                // Stamped before the replies: a reply may write the client's response itself.
                timeline::stamp(Hop::Answered, self.p.id);
                for (reply, n) in w.proposals {
                    let _ = reply.send(Ok(Appended {
                        raft_index: index,
                        base_offset: base,
                        offset_count: n,
                    }));
                    base += u64::from(n);
                }
            } else {
                for (reply, _) in w.proposals {
                    let _ = reply.send(Err(AppendError::Lost));
                }
            }
        }
    }

    /// Publishes what readers see ([`super::Visible`]), with the last stable offset computed
    /// from the high watermark and the open transactions, and the aborted transactions when
    /// they changed (those ending below the log start are forgotten first).
    pub(super) fn publish(&mut self) {
        let hw = self.visible.high_watermark;
        self.visible.last_stable_offset = hw;
        if let Some(table) = self.p.producers.as_mut() {
            table.trim_aborted_below(self.visible.log_start_offset);
            // Never below the log start (DeleteRecords past an open transaction's first
            // offset), as Kafka's first unstable offset.
            self.visible.last_stable_offset = table
                .last_stable_offset(hw)
                .max(self.visible.log_start_offset.min(hw));
            let version = table.transactions().aborted_version();
            if self.aborted_published != Some(version) {
                self.aborted_published = Some(version);
                let list: Vec<_> = table.transactions().aborted().iter().copied().collect();
                self.p.aborted.send_replace(list.into());
            }
        }
        let mut leadership_moved = false;
        self.p.visible.send_if_modified(|v| {
            if *v == self.visible {
                false
            } else {
                leadership_moved = v.leader != self.visible.leader || v.term != self.visible.term;
                *v = self.visible;
                true
            }
        });
        if leadership_moved {
            self.p.leadership.note();
        }
    }

    pub(super) fn fail_all(&mut self, err: AppendError) {
        for p in self.queued.drain(..) {
            let _ = p.reply.send(Err(err.clone()));
        }
        for (_, w) in self
            .proposed
            .drain()
            .chain(std::mem::take(&mut self.appended))
        {
            for (reply, _) in w.proposals {
                let _ = reply.send(Err(err.clone()));
            }
        }
        self.pending_count = 0;
    }
}
