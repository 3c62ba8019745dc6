//! SASL on a Kafka connection: SaslHandshake and SaslAuthenticate answered through the
//! connection's [`crate::security::sasl::SaslSession`], PLAIN passwords checked off the
//! runtime threads, a failure answered after the configured delay and the connection closed.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::{Request, Response};
use kafka_proto::header::RequestHeader;
use kafka_proto::messages::sasl_authenticate_response::SaslAuthenticateResponse;
use kafka_proto::messages::sasl_handshake_response::SaslHandshakeResponse;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::frames::write_segments;
use super::requests::ConnState;
use super::ConnectionEnd;
use crate::kafka::host::ConnectionHost;
use crate::kafka::reply;
use crate::security::sasl::{AuthStep, HandshakeOutcome};

/// What the SASL layer decided about one frame.
pub(super) enum SaslOutcome {
    /// Answer these bytes (already framed) and go on.
    Answer(Vec<Bytes>),
    /// Answer these bytes after the failed-authentication delay, then close.
    Fail(Vec<Bytes>),
    /// Close at once, without an answer.
    Close,
}

/// Writes what the SASL layer decided: an answer, or (after the delay) a failure and the end
/// of the connection.
pub(super) async fn finish_sasl<W: AsyncWrite + Unpin, H: ConnectionHost>(
    node: &H,
    outcome: SaslOutcome,
    writer: &mut W,
    write_timeout: Duration,
) -> Result<(), ConnectionEnd> {
    match outcome {
        SaslOutcome::Answer(segments) => {
            write_segments(writer, &segments, write_timeout).await?;
            Ok(())
        }
        SaslOutcome::Fail(segments) => {
            tokio::time::sleep(node.config().security.failed_authentication_delay).await;
            write_segments(writer, &segments, write_timeout).await?;
            let _ = writer.flush().await;
            let _ = writer.shutdown().await;
            Err(ConnectionEnd::AuthenticationFailed)
        }
        SaslOutcome::Close => Err(ConnectionEnd::AuthenticationFailed),
    }
}

fn encoded(header: &RequestHeader, response: Response) -> Option<Vec<Bytes>> {
    reply::frame(header.correlation_id, header.api_version, &response)
}

/// SaslHandshake / SaslAuthenticate on a listener without SASL.
pub(super) fn sasl_not_enabled(
    header: &RequestHeader,
    api: kafka_proto::api::ApiKey,
) -> SaslOutcome {
    let response = if api == kafka_proto::api::ApiKey::SaslHandshake {
        Response::SaslHandshake(SaslHandshakeResponse {
            error_code: ErrorCode::IllegalSaslState.code(),
            mechanisms: Vec::new(),
        })
    } else {
        Response::SaslAuthenticate(SaslAuthenticateResponse {
            error_code: ErrorCode::IllegalSaslState.code(),
            error_message: Some("SASL is not enabled on this listener".into()),
            ..Default::default()
        })
    };
    encoded(header, response).map_or(SaslOutcome::Close, SaslOutcome::Fail)
}

/// Records a completed authentication on the connection.
fn authenticated<H: ConnectionHost>(
    node: &H,
    state: &mut ConnState,
    principal: crate::security::Principal,
    reauth: bool,
) {
    node.security_stats().authenticated(reauth);
    tracing::debug!(peer = %state.conn.peer, %principal, reauth, "SASL authentication succeeded");
    state.conn.principal = principal;
    state.auth_deadline = None;
    state
        .frame_limit
        .store(node.config().kafka.request_max_bytes, Ordering::Relaxed);
}

/// When `token` is a PLAIN message the session expects: whether its password is the user's,
/// checked off the runtime threads through the process-wide gate
/// ([`ConnectionHost::verify_password`]; a full gate refuses the login).
pub(super) async fn plain_verdict<H: ConnectionHost>(
    node: &H,
    state: &ConnState,
    token: &[u8],
) -> Option<bool> {
    let (user, password) = state.sasl.as_ref()?.plain_attempt(token)?;
    match node.verify_password(&user, password).await {
        Ok(ok) => Some(ok),
        Err(e) => {
            tracing::warn!(peer = %state.conn.peer, "PLAIN login refused: {e}");
            Some(false)
        }
    }
}

/// The credentials of `node`, with a PLAIN verdict computed beforehand ([`plain_verdict`]).
struct NodeLookup<'a, H> {
    node: &'a H,
    plain: Option<bool>,
}

impl<H: ConnectionHost> crate::security::sasl::CredentialLookup for NodeLookup<'_, H> {
    fn credential(
        &self,
        user: &str,
        mechanism: crate::security::scram::ScramMechanism,
    ) -> Option<crate::security::scram::ScramCredential> {
        self.node.scram_credential(user, mechanism)
    }

    fn password_matches(&self, _user: &str, _password: &str) -> bool {
        // Never derive here (on a runtime thread): no verdict means refused.
        self.plain.unwrap_or(false)
    }
}

/// Handles SaslHandshake or SaslAuthenticate on a SASL listener.
pub(super) fn authenticate<H: ConnectionHost>(
    node: &H,
    state: &mut ConnState,
    header: &RequestHeader,
    request: Request,
    plain: Option<bool>,
) -> SaslOutcome {
    let Some(sasl) = state.sasl.as_mut() else {
        return SaslOutcome::Close;
    };
    match request {
        Request::SaslHandshake(req) => {
            let outcome = sasl.handshake(&req.mechanism, header.api_version);
            let error_code = match outcome {
                HandshakeOutcome::Accepted => ErrorCode::None,
                HandshakeOutcome::Unsupported => ErrorCode::UnsupportedSaslMechanism,
                HandshakeOutcome::IllegalState => ErrorCode::IllegalSaslState,
            };
            let response = Response::SaslHandshake(SaslHandshakeResponse {
                error_code: error_code.code(),
                mechanisms: sasl.enabled_names(),
            });
            match (encoded(header, response), outcome) {
                (Some(s), HandshakeOutcome::Accepted) => SaslOutcome::Answer(s),
                (Some(s), _) => {
                    node.security_stats().authentication_failed();
                    SaslOutcome::Fail(s)
                }
                (None, _) => SaslOutcome::Close,
            }
        }
        Request::SaslAuthenticate(req) => {
            let lookup = NodeLookup { node, plain };
            let reauth = sasl.is_authenticated();
            let step = sasl.authenticate(&req.auth_bytes, &lookup, Instant::now());
            let mut response = SaslAuthenticateResponse::default();
            let fail = match step {
                AuthStep::Challenge(bytes) => {
                    response.auth_bytes = Bytes::from(bytes);
                    false
                }
                AuthStep::Done {
                    response: bytes,
                    principal,
                    session_lifetime_ms,
                } => {
                    response.auth_bytes = Bytes::from(bytes);
                    response.session_lifetime_ms = session_lifetime_ms;
                    authenticated(node, state, principal, reauth);
                    false
                }
                AuthStep::Failed(message) => {
                    response.error_code = ErrorCode::SaslAuthenticationFailed.code();
                    response.error_message = Some(message);
                    true
                }
                AuthStep::IllegalState => {
                    response.error_code = ErrorCode::IllegalSaslState.code();
                    response.error_message = Some(
                        "Unexpected SaslAuthenticate request: no SaslHandshake before it".into(),
                    );
                    true
                }
            };
            match encoded(header, Response::SaslAuthenticate(response)) {
                Some(s) if fail => {
                    node.security_stats().authentication_failed();
                    SaslOutcome::Fail(s)
                }
                Some(s) => SaslOutcome::Answer(s),
                None => SaslOutcome::Close,
            }
        }
        _ => SaslOutcome::Close,
    }
}

/// Handles a bare token after a v0 SaslHandshake: the answer is a bare length-prefixed token;
/// a failure closes the connection without an answer (there is no error field), after the
/// delay.
pub(super) fn raw_token<H: ConnectionHost>(
    node: &H,
    state: &mut ConnState,
    token: &[u8],
    plain: Option<bool>,
) -> SaslOutcome {
    let Some(sasl) = state.sasl.as_mut() else {
        return SaslOutcome::Close;
    };
    let lookup = NodeLookup { node, plain };
    let reauth = sasl.is_authenticated();
    let bare = |bytes: Vec<u8>| {
        let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
        vec![
            Bytes::copy_from_slice(&len.to_be_bytes()),
            Bytes::from(bytes),
        ]
    };
    match sasl.authenticate(token, &lookup, Instant::now()) {
        AuthStep::Challenge(bytes) => SaslOutcome::Answer(bare(bytes)),
        AuthStep::Done {
            response,
            principal,
            ..
        } => {
            authenticated(node, state, principal, reauth);
            SaslOutcome::Answer(bare(response))
        }
        AuthStep::Failed(_) | AuthStep::IllegalState => {
            node.security_stats().authentication_failed();
            SaslOutcome::Fail(Vec::new())
        }
    }
}
