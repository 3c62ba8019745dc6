//! The flow limits ([`crate::flow`]) on the admin HTTP API (what `vdlctl rate list | update` calls):
//!
//! The answers are [`vdl_admin_api::rates::Rates`]; the body of `PUT /rates` is a
//! [`vdl_admin_api::rates::RatesUpdate`], read here as a JSON map so that a bad value is
//! answered with a message naming the limit.
//!
//! - `GET /rates` — JSON object: each of the seven limits ([`FLOW_LIMIT_NAMES`]) by name, a
//!   number per second or `null` (unlimited); plus `throttled_requests` and
//!   `throttle_time_ms_total` of this node.
//! - `PUT /rates` — JSON object with some of the seven names, each a positive number or `null`
//!   (0 means unlimited too); the others keep their values. The new limits are committed to the
//!   replicated metadata (any node accepts the request) and every node applies them; answers the
//!   limits now in force, `400` naming an unknown limit or a bad value, `503` when the metadata
//!   group cannot commit.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Map, Value};
use vdl_admin_api::rates::Rates;

use crate::admin::reply::error;
use crate::flow::settings::{FlowLimits, FLOW_LIMIT_NAMES};
use crate::metadata::MetaCommand;
use crate::node::Node;

/// How long `PUT /rates` waits for the commit.
const UPDATE_TIMEOUT: Duration = Duration::from_secs(30);

/// The routes above, to merge into the admin router.
pub fn routes() -> Router<Arc<Node>> {
    Router::new().route("/rates", get(list).put(update))
}

/// The `GET /rates` answer: `limits` and this node's throttling counters.
fn rates(node: &Node, limits: &FlowLimits) -> Rates {
    Rates {
        throttle_time_ms_total: node.flow().throttle_time_ms_total(),
        throttled_requests: node.flow().throttled_requests(),
        ..Rates::from(*limits)
    }
}

async fn list(State(node): State<Arc<Node>>) -> Json<Rates> {
    let limits = node.flow_settings().limits;
    Json(rates(&node, &limits))
}

fn bad_request(message: String) -> Response {
    error(StatusCode::BAD_REQUEST, message)
}

/// The limits `current` becomes with the changes in `body`.
pub fn apply_changes(current: FlowLimits, body: &Map<String, Value>) -> Result<FlowLimits, String> {
    let mut limits = current;
    for (name, value) in body {
        let parsed = match value {
            Value::Null => None,
            v => Some(v.as_u64().ok_or_else(|| {
                format!("limit {name}: expected a whole number per second or null, got {v}")
            })?),
        };
        if !limits.set(name, parsed) {
            return Err(format!(
                "unknown limit {name} (known: {})",
                FLOW_LIMIT_NAMES.join(", ")
            ));
        }
    }
    Ok(limits)
}

async fn update(State(node): State<Arc<Node>>, Json(body): Json<Value>) -> Response {
    let Value::Object(body) = body else {
        return bad_request("expected a JSON object of limits".into());
    };
    let limits = match apply_changes(node.flow_settings().limits, &body) {
        Ok(l) => l,
        Err(e) => return bad_request(e),
    };
    let command = MetaCommand::SetFlowLimits { limits };
    match node
        .metadata_proposer()
        .propose(&command, UPDATE_TIMEOUT)
        .await
    {
        Ok(_) => Json(rates(&node, &node.flow_settings().limits)).into_response(),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_apply_to_the_named_limits_only() {
        let current = FlowLimits {
            produce_bytes_per_sec: Some(100),
            tail_read_bytes_per_sec: Some(7),
            ..FlowLimits::default()
        };
        let body: Map<String, Value> = serde_json::from_str(
            r#"{"produce_requests_per_sec": 5, "tail_read_bytes_per_sec": null}"#,
        )
        .unwrap();
        let l = apply_changes(current, &body).unwrap();
        assert_eq!(l.produce_requests_per_sec, Some(5));
        assert_eq!(l.produce_bytes_per_sec, Some(100));
        assert_eq!(l.tail_read_bytes_per_sec, None);
        let bad: Map<String, Value> = serde_json::from_str(r#"{"nope": 1}"#).unwrap();
        assert!(apply_changes(current, &bad)
            .unwrap_err()
            .contains("unknown limit nope"));
        let neg: Map<String, Value> =
            serde_json::from_str(r#"{"produce_bytes_per_sec": -1}"#).unwrap();
        assert!(apply_changes(current, &neg).is_err());
    }
}
