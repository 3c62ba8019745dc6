//! Authentication and authorization of the admin HTTP API (see docs/security.md, "The admin
//! API").
//!
//! - **Settings** (`[admin]`, [`crate::config::AdminSettings`], parsed by the configuration):
//!   HTTPS files (`tls_cert`, `tls_key`, `tls_ca`, `tls_client_auth`), `require_auth` (default
//!   on whenever the node has any security configured: a Kafka listener other than PLAINTEXT,
//!   `[peer_tls]`, or `authorizer = "acl"`), `allow_basic_without_tls` (default off),
//!   `advertised`.
//! - **Credentials** ([`authenticate`]): an `Authorization: Basic` header with a SCRAM user's
//!   name and password (checked by [`crate::security::password`]: the same users as SASL), or
//!   else a client certificate verified against `tls_ca` during the TLS handshake (its
//!   principal as the Kafka SSL listener derives it). Basic on a listener without TLS is
//!   refused unless `allow_basic_without_tls`. With `require_auth`, a call with neither is
//!   refused (401); without it, it acts as `User:ANONYMOUS`.
//! - **Authorization** ([`required_access`], [`authorize`]): every route is mapped to the
//!   Kafka ACL guarding the same power and decided by the node's Kafka authorizer (super users
//!   pass; `authorizer = "none"`: every authenticated caller may do everything). Refused:
//!   403 with a JSON error.
//! - **Forwarding**: a node calling another node's admin API for a caller (cluster status,
//!   segment forwarding) passes the caller's `Authorization` header on, over HTTPS verified with
//!   `tls_ca` and presenting this node's certificate, so the receiving node authorizes the call
//!   as the caller ([`Caller::authorization`]).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use vdl_admin_api::ErrorBody;

use crate::admin::http::AdminConnection;
use crate::node::Node;
use crate::security::acl::{AclOperation, ResourceType, CLUSTER_RESOURCE_NAME};
use crate::security::Principal;

/// Longest `Authorization` header read (a longer one is refused without decoding).
pub const MAX_AUTHORIZATION_BYTES: usize = 4096;

/// Who is calling, as authenticated (a request extension for the handlers).
#[derive(Debug, Clone)]
pub struct Caller {
    /// The principal the call acts as.
    pub principal: Principal,
    /// The caller's `Authorization` header, passed on when this node calls another for the
    /// caller.
    pub authorization: Option<HeaderValue>,
}

impl Caller {
    /// A caller with no credentials (calls made by the node itself, tests).
    pub fn anonymous() -> Caller {
        Caller {
            principal: Principal::anonymous(),
            authorization: None,
        }
    }
}

/// Why a call was refused before its handler ran.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AdminAuthError {
    /// No credentials, or credentials that do not verify: 401.
    #[error("{0}")]
    Unauthenticated(String),
    /// Authenticated, but the ACLs do not allow it: 403.
    #[error("{0}")]
    Forbidden(String),
    /// Too many password checks in progress: 503.
    #[error("{0}")]
    Busy(String),
}

impl IntoResponse for AdminAuthError {
    fn into_response(self) -> Response {
        let status = match &self {
            AdminAuthError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            AdminAuthError::Forbidden(_) => StatusCode::FORBIDDEN,
            AdminAuthError::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        let mut resp = (status, Json(ErrorBody::new(self.to_string()))).into_response();
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"vdl admin\", charset=\"UTF-8\""),
            );
        }
        resp
    }
}

/// The user name and password of an `Authorization: Basic` header value.
pub fn parse_basic(value: &HeaderValue) -> Result<(String, String), AdminAuthError> {
    let bad =
        |why: &str| AdminAuthError::Unauthenticated(format!("bad Authorization header: {why}"));
    let bytes = value.as_bytes();
    if bytes.len() > MAX_AUTHORIZATION_BYTES {
        return Err(bad("too long"));
    }
    let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8"))?;
    let (scheme, rest) = text.split_once(' ').ok_or_else(|| bad("no scheme"))?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err(bad("only the Basic scheme is accepted"));
    }
    let decoded = B64.decode(rest.trim()).map_err(|_| bad("not base64"))?;
    let decoded = String::from_utf8(decoded).map_err(|_| bad("not UTF-8"))?;
    let (user, password) = decoded
        .split_once(':')
        .ok_or_else(|| bad("no `:` between user and password"))?;
    if user.is_empty() || password.is_empty() {
        return Err(bad("empty user or password"));
    }
    Ok((user.to_string(), password.to_string()))
}

/// Authenticates a call (the rules in the module documentation).
pub async fn authenticate(
    node: &Node,
    conn: &AdminConnection,
    authorization: Option<&HeaderValue>,
) -> Result<Caller, AdminAuthError> {
    let settings = &node.config().admin;
    if let Some(value) = authorization {
        if !conn.tls && !settings.allow_basic_without_tls {
            return Err(AdminAuthError::Unauthenticated(
                "Basic authentication is refused on an admin listener without TLS (set [admin] tls_cert, or allow_basic_without_tls)".into(),
            ));
        }
        let (user, password) = parse_basic(value)?;
        return match node.verify_password(&user, password).await {
            Ok(true) => Ok(Caller {
                principal: Principal::user(user),
                authorization: Some(value.clone()),
            }),
            Ok(false) => {
                tokio::time::sleep(node.config().security.failed_authentication_delay).await;
                Err(AdminAuthError::Unauthenticated(
                    "invalid user name or password".into(),
                ))
            }
            Err(e) => Err(AdminAuthError::Busy(e.to_string())),
        };
    }
    if let Some(p) = &conn.certificate {
        return Ok(Caller {
            principal: p.clone(),
            authorization: None,
        });
    }
    if settings.require_auth {
        return Err(AdminAuthError::Unauthenticated(
            "authentication required: a client certificate or HTTP Basic with a SCRAM user".into(),
        ));
    }
    Ok(Caller::anonymous())
}

/// The ACL a call needs: an operation on a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Required {
    /// The operation.
    pub operation: AclOperation,
    /// The resource type.
    pub resource_type: ResourceType,
    /// The resource name (`kafka-cluster` for the cluster).
    pub name: String,
}

fn cluster(operation: AclOperation) -> Required {
    Required {
        operation,
        resource_type: ResourceType::Cluster,
        name: CLUSTER_RESOURCE_NAME.to_string(),
    }
}

/// The ACL guarding `method` on the route `route` (the router's template, as
/// `/streams/{name}/records`) with path parameter `name` (the stream or topic, decoded):
///
/// | route | ACL |
/// |---|---|
/// | `GET /streams/{name}/records` | READ on topic `name` |
/// | `POST /streams/{name}/append` | WRITE on topic `name` |
/// | `POST /members`, `DELETE /members/{id}`, `PUT /rates`, `POST .../leader`, `POST /leaders/balance`, `POST .../segments/delete` | ALTER on the cluster |
/// | every other route (`GET /status`, `/metrics`, `/members`, `/rates`, `/replicas`, `/cluster/status`, `.../segments`) | DESCRIBE on the cluster |
pub fn required_access(method: &Method, route: &str, name: Option<&str>) -> Required {
    let topic = |operation| Required {
        operation,
        resource_type: ResourceType::Topic,
        name: name.unwrap_or_default().to_string(),
    };
    match (method.as_str(), route) {
        ("GET", "/streams/{name}/records") => topic(AclOperation::Read),
        ("POST", "/streams/{name}/append") => topic(AclOperation::Write),
        ("POST", "/members")
        | ("DELETE", "/members/{id}")
        | ("PUT", "/rates")
        | ("POST", "/partitions/{topic}/{partition}/leader")
        | ("POST", "/leaders/balance")
        | ("POST", "/partitions/{topic}/{partition}/segments/delete") => {
            cluster(AclOperation::Alter)
        }
        _ => cluster(AclOperation::Describe),
    }
}

/// Whether `caller`, connecting from `peer`, holds `required` on `node` (as the Kafka
/// listener decides: until the node's ACLs are current only super users pass).
pub fn authorize(node: &Node, caller: &Caller, peer: SocketAddr, required: &Required) -> bool {
    let authorizer = node.authorizer();
    if !authorizer.is_enabled() {
        return true;
    }
    if !node.acls_current() {
        return authorizer.is_super_user(&caller.principal);
    }
    authorizer.authorize(
        &node.metadata().acls,
        &caller.principal,
        &peer.ip().to_canonical().to_string(),
        required.operation,
        required.resource_type,
        &required.name,
    )
}

/// The admin router's guard (a route layer: it runs once the route matched): authenticates
/// the call, checks the route's ACL, and hands the [`Caller`] to the handler.
pub async fn guard(State(node): State<Arc<Node>>, mut req: Request, next: Next) -> Response {
    let Some(conn) = req.extensions().get::<AdminConnection>().cloned() else {
        // A request that did not come through the admin listener (the router used alone).
        return AdminAuthError::Unauthenticated("no connection information".into()).into_response();
    };
    let caller = match authenticate(&node, &conn, req.headers().get(header::AUTHORIZATION)).await {
        Ok(c) => c,
        Err(e) => {
            if matches!(e, AdminAuthError::Unauthenticated(_)) {
                node.security_stats().admin_authentication_failed();
            }
            tracing::debug!(peer = %conn.peer, path = %req.uri().path(), "admin call refused: {e}");
            return e.into_response();
        }
    };
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string())
        .unwrap_or_default();
    let (mut parts, body) = req.into_parts();
    let name =
        axum::extract::Path::<std::collections::HashMap<String, String>>::from_request_parts(
            &mut parts, &node,
        )
        .await
        .ok()
        .and_then(|p| p.0.get("name").cloned());
    req = Request::from_parts(parts, body);
    let required = required_access(req.method(), &route, name.as_deref());
    if !authorize(&node, &caller, conn.peer, &required) {
        tracing::info!(principal = %caller.principal, peer = %conn.peer, %route, "admin call denied by the ACLs");
        node.security_stats().admin_call_denied();
        return AdminAuthError::Forbidden(format!(
            "{} may not {} on {} {} ({} {route})",
            caller.principal,
            required.operation.name(),
            required.resource_type.name(),
            required.name,
            req.method(),
        ))
        .into_response();
    }
    req.extensions_mut().insert(caller);
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_maps_to_the_acl_guarding_the_same_power() {
        use AclOperation::*;
        let c = |op| cluster(op);
        let t = |op, n: &str| Required {
            operation: op,
            resource_type: ResourceType::Topic,
            name: n.into(),
        };
        let cases = [
            ("GET", "/status", None, c(Describe)),
            ("GET", "/metrics", None, c(Describe)),
            ("GET", "/members", None, c(Describe)),
            ("POST", "/members", None, c(Alter)),
            ("DELETE", "/members/{id}", None, c(Alter)),
            ("GET", "/rates", None, c(Describe)),
            ("PUT", "/rates", None, c(Alter)),
            ("GET", "/replicas", None, c(Describe)),
            ("GET", "/cluster/status", None, c(Describe)),
            (
                "POST",
                "/partitions/{topic}/{partition}/leader",
                None,
                c(Alter),
            ),
            ("POST", "/leaders/balance", None, c(Alter)),
            (
                "GET",
                "/partitions/{topic}/{partition}/segments",
                None,
                c(Describe),
            ),
            (
                "POST",
                "/partitions/{topic}/{partition}/segments/delete",
                None,
                c(Alter),
            ),
            ("GET", "/streams/{name}/records", Some("t1"), t(Read, "t1")),
            ("POST", "/streams/{name}/append", Some("t1"), t(Write, "t1")),
            // A method the route does not serve is never more than DESCRIBE.
            ("GET", "/streams/{name}/append", Some("t1"), c(Describe)),
        ];
        for (method, route, name, want) in cases {
            let m = Method::from_bytes(method.as_bytes()).unwrap();
            assert_eq!(required_access(&m, route, name), want, "{method} {route}");
        }
    }

    #[test]
    fn basic_headers_parse_strictly() {
        let h = |s: &str| HeaderValue::from_str(s).unwrap();
        let enc = |s: &str| format!("Basic {}", B64.encode(s));
        assert_eq!(
            parse_basic(&h(&enc("alice:pa:ss"))).unwrap(),
            ("alice".to_string(), "pa:ss".to_string())
        );
        assert_eq!(
            parse_basic(&h(&format!("basic {}", B64.encode("a:b")))).unwrap(),
            ("a".to_string(), "b".to_string())
        );
        for bad in [
            "Bearer abc".to_string(),
            "Basic".to_string(),
            "Basic !!!".to_string(),
            enc("nocolon"),
            enc(":pw"),
            enc("user:"),
            format!("Basic {}", "A".repeat(MAX_AUTHORIZATION_BYTES)),
        ] {
            assert!(parse_basic(&h(&bad)).is_err(), "{bad}");
        }
    }
}
