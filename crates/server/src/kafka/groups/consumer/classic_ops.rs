//! What the coordinator does for classic-protocol requests (JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup) on a consumer-protocol group with members (their members of type classic,
//! [`super::classic_member`]), and the online upgrade and downgrade between the two kinds
//! ([`super::migration`]) under `group.consumer.migration.policy`.
//!
//! Locks: a classic group's lock and a consumer group's lock are never held together (a
//! conversion takes the group out of one registry under its lock, then puts the converted
//! group in the other).

use std::time::Instant;

use kafka_proto::error_code::ErrorCode;

use super::super::coordinator::{lock, Coordinator};
use super::super::group::Group;
use super::super::limits::MAX_GROUPS;
use super::super::types::{GroupStore, JoinOutcome, JoinParams, SyncOutcome, SyncParams};
use super::classic_member::ClassicJoin;
use super::classic_protocol::CONSUMER_PROTOCOL_TYPE;
use super::group::ConsumerGroup;
use super::registry::Entry;
use super::types::Context;

impl Coordinator {
    /// A classic JoinGroup (already checked as every JoinGroup is) on consumer group
    /// `p.group_id`: None when there is no such group with members (the classic path then
    /// runs, converting an empty one); otherwise the answer and the sequence number of the
    /// group's record that must be written before it goes out (0: none).
    pub(in super::super) fn consumer_classic_join(
        &self,
        term: u64,
        p: &JoinParams,
        ctx: &Context<'_>,
        now: Instant,
    ) -> Option<(JoinOutcome, u64)> {
        let _term = self.state(term)?;
        self.consumer.with(&p.group_id, |_, e| {
            if e.group.members.is_empty() {
                return None;
            }
            let (member_id, new_member) = if p.member_id.is_empty() {
                let id = self.new_member_id(&p.client_id);
                if p.group_instance_id.is_none() && p.require_known_member_id {
                    return Some((JoinOutcome::error(ErrorCode::MemberIdRequired, &id), 0));
                }
                (id, true)
            } else {
                (p.member_id.clone(), false)
            };
            let j = ClassicJoin {
                member_id: member_id.clone(),
                new_member,
                instance_id: p.group_instance_id.clone(),
                client_id: p.client_id.clone(),
                client_host: p.client_host.clone(),
                session_timeout_ms: p.session_timeout_ms,
                rebalance_timeout_ms: p.rebalance_timeout_ms,
                protocol_type: p.protocol_type.clone(),
                protocols: p
                    .protocols
                    .iter()
                    .map(|(n, m)| (n.clone(), m.to_vec()))
                    .collect(),
            };
            let answer = match e.group.classic_join(&j, ctx, now) {
                Ok(joined) => JoinOutcome {
                    error: ErrorCode::None,
                    generation_id: joined.generation,
                    protocol_type: Some(CONSUMER_PROTOCOL_TYPE.to_owned()),
                    protocol_name: Some(joined.protocol_name),
                    leader: String::new(),
                    member_id,
                    members: Vec::new(),
                    skip_assignment: false,
                },
                Err((error, _)) => JoinOutcome::error(error, &p.member_id),
            };
            self.store_consumer(&p.group_id, e);
            self.consumer.schedule(&p.group_id, &e.group);
            Some((answer, e.record_seq))
        })?
    }

    /// A classic SyncGroup on a consumer group: None when `p.group_id` is not one.
    pub(in super::super) fn consumer_classic_sync(
        &self,
        term: u64,
        p: &SyncParams,
        ctx: &Context<'_>,
        now: Instant,
    ) -> Option<SyncOutcome> {
        let _term = self.state(term)?;
        self.consumer.with(&p.group_id, |_, e| {
            let answer = e.group.classic_sync(
                &p.member_id,
                p.group_instance_id.as_deref(),
                p.generation_id,
                (p.protocol_type.as_deref(), p.protocol_name.as_deref()),
                ctx,
                now,
            );
            self.consumer.schedule(&p.group_id, &e.group);
            match answer {
                Ok((protocol_name, assignment)) => SyncOutcome {
                    error: ErrorCode::None,
                    protocol_type: Some(CONSUMER_PROTOCOL_TYPE.to_owned()),
                    protocol_name: Some(protocol_name),
                    assignment: assignment.into(),
                },
                Err(error) => SyncOutcome::error(error),
            }
        })
    }

    /// A classic Heartbeat on a consumer group: None when `group_id` is not one.
    pub(in super::super) fn consumer_classic_heartbeat(
        &self,
        term: u64,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        instance_id: Option<&str>,
        ctx: &Context<'_>,
        now: Instant,
    ) -> Option<ErrorCode> {
        let _term = self.state(term)?;
        self.consumer.with(group_id, |_, e| {
            let error = e
                .group
                .classic_heartbeat(member_id, instance_id, generation_id, ctx, now);
            self.consumer.schedule(group_id, &e.group);
            error
        })
    }

    /// A classic LeaveGroup on a consumer group: None when `group_id` is not one; otherwise
    /// one error per member and the sequence number of the group's record to wait for.
    pub(in super::super) fn consumer_classic_leave(
        &self,
        term: u64,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> Option<(Vec<ErrorCode>, u64)> {
        let _term = self.state(term)?;
        self.consumer.with(group_id, |_, e| {
            let errors = members
                .iter()
                .map(|(id, instance)| e.group.classic_leave(id, instance.as_deref()))
                .collect();
            self.store_consumer(group_id, e);
            self.consumer.schedule(group_id, &e.group);
            (errors, e.record_seq)
        })
    }

    /// The online upgrade of classic group `group_id` with members, for a consumer-protocol
    /// member joining it: Ok(true) when it was converted (the consumer group is in place),
    /// Ok(false) when there is no classic group of that id (an empty one is removed: the
    /// joining member creates the consumer group), Err(message) when it cannot be upgraded.
    pub(in super::super) fn upgrade_classic(
        &self,
        group_id: &str,
        ctx: &Context<'_>,
        now: Instant,
    ) -> Result<bool, String> {
        let converted = self.with_group(group_id, |arc, g| {
            if g.members.is_empty() && g.pending.is_empty() {
                self.remove(group_id, arc, g);
                return Ok(None);
            }
            let cannot = |why: &str| {
                format!("Cannot upgrade classic group {group_id} to consumer group because {why}")
            };
            if !ctx.settings.migration.upgrade_enabled() {
                return Err(cannot("online upgrade is disabled."));
            }
            let cg = ConsumerGroup::from_classic(g, ctx.topics, ctx.settings.max_size, now)
                .map_err(|why| cannot(&why))?;
            // Requests waiting in a rebalance of the classic group rejoin the consumer group.
            g.drop_waiters(ErrorCode::RebalanceInProgress);
            self.remove(group_id, arc, g);
            Ok(Some(cg))
        });
        let Some(cg) = converted.transpose()?.flatten() else {
            return Ok(false);
        };
        tracing::info!(group = %group_id, members = cg.members.len(), "classic group upgraded to a consumer group");
        let Some(arc) = self.consumer.find(group_id, true, MAX_GROUPS) else {
            return Err(format!(
                "Cannot upgrade classic group {group_id}: too many groups."
            ));
        };
        let mut e = lock(&arc);
        if e.group.members.is_empty() {
            e.group = cg;
        }
        self.store_consumer(group_id, &mut e);
        self.consumer.schedule(group_id, &e.group);
        Ok(true)
    }

    /// After a consumer-protocol member left consumer group `group_id` (`arc`, locked by the
    /// caller as `e`): when the downgrade is enabled and every remaining member uses the
    /// classic protocol, the group is taken out (and forgotten by the metadata) and returned
    /// as a classic group at `generation` in a rebalance, for the caller to install with
    /// [`Coordinator::install_classic`] once it no longer holds the consumer group's lock.
    pub(in super::super) fn take_for_downgrade(
        &self,
        group_id: &str,
        arc: &super::registry::EntryRef,
        e: &mut Entry,
        generation: i32,
        ctx: &Context<'_>,
        now: Instant,
    ) -> Option<Group> {
        if !ctx.settings.migration.downgrade_enabled() || !e.group.all_classic() {
            return None;
        }
        let classic = e.group.to_classic(generation, ctx.topics, now);
        self.consumer.remove(group_id, arc, e);
        e.record_seq = self.queue_record(group_id, GroupStore::Consumer(None));
        tracing::info!(group = %group_id, "consumer group downgraded to a classic group");
        Some(classic)
    }

    /// Puts classic group `g` (a downgraded consumer group) in place as group `group_id`.
    pub(in super::super) fn install_classic(&self, group_id: &str, g: Group, now: Instant) {
        loop {
            let arc = match self.find(group_id, true) {
                Ok(Some(arc)) => arc,
                _ => {
                    tracing::warn!(group = %group_id, "downgraded group not installed: too many groups");
                    return;
                }
            };
            let mut guard = lock(&arc);
            if guard.removed {
                continue;
            }
            if guard.members.is_empty() && guard.pending.is_empty() {
                let record_seq = guard.record_seq;
                *guard = g;
                guard.record_seq = record_seq;
            }
            self.settle(group_id, &mut guard, now);
            return;
        }
    }

    /// Downgrades the groups whose last consumer-protocol member a tick removed (session
    /// expired or fenced) and that still hold classic members only, as a leave does, while
    /// leading in `term`.
    pub(in super::super) fn downgrade_after_tick(
        &self,
        term: u64,
        ctx: &Context<'_>,
        now: Instant,
    ) {
        let Some(_term) = self.state(term) else {
            return;
        };
        for (id, epoch_before) in self.consumer.take_downgrades() {
            let classic = self
                .consumer
                .with(&id, |arc, e| {
                    let g = self.take_for_downgrade(&id, arc, e, epoch_before, ctx, now);
                    if g.is_none() {
                        self.consumer.schedule(&id, &e.group);
                    }
                    g
                })
                .flatten();
            if let Some(classic) = classic {
                self.install_classic(&id, classic, now);
            }
        }
    }
}
