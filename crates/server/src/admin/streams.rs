//! Append and read on log streams without the Kafka protocol (for operators, scripts and the
//! multi-process tests):
//! - `POST /streams/{name}/append?timeout_ms=N&partition=P` — body: one or more Kafka record
//!   batches (magic 2). Each batch is validated like a Kafka produce's batch (CRC, counts,
//!   every record, offsets, timestamps: `records::validate_producer_batch`). Answers once the
//!   batches are committed (fsynced on a majority): `200 {"base_offset":..,"raft_index":..}`;
//!   `421` with `{"error":..,"leader":id}` on a follower, `504` on timeout, `400` on bad input.
//! - `GET /streams/{name}/records?offset=N&max_bytes=M&partition=P` — committed record batches
//!   from offset N, whole batches, as `application/octet-stream`; header `x-high-watermark`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use kafka_proto::records::{split_batches, validate_producer_batch};
use serde::Deserialize;

use crate::admin::reply::error_with_leader as error;
use crate::node::Node;
use crate::replication::group::AppendError;

/// Largest append body accepted (as Kafka's default message.max.bytes).
pub const MAX_APPEND_BYTES: usize = 1 << 20;
/// Longest an append may wait for commit.
const MAX_APPEND_TIMEOUT_MS: u64 = 60_000;

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

/// The query of `POST /streams/{name}/append`.
#[derive(Deserialize)]
pub(super) struct AppendParams {
    timeout_ms: Option<u64>,
    /// Partition of the topic (default 0).
    partition: Option<u32>,
}

/// `POST /streams/{name}/append`: appends the body's batches, answered once committed.
pub(super) async fn append(
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

/// The query of `GET /streams/{name}/records`.
#[derive(Deserialize)]
pub(super) struct ReadParams {
    offset: u64,
    max_bytes: Option<u64>,
    /// Partition of the topic (default 0).
    partition: Option<u32>,
}

/// `GET /streams/{name}/records`: committed whole batches from an offset.
pub(super) async fn records(
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
