//! What the coordinator's requests carry and answer: a group's state as Kafka names it, the
//! JoinGroup and SyncGroup parameters and outcomes, an answer to wait for, a record for the
//! metadata, and the ListGroups and DescribeGroups views of a group.

use std::time::Duration;

use bytes::Bytes;
use kafka_proto::error_code::ErrorCode;
use tokio::sync::oneshot;

use crate::metadata::GroupRecord;

/// A record for the metadata: a group's id and what to store.
pub(super) type StoredRecord = (String, GroupStore);

/// What the metadata stores of a group.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum GroupStore {
    /// A classic group's membership (None: it became empty).
    Classic(Option<GroupRecord>),
    /// A consumer-protocol group's state (None: it is gone).
    Consumer(Option<crate::metadata::codec::ConsumerGroupRecord>),
}

/// A group's state, as Kafka names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GroupState {
    /// No members.
    Empty,
    /// Members are (re)joining.
    PreparingRebalance,
    /// Joined; waiting for the leader's assignment.
    CompletingRebalance,
    /// Every member has its assignment.
    Stable,
    /// No such group.
    Dead,
}

impl GroupState {
    /// The name Kafka reports (DescribeGroups, ListGroups).
    pub(super) fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// A JoinGroup request, as the state machine needs it.
#[derive(Debug, Clone)]
pub(super) struct JoinParams {
    /// Group id.
    pub(super) group_id: String,
    /// Member id; empty for a new member.
    pub(super) member_id: String,
    /// Static instance id (`group.instance.id`, KIP-345).
    pub(super) group_instance_id: Option<String>,
    /// The client's `client.id`.
    pub(super) client_id: String,
    /// The client's address, as reported by DescribeGroups.
    pub(super) client_host: String,
    /// Session timeout.
    pub(super) session_timeout_ms: i32,
    /// Rebalance timeout (the session timeout for v0 requests).
    pub(super) rebalance_timeout_ms: i32,
    /// Protocol type ("consumer").
    pub(super) protocol_type: String,
    /// (name, metadata) per supported protocol, most preferred first.
    pub(super) protocols: Vec<(String, Bytes)>,
    /// v4+: a new member first gets MEMBER_ID_REQUIRED with its id.
    pub(super) require_known_member_id: bool,
}

/// One member in the leader's JoinGroup response.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct JoinedMember {
    /// Member id.
    pub(super) member_id: String,
    /// Static instance id, as sent.
    pub(super) group_instance_id: Option<String>,
    /// The member's metadata for the chosen protocol.
    pub(super) metadata: Bytes,
}

/// The answer to a JoinGroup.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct JoinOutcome {
    /// Error (NONE on success).
    pub(super) error: ErrorCode,
    /// The new generation (-1 on error).
    pub(super) generation_id: i32,
    /// The group's protocol type.
    pub(super) protocol_type: Option<String>,
    /// The chosen protocol.
    pub(super) protocol_name: Option<String>,
    /// The leader's member id.
    pub(super) leader: String,
    /// The member id of the requester (also for MEMBER_ID_REQUIRED).
    pub(super) member_id: String,
    /// Every member with its metadata, for the leader only.
    pub(super) members: Vec<JoinedMember>,
    /// v9+: the leader must not compute an assignment (a static leader that rejoined without
    /// a rebalance: the group keeps the current one).
    pub(super) skip_assignment: bool,
}

impl JoinOutcome {
    /// A failed join of `member_id`.
    pub(super) fn error(error: ErrorCode, member_id: &str) -> JoinOutcome {
        JoinOutcome {
            error,
            generation_id: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            member_id: member_id.to_owned(),
            members: Vec::new(),
            skip_assignment: false,
        }
    }
}

/// A SyncGroup request, as the state machine needs it.
#[derive(Debug, Clone)]
pub(super) struct SyncParams {
    /// Group id.
    pub(super) group_id: String,
    /// The generation the member joined.
    pub(super) generation_id: i32,
    /// Member id.
    pub(super) member_id: String,
    /// v3+: the member's static instance id.
    pub(super) group_instance_id: Option<String>,
    /// v5+: the protocol type the member expects.
    pub(super) protocol_type: Option<String>,
    /// v5+: the protocol the member expects.
    pub(super) protocol_name: Option<String>,
    /// The leader's assignment per member (empty from followers).
    pub(super) assignments: Vec<(String, Bytes)>,
}

/// The answer to a SyncGroup.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct SyncOutcome {
    /// Error (NONE on success).
    pub(super) error: ErrorCode,
    /// The group's protocol type.
    pub(super) protocol_type: Option<String>,
    /// The chosen protocol.
    pub(super) protocol_name: Option<String>,
    /// The member's assignment.
    pub(super) assignment: Bytes,
}

impl SyncOutcome {
    /// A failed sync.
    pub(super) fn error(error: ErrorCode) -> SyncOutcome {
        SyncOutcome {
            error,
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        }
    }
}

/// An answer available now, or one to wait for (at most the given time).
#[derive(Debug)]
pub(super) enum Pending<T> {
    /// The answer.
    Now(T),
    /// The answer arrives on the channel; give up after the duration.
    Wait(oneshot::Receiver<T>, Duration),
}

/// A group as listed by ListGroups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct GroupListing {
    /// Group id.
    pub(super) group_id: String,
    /// Protocol type ("" when unknown).
    pub(super) protocol_type: String,
    /// State.
    pub(super) state: GroupState,
}

/// A member as described by DescribeGroups.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct MemberDescription {
    /// Member id.
    pub(super) member_id: String,
    /// Static instance id.
    pub(super) group_instance_id: Option<String>,
    /// The client's `client.id`.
    pub(super) client_id: String,
    /// The client's address.
    pub(super) client_host: String,
    /// Metadata for the chosen protocol (only when Stable).
    pub(super) metadata: Bytes,
    /// Assignment (only when Stable).
    pub(super) assignment: Bytes,
}

/// A group as described by DescribeGroups.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct GroupDescription {
    /// State.
    pub(super) state: GroupState,
    /// Protocol type.
    pub(super) protocol_type: String,
    /// The chosen protocol (only when Stable).
    pub(super) protocol: String,
    /// Members.
    pub(super) members: Vec<MemberDescription>,
}
