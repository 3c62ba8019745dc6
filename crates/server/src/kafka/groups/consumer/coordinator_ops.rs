//! What the coordinator does for consumer-protocol groups: heartbeats (with the group's record
//! queued for the metadata when the heartbeat changed it), deadlines, the classic interplay
//! (a group id is one kind at a time; an empty group of the other kind is converted), the
//! offset commit checks with member epochs, listing, describing and deleting.

use std::time::Instant;

use kafka_proto::error_code::ErrorCode;

use super::super::coordinator::{lock, Coordinator};
use super::super::limits::MAX_GROUPS;
use super::super::types::GroupStore;
use super::group::{ConsumerGroup, ConsumerGroupState};
use super::registry::Entry;
use super::types::{Context, HeartbeatOutcome, HeartbeatParams};

impl Coordinator {
    /// Queues group `id`'s record when the state the metadata stores changed.
    pub(super) fn store_consumer(&self, id: &str, e: &mut Entry) {
        if e.group.dirty {
            e.group.dirty = false;
            e.record_seq = self.queue_record(id, GroupStore::Consumer(Some(e.group.record())));
        }
    }

    /// Expires sessions and fences slow revokers of the consumer groups whose deadline is due.
    pub(in super::super) fn tick_consumer_groups(&self, now: Instant) {
        for id in self.consumer.take_due(now) {
            self.consumer.with(&id, |_, e| {
                let had_consumer_member = e.group.members.values().any(|m| m.classic.is_none());
                let epoch_before = e.group.group_epoch;
                e.group.tick(now);
                if had_consumer_member && e.group.all_classic() {
                    self.consumer.note_downgrade(&id, epoch_before);
                }
                self.store_consumer(&id, e);
                self.consumer.schedule(&id, &e.group);
            });
        }
    }

    /// Handles a ConsumerGroupHeartbeat (already validated) while leading in metadata term
    /// `term`: the answer, and the sequence number of the group's last record, which must be
    /// written before the answer goes out (0: nothing to wait for).
    pub(crate) fn consumer_heartbeat(
        &self,
        term: u64,
        group_id: &str,
        p: &HeartbeatParams,
        ctx: &Context<'_>,
        now: Instant,
    ) -> (HeartbeatOutcome, u64) {
        let Some(_term) = self.state(term) else {
            return (
                HeartbeatOutcome::error(ErrorCode::NotCoordinator, "", &p.member_id),
                0,
            );
        };
        // A classic group of that id: removed when empty; with members, upgraded online by a
        // join (Kafka's `group.consumer.migration.policy`), refused otherwise.
        if p.member_epoch == 0 {
            if let Err(message) = self.upgrade_classic(group_id, ctx, now) {
                return (
                    HeartbeatOutcome::error(ErrorCode::GroupIdNotFound, message, &p.member_id),
                    0,
                );
            }
        } else if self
            .with_group(group_id, |_, g| {
                !g.members.is_empty() || !g.pending.is_empty()
            })
            .unwrap_or(false)
        {
            return (
                HeartbeatOutcome::error(
                    ErrorCode::GroupIdNotFound,
                    format!("Group {group_id} is not a consumer group."),
                    &p.member_id,
                ),
                0,
            );
        }
        let create = p.member_epoch == 0;
        loop {
            let Some(e) = self.consumer.find(group_id, create, MAX_GROUPS) else {
                let o = if create {
                    tracing::warn!(group = %group_id, "too many consumer groups; join refused");
                    HeartbeatOutcome::error(
                        ErrorCode::CoordinatorNotAvailable,
                        "Too many groups.",
                        &p.member_id,
                    )
                } else {
                    // Kafka 4.1's answers (checked with raw requests).
                    let message = if p.member_epoch < 0 {
                        format!("Group {group_id} not found.")
                    } else {
                        format!("Consumer group {group_id} not found.")
                    };
                    HeartbeatOutcome::error(ErrorCode::GroupIdNotFound, message, &p.member_id)
                };
                return (o, 0);
            };
            let mut entry = lock(&e);
            if entry.removed {
                continue;
            }
            let leaving_consumer_member = p.member_epoch == -1
                && entry
                    .group
                    .members
                    .get(&p.member_id)
                    .is_some_and(|m| m.classic.is_none());
            let epoch_before = entry.group.group_epoch;
            let o = entry.group.heartbeat(p, ctx, now);
            self.store_consumer(group_id, &mut entry);
            let downgraded = if leaving_consumer_member && o.error == ErrorCode::None {
                self.take_for_downgrade(group_id, &e, &mut entry, epoch_before, ctx, now)
            } else {
                None
            };
            if downgraded.is_none() {
                self.consumer.schedule(group_id, &entry.group);
            }
            let seq = entry.record_seq;
            drop(entry);
            if let Some(classic) = downgraded {
                self.install_classic(group_id, classic, now);
            }
            return (o, seq);
        }
    }

    /// For a classic JoinGroup on group `group_id`: an empty consumer-protocol group of that
    /// id is converted (forgotten; its offsets stay); a consumer group with members refuses
    /// the join with INCONSISTENT_GROUP_PROTOCOL (no online downgrade).
    pub(in super::super) fn classic_join_allowed(&self, group_id: &str) -> Result<(), ErrorCode> {
        self.consumer
            .with(group_id, |arc, e| {
                if !e.group.members.is_empty() {
                    return Err(ErrorCode::InconsistentGroupProtocol);
                }
                self.consumer.remove(group_id, arc, e);
                self.queue_record(group_id, GroupStore::Consumer(None));
                Ok(())
            })
            .unwrap_or(Ok(()))
    }

    /// The consumer-protocol groups without members, while leading in `term` (for the
    /// offset expiry task, which removes those without committed offsets, as Kafka's cleanup).
    pub(crate) fn consumer_empty_groups(&self, term: u64) -> Vec<String> {
        self.consumer_list(term)
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, state)| *state == ConsumerGroupState::Empty)
            .map(|(id, _)| id)
            .collect()
    }

    /// Whether group `group_id` is a consumer-protocol group here.
    pub(crate) fn is_consumer_group(&self, group_id: &str) -> bool {
        self.consumer.contains(group_id)
    }

    /// The consumer-protocol groups and their states, while leading in `term`.
    pub(crate) fn consumer_list(
        &self,
        term: u64,
    ) -> Result<Vec<(String, ConsumerGroupState)>, ErrorCode> {
        let _term = self.state(term).ok_or(ErrorCode::NotCoordinator)?;
        let mut out: Vec<(String, ConsumerGroupState)> = self
            .consumer
            .all()
            .into_iter()
            .filter_map(|(id, e)| {
                let e = lock(&e);
                (!e.removed).then(|| (id, e.group.state()))
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// A copy of consumer-protocol group `group_id`, while leading in `term`.
    pub(crate) fn consumer_snapshot(&self, term: u64, group_id: &str) -> Option<ConsumerGroup> {
        let _term = self.state(term)?;
        self.consumer.with(group_id, |_, e| e.group.clone())
    }

    /// DeleteGroups of consumer-protocol group `group_id`: None when there is none;
    /// NON_EMPTY_GROUP while it has members; otherwise removed (and forgotten by the metadata).
    pub(crate) fn consumer_remove_empty(
        &self,
        term: u64,
        group_id: &str,
    ) -> Option<Result<(), ErrorCode>> {
        let Some(_term) = self.state(term) else {
            return Some(Err(ErrorCode::NotCoordinator));
        };
        self.consumer.with(group_id, |arc, e| {
            if !e.group.members.is_empty() {
                return Err(ErrorCode::NonEmptyGroup);
            }
            self.consumer.remove(group_id, arc, e);
            self.queue_record(group_id, GroupStore::Consumer(None));
            Ok(())
        })
    }

    /// An OffsetCommit / TxnOffsetCommit / OffsetFetch check against a consumer-protocol group
    /// (Kafka's `ConsumerGroup.validateOffsetCommit` / `validateOffsetFetch`): None when
    /// `group_id` is not one. Member epoch -1 without a member id is an admin (or standalone)
    /// request: allowed on an empty group (always for a fetch). Otherwise the member must
    /// exist (UNKNOWN_MEMBER_ID) and give its current epoch (STALE_MEMBER_EPOCH); a
    /// non-transactional commit from it needs OffsetCommit v9+ (UNSUPPORTED_VERSION).
    pub(crate) fn consumer_validate_offsets(
        &self,
        term: u64,
        group_id: &str,
        member_id: Option<&str>,
        member_epoch: i32,
        kind: OffsetsCheck,
    ) -> Option<ErrorCode> {
        let Some(_term) = self.state(term) else {
            return Some(ErrorCode::NotCoordinator);
        };
        self.consumer.with(group_id, |_, e| {
            let member_id = member_id.unwrap_or("");
            if member_epoch < 0 && member_id.is_empty() {
                return match kind {
                    OffsetsCheck::Fetch | OffsetsCheck::TxnCommit => ErrorCode::None,
                    OffsetsCheck::Commit { .. } if e.group.members.is_empty() => ErrorCode::None,
                    OffsetsCheck::Commit { .. } => ErrorCode::UnknownMemberId,
                };
            }
            let Some(m) = e.group.members.get(member_id) else {
                return ErrorCode::UnknownMemberId;
            };
            if m.classic.is_some() {
                // A classic member commits with its generation (its member epoch), at any
                // version.
                return if member_epoch == m.epoch {
                    ErrorCode::None
                } else {
                    ErrorCode::IllegalGeneration
                };
            }
            if let OffsetsCheck::Commit { version } = kind {
                if version < 9 {
                    return ErrorCode::UnsupportedVersion;
                }
            }
            if member_epoch != m.epoch {
                return ErrorCode::StaleMemberEpoch;
            }
            ErrorCode::None
        })
    }
}

/// Which offsets request is checked ([`Coordinator::consumer_validate_offsets`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OffsetsCheck {
    /// OffsetCommit of that version.
    Commit {
        /// The request version.
        version: i16,
    },
    /// TxnOffsetCommit.
    TxnCommit,
    /// OffsetFetch.
    Fetch,
}
