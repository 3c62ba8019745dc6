//! The APIs this codec speaks, their supported version ranges, and which header version goes
//! with each (API, version).
//!
//! The table in [`for_each_api`] is the one place the supported ranges are written down; the
//! [`ApiKey`] enum, the [`crate::frame::Request`] and [`crate::frame::Response`] enums and the
//! ApiVersions response we advertise are all built from it.

use crate::messages::Message;

/// Calls `$callback!` with the table of supported APIs:
/// `Variant = key, "Name", lowest..=highest, RequestType, ResponseType;` per API.
/// The ranges are Apache Kafka 3.9's, except the versions Kafka 4.0 added for KIP-890 part 2
/// (transaction version 2): Produce v12 and TxnOffsetCommit v5 (their v11 and v4 bodies) and
/// EndTxn v5 (its response carries the producer id and epoch), and Kafka 4's consumer group
/// protocol (KIP-848): ConsumerGroupHeartbeat and ConsumerGroupDescribe v0-1, DescribeGroups v6.
macro_rules! for_each_api {
    ($callback:ident) => {
        $callback! {
            Produce = 0, "Produce", 0..=12, ProduceRequest, ProduceResponse;
            Fetch = 1, "Fetch", 0..=17, FetchRequest, FetchResponse;
            ListOffsets = 2, "ListOffsets", 0..=9, ListOffsetsRequest, ListOffsetsResponse;
            Metadata = 3, "Metadata", 0..=12, MetadataRequest, MetadataResponse;
            OffsetCommit = 8, "OffsetCommit", 0..=9, OffsetCommitRequest, OffsetCommitResponse;
            OffsetFetch = 9, "OffsetFetch", 0..=9, OffsetFetchRequest, OffsetFetchResponse;
            FindCoordinator = 10, "FindCoordinator", 0..=6, FindCoordinatorRequest, FindCoordinatorResponse;
            JoinGroup = 11, "JoinGroup", 0..=9, JoinGroupRequest, JoinGroupResponse;
            Heartbeat = 12, "Heartbeat", 0..=4, HeartbeatRequest, HeartbeatResponse;
            LeaveGroup = 13, "LeaveGroup", 0..=5, LeaveGroupRequest, LeaveGroupResponse;
            SyncGroup = 14, "SyncGroup", 0..=5, SyncGroupRequest, SyncGroupResponse;
            DescribeGroups = 15, "DescribeGroups", 0..=6, DescribeGroupsRequest, DescribeGroupsResponse;
            ListGroups = 16, "ListGroups", 0..=5, ListGroupsRequest, ListGroupsResponse;
            SaslHandshake = 17, "SaslHandshake", 0..=1, SaslHandshakeRequest, SaslHandshakeResponse;
            ApiVersions = 18, "ApiVersions", 0..=4, ApiVersionsRequest, ApiVersionsResponse;
            CreateTopics = 19, "CreateTopics", 0..=7, CreateTopicsRequest, CreateTopicsResponse;
            DeleteTopics = 20, "DeleteTopics", 0..=6, DeleteTopicsRequest, DeleteTopicsResponse;
            DeleteRecords = 21, "DeleteRecords", 0..=2, DeleteRecordsRequest, DeleteRecordsResponse;
            InitProducerId = 22, "InitProducerId", 0..=5, InitProducerIdRequest, InitProducerIdResponse;
            AddPartitionsToTxn = 24, "AddPartitionsToTxn", 0..=5, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse;
            AddOffsetsToTxn = 25, "AddOffsetsToTxn", 0..=4, AddOffsetsToTxnRequest, AddOffsetsToTxnResponse;
            EndTxn = 26, "EndTxn", 0..=5, EndTxnRequest, EndTxnResponse;
            WriteTxnMarkers = 27, "WriteTxnMarkers", 0..=1, WriteTxnMarkersRequest, WriteTxnMarkersResponse;
            TxnOffsetCommit = 28, "TxnOffsetCommit", 0..=5, TxnOffsetCommitRequest, TxnOffsetCommitResponse;
            DescribeAcls = 29, "DescribeAcls", 0..=3, DescribeAclsRequest, DescribeAclsResponse;
            CreateAcls = 30, "CreateAcls", 0..=3, CreateAclsRequest, CreateAclsResponse;
            DeleteAcls = 31, "DeleteAcls", 0..=3, DeleteAclsRequest, DeleteAclsResponse;
            DescribeConfigs = 32, "DescribeConfigs", 0..=4, DescribeConfigsRequest, DescribeConfigsResponse;
            AlterConfigs = 33, "AlterConfigs", 0..=2, AlterConfigsRequest, AlterConfigsResponse;
            DescribeLogDirs = 35, "DescribeLogDirs", 0..=4, DescribeLogDirsRequest, DescribeLogDirsResponse;
            SaslAuthenticate = 36, "SaslAuthenticate", 0..=2, SaslAuthenticateRequest, SaslAuthenticateResponse;
            CreatePartitions = 37, "CreatePartitions", 0..=3, CreatePartitionsRequest, CreatePartitionsResponse;
            DeleteGroups = 42, "DeleteGroups", 0..=2, DeleteGroupsRequest, DeleteGroupsResponse;
            ElectLeaders = 43, "ElectLeaders", 0..=2, ElectLeadersRequest, ElectLeadersResponse;
            IncrementalAlterConfigs = 44, "IncrementalAlterConfigs", 0..=1, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse;
            ListPartitionReassignments = 46, "ListPartitionReassignments", 0..=0, ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse;
            OffsetDelete = 47, "OffsetDelete", 0..=0, OffsetDeleteRequest, OffsetDeleteResponse;
            DescribeClientQuotas = 48, "DescribeClientQuotas", 0..=1, DescribeClientQuotasRequest, DescribeClientQuotasResponse;
            AlterClientQuotas = 49, "AlterClientQuotas", 0..=1, AlterClientQuotasRequest, AlterClientQuotasResponse;
            DescribeUserScramCredentials = 50, "DescribeUserScramCredentials", 0..=0, DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse;
            AlterUserScramCredentials = 51, "AlterUserScramCredentials", 0..=0, AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse;
            DescribeCluster = 60, "DescribeCluster", 0..=1, DescribeClusterRequest, DescribeClusterResponse;
            DescribeProducers = 61, "DescribeProducers", 0..=0, DescribeProducersRequest, DescribeProducersResponse;
            DescribeTransactions = 65, "DescribeTransactions", 0..=0, DescribeTransactionsRequest, DescribeTransactionsResponse;
            ListTransactions = 66, "ListTransactions", 0..=1, ListTransactionsRequest, ListTransactionsResponse;
            ConsumerGroupHeartbeat = 68, "ConsumerGroupHeartbeat", 0..=1, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse;
            ConsumerGroupDescribe = 69, "ConsumerGroupDescribe", 0..=1, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse;
        }
    };
}
pub(crate) use for_each_api;

macro_rules! define_api_key {
    ($($variant:ident = $key:literal, $name:literal, $lo:literal..=$hi:literal, $req:ident, $resp:ident;)*) => {
        /// A Kafka API this codec supports.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(i16)]
        pub enum ApiKey {
            $(
                #[doc = concat!("`", $name, "` (API key ", stringify!($key), "), versions ",
                    stringify!($lo), "-", stringify!($hi), ".")]
                $variant = $key,
            )*
        }

        impl ApiKey {
            /// Every supported API, in API key order.
            pub const ALL: &'static [ApiKey] = &[$(ApiKey::$variant),*];

            /// The API with this key, if supported.
            pub fn from_i16(key: i16) -> Option<ApiKey> {
                match key {
                    $($key => Some(ApiKey::$variant),)*
                    _ => None,
                }
            }

            /// The API key as sent on the wire.
            pub fn as_i16(self) -> i16 {
                self as i16
            }

            /// Kafka's name for the API, e.g. `"Produce"`.
            pub fn name(self) -> &'static str {
                match self {
                    $(ApiKey::$variant => $name,)*
                }
            }

            /// Lowest supported version.
            pub fn lowest_version(self) -> i16 {
                match self {
                    $(ApiKey::$variant => $lo,)*
                }
            }

            /// Highest supported version.
            pub fn highest_version(self) -> i16 {
                match self {
                    $(ApiKey::$variant => $hi,)*
                }
            }

            /// First flexible version of the request (and response), if any.
            pub fn flexible_from(self) -> Option<i16> {
                match self {
                    $(ApiKey::$variant => <crate::messages::$req as Message>::FLEXIBLE_FROM,)*
                }
            }

            /// First flexible version of the response. Same as the request's for every API here.
            fn response_flexible_from(self) -> Option<i16> {
                match self {
                    $(ApiKey::$variant => <crate::messages::$resp as Message>::FLEXIBLE_FROM,)*
                }
            }
        }
    };
}
for_each_api!(define_api_key);

impl ApiKey {
    /// True when `version` of this API is supported.
    pub fn supports(self, version: i16) -> bool {
        (self.lowest_version()..=self.highest_version()).contains(&version)
    }

    /// True when `version` of this API uses the flexible (compact, tagged) encoding.
    pub fn is_flexible(self, version: i16) -> bool {
        self.flexible_from().is_some_and(|f| version >= f)
    }
}

impl std::fmt::Display for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The request header version for `version` of `api`: 2 for flexible versions, 1 otherwise
/// (Kafka's rule; header v0 is only used by ControlledShutdown v0, which is not supported here).
/// Versions above the supported range follow the same rule, as Kafka parses them.
pub fn request_header_version(api: ApiKey, version: i16) -> i16 {
    if api.is_flexible(version) {
        2
    } else {
        1
    }
}

/// The response header version for `version` of `api`: 1 for flexible versions, 0 otherwise,
/// except that ApiVersions responses always use header v0 (so a client that does not yet know
/// the broker's versions can read them).
pub fn response_header_version(api: ApiKey, version: i16) -> i16 {
    if api == ApiKey::ApiVersions {
        return 0;
    }
    if api.response_flexible_from().is_some_and(|f| version >= f) {
        1
    } else {
        0
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::messages::*;

    macro_rules! check_table {
        ($($variant:ident = $key:literal, $name:literal, $lo:literal..=$hi:literal, $req:ident, $resp:ident;)*) => {$(
            assert_eq!(<$req as Message>::API_KEY, $key);
            assert_eq!(<$resp as Message>::API_KEY, $key);
            assert_eq!(<$req as Message>::LOWEST_VERSION, $lo, "{}", $name);
            assert_eq!(<$req as Message>::HIGHEST_VERSION, $hi, "{}", $name);
            assert_eq!(<$resp as Message>::LOWEST_VERSION, $lo, "{}", $name);
            assert_eq!(<$resp as Message>::HIGHEST_VERSION, $hi, "{}", $name);
            assert_eq!(<$req as Message>::FLEXIBLE_FROM, <$resp as Message>::FLEXIBLE_FROM);
            assert_eq!(ApiKey::$variant.name(), $name);
            assert_eq!(ApiKey::from_i16($key), Some(ApiKey::$variant));
        )*};
    }

    /// The number of request schema files (each has its response).
    pub(crate) fn schema_pairs() -> usize {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schema");
        std::fs::read_dir(dir)
            .expect("the schema directory")
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with("_request.schema"))
            })
            .count()
    }

    #[test]
    fn table_matches_the_schemas() {
        for_each_api!(check_table);
        // One API per request/response pair of schema files.
        assert_eq!(ApiKey::ALL.len(), schema_pairs());
        assert_eq!(ApiKey::from_i16(4), None);
        assert_eq!(ApiKey::from_i16(-1), None);
    }

    #[test]
    fn header_versions() {
        // ApiVersions: request header v2 from v3, response header always v0.
        assert_eq!(request_header_version(ApiKey::ApiVersions, 2), 1);
        assert_eq!(request_header_version(ApiKey::ApiVersions, 3), 2);
        assert_eq!(request_header_version(ApiKey::ApiVersions, 4), 2);
        assert_eq!(request_header_version(ApiKey::ApiVersions, 9), 2);
        for v in 0..=4 {
            assert_eq!(response_header_version(ApiKey::ApiVersions, v), 0);
        }
        // Produce: flexible from v9.
        assert_eq!(request_header_version(ApiKey::Produce, 8), 1);
        assert_eq!(request_header_version(ApiKey::Produce, 9), 2);
        assert_eq!(response_header_version(ApiKey::Produce, 8), 0);
        assert_eq!(response_header_version(ApiKey::Produce, 9), 1);
        // Fetch: flexible from v12.
        assert_eq!(request_header_version(ApiKey::Fetch, 11), 1);
        assert_eq!(request_header_version(ApiKey::Fetch, 12), 2);
        assert_eq!(response_header_version(ApiKey::Fetch, 12), 1);
        // Metadata v9+, DescribeCluster always, SaslHandshake never.
        assert_eq!(request_header_version(ApiKey::Metadata, 9), 2);
        assert_eq!(response_header_version(ApiKey::Metadata, 8), 0);
        assert_eq!(request_header_version(ApiKey::DescribeCluster, 0), 2);
        assert_eq!(response_header_version(ApiKey::DescribeCluster, 0), 1);
        assert_eq!(request_header_version(ApiKey::SaslHandshake, 1), 1);
        assert_eq!(response_header_version(ApiKey::SaslHandshake, 1), 0);
        assert_eq!(request_header_version(ApiKey::SaslAuthenticate, 2), 2);
        assert_eq!(response_header_version(ApiKey::SaslAuthenticate, 1), 0);
        assert_eq!(request_header_version(ApiKey::InitProducerId, 2), 2);
        assert_eq!(request_header_version(ApiKey::DescribeConfigs, 4), 2);
        assert_eq!(request_header_version(ApiKey::DescribeConfigs, 3), 1);
    }
}
