//! The admin API's route table: every endpoint of the admin HTTP listener, each behind the
//! authentication and ACL guard ([`crate::admin::auth::guard`]), with the body limit and the
//! API version header on every answer. The endpoints live in their own files:
//!
//! | Routes | File |
//! |---|---|
//! | `GET /status`, `GET /metrics` | [`crate::admin::status`] |
//! | `POST /streams/{name}/append`, `GET /streams/{name}/records` | [`crate::admin::streams`] |
//! | `GET`/`POST /members`, `DELETE /members/{id}` | [`crate::admin::members`] |
//! | `GET`/`PUT /rates` | [`crate::admin::rates`] |
//! | `GET /replicas`, `GET /cluster/status`, leaders, segments (what `vdlctl` calls) | [`crate::admin::operator`] |
//!
//! The JSON answers' types (except `/status`'s and `/replicas`') are in the `vdl-admin-api`
//! crate, shared with `vdlctl`; every answer carries the header `x-vdl-admin-api-version` with
//! [`vdl_admin_api::ADMIN_API_VERSION`].
//!
//! Every call is authenticated and authorized (the endpoint's Kafka ACL) by
//! [`crate::admin::auth`]: 401 without valid credentials when `[admin] require_auth` is on, 403
//! when the ACLs refuse.

use std::sync::Arc;

use axum::http::HeaderValue;
use axum::response::Response;
use axum::routing::{delete, get, post};
use axum::Router;

use crate::admin::streams::MAX_APPEND_BYTES;
use crate::admin::{auth, members, operator, rates, status, streams};
use crate::node::Node;

/// The router serving every admin endpoint for `node`.
pub fn router(node: Arc<Node>) -> Router {
    Router::new()
        .route("/status", get(status::status))
        .route("/streams/{name}/append", post(streams::append))
        .route("/streams/{name}/records", get(streams::records))
        .route("/members", get(members::members).post(members::add_member))
        .route("/members/{id}", delete(members::remove_member))
        .merge(rates::routes())
        .route("/metrics", get(status::metrics))
        .route("/replicas", get(operator::replicas))
        .route("/cluster/status", get(operator::cluster_status))
        .route(
            "/partitions/{topic}/{partition}/leader",
            post(operator::transfer_leader),
        )
        .route("/leaders/balance", post(operator::balance_leaders))
        .route(
            "/partitions/{topic}/{partition}/segments",
            get(operator::list_segments),
        )
        .route(
            "/partitions/{topic}/{partition}/segments/delete",
            post(operator::delete_segments),
        )
        // Every call authenticated and authorized (see crate::admin::auth).
        .route_layer(axum::middleware::from_fn_with_state(
            node.clone(),
            auth::guard,
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
