//! Membership changes on the admin API (`vdlctl member` calls them; see
//! [`crate::replication::membership`]):
//! - `GET /members` — JSON list of every member: id, name, peer and Kafka addresses, state
//!   (`joining`, `voter`, `leaving`, `removed`), whether it is connected, replicas held.
//! - `POST /members?timeout_ms=N` — body `{"id":4,"peer":"IP:PORT","kafka":"HOST:PORT",
//!   "name":"vdl4"}` (name optional): adds the member and answers `200` with the member once
//!   it is a voter of the metadata group (it must be running with `join = true`); `400` bad
//!   input, `409` refused (id removed, or a member at another address), `504` not finished in
//!   time (the change goes on), `503` the command did not commit.
//! - `DELETE /members/{id}?timeout_ms=N` — moves the member's replicas to other members and
//!   removes it from the metadata group; `200` once done, `404` unknown id, `409` refused (last
//!   member, a replica with nowhere to go), `504`, `503` as above.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use crate::admin::reply::error_with_leader as error;
use crate::node::Node;

/// Longest a membership change is waited for (default 60 s).
const MAX_MEMBERSHIP_TIMEOUT_MS: u64 = 600_000;

/// `GET /members`.
pub(super) async fn members(
    State(node): State<Arc<Node>>,
) -> Json<Vec<crate::replication::membership::MemberView>> {
    Json(node.members())
}

/// The query of `POST /members` and `DELETE /members/{id}`.
#[derive(Deserialize)]
pub(super) struct MembershipParams {
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

/// `POST /members`: adds a member, answered once it is a voter.
pub(super) async fn add_member(
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

/// `DELETE /members/{id}`: moves the member's replicas away and removes it.
pub(super) async fn remove_member(
    State(node): State<Arc<Node>>,
    Path(id): Path<u64>,
    Query(params): Query<MembershipParams>,
) -> Response {
    match node.remove_member(id, membership_timeout(&params)).await {
        Ok(()) => Json(vdl_admin_api::members::RemovedMember { removed: id }).into_response(),
        Err(e) => membership_error(e),
    }
}
