//! The record of the one-time import of the bootstrap SCRAM users into the metadata
//! (`MetaCommand::ImportScramUsers`; the import itself is `crate::node::bootstrap_users`):
//! the credentials as the command carries them, and how applying it adds them to the
//! replicated credentials. Plain data over [`crate::security::scram`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::security::scram::{ScramCredential, ScramMechanism, MAX_CREDENTIALS};

/// One bootstrap credential in `MetaCommand::ImportScramUsers`: as `UpsertScramCredential`
/// carries it (salt, iterations and derived keys, never a password).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportedCredential {
    /// The user name.
    pub user: String,
    /// Kafka's mechanism type (1: SCRAM-SHA-256, 2: SCRAM-SHA-512); an unknown one is skipped.
    pub mechanism: i8,
    /// The salt.
    pub salt: Vec<u8>,
    /// PBKDF2 iterations.
    pub iterations: u32,
    /// `H(ClientKey)`.
    pub stored_key: Vec<u8>,
    /// `HMAC(SaltedPassword, "Server Key")`.
    pub server_key: Vec<u8>,
}

/// Adds each of `credentials` whose user and mechanism has no credential in `stored` yet
/// (an unknown mechanism, an empty user name or one beyond [`MAX_CREDENTIALS`] is skipped);
/// returns how many were added.
pub fn apply_import(
    stored: &mut BTreeMap<(String, ScramMechanism), ScramCredential>,
    credentials: Vec<ImportedCredential>,
) -> usize {
    let mut added = 0;
    for c in credentials {
        let Some(mechanism) = ScramMechanism::from_kafka_type(c.mechanism) else {
            continue;
        };
        if c.user.is_empty() || stored.len() >= MAX_CREDENTIALS {
            continue;
        }
        let key = (c.user, mechanism);
        if stored.contains_key(&key) {
            continue;
        }
        stored.insert(
            key,
            ScramCredential {
                mechanism,
                salt: c.salt,
                iterations: c.iterations,
                stored_key: c.stored_key,
                server_key: c.server_key,
            },
        );
        added += 1;
    }
    added
}
