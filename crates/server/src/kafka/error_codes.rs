//! Which Kafka error code answers a failed append or proposal ([`AppendError`]): one table,
//! keyed by what the request asked of which Raft group ([`Proposal`]).
//!
//! The same failure gets different codes on purpose, because Kafka's clients act on the code
//! by the role they addressed: a produce went to a partition's leader (NOT_LEADER_OR_FOLLOWER
//! makes the client look the leader up again), an admin change to the controller
//! (NOT_CONTROLLER), a group request to the group's coordinator (NOT_COORDINATOR makes the
//! consumer find the coordinator again; COORDINATOR_LOAD_IN_PROGRESS and
//! COORDINATOR_NOT_AVAILABLE make it retry). Here the controller and every group coordinator
//! are the metadata group's leader, and a partition's leader is its Raft group's leader, so
//! "not the leader" maps to the code naming the role the client addressed.

use kafka_proto::error_code::ErrorCode;

use crate::replication::group::AppendError;
use crate::replication::producers::SequenceError;

/// What a request asked of a Raft group when the append failed: decides the Kafka error
/// code ([`append_error_code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proposal {
    /// Produce: a record batch appended to a partition's stream (addressed to its leader).
    Records,
    /// An admin change through the metadata group (topics, configs, ACLs, quotas, SCRAM
    /// users), addressed to the controller.
    MetadataChange,
    /// DeleteRecords: the new log start offset through the metadata group, addressed to the
    /// partition's leader, so never NOT_CONTROLLER (which the client would not act on): a
    /// failure it can retry is REQUEST_TIMED_OUT.
    RecordDeletion,
    /// OffsetCommit: a group's offsets through the metadata group, addressed to the group's
    /// coordinator.
    OffsetCommit,
    /// OffsetFetch, ListGroups, DescribeGroups: the read barrier (Raft ReadIndex) on the
    /// metadata group before reading a group's state; only errors Java's consumer retries.
    ReadBarrier,
    /// DeleteGroups, OffsetDelete: a group's offsets removed through the metadata group
    /// (the caller logs the failure).
    OffsetDeletion,
}

/// The Kafka error code that answers `e`, a failure of the `proposal`.
pub fn append_error_code(e: &AppendError, proposal: Proposal) -> ErrorCode {
    let deposed = matches!(
        e,
        AppendError::NotLeader { .. } | AppendError::Lost | AppendError::Stopped
    );
    match proposal {
        Proposal::Records => match e {
            AppendError::NotLeader { .. } | AppendError::Lost | AppendError::Stopped => {
                ErrorCode::NotLeaderOrFollower
            }
            AppendError::Timeout | AppendError::Busy => ErrorCode::RequestTimedOut,
            AppendError::Invalid(_) => ErrorCode::InvalidRecord,
            AppendError::Sequence(SequenceError::OutOfOrder) => ErrorCode::OutOfOrderSequenceNumber,
            AppendError::Sequence(SequenceError::InvalidEpoch) => ErrorCode::InvalidProducerEpoch,
            // The first attempt is still being replicated: a retriable error; the retry after
            // it commits is answered with its offset.
            AppendError::Sequence(SequenceError::DuplicateInFlight) => ErrorCode::NotEnoughReplicas,
            AppendError::Storage(_) => ErrorCode::KafkaStorageError,
            AppendError::TooFewInSync { .. } => ErrorCode::NotEnoughReplicasAfterAppend,
        },
        Proposal::MetadataChange | Proposal::RecordDeletion => match e {
            AppendError::Timeout => ErrorCode::RequestTimedOut,
            // The node's topic and partition limits (`kafka.max_topics`, ...).
            AppendError::Invalid(m) if m.contains("limit of") => ErrorCode::PolicyViolation,
            AppendError::Invalid(_) => ErrorCode::InvalidRequest,
            _ if proposal == Proposal::RecordDeletion => ErrorCode::RequestTimedOut,
            _ => ErrorCode::NotController,
        },
        Proposal::OffsetCommit => match e {
            AppendError::Timeout => ErrorCode::RequestTimedOut,
            AppendError::Busy => ErrorCode::CoordinatorLoadInProgress,
            AppendError::Invalid(_) => ErrorCode::InvalidCommitOffsetSize,
            _ if deposed => ErrorCode::NotCoordinator,
            _ => ErrorCode::UnknownServerError,
        },
        Proposal::ReadBarrier if deposed => ErrorCode::NotCoordinator,
        Proposal::ReadBarrier => ErrorCode::CoordinatorLoadInProgress,
        Proposal::OffsetDeletion => match e {
            AppendError::NotLeader { .. } => ErrorCode::NotCoordinator,
            _ => ErrorCode::CoordinatorNotAvailable,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every failure, for checking that each proposal's table covers them.
    fn failures() -> Vec<AppendError> {
        vec![
            AppendError::NotLeader { leader: Some(2) },
            AppendError::Timeout,
            AppendError::Busy,
            AppendError::Lost,
            AppendError::Stopped,
            AppendError::Invalid("too large".into()),
            AppendError::Invalid("over the limit of 10 topics".into()),
            AppendError::Sequence(SequenceError::OutOfOrder),
            AppendError::Storage("disk full".into()),
            AppendError::TooFewInSync {
                in_sync: 1,
                required: 2,
            },
        ]
    }

    #[test]
    fn a_deposed_leader_names_the_role_the_client_addressed() {
        let deposed = AppendError::NotLeader { leader: None };
        let code = |p| append_error_code(&deposed, p);
        assert_eq!(code(Proposal::Records), ErrorCode::NotLeaderOrFollower);
        assert_eq!(code(Proposal::MetadataChange), ErrorCode::NotController);
        assert_eq!(code(Proposal::RecordDeletion), ErrorCode::RequestTimedOut);
        assert_eq!(code(Proposal::OffsetCommit), ErrorCode::NotCoordinator);
        assert_eq!(code(Proposal::ReadBarrier), ErrorCode::NotCoordinator);
        assert_eq!(code(Proposal::OffsetDeletion), ErrorCode::NotCoordinator);
    }

    #[test]
    fn no_failure_is_answered_without_an_error() {
        for p in [
            Proposal::Records,
            Proposal::MetadataChange,
            Proposal::RecordDeletion,
            Proposal::OffsetCommit,
            Proposal::ReadBarrier,
            Proposal::OffsetDeletion,
        ] {
            for e in failures() {
                assert_ne!(append_error_code(&e, p), ErrorCode::None, "{p:?} {e}");
            }
        }
    }

    #[test]
    fn node_limits_are_a_policy_violation() {
        let e = AppendError::Invalid("over the limit of 10 topics".into());
        assert_eq!(
            append_error_code(&e, Proposal::MetadataChange),
            ErrorCode::PolicyViolation
        );
        assert_eq!(
            append_error_code(&e, Proposal::RecordDeletion),
            ErrorCode::PolicyViolation
        );
    }
}
