//! Request dispatch: one decoded request in, its response out (now, later, or never for
//! `acks=0` produce).

use std::sync::Arc;

use kafka_proto::api::ApiKey;
use kafka_proto::frame::{Request, Response};
use kafka_proto::header::RequestHeader;
use kafka_proto::messages::api_versions_response::{
    ApiVersion, ApiVersionsResponse, FinalizedFeatureKey, SupportedFeatureKey,
};

pub use crate::served_apis::SERVED_APIS;

use crate::kafka::access::Access;
use crate::kafka::connection::ConnectionContext;
use crate::kafka::direct_answer::DirectAnswer;
use crate::kafka::groups::{
    find_coordinator_api, group_admin_api, membership_api, offsets_api, txn_offsets_api,
};
use crate::kafka::host::KafkaHost;
use crate::kafka::reply::{self, Reply};
use crate::kafka::{
    acls, cluster, configs, fetch, metadata, partition_admin, produce, quotas, topics, txn,
    txn_markers, users,
};

/// The feature KIP-890 part 2 is negotiated by: a Kafka 4.x client uses transaction version 2
/// when the broker's ApiVersions finalizes it at level 2 or more.
pub const TRANSACTION_VERSION_FEATURE: &str = "transaction.version";

/// The transaction version levels this server supports (1: the protocol before KIP-890 part 2;
/// 2: an epoch bump at every EndTxn and implicit AddPartitions, see `kafka::txn`) and the
/// one it finalizes, as a Kafka 4.x broker with the feature at its default.
pub const TRANSACTION_VERSION_MAX: i16 = 2;

/// The finalized-features epoch ApiVersions reports: this server's finalized features never
/// change, so one epoch; a client takes finalized features only from an epoch above -1.
pub const FINALIZED_FEATURES_EPOCH: i64 = 1;

/// The ApiVersions response body listing [`SERVED_APIS`] and the features: `transaction.version`
/// supported 0 to [`TRANSACTION_VERSION_MAX`] and finalized at it, as a Kafka 4.x broker
/// advertises it (clients that do not read features, such as librdkafka and the Kafka 3.9
/// Java client, keep transaction version 1).
pub fn api_versions() -> ApiVersionsResponse {
    ApiVersionsResponse {
        error_code: 0,
        supported_features: vec![SupportedFeatureKey {
            name: TRANSACTION_VERSION_FEATURE.to_string(),
            min_version: 0,
            max_version: TRANSACTION_VERSION_MAX,
            ..SupportedFeatureKey::default()
        }],
        finalized_features_epoch: FINALIZED_FEATURES_EPOCH,
        finalized_features: vec![FinalizedFeatureKey {
            name: TRANSACTION_VERSION_FEATURE.to_string(),
            max_version_level: TRANSACTION_VERSION_MAX,
            min_version_level: TRANSACTION_VERSION_MAX,
            ..FinalizedFeatureKey::default()
        }],
        api_keys: SERVED_APIS
            .iter()
            .map(|(api, lo, hi)| ApiVersion {
                api_key: api.as_i16(),
                min_version: *lo,
                max_version: *hi,
                ..ApiVersion::default()
            })
            .collect(),
        ..ApiVersionsResponse::default()
    }
}

/// Handles one request. Produce requests are submitted to their streams before this returns,
/// so a connection's produces reach each stream in the order they were sent. With `direct`,
/// a produce's response may be written by the worker that learns its commit (see
/// [`crate::kafka::direct_answer`]). Generic over the host: each handler is compiled for the
/// node itself, no `dyn` between the connection and the produce and fetch paths.
pub(crate) fn dispatch<H: KafkaHost>(
    node: &Arc<H>,
    header: RequestHeader,
    request: Request,
    conn: &ConnectionContext,
    chain: &mut produce::ProduceChain,
    direct: Option<DirectAnswer>,
) -> Reply {
    let version = header.api_version;
    let cid = header.correlation_id;
    // Every handler checks what the connection's principal may do (see `access`).
    let access = &Access::new(node, conn);
    match request {
        Request::ApiVersions(_) => reply::now(cid, version, Response::ApiVersions(api_versions())),
        Request::Metadata(req) => {
            metadata::handle(node, access, req, version, cid, &conn.listener_name)
        }
        Request::CreateTopics(req) => topics::create_topics(node, access, req, version, cid),
        Request::DeleteTopics(req) => topics::delete_topics(node, access, req, version, cid),
        Request::CreatePartitions(req) => {
            topics::create_partitions(node, access, req, version, cid)
        }
        Request::InitProducerId(req) => cluster::init_producer_id(node, access, req, version, cid),
        Request::DescribeCluster(req) => reply::now(
            cid,
            version,
            Response::DescribeCluster(cluster::describe_cluster(
                node,
                access,
                &req,
                &conn.listener_name,
            )),
        ),
        Request::DescribeConfigs(req) => reply::now(
            cid,
            version,
            Response::DescribeConfigs(cluster::describe_configs(node, access, &req, version)),
        ),
        Request::AlterConfigs(req) => configs::alter_configs(node, access, req, version, cid),
        Request::IncrementalAlterConfigs(req) => {
            configs::incremental_alter_configs(node, access, req, version, cid)
        }
        Request::DeleteRecords(req) => {
            partition_admin::delete_records(node, access, req, version, cid)
        }
        Request::DescribeLogDirs(req) => reply::now(
            cid,
            version,
            Response::DescribeLogDirs(partition_admin::describe_log_dirs(
                node.as_ref(),
                access,
                &req,
            )),
        ),
        Request::DescribeProducers(req) => {
            partition_admin::describe_producers(node, access, req, version, cid)
        }
        Request::AddPartitionsToTxn(req) => {
            txn::add_api::add_partitions_to_txn(node, access, req, version, cid)
        }
        Request::AddOffsetsToTxn(req) => {
            txn::add_api::add_offsets_to_txn(node, access, req, version, cid)
        }
        Request::EndTxn(req) => txn::end_txn_api::end_txn(node, access, req, version, cid),
        Request::DescribeTransactions(req) => {
            txn::describe_api::describe_transactions(node, access, req, version, cid)
        }
        Request::ListTransactions(req) => {
            txn::describe_api::list_transactions(node, access, req, version, cid)
        }
        Request::WriteTxnMarkers(req) => {
            txn_markers::write_txn_markers(node, access, req, version, cid)
        }
        Request::ElectLeaders(req) => {
            partition_admin::elect_leaders(node, access, req, version, cid)
        }
        Request::ListPartitionReassignments(req) => {
            reply::now(
                cid,
                version,
                Response::ListPartitionReassignments(
                    partition_admin::list_partition_reassignments(node.as_ref(), access, &req),
                ),
            )
        }
        Request::ListOffsets(req) => reply::now(
            cid,
            version,
            Response::ListOffsets(metadata::list_offsets(node.as_ref(), access, &req, version)),
        ),
        Request::Produce(req) => {
            let client_id = header.client_id.as_deref().unwrap_or("");
            let throttle = produce::charge(node.as_ref(), &req, conn.client(client_id));
            if !throttle.is_zero() {
                conn.mute.mute_for(throttle, std::time::Instant::now());
                node.metrics()
                    .observe_throttle(ApiKey::Produce.as_i16(), throttle);
            }
            if chain.held_back() || txn::produce_check::needs_barrier(node.as_ref(), &req) {
                let (submitted, hold) = tokio::sync::watch::channel(false);
                let previous = chain.hold_back(hold);
                return txn::produce_check::produce_after_barrier(
                    node.clone(),
                    access.clone(),
                    req,
                    version,
                    cid,
                    throttle,
                    (previous, submitted),
                );
            }
            produce::produce(
                node.as_ref(),
                access,
                req,
                version,
                cid,
                chain,
                throttle,
                direct,
            )
        }
        Request::Fetch(req) => {
            let charged = fetch::Charged {
                mute: conn.mute.clone(),
                user: conn.principal.name.clone(),
                client_id: header.client_id.clone().unwrap_or_default(),
            };
            fetch::fetch(node.clone(), access, req, version, cid, charged)
        }
        Request::FindCoordinator(req) => find_coordinator_api::find_coordinator(
            node,
            access,
            req,
            version,
            cid,
            &conn.listener_name,
        ),
        Request::JoinGroup(req) => {
            // Reported by DescribeGroups as Kafka does (`InetAddress.toString`).
            let client_host = format!("/{}", crate::security::acl::kafka_host(conn.peer.ip()));
            membership_api::join_group(
                node,
                access,
                header.client_id.clone(),
                client_host,
                req,
                version,
                cid,
            )
        }
        Request::ConsumerGroupHeartbeat(req) => {
            let client_host = format!("/{}", crate::security::acl::kafka_host(conn.peer.ip()));
            crate::kafka::groups::consumer::heartbeat_api::consumer_group_heartbeat(
                node,
                access,
                header.client_id.clone(),
                client_host,
                req,
                version,
                cid,
            )
        }
        Request::ConsumerGroupDescribe(req) => {
            crate::kafka::groups::consumer::describe_api::consumer_group_describe(
                node, access, req, version, cid,
            )
        }
        Request::SyncGroup(req) => membership_api::sync_group(node, access, req, version, cid),
        Request::Heartbeat(req) => membership_api::heartbeat(node, access, req, version, cid),
        Request::LeaveGroup(req) => membership_api::leave_group(node, access, req, version, cid),
        Request::OffsetCommit(req) => offsets_api::offset_commit(node, access, req, version, cid),
        Request::OffsetFetch(req) => offsets_api::offset_fetch(node, access, req, version, cid),
        Request::TxnOffsetCommit(req) => {
            txn_offsets_api::txn_offset_commit(node, access, req, version, cid)
        }
        Request::ListGroups(req) => group_admin_api::list_groups(node, access, req, version, cid),
        Request::DescribeGroups(req) => {
            group_admin_api::describe_groups(node, access, req, version, cid)
        }
        Request::DeleteGroups(req) => {
            group_admin_api::delete_groups(node, access, req, version, cid)
        }
        Request::OffsetDelete(req) => offsets_api::offset_delete(node, access, req, version, cid),
        Request::CreateAcls(req) => acls::create_acls(node, access, req, version, cid),
        Request::DescribeAcls(req) => reply::now(
            cid,
            version,
            Response::DescribeAcls(acls::describe_acls(node.as_ref(), access, &req)),
        ),
        Request::DeleteAcls(req) => acls::delete_acls(node, access, req, version, cid),
        Request::DescribeUserScramCredentials(req) => reply::now(
            cid,
            version,
            Response::DescribeUserScramCredentials(users::describe_user_scram_credentials(
                node.as_ref(),
                access,
                &req,
            )),
        ),
        Request::AlterUserScramCredentials(req) => {
            users::alter_user_scram_credentials(node, access, req, version, cid)
        }
        Request::DescribeClientQuotas(req) => {
            quotas::describe_client_quotas(node.as_ref(), access, req, version, cid)
        }
        Request::AlterClientQuotas(req) => {
            quotas::alter_client_quotas(node, access, req, version, cid)
        }
        other => {
            // Not advertised in ApiVersions; a client sending it anyway gets the connection
            // closed, as Kafka does for requests it cannot parse.
            tracing::debug!("unserved API {:?}", other.api_key());
            Reply::Close
        }
    }
}
