//! Kafka's error codes, as defined by Apache Kafka 3.9 (`org.apache.kafka.common.protocol.Errors`):
//! every code from -1 (`UNKNOWN_SERVER_ERROR`) and 0 (`NONE`) up to 127 (`VOTER_NOT_FOUND`).
//!
//! [`ErrorCode::from_code`] maps a code this table does not know to [`ErrorCode::Unknown`], which
//! keeps the number, so a code from a newer peer survives a round trip; Kafka's Java client would
//! turn such a code into `UNKNOWN_SERVER_ERROR`, and [`ErrorCode::Unknown`] reports that name and
//! is not retriable, like it.

use std::fmt;

/// Declares the enum and its tables from one list: variant = code, Kafka's name, retriable.
macro_rules! error_codes {
    ($($variant:ident = $code:literal, $name:literal, $retriable:literal;)*) => {
        /// A Kafka error code. `code()` gives the number sent on the wire.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ErrorCode {
            $(
                #[doc = concat!("`", $name, "` (", stringify!($code), ").")]
                $variant,
            )*
            /// A code this table does not define (newer than Kafka 3.9, or garbage); keeps the
            /// number as received.
            Unknown(i16),
        }

        impl ErrorCode {
            /// Every code defined by Kafka 3.9, in numeric order (without [`ErrorCode::Unknown`]).
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The number sent on the wire.
            pub const fn code(self) -> i16 {
                match self {
                    $(ErrorCode::$variant => $code,)*
                    ErrorCode::Unknown(c) => c,
                }
            }

            /// The error for a wire number; numbers Kafka 3.9 does not define give
            /// [`ErrorCode::Unknown`] holding the number. Never fails.
            pub const fn from_code(code: i16) -> ErrorCode {
                match code {
                    $($code => ErrorCode::$variant,)*
                    other => ErrorCode::Unknown(other),
                }
            }

            /// Kafka's name for the error, in SCREAMING_CASE (e.g. `NOT_LEADER_OR_FOLLOWER`).
            /// [`ErrorCode::Unknown`] reports `UNKNOWN_SERVER_ERROR`, the error Kafka clients
            /// substitute for codes they do not know.
            pub const fn name(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $name,)*
                    ErrorCode::Unknown(_) => "UNKNOWN_SERVER_ERROR",
                }
            }

            /// True when Kafka's Java client treats the error as retriable (its exception
            /// extends `RetriableException`). False for [`ErrorCode::None`] and
            /// [`ErrorCode::Unknown`].
            pub const fn is_retriable(self) -> bool {
                match self {
                    $(ErrorCode::$variant => $retriable,)*
                    ErrorCode::Unknown(_) => false,
                }
            }
        }
    };
}

error_codes! {
    UnknownServerError = -1, "UNKNOWN_SERVER_ERROR", false;
    None = 0, "NONE", false;
    OffsetOutOfRange = 1, "OFFSET_OUT_OF_RANGE", false;
    CorruptMessage = 2, "CORRUPT_MESSAGE", true;
    UnknownTopicOrPartition = 3, "UNKNOWN_TOPIC_OR_PARTITION", true;
    InvalidFetchSize = 4, "INVALID_FETCH_SIZE", false;
    LeaderNotAvailable = 5, "LEADER_NOT_AVAILABLE", true;
    NotLeaderOrFollower = 6, "NOT_LEADER_OR_FOLLOWER", true;
    RequestTimedOut = 7, "REQUEST_TIMED_OUT", true;
    BrokerNotAvailable = 8, "BROKER_NOT_AVAILABLE", false;
    ReplicaNotAvailable = 9, "REPLICA_NOT_AVAILABLE", true;
    MessageTooLarge = 10, "MESSAGE_TOO_LARGE", false;
    StaleControllerEpoch = 11, "STALE_CONTROLLER_EPOCH", false;
    OffsetMetadataTooLarge = 12, "OFFSET_METADATA_TOO_LARGE", false;
    NetworkException = 13, "NETWORK_EXCEPTION", true;
    CoordinatorLoadInProgress = 14, "COORDINATOR_LOAD_IN_PROGRESS", true;
    CoordinatorNotAvailable = 15, "COORDINATOR_NOT_AVAILABLE", true;
    NotCoordinator = 16, "NOT_COORDINATOR", true;
    InvalidTopicException = 17, "INVALID_TOPIC_EXCEPTION", false;
    RecordListTooLarge = 18, "RECORD_LIST_TOO_LARGE", false;
    NotEnoughReplicas = 19, "NOT_ENOUGH_REPLICAS", true;
    NotEnoughReplicasAfterAppend = 20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", true;
    InvalidRequiredAcks = 21, "INVALID_REQUIRED_ACKS", false;
    IllegalGeneration = 22, "ILLEGAL_GENERATION", false;
    InconsistentGroupProtocol = 23, "INCONSISTENT_GROUP_PROTOCOL", false;
    InvalidGroupId = 24, "INVALID_GROUP_ID", false;
    UnknownMemberId = 25, "UNKNOWN_MEMBER_ID", false;
    InvalidSessionTimeout = 26, "INVALID_SESSION_TIMEOUT", false;
    RebalanceInProgress = 27, "REBALANCE_IN_PROGRESS", false;
    InvalidCommitOffsetSize = 28, "INVALID_COMMIT_OFFSET_SIZE", false;
    TopicAuthorizationFailed = 29, "TOPIC_AUTHORIZATION_FAILED", false;
    GroupAuthorizationFailed = 30, "GROUP_AUTHORIZATION_FAILED", false;
    ClusterAuthorizationFailed = 31, "CLUSTER_AUTHORIZATION_FAILED", false;
    InvalidTimestamp = 32, "INVALID_TIMESTAMP", false;
    UnsupportedSaslMechanism = 33, "UNSUPPORTED_SASL_MECHANISM", false;
    IllegalSaslState = 34, "ILLEGAL_SASL_STATE", false;
    UnsupportedVersion = 35, "UNSUPPORTED_VERSION", false;
    TopicAlreadyExists = 36, "TOPIC_ALREADY_EXISTS", false;
    InvalidPartitions = 37, "INVALID_PARTITIONS", false;
    InvalidReplicationFactor = 38, "INVALID_REPLICATION_FACTOR", false;
    InvalidReplicaAssignment = 39, "INVALID_REPLICA_ASSIGNMENT", false;
    InvalidConfig = 40, "INVALID_CONFIG", false;
    NotController = 41, "NOT_CONTROLLER", true;
    InvalidRequest = 42, "INVALID_REQUEST", false;
    UnsupportedForMessageFormat = 43, "UNSUPPORTED_FOR_MESSAGE_FORMAT", false;
    PolicyViolation = 44, "POLICY_VIOLATION", false;
    OutOfOrderSequenceNumber = 45, "OUT_OF_ORDER_SEQUENCE_NUMBER", false;
    DuplicateSequenceNumber = 46, "DUPLICATE_SEQUENCE_NUMBER", false;
    InvalidProducerEpoch = 47, "INVALID_PRODUCER_EPOCH", false;
    InvalidTxnState = 48, "INVALID_TXN_STATE", false;
    InvalidProducerIdMapping = 49, "INVALID_PRODUCER_ID_MAPPING", false;
    InvalidTransactionTimeout = 50, "INVALID_TRANSACTION_TIMEOUT", false;
    ConcurrentTransactions = 51, "CONCURRENT_TRANSACTIONS", true;
    TransactionCoordinatorFenced = 52, "TRANSACTION_COORDINATOR_FENCED", false;
    TransactionalIdAuthorizationFailed = 53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", false;
    SecurityDisabled = 54, "SECURITY_DISABLED", false;
    OperationNotAttempted = 55, "OPERATION_NOT_ATTEMPTED", false;
    KafkaStorageError = 56, "KAFKA_STORAGE_ERROR", true;
    LogDirNotFound = 57, "LOG_DIR_NOT_FOUND", false;
    SaslAuthenticationFailed = 58, "SASL_AUTHENTICATION_FAILED", false;
    UnknownProducerId = 59, "UNKNOWN_PRODUCER_ID", false;
    ReassignmentInProgress = 60, "REASSIGNMENT_IN_PROGRESS", false;
    DelegationTokenAuthDisabled = 61, "DELEGATION_TOKEN_AUTH_DISABLED", false;
    DelegationTokenNotFound = 62, "DELEGATION_TOKEN_NOT_FOUND", false;
    DelegationTokenOwnerMismatch = 63, "DELEGATION_TOKEN_OWNER_MISMATCH", false;
    DelegationTokenRequestNotAllowed = 64, "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED", false;
    DelegationTokenAuthorizationFailed = 65, "DELEGATION_TOKEN_AUTHORIZATION_FAILED", false;
    DelegationTokenExpired = 66, "DELEGATION_TOKEN_EXPIRED", false;
    InvalidPrincipalType = 67, "INVALID_PRINCIPAL_TYPE", false;
    NonEmptyGroup = 68, "NON_EMPTY_GROUP", false;
    GroupIdNotFound = 69, "GROUP_ID_NOT_FOUND", false;
    FetchSessionIdNotFound = 70, "FETCH_SESSION_ID_NOT_FOUND", true;
    InvalidFetchSessionEpoch = 71, "INVALID_FETCH_SESSION_EPOCH", true;
    ListenerNotFound = 72, "LISTENER_NOT_FOUND", true;
    TopicDeletionDisabled = 73, "TOPIC_DELETION_DISABLED", false;
    FencedLeaderEpoch = 74, "FENCED_LEADER_EPOCH", true;
    UnknownLeaderEpoch = 75, "UNKNOWN_LEADER_EPOCH", true;
    UnsupportedCompressionType = 76, "UNSUPPORTED_COMPRESSION_TYPE", false;
    StaleBrokerEpoch = 77, "STALE_BROKER_EPOCH", false;
    OffsetNotAvailable = 78, "OFFSET_NOT_AVAILABLE", true;
    MemberIdRequired = 79, "MEMBER_ID_REQUIRED", false;
    PreferredLeaderNotAvailable = 80, "PREFERRED_LEADER_NOT_AVAILABLE", true;
    GroupMaxSizeReached = 81, "GROUP_MAX_SIZE_REACHED", false;
    FencedInstanceId = 82, "FENCED_INSTANCE_ID", false;
    EligibleLeadersNotAvailable = 83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", true;
    ElectionNotNeeded = 84, "ELECTION_NOT_NEEDED", true;
    NoReassignmentInProgress = 85, "NO_REASSIGNMENT_IN_PROGRESS", false;
    GroupSubscribedToTopic = 86, "GROUP_SUBSCRIBED_TO_TOPIC", false;
    InvalidRecord = 87, "INVALID_RECORD", false;
    UnstableOffsetCommit = 88, "UNSTABLE_OFFSET_COMMIT", true;
    ThrottlingQuotaExceeded = 89, "THROTTLING_QUOTA_EXCEEDED", true;
    ProducerFenced = 90, "PRODUCER_FENCED", false;
    ResourceNotFound = 91, "RESOURCE_NOT_FOUND", false;
    DuplicateResource = 92, "DUPLICATE_RESOURCE", false;
    UnacceptableCredential = 93, "UNACCEPTABLE_CREDENTIAL", false;
    InconsistentVoterSet = 94, "INCONSISTENT_VOTER_SET", false;
    InvalidUpdateVersion = 95, "INVALID_UPDATE_VERSION", false;
    FeatureUpdateFailed = 96, "FEATURE_UPDATE_FAILED", false;
    PrincipalDeserializationFailure = 97, "PRINCIPAL_DESERIALIZATION_FAILURE", false;
    SnapshotNotFound = 98, "SNAPSHOT_NOT_FOUND", false;
    PositionOutOfRange = 99, "POSITION_OUT_OF_RANGE", false;
    UnknownTopicId = 100, "UNKNOWN_TOPIC_ID", true;
    DuplicateBrokerRegistration = 101, "DUPLICATE_BROKER_REGISTRATION", false;
    BrokerIdNotRegistered = 102, "BROKER_ID_NOT_REGISTERED", false;
    InconsistentTopicId = 103, "INCONSISTENT_TOPIC_ID", true;
    InconsistentClusterId = 104, "INCONSISTENT_CLUSTER_ID", false;
    TransactionalIdNotFound = 105, "TRANSACTIONAL_ID_NOT_FOUND", false;
    FetchSessionTopicIdError = 106, "FETCH_SESSION_TOPIC_ID_ERROR", true;
    IneligibleReplica = 107, "INELIGIBLE_REPLICA", false;
    NewLeaderElected = 108, "NEW_LEADER_ELECTED", false;
    OffsetMovedToTieredStorage = 109, "OFFSET_MOVED_TO_TIERED_STORAGE", false;
    FencedMemberEpoch = 110, "FENCED_MEMBER_EPOCH", false;
    UnreleasedInstanceId = 111, "UNRELEASED_INSTANCE_ID", false;
    UnsupportedAssignor = 112, "UNSUPPORTED_ASSIGNOR", false;
    StaleMemberEpoch = 113, "STALE_MEMBER_EPOCH", false;
    MismatchedEndpointType = 114, "MISMATCHED_ENDPOINT_TYPE", false;
    UnsupportedEndpointType = 115, "UNSUPPORTED_ENDPOINT_TYPE", false;
    UnknownControllerId = 116, "UNKNOWN_CONTROLLER_ID", false;
    UnknownSubscriptionId = 117, "UNKNOWN_SUBSCRIPTION_ID", false;
    TelemetryTooLarge = 118, "TELEMETRY_TOO_LARGE", false;
    InvalidRegistration = 119, "INVALID_REGISTRATION", false;
    TransactionAbortable = 120, "TRANSACTION_ABORTABLE", false;
    InvalidRecordState = 121, "INVALID_RECORD_STATE", false;
    ShareSessionNotFound = 122, "SHARE_SESSION_NOT_FOUND", true;
    InvalidShareSessionEpoch = 123, "INVALID_SHARE_SESSION_EPOCH", true;
    FencedStateEpoch = 124, "FENCED_STATE_EPOCH", false;
    InvalidVoterKey = 125, "INVALID_VOTER_KEY", false;
    DuplicateVoter = 126, "DUPLICATE_VOTER", false;
    VoterNotFound = 127, "VOTER_NOT_FOUND", false;
    InvalidRegularExpression = 128, "INVALID_REGULAR_EXPRESSION", false;
}

impl ErrorCode {
    /// True for [`ErrorCode::None`], the only code that is not an error.
    pub const fn is_ok(self) -> bool {
        matches!(self, ErrorCode::None)
    }
}

impl Default for ErrorCode {
    /// [`ErrorCode::None`].
    fn default() -> ErrorCode {
        ErrorCode::None
    }
}

impl From<i16> for ErrorCode {
    /// Same as [`ErrorCode::from_code`].
    fn from(code: i16) -> ErrorCode {
        ErrorCode::from_code(code)
    }
}

impl From<ErrorCode> for i16 {
    /// Same as [`ErrorCode::code`].
    fn from(e: ErrorCode) -> i16 {
        e.code()
    }
}

impl fmt::Display for ErrorCode {
    /// Kafka's name and the number, e.g. `NOT_LEADER_OR_FOLLOWER (6)`; an unknown code shows as
    /// `UNKNOWN_SERVER_ERROR (unrecognized code 999)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorCode::Unknown(c) => write!(f, "UNKNOWN_SERVER_ERROR (unrecognized code {c})"),
            e => write!(f, "{} ({})", e.name(), e.code()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_dense_and_round_trips() {
        assert_eq!(ErrorCode::ALL.len(), 130);
        for (i, e) in ErrorCode::ALL.iter().enumerate() {
            assert_eq!(i64::from(e.code()), i as i64 - 1);
            assert_eq!(ErrorCode::from_code(e.code()), *e);
        }
        assert_eq!(ErrorCode::from_code(129), ErrorCode::Unknown(129));
        assert_eq!(ErrorCode::from_code(-2).code(), -2);
    }
}
