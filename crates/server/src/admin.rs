//! The admin HTTP listener: node status, and append/read on log streams without the Kafka
//! protocol (for operators, scripts and the multi-process tests).
//!
//! Endpoints:
//! - `GET /status` — JSON: this node and every stream's (every partition's) leader, term,
//!   applied index, high watermark and log start offset; the Kafka listeners' authentication
//!   counters and the peer port's refused connections; the replicas damaged on this node
//!   (being repaired from a healthy one) and the scrubber's counters.
//! - `POST /streams/{name}/append?timeout_ms=N&partition=P` — body: one or more Kafka record batches
//!   (magic 2). Each batch is validated like a Kafka produce's batch (CRC, counts, every
//!   record, offsets, timestamps: `records::validate_producer_batch`). Answers once the
//!   batches are committed (fsynced on a majority): `200 {"base_offset":..,"raft_index":..}`;
//!   `421` with `{"error":..,"leader":id}` on a follower, `504` on timeout, `400` on bad input.
//! - `GET /streams/{name}/records?offset=N&max_bytes=M&partition=P` — committed record batches from offset
//!   N, whole batches, as `application/octet-stream`; header `x-high-watermark`.
//! - `GET /rates`, `PUT /rates` — the node-wide flow limits (see [`crate::admin_rates`]).
//! - `GET /members` — JSON list of every member: id, name, peer and Kafka addresses, state
//!   (`joining`, `voter`, `leaving`, `removed`), whether it is connected, replicas held.
//! - `POST /members?timeout_ms=N` — body `{"id":4,"peer":"IP:PORT","kafka":"HOST:PORT",
//!   "name":"vdl4"}` (name optional): adds the member and answers `200` with the member once
//!   it is a voter of the metadata group (it must be running with `join = true`); `400` bad
//!   input, `409` refused (id removed, or a member at another address), `504` not finished in
//!   time (the change goes on), `503` the command did not commit.
//! - `DELETE /members/{id}?timeout_ms=N` — moves the member's replicas to other members and
//!   removes it from the metadata group; `200` once done, `404` unknown id, `409` refused (last
//!   member, a replica with nowhere to go), `504`, `503` as above. See
//!   [`crate::replication::membership`].
//! - `GET /metrics` — Prometheus metrics (OpenMetrics text, see [`crate::metrics`]).
//! - The operator endpoints `vdlctl` uses: see [`crate::admin_ops`].
//!
//! The JSON answers' types (except `/status`'s, below) are in the `vdl-admin-api` crate,
//! shared with `vdlctl`; every answer carries the header `x-vdl-admin-api-version` with
//! [`vdl_admin_api::ADMIN_API_VERSION`].
//!
//! Every call is authenticated and authorized (the endpoint's Kafka ACL) by
//! [`crate::admin_auth`]: 401 without valid credentials when `[admin] require_auth` is on, 403
//! when the ACLs refuse.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use kafka_proto::records::{split_batches, validate_producer_batch};
use serde::{Deserialize, Serialize};

use crate::node::Node;
use crate::replication::group::AppendError;

/// Largest append body accepted (as Kafka's default message.max.bytes).
pub const MAX_APPEND_BYTES: usize = 1 << 20;
/// Longest an append may wait for commit.
const MAX_APPEND_TIMEOUT_MS: u64 = 60_000;
/// Longest a membership change is waited for (default 60 s).
const MAX_MEMBERSHIP_TIMEOUT_MS: u64 = 600_000;

/// One stream's state in `/status`.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct StreamStatus {
    /// Stream (topic) name.
    pub name: String,
    /// Leader node id (0: none known).
    pub leader: u64,
    /// Current term.
    pub term: u64,
    /// Highest applied (committed) Raft index.
    pub applied_index: u64,
    /// Next offset after the last committed record.
    pub high_watermark: u64,
    /// First offset still stored.
    pub log_start_offset: u64,
    /// Partition of the topic (0 for a stream configured at start; absent in documents from
    /// versions before partitions). Last, so scripts reading the fields in order (name,
    /// leader, ...) keep working.
    #[serde(default)]
    pub partition: u32,
    /// Whether the partition's Raft group is quiesced on this node (idle: no ticks, no
    /// heartbeats).
    #[serde(default)]
    pub quiesced: bool,
}

/// The `/status` document.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct NodeStatus {
    /// This node's id.
    pub id: u64,
    /// This node's name.
    pub name: String,
    /// Every stream this node serves: each partition of each topic, partitions of a topic in
    /// order.
    pub streams: Vec<StreamStatus>,
    /// Authentication counters of the Kafka listeners (absent in documents from versions
    /// before them).
    #[serde(default)]
    pub security: crate::security::stats::SecurityStatsSnapshot,
    /// Peer connections refused so far (no hello, a bad or forged hello, no valid TLS
    /// certificate with `[peer_tls]`).
    #[serde(default)]
    pub peer_refused_connections: u64,
    /// Raft messages from peers delivered to their group so far.
    #[serde(default)]
    pub peer_delivered_messages: u64,
    /// Replicas on this node whose storage was found damaged and that are not whole again.
    #[serde(default)]
    pub damaged: Vec<DamagedStatus>,
    /// Storage-fault counters (scrubber and repairs).
    #[serde(default)]
    pub storage: StorageCounters,
}

/// A damaged replica in `/status`.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct DamagedStatus {
    /// The stream (topic-partition label).
    pub stream: String,
    /// The first Raft index lost (0: the hard state was lost, not entries).
    pub first_bad_index: u64,
    /// The last index the log had before the cut.
    pub lost_last_index: u64,
    /// Where the damage was found.
    pub detail: String,
}

/// Storage-fault counters in `/status`.
#[derive(Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct StorageCounters {
    /// Bytes of sealed segments the scrubber CRC-checked.
    pub scrub_bytes_verified: u64,
    /// Damaged entries the scrubber found.
    pub scrub_faults_found: u64,
    /// Damage found anywhere (open, reads, scrubber, hard state).
    pub faults_found: u64,
    /// Repairs completed.
    pub repairs_completed: u64,
}

/// The router serving the endpoints above for `node`.
pub fn router(node: Arc<Node>) -> Router {
    Router::new()
        .route("/status", get(status))
        .route("/streams/{name}/append", post(append))
        .route("/streams/{name}/records", get(records))
        .route("/members", get(members).post(add_member))
        .route("/members/{id}", delete(remove_member))
        .merge(crate::admin_rates::routes())
        .route("/metrics", get(metrics))
        .route("/replicas", get(crate::admin_ops::replicas))
        .route("/cluster/status", get(crate::admin_ops::cluster_status))
        .route(
            "/partitions/{topic}/{partition}/leader",
            post(crate::admin_ops::transfer_leader),
        )
        .route("/leaders/balance", post(crate::admin_ops::balance_leaders))
        .route(
            "/partitions/{topic}/{partition}/segments",
            get(crate::admin_ops::list_segments),
        )
        .route(
            "/partitions/{topic}/{partition}/segments/delete",
            post(crate::admin_ops::delete_segments),
        )
        // Every call authenticated and authorized (see crate::admin_auth).
        .route_layer(axum::middleware::from_fn_with_state(
            node.clone(),
            crate::admin_auth::guard,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_APPEND_BYTES))
        // Every answer says which admin API version produced it (see vdl-admin-api).
        .layer(axum::middleware::map_response(with_version_header))
        .with_state(node)
}

/// Adds [`vdl_admin_api::VERSION_HEADER`] (this server's
/// [`vdl_admin_api::ADMIN_API_VERSION`]) to an answer.
async fn with_version_header(mut response: Response) -> Response {
    response.headers_mut().insert(
        vdl_admin_api::VERSION_HEADER,
        HeaderValue::from(vdl_admin_api::ADMIN_API_VERSION),
    );
    response
}

/// Serves the admin API on `listener` until the task is dropped: plain HTTP or HTTPS as the
/// node's `[admin]` settings say (see [`crate::admin_http`]).
pub async fn serve(listener: tokio::net::TcpListener, node: Arc<Node>) -> std::io::Result<()> {
    crate::admin_http::serve(listener, node).await
}

async fn metrics(State(node): State<Arc<Node>>) -> Response {
    let text = crate::metrics::encode(node.scrape());
    let mut resp = text.into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
    );
    resp
}

async fn status(State(node): State<Arc<Node>>) -> Json<NodeStatus> {
    let streams = node
        .stream_names()
        .into_iter()
        .flat_map(|n| node.partitions(&n))
        .map(|s| {
            let v = s.visible();
            StreamStatus {
                name: s.name().to_owned(),
                partition: s.partition(),
                quiesced: v.quiesced,
                leader: v.leader,
                term: v.term,
                applied_index: v.applied_index,
                high_watermark: v.high_watermark,
                log_start_offset: v.log_start_offset,
            }
        })
        .collect();
    let faults = node.storage_faults();
    let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    Json(NodeStatus {
        id: node.config().id,
        name: node.config().name.clone(),
        streams,
        security: node.security_stats().snapshot(),
        peer_refused_connections: node.peer_stats().refused_connections(),
        peer_delivered_messages: node.peer_stats().delivered_messages(),
        damaged: faults
            .damaged()
            .into_iter()
            .map(|d| DamagedStatus {
                stream: d.stream,
                first_bad_index: d.first_bad_index,
                lost_last_index: d.lost_last_index,
                detail: d.detail,
            })
            .collect(),
        storage: StorageCounters {
            scrub_bytes_verified: load(&faults.scrub_bytes_verified),
            scrub_faults_found: load(&faults.scrub_faults_found),
            faults_found: load(&faults.faults_found),
            repairs_completed: load(&faults.repairs_completed),
        },
    })
}

/// A stream partition this node has no replica of: 421 with the leader the leaders report
/// (see [`crate::replication::leaders`]) when the partition exists, 404 when it does not.
fn not_here(node: &Node, name: &str, partition: u32) -> Response {
    match node.topic_layout(name) {
        Some(l) if (partition as usize) < l.replicas.len() => error(
            StatusCode::MISDIRECTED_REQUEST,
            format!("no replica of {name} partition {partition} on this node"),
            node.reported_leader(name, l.incarnation, partition)
                .map(|(leader, _)| leader),
        ),
        _ => error(
            StatusCode::NOT_FOUND,
            format!("no stream {name} partition {partition}"),
            None,
        ),
    }
}

#[derive(Deserialize)]
struct AppendParams {
    timeout_ms: Option<u64>,
    /// Partition of the topic (default 0).
    partition: Option<u32>,
}

fn error(status: StatusCode, message: String, leader: Option<u64>) -> Response {
    (
        status,
        Json(serde_json::json!({ "error": message, "leader": leader })),
    )
        .into_response()
}

async fn append(
    State(node): State<Arc<Node>>,
    Path(name): Path<String>,
    Query(params): Query<AppendParams>,
    body: Bytes,
) -> Response {
    let partition = params.partition.unwrap_or(0);
    let Some(stream) = node.partition(&name, partition) else {
        return not_here(&node, &name, partition);
    };
    if body.is_empty() {
        return error(StatusCode::BAD_REQUEST, "empty body".into(), None);
    }
    // Each batch is checked as a Kafka produce's batch is (at the newest Produce version).
    let limits = node
        .config()
        .kafka
        .produce_limits(crate::metadata::wall_clock_ms());
    let mut span: u64 = 0;
    for batch in split_batches(body.clone()) {
        let checked = batch.map_err(|e| e.to_string()).and_then(|b| {
            validate_producer_batch(&b, i16::MAX, &limits).map_err(|e| e.to_string())
        });
        match checked {
            Ok(count) => span += u64::from(count),
            Err(e) => return error(StatusCode::BAD_REQUEST, e, None),
        }
    }
    let Ok(span) = u32::try_from(span) else {
        return error(StatusCode::BAD_REQUEST, "too many records".into(), None);
    };
    let timeout = Duration::from_millis(
        params
            .timeout_ms
            .unwrap_or(30_000)
            .min(MAX_APPEND_TIMEOUT_MS),
    );
    match stream.append(body, span, timeout).await {
        Ok(a) => Json(serde_json::json!({
            "base_offset": a.base_offset,
            "raft_index": a.raft_index,
            "offset_count": a.offset_count,
        }))
        .into_response(),
        Err(AppendError::NotLeader { leader }) => error(
            StatusCode::MISDIRECTED_REQUEST,
            "not the leader".into(),
            leader,
        ),
        Err(AppendError::Timeout) => error(
            StatusCode::GATEWAY_TIMEOUT,
            "not committed in time".into(),
            None,
        ),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string(), None),
    }
}

#[derive(Deserialize)]
struct ReadParams {
    offset: u64,
    max_bytes: Option<u64>,
    /// Partition of the topic (default 0).
    partition: Option<u32>,
}

async fn records(
    State(node): State<Arc<Node>>,
    Path(name): Path<String>,
    Query(params): Query<ReadParams>,
) -> Response {
    let partition = params.partition.unwrap_or(0);
    let Some(stream) = node.partition(&name, partition) else {
        return not_here(&node, &name, partition);
    };
    let hw = stream.visible().high_watermark;
    match stream.read(
        params.offset,
        params.max_bytes.unwrap_or(1 << 20).min(64 << 20),
    ) {
        Ok(read) => {
            let mut body = Vec::with_capacity(read.bytes as usize);
            for c in &read.chunks {
                body.extend_from_slice(c);
            }
            let mut resp = body.into_response();
            let h = resp.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            h.insert("x-high-watermark", HeaderValue::from(hw));
            resp
        }
        Err(e) => error(StatusCode::RANGE_NOT_SATISFIABLE, e.to_string(), None),
    }
}

async fn members(
    State(node): State<Arc<Node>>,
) -> Json<Vec<crate::replication::membership::MemberView>> {
    Json(node.members())
}

#[derive(Deserialize)]
struct MembershipParams {
    timeout_ms: Option<u64>,
}

fn membership_timeout(params: &MembershipParams) -> Duration {
    Duration::from_millis(
        params
            .timeout_ms
            .unwrap_or(60_000)
            .min(MAX_MEMBERSHIP_TIMEOUT_MS),
    )
}

fn membership_error(e: crate::replication::membership::MembershipError) -> Response {
    use crate::replication::membership::MembershipError as E;
    let status = match &e {
        E::Unknown(_) => StatusCode::NOT_FOUND,
        E::Removed(_) | E::Conflict(..) | E::LastMember | E::NoRoom(_) => StatusCode::CONFLICT,
        E::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
        E::Propose(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    error(status, e.to_string(), None)
}

async fn add_member(
    State(node): State<Arc<Node>>,
    Query(params): Query<MembershipParams>,
    body: Bytes,
) -> Response {
    let body: vdl_admin_api::members::AddMember = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("bad body: {e}"), None),
    };
    if body.id == 0 {
        return error(StatusCode::BAD_REQUEST, "id must be non-zero".into(), None);
    }
    let Ok(peer) = body.peer.parse::<std::net::SocketAddr>() else {
        return error(
            StatusCode::BAD_REQUEST,
            format!("peer `{}` is not IP:PORT", body.peer),
            None,
        );
    };
    if !crate::replication::peer_wire::valid_advertised(&body.kafka) {
        return error(
            StatusCode::BAD_REQUEST,
            format!("kafka `{}` is not HOST:PORT", body.kafka),
            None,
        );
    }
    let name = body.name.unwrap_or_else(|| format!("vdl{}", body.id));
    let timeout = membership_timeout(&params);
    match node
        .add_member(body.id, name, peer, body.kafka, timeout)
        .await
    {
        Ok(()) => match node.members().into_iter().find(|m| m.id == body.id) {
            Some(m) => Json(m).into_response(),
            None => error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "added member not listed".into(),
                None,
            ),
        },
        Err(e) => membership_error(e),
    }
}

async fn remove_member(
    State(node): State<Arc<Node>>,
    Path(id): Path<u64>,
    Query(params): Query<MembershipParams>,
) -> Response {
    match node.remove_member(id, membership_timeout(&params)).await {
        Ok(()) => Json(vdl_admin_api::members::RemovedMember { removed: id }).into_response(),
        Err(e) => membership_error(e),
    }
}
