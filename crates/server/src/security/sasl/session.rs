//! [`SaslSession`]: the SASL state machine of one connection (handshake, tokens, KIP-368
//! session lifetime and re-authentication).

use std::time::{Duration, Instant};

use kafka_proto::api::ApiKey;

use super::plain::{check_plain, parse_plain, PlainError};
use super::{CredentialLookup, ScramError, ScramServer};
use crate::security::config::SaslMechanism;
use crate::security::Principal;

/// What to do with a request on a SASL connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Serve it as usual.
    Serve,
    /// A SaslHandshake or SaslAuthenticate: hand it to the session.
    Authenticate,
    /// Close the connection without an answer (not authenticated, or the session expired).
    Close,
}

/// The result of a SaslHandshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeOutcome {
    /// The mechanism is enabled: authentication tokens follow.
    Accepted,
    /// Not enabled here: UNSUPPORTED_SASL_MECHANISM, then the connection is closed.
    Unsupported,
    /// A handshake at this point is not allowed: ILLEGAL_SASL_STATE, then close.
    IllegalState,
}

/// The result of one authentication token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthStep {
    /// Send this challenge; another token follows.
    Challenge(Vec<u8>),
    /// Authenticated as `principal`: send `response` (the server's last message, maybe empty)
    /// with `session_lifetime_ms` (0: the session does not expire).
    Done {
        /// The server's final token.
        response: Vec<u8>,
        /// Who the client is from now on.
        principal: Principal,
        /// KIP-368 session lifetime (SaslAuthenticate v1+).
        session_lifetime_ms: i64,
    },
    /// Authentication failed: SASL_AUTHENTICATION_FAILED with this message, then (after the
    /// failed-authentication delay) close.
    Failed(String),
    /// A SaslAuthenticate without a handshake before it: ILLEGAL_SASL_STATE, then close.
    IllegalState,
}

#[derive(Debug)]
enum State {
    /// Waiting for SaslHandshake (initially, and between re-authentications).
    AwaitingHandshake,
    /// The handshake chose `mechanism`; the first token is next. `raw`: v0 handshake, tokens
    /// arrive as bare frames instead of SaslAuthenticate requests.
    AwaitingFirstToken {
        mechanism: SaslMechanism,
        raw: bool,
        /// Set when the re-authentication cannot succeed (the mechanism changed): the token
        /// gets this failure.
        doomed: Option<String>,
    },
    /// A SCRAM exchange after its first message.
    Scram { server: Box<ScramServer>, raw: bool },
    /// Authentication failed: nothing more is accepted.
    Failed,
}

#[derive(Debug, Clone)]
struct Session {
    principal: Principal,
    mechanism: SaslMechanism,
    expires_at: Option<Instant>,
}

/// The SASL state of one connection.
#[derive(Debug)]
pub struct SaslSession {
    enabled: Vec<SaslMechanism>,
    max_reauth: Option<Duration>,
    state: State,
    session: Option<Session>,
}

impl SaslSession {
    /// A connection on a listener enabling `enabled`, whose sessions last `max_reauth`.
    pub fn new(enabled: Vec<SaslMechanism>, max_reauth: Option<Duration>) -> SaslSession {
        SaslSession {
            enabled,
            max_reauth,
            state: State::AwaitingHandshake,
            session: None,
        }
    }

    /// The authenticated principal, once authenticated.
    pub fn principal(&self) -> Option<&Principal> {
        self.session.as_ref().map(|s| &s.principal)
    }

    /// Whether a client completed authentication (it may be re-authenticating now).
    pub fn is_authenticated(&self) -> bool {
        self.session.is_some()
    }

    /// Whether the next frame is a bare token (after a v0 SaslHandshake), not a request.
    pub fn expects_raw_token(&self) -> bool {
        matches!(
            self.state,
            State::AwaitingFirstToken { raw: true, .. } | State::Scram { raw: true, .. }
        )
    }

    /// Whether the session expired at `now` (KIP-368).
    pub fn expired(&self, now: Instant) -> bool {
        self.session
            .as_ref()
            .and_then(|s| s.expires_at)
            .is_some_and(|at| now >= at)
    }

    /// What to do with a request of `api` at `now`.
    pub fn gate(&self, api: ApiKey, now: Instant) -> Gate {
        match api {
            ApiKey::SaslHandshake | ApiKey::SaslAuthenticate => Gate::Authenticate,
            // Before authentication, and during a live session (an expired session's next
            // request other than a re-authentication closes the connection, as in Kafka).
            ApiKey::ApiVersions if !self.expired(now) => Gate::Serve,
            _ if self.session.is_some() && !self.expired(now) => Gate::Serve,
            _ => Gate::Close,
        }
    }

    /// Handles SaslHandshake for `mechanism` (request version `version`: 0 means the tokens
    /// then come as bare frames).
    pub fn handshake(&mut self, mechanism: &str, version: i16) -> HandshakeOutcome {
        if !matches!(self.state, State::AwaitingHandshake) {
            self.state = State::Failed;
            return HandshakeOutcome::IllegalState;
        }
        let Some(m) = self.enabled.iter().copied().find(|m| m.name() == mechanism) else {
            self.state = State::Failed;
            return HandshakeOutcome::Unsupported;
        };
        let doomed = match &self.session {
            Some(s) if s.mechanism != m => Some(format!(
                "SASL mechanism '{}' requested by client is not supported for re-authentication of mechanism '{}'",
                m.name(),
                s.mechanism.name()
            )),
            _ => None,
        };
        self.state = State::AwaitingFirstToken {
            mechanism: m,
            raw: version == 0,
            doomed,
        };
        HandshakeOutcome::Accepted
    }

    /// When the next token is a PLAIN message (the session awaits PLAIN's first token) and
    /// `token` is a well-formed one: its user name and password, so that the caller can check
    /// the password off its thread ([`crate::security::password`]) and hand the verdict to
    /// [`SaslSession::authenticate`] through [`CredentialLookup::password_matches`].
    pub fn plain_attempt(&self, token: &[u8]) -> Option<(String, String)> {
        match &self.state {
            State::AwaitingFirstToken {
                mechanism: SaslMechanism::Plain,
                doomed: None,
                ..
            } => parse_plain(token)
                .ok()
                .map(|(u, p)| (u.to_string(), p.to_string())),
            _ => None,
        }
    }

    /// The names of the enabled mechanisms, as SaslHandshake lists them.
    pub fn enabled_names(&self) -> Vec<String> {
        self.enabled.iter().map(|m| m.name().to_string()).collect()
    }

    /// Handles one authentication token at `now`.
    pub fn authenticate(
        &mut self,
        token: &[u8],
        lookup: &dyn CredentialLookup,
        now: Instant,
    ) -> AuthStep {
        let reauth = self.session.is_some();
        let state = std::mem::replace(&mut self.state, State::Failed);
        let step = match state {
            State::AwaitingHandshake | State::Failed => return AuthStep::IllegalState,
            State::AwaitingFirstToken {
                doomed: Some(why), ..
            } => Err(why),
            State::AwaitingFirstToken {
                mechanism: SaslMechanism::Plain,
                ..
            } => match check_plain(token, lookup) {
                Ok(user) => Ok((SaslMechanism::Plain, Principal::user(user), Vec::new())),
                Err(PlainError::Malformed(why)) => Err(generic_failure(reauth, "PLAIN", &why)),
                Err(PlainError::Refused(msg)) => Err(msg),
            },
            State::AwaitingFirstToken {
                mechanism: SaslMechanism::Scram(m),
                raw,
                ..
            } => match ScramServer::first(m, token, lookup) {
                Ok((server, challenge)) => {
                    self.state = State::Scram {
                        server: Box::new(server),
                        raw,
                    };
                    return AuthStep::Challenge(challenge);
                }
                Err(ScramError::Refused(msg)) => Err(msg),
                Err(ScramError::Invalid(why)) => Err(generic_failure(reauth, m.sasl_name(), &why)),
            },
            State::Scram { server, .. } => {
                let m = server.mechanism;
                match server.last(token) {
                    Ok((user, response)) => {
                        Ok((SaslMechanism::Scram(m), Principal::user(user), response))
                    }
                    Err(ScramError::Refused(msg)) => Err(msg),
                    Err(ScramError::Invalid(why)) => {
                        Err(generic_failure(reauth, m.sasl_name(), &why))
                    }
                }
            }
        };
        match step {
            Err(message) => AuthStep::Failed(message),
            Ok((mechanism, principal, response)) => {
                if let Some(old) = &self.session {
                    if old.principal != principal {
                        return AuthStep::Failed(format!(
                            "Cannot change principals during re-authentication from {}: {}",
                            old.principal, principal
                        ));
                    }
                }
                self.state = State::AwaitingHandshake;
                let lifetime = self.max_reauth;
                self.session = Some(Session {
                    principal: principal.clone(),
                    mechanism,
                    expires_at: lifetime.map(|d| now + d),
                });
                AuthStep::Done {
                    response,
                    principal,
                    session_lifetime_ms: lifetime
                        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
                }
            }
        }
    }
}

/// Kafka's message for a SaslException (malformed exchange, wrong proof, unknown user): the
/// detail is logged, never sent.
fn generic_failure(reauth: bool, mechanism: &str, detail: &str) -> String {
    tracing::debug!("SASL {mechanism} authentication failed: {detail}");
    format!(
        "Authentication failed during {} due to invalid credentials with SASL mechanism {mechanism}",
        if reauth {
            "re-authentication"
        } else {
            "authentication"
        }
    )
}
