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
//!
//! Files: this one (what a session needs from outside: credentials, token bound, constant-time
//! comparison), `session.rs` (the per-connection state machine, [`SaslSession`]), `plain.rs`
//! (PLAIN messages) and `scram_server.rs` (the server side of SCRAM, [`ScramServer`]).

mod plain;
mod scram_server;
mod session;
#[cfg(test)]
mod tests;

use crate::security::scram::{ScramCredential, ScramMechanism};

pub use scram_server::{ScramError, ScramServer};
pub use session::{AuthStep, Gate, HandshakeOutcome, SaslSession};

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

/// Compares two byte strings in time independent of where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
