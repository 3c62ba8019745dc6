//! SASL authentication of a Kafka connection, as Kafka's `SaslServerAuthenticator` does it:
//! a state machine fed with SaslHandshake and SaslAuthenticate requests (or, after a v0
//! handshake, raw tokens), with no I/O of its own.
//!
//! - Before authentication only ApiVersions, SaslHandshake and SaslAuthenticate are served;
//!   any other request closes the connection ([`SaslSession::gate`]).
//! - Mechanisms: `PLAIN` (RFC 4616) and `SCRAM-SHA-256` / `SCRAM-SHA-512` (RFC 5802/7677,
//!   server side, [`ScramServer`]). PLAIN checks the password against the user's SCRAM
//!   credentials ([`crate::security::password`]: it must match every credential the user has;
//!   an unknown user costs the same derivations; the Kafka listener runs the check off its
//!   threads), so a user has one secret for both (no password is stored anywhere).
//! - A failure answers SASL_AUTHENTICATION_FAILED with Kafka's message; the caller delays that
//!   answer and closes the connection.
//! - KIP-368: with `connections_max_reauth` set, a session lasts that long
//!   (`session_lifetime_ms` in SaslAuthenticate v1+); the first request other than a
//!   re-authentication after it expires closes the connection. A SaslHandshake on an
//!   authenticated connection starts a re-authentication, which must keep the mechanism and
//!   the principal.

use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use kafka_proto::api::ApiKey;

use crate::security::config::SaslMechanism;
use crate::security::scram::{ScramCredential, ScramMechanism};
use crate::security::Principal;

/// Largest SCRAM or PLAIN token a session accepts (the request holding it is also bounded
/// before it is read, by `security.sasl_max_receive_bytes`).
pub const MAX_TOKEN_BYTES: usize = 64 * 1024;

/// Finds the SCRAM credential of a user for a mechanism.
pub trait CredentialLookup {
    /// The credential of `user` for `mechanism`, if there is one.
    fn credential(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential>;

    /// Whether `password` is `user`'s (PLAIN): the rules of
    /// [`crate::security::password`] (every credential of the user must match; equal work for
    /// unknown users). The default derives here, blocking; the Kafka listener answers with a
    /// verdict computed beforehand off the runtime threads ([`SaslSession::plain_attempt`]).
    fn password_matches(&self, user: &str, password: &str) -> bool {
        let plan = crate::security::password::plan(
            self.credential(user, ScramMechanism::Sha256),
            self.credential(user, ScramMechanism::Sha512),
        );
        crate::security::password::check_blocking(&plan, password)
    }
}

impl<F: Fn(&str, ScramMechanism) -> Option<ScramCredential>> CredentialLookup for F {
    fn credential(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
        self(user, mechanism)
    }
}

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

/// Compares two byte strings in time independent of where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

enum PlainError {
    /// Not a PLAIN message (Kafka's SaslException: the generic message).
    Malformed(String),
    /// Kafka's SaslAuthenticationException: this message is sent.
    Refused(String),
}

/// Checks a PLAIN message `authzid NUL authcid NUL password` and returns the user name.
fn check_plain(token: &[u8], lookup: &dyn CredentialLookup) -> Result<String, PlainError> {
    let (user, password) = parse_plain(token)?;
    if lookup.password_matches(user, password) {
        Ok(user.to_string())
    } else {
        Err(PlainError::Refused(
            "Authentication failed: Invalid username or password".into(),
        ))
    }
}

/// The user name and password of a well-formed PLAIN message (the refusals Kafka sends for
/// the others).
fn parse_plain(token: &[u8]) -> Result<(&str, &str), PlainError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(PlainError::Malformed("token too large".into()));
    }
    let text = std::str::from_utf8(token)
        .map_err(|_| PlainError::Malformed("the PLAIN message is not UTF-8".into()))?;
    let parts: Vec<&str> = text.split('\0').collect();
    let [authzid, user, password] = parts[..] else {
        return Err(PlainError::Malformed(format!(
            "Invalid SASL/PLAIN response: expected 3 tokens, got {}",
            parts.len()
        )));
    };
    if user.is_empty() {
        return Err(PlainError::Refused(
            "Authentication failed: username not specified".into(),
        ));
    }
    if password.is_empty() {
        return Err(PlainError::Refused(
            "Authentication failed: password not specified".into(),
        ));
    }
    if !authzid.is_empty() && authzid != user {
        return Err(PlainError::Refused(
            "Authentication failed: Client requested an authorization id that is different from username".into(),
        ));
    }
    Ok((user, password))
}

/// Why a SCRAM exchange failed.
#[derive(Debug)]
pub enum ScramError {
    /// Malformed messages, unknown user, wrong proof: Kafka's generic failure (the detail is
    /// for logs only).
    Invalid(String),
    /// A refusal whose message Kafka sends as is.
    Refused(String),
}

/// The server side of one SCRAM exchange (RFC 5802 as Kafka's `ScramSaslServer` runs it),
/// after the client's first message.
#[derive(Debug)]
pub struct ScramServer {
    mechanism: ScramMechanism,
    user: String,
    credential: ScramCredential,
    gs2_header: String,
    nonce: String,
    client_first_bare: String,
    server_first: String,
}

/// `saslname` of RFC 5802: `=2C` is `,`, `=3D` is `=`, any other `=` is invalid.
fn decode_saslname(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i + 1..i + 3) {
            Some("2C") => out.push(','),
            Some("3D") => out.push('='),
            _ => return None,
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}

fn valid_nonce(n: &str) -> bool {
    !n.is_empty() && n.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

impl ScramServer {
    /// Reads the client's first message (`gs2-header client-first-bare`) and answers the
    /// server's first message (`r=nonce,s=salt,i=iterations`).
    pub fn first(
        mechanism: ScramMechanism,
        token: &[u8],
        lookup: &dyn CredentialLookup,
    ) -> Result<(ScramServer, Vec<u8>), ScramError> {
        let invalid = |why: &str| ScramError::Invalid(why.to_string());
        if token.len() > MAX_TOKEN_BYTES {
            return Err(invalid("client first message too large"));
        }
        let text = std::str::from_utf8(token).map_err(|_| invalid("not UTF-8"))?;
        // gs2-header: ("n" | "y") "," [ "a=" authzid ] ","; channel binding ("p=") is not
        // offered, as in Kafka.
        let (cbind, rest) = text
            .split_once(',')
            .ok_or_else(|| invalid("no gs2 header"))?;
        if cbind != "n" && cbind != "y" {
            return Err(invalid("channel binding is not supported"));
        }
        let (authz, bare) = rest
            .split_once(',')
            .ok_or_else(|| invalid("no gs2 header"))?;
        let authzid = match authz {
            "" => None,
            a => Some(
                a.strip_prefix("a=")
                    .and_then(decode_saslname)
                    .ok_or_else(|| invalid("bad authzid"))?,
            ),
        };
        let gs2_header = format!("{cbind},{authz},");
        let mut fields = bare.split(',');
        let user = fields
            .next()
            .and_then(|f| f.strip_prefix("n="))
            .and_then(decode_saslname)
            .filter(|u| !u.is_empty())
            .ok_or_else(|| invalid("bad user name"))?;
        let client_nonce = fields
            .next()
            .and_then(|f| f.strip_prefix("r="))
            .filter(|n| valid_nonce(n))
            .ok_or_else(|| invalid("bad nonce"))?;
        for ext in fields {
            let (key, value) = ext
                .split_once('=')
                .ok_or_else(|| invalid("bad extension"))?;
            if key == "tokenauth" && value.eq_ignore_ascii_case("true") {
                return Err(invalid("delegation tokens are not supported"));
            }
        }
        if let Some(a) = authzid {
            if a != user {
                return Err(ScramError::Refused(
                    "Authentication failed: Client requested an authorization id that is different from username".into(),
                ));
            }
        }
        let credential = lookup
            .credential(&user, mechanism)
            .ok_or_else(|| invalid("unknown user"))?;
        // Alphanumeric, as Kafka's: some clients (librdkafka) mis-read a nonce with `=`.
        let mut server_nonce = [0u8; 24];
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut server_nonce);
        let server_nonce: String = server_nonce.iter().map(|b| format!("{b:02x}")).collect();
        let nonce = format!("{client_nonce}{server_nonce}");
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(&credential.salt),
            credential.iterations
        );
        let challenge = server_first.clone().into_bytes();
        Ok((
            ScramServer {
                mechanism,
                user,
                credential,
                gs2_header,
                nonce,
                client_first_bare: bare.to_string(),
                server_first,
            },
            challenge,
        ))
    }

    /// Reads the client's final message (`c=...,r=...,p=proof`), checks the proof and answers
    /// the server's final message (`v=signature`) with the user name.
    pub fn last(self, token: &[u8]) -> Result<(String, Vec<u8>), ScramError> {
        let invalid = |why: &str| ScramError::Invalid(why.to_string());
        if token.len() > MAX_TOKEN_BYTES {
            return Err(invalid("client final message too large"));
        }
        let text = std::str::from_utf8(token).map_err(|_| invalid("not UTF-8"))?;
        let (without_proof, proof) = text.rsplit_once(",p=").ok_or_else(|| invalid("no proof"))?;
        let mut fields = without_proof.split(',');
        let channel = fields
            .next()
            .and_then(|f| f.strip_prefix("c="))
            .ok_or_else(|| invalid("no channel binding"))?;
        if B64.decode(channel).ok().as_deref() != Some(self.gs2_header.as_bytes()) {
            return Err(invalid("channel binding does not match the gs2 header"));
        }
        let nonce = fields
            .next()
            .and_then(|f| f.strip_prefix("r="))
            .ok_or_else(|| invalid("no nonce"))?;
        // Kafka checks that the nonce *ends with* the server's (client nonce + server
        // nonce), not that it equals it: librdkafka sends the client nonce once more in
        // front, and Kafka accepts it, so must we.
        if !nonce.ends_with(&self.nonce) {
            return Err(invalid("Invalid client nonce in the final client message."));
        }
        let proof = B64
            .decode(proof)
            .map_err(|_| invalid("proof is not base64"))?;
        let m = self.mechanism;
        if proof.len() != m.hash_len() {
            return Err(invalid("proof of the wrong length"));
        }
        let auth_message = format!(
            "{},{},{without_proof}",
            self.client_first_bare, self.server_first
        );
        let signature = m.hmac(&self.credential.stored_key, auth_message.as_bytes());
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
        if !constant_time_eq(&m.hash(&client_key), &self.credential.stored_key) {
            return Err(invalid("Invalid client credentials"));
        }
        let server_signature = m.hmac(&self.credential.server_key, auth_message.as_bytes());
        Ok((
            self.user,
            format!("v={}", B64.encode(server_signature)).into_bytes(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A SCRAM client, as RFC 5802 describes it, for the tests.
    fn client_final(
        m: ScramMechanism,
        password: &str,
        client_first_bare: &str,
        server_first: &str,
    ) -> (String, Vec<u8>) {
        let mut salt = None;
        let mut iterations = 0;
        let mut nonce = "";
        for f in server_first.split(',') {
            if let Some(v) = f.strip_prefix("s=") {
                salt = Some(B64.decode(v).unwrap());
            } else if let Some(v) = f.strip_prefix("i=") {
                iterations = v.parse().unwrap();
            } else if let Some(v) = f.strip_prefix("r=") {
                nonce = v;
            }
        }
        let salted = m.salted_password(password.as_bytes(), &salt.unwrap(), iterations);
        let client_key = m.hmac(&salted, b"Client Key");
        let stored_key = m.hash(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{client_first_bare},{server_first},{without_proof}");
        let sig = m.hmac(&stored_key, auth.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&sig).map(|(a, b)| a ^ b).collect();
        let server_key = m.hmac(&salted, b"Server Key");
        let expected_v = m.hmac(&server_key, auth.as_bytes());
        (
            format!("{without_proof},p={}", B64.encode(proof)),
            expected_v,
        )
    }

    fn users() -> impl Fn(&str, ScramMechanism) -> Option<ScramCredential> {
        let creds: Vec<(String, ScramCredential)> = ScramMechanism::ALL
            .into_iter()
            .map(|m| {
                (
                    "alice".to_string(),
                    ScramCredential::generate(m, "wonderland", 4096),
                )
            })
            .collect();
        move |user, m| {
            creds
                .iter()
                .find(|(u, c)| u == user && c.mechanism == m)
                .map(|(_, c)| c.clone())
        }
    }

    fn scram_session() -> SaslSession {
        SaslSession::new(
            vec![
                SaslMechanism::Scram(ScramMechanism::Sha256),
                SaslMechanism::Scram(ScramMechanism::Sha512),
                SaslMechanism::Plain,
            ],
            Some(Duration::from_secs(60)),
        )
    }

    fn scram_login(
        s: &mut SaslSession,
        lookup: &dyn CredentialLookup,
        m: ScramMechanism,
        password: &str,
        now: Instant,
    ) -> AuthStep {
        assert_eq!(s.handshake(m.sasl_name(), 1), HandshakeOutcome::Accepted);
        let first_bare = "n=alice,r=fyko+d2lbbFgONRv9qkxdawL";
        let AuthStep::Challenge(server_first) =
            s.authenticate(format!("n,,{first_bare}").as_bytes(), lookup, now)
        else {
            panic!("no challenge");
        };
        let server_first = String::from_utf8(server_first).unwrap();
        assert!(server_first.starts_with("r=fyko+d2lbbFgONRv9qkxdawL"));
        let (last, expected_v) = client_final(m, password, first_bare, &server_first);
        let step = s.authenticate(last.as_bytes(), lookup, now);
        if let AuthStep::Done { response, .. } = &step {
            assert_eq!(
                response,
                format!("v={}", B64.encode(expected_v)).as_bytes(),
                "server signature"
            );
        }
        step
    }

    #[test]
    fn scram_exchange_authenticates_with_both_hashes() {
        let lookup = users();
        for m in ScramMechanism::ALL {
            let mut s = scram_session();
            let now = Instant::now();
            assert_eq!(s.gate(ApiKey::Metadata, now), Gate::Close);
            assert_eq!(s.gate(ApiKey::ApiVersions, now), Gate::Serve);
            match scram_login(&mut s, &lookup, m, "wonderland", now) {
                AuthStep::Done {
                    principal,
                    session_lifetime_ms,
                    ..
                } => {
                    assert_eq!(principal.to_string(), "User:alice");
                    assert_eq!(session_lifetime_ms, 60_000);
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(s.gate(ApiKey::Produce, now), Gate::Serve);
            // KIP-368: after the lifetime, the next request closes the connection unless it
            // re-authenticates; re-authentication renews the session.
            let later = now + Duration::from_secs(61);
            assert_eq!(s.gate(ApiKey::Produce, later), Gate::Close);
            assert_eq!(s.gate(ApiKey::SaslHandshake, later), Gate::Authenticate);
            assert!(matches!(
                scram_login(&mut s, &lookup, m, "wonderland", later),
                AuthStep::Done { .. }
            ));
            assert_eq!(s.gate(ApiKey::Produce, later), Gate::Serve);
        }
    }

    #[test]
    fn scram_refuses_wrong_password_unknown_user_and_bad_messages() {
        let lookup = users();
        let now = Instant::now();
        let mut s = scram_session();
        match scram_login(&mut s, &lookup, ScramMechanism::Sha512, "wrong", now) {
            AuthStep::Failed(msg) => assert_eq!(
                msg,
                "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"
            ),
            other => panic!("{other:?}"),
        }
        // Nothing more is accepted after a failure.
        assert_eq!(
            s.authenticate(b"n,,n=alice,r=x", &lookup, now),
            AuthStep::IllegalState
        );
        assert_eq!(s.gate(ApiKey::Metadata, now), Gate::Close);
        for first in [
            &b"n,,n=bob,r=abc"[..],         // unknown user
            b"p=tls-unique,,n=alice,r=abc", // channel binding
            b"n,,n=al=ZZice,r=abc",         // bad saslname escape
            b"n,,r=abc",                    // no user
            b"n,,n=alice,r=a,tokenauth=true",
            b"\xff\xfe",
        ] {
            let mut s = scram_session();
            s.handshake("SCRAM-SHA-256", 1);
            assert!(
                matches!(s.authenticate(first, &lookup, now), AuthStep::Failed(_)),
                "{first:?}"
            );
        }
        let mut s = scram_session();
        s.handshake("SCRAM-SHA-256", 1);
        assert_eq!(
            s.authenticate(b"n,a=mallory,n=alice,r=abc", &lookup, now),
            AuthStep::Failed(
                "Authentication failed: Client requested an authorization id that is different from username".into()
            )
        );
        // A final message with another nonce is refused.
        let mut s = scram_session();
        s.handshake("SCRAM-SHA-256", 1);
        assert!(matches!(
            s.authenticate(b"n,,n=alice,r=abc", &lookup, now),
            AuthStep::Challenge(_)
        ));
        assert!(matches!(
            s.authenticate(b"c=biws,r=abcOTHER,p=AAAA", &lookup, now),
            AuthStep::Failed(_)
        ));
    }

    /// librdkafka puts its client nonce in front of the whole nonce in its final message;
    /// Kafka only checks that the nonce ends with the server's, and so does this server.
    #[test]
    fn scram_accepts_librdkafkas_final_nonce() {
        let lookup = users();
        let m = ScramMechanism::Sha256;
        let mut s = scram_session();
        s.handshake(m.sasl_name(), 1);
        let first_bare = "n=alice,r=cnonce";
        let AuthStep::Challenge(server_first) = s.authenticate(
            format!("n,,{first_bare}").as_bytes(),
            &lookup,
            Instant::now(),
        ) else {
            panic!("no challenge");
        };
        let server_first = String::from_utf8(server_first).unwrap();
        let full_nonce = server_first
            .split(',')
            .next()
            .unwrap()
            .trim_start_matches("r=");
        let nonce = format!("cnonce{full_nonce}");
        let salted = m.salted_password(
            b"wonderland",
            &lookup("alice", m).unwrap().salt,
            lookup("alice", m).unwrap().iterations,
        );
        let client_key = m.hmac(&salted, b"Client Key");
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{first_bare},{server_first},{without_proof}");
        let sig = m.hmac(&m.hash(&client_key), auth.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&sig).map(|(a, b)| a ^ b).collect();
        let last = format!("{without_proof},p={}", B64.encode(proof));
        assert!(matches!(
            s.authenticate(last.as_bytes(), &lookup, Instant::now()),
            AuthStep::Done { .. }
        ));
    }

    #[test]
    fn plain_checks_the_password_against_the_scram_credential() {
        let lookup = users();
        let now = Instant::now();
        let mut s = scram_session();
        assert_eq!(s.handshake("PLAIN", 1), HandshakeOutcome::Accepted);
        assert!(matches!(
            s.authenticate(b"\0alice\0wonderland", &lookup, now),
            AuthStep::Done { .. }
        ));
        assert_eq!(s.principal().unwrap().to_string(), "User:alice");
        for (token, msg) in [
            (
                &b"\0alice\0nope"[..],
                "Authentication failed: Invalid username or password",
            ),
            (
                b"\0bob\0wonderland",
                "Authentication failed: Invalid username or password",
            ),
            (
                b"bob\0alice\0wonderland",
                "Authentication failed: Client requested an authorization id that is different from username",
            ),
            (
                b"alice-wonderland",
                "Authentication failed during authentication due to invalid credentials with SASL mechanism PLAIN",
            ),
        ] {
            let mut s = scram_session();
            s.handshake("PLAIN", 1);
            assert_eq!(
                s.authenticate(token, &lookup, now),
                AuthStep::Failed(msg.into())
            );
        }
    }

    #[test]
    fn handshakes_and_states_follow_kafka() {
        let lookup = users();
        let now = Instant::now();
        let mut s = SaslSession::new(vec![SaslMechanism::Plain], None);
        assert_eq!(
            s.authenticate(b"\0alice\0wonderland", &lookup, now),
            AuthStep::IllegalState
        );
        let mut s = SaslSession::new(vec![SaslMechanism::Plain], None);
        assert_eq!(
            s.handshake("SCRAM-SHA-256", 1),
            HandshakeOutcome::Unsupported
        );
        let mut s = SaslSession::new(vec![SaslMechanism::Plain], None);
        assert_eq!(s.handshake("PLAIN", 0), HandshakeOutcome::Accepted);
        assert!(s.expects_raw_token());
        assert_eq!(s.handshake("PLAIN", 1), HandshakeOutcome::IllegalState);
        // Without connections_max_reauth the session never expires; the lifetime is 0.
        let mut s = SaslSession::new(vec![SaslMechanism::Plain], None);
        s.handshake("PLAIN", 1);
        match s.authenticate(b"\0alice\0wonderland", &lookup, now) {
            AuthStep::Done {
                session_lifetime_ms,
                ..
            } => assert_eq!(session_lifetime_ms, 0),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            s.gate(ApiKey::Fetch, now + Duration::from_secs(86_400)),
            Gate::Serve
        );
        // Re-authentication may not change the mechanism.
        let mut s = scram_session();
        s.handshake("PLAIN", 1);
        s.authenticate(b"\0alice\0wonderland", &lookup, now);
        assert_eq!(s.handshake("SCRAM-SHA-256", 1), HandshakeOutcome::Accepted);
        assert!(matches!(
            s.authenticate(b"n,,n=alice,r=abc", &lookup, now),
            AuthStep::Failed(_)
        ));
    }

    #[test]
    fn oversized_tokens_are_refused_without_parsing() {
        let lookup = users();
        let big = vec![b'a'; MAX_TOKEN_BYTES + 1];
        for mech in ["PLAIN", "SCRAM-SHA-512"] {
            let mut s = scram_session();
            s.handshake(mech, 1);
            assert!(matches!(
                s.authenticate(&big, &lookup, Instant::now()),
                AuthStep::Failed(_)
            ));
        }
    }
}
