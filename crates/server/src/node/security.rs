//! A node's security state: SCRAM credential look-ups, the authorizer, authentication
//! counters, and whether the ACLs are current after start.

use std::sync::Arc;

use super::Node;
use crate::security::password::{PasswordChecker, PasswordError};
use crate::security::scram::{ScramCredential, ScramMechanism};

impl Node {
    /// The SCRAM credential of `user` for `mechanism`: the replicated one (set with
    /// AlterUserScramCredentials, e.g. `kafka-configs.sh --entity-type users`, or imported
    /// from the bootstrap users); until the bootstrap users were imported, else the configured
    /// one (`[[security.scram_users]]`, see [`super::bootstrap_users`]).
    pub fn scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Option<ScramCredential> {
        super::bootstrap_users::credential(self, user, mechanism)
    }

    /// Checks `user`'s `password` against this node's credentials for the user (replicated,
    /// else bootstrap: [`Node::scram_credential`]) through the process-wide gate
    /// ([`PasswordChecker::global`]: bounded, off the runtime threads, equal cost for unknown
    /// users): what SASL PLAIN and the admin API's Basic authentication use.
    pub async fn verify_password(
        &self,
        user: &str,
        password: String,
    ) -> Result<bool, PasswordError> {
        let sha256 = self.scram_credential(user, ScramMechanism::Sha256);
        let sha512 = self.scram_credential(user, ScramMechanism::Sha512);
        PasswordChecker::global()
            .verify(sha256, sha512, password)
            .await
    }

    /// Authentication counters of the Kafka listeners.
    pub fn security_stats(&self) -> &crate::security::stats::SecurityStats {
        &self.security_stats
    }

    /// The same counters, shared (for the connection limits).
    pub fn security_stats_arc(&self) -> Arc<crate::security::stats::SecurityStats> {
        self.security_stats.clone()
    }

    /// Whether this node's ACLs are known to be current: its metadata is
    /// ([`Node::metadata_current`]), so every ACL change committed before the start (also ones
    /// this node had not heard were committed when it stopped) is applied. Until then, with the
    /// ACL authorizer, only super users are allowed anything: a node must not decide with a
    /// DENY it has not replayed yet. Always true without an authorizer.
    pub fn acls_current(&self) -> bool {
        !self.authorizer.is_enabled() || self.metadata_current()
    }

    /// The authorizer configured for this node (`[security]`).
    pub fn authorizer(&self) -> &crate::security::authorizer::Authorizer {
        &self.authorizer
    }

    /// The SCRAM credential of `user` for `mechanism` stored in the replicated metadata
    /// (AlterUserScramCredentials), as this node has applied it; `None` when there is none.
    pub fn replicated_scram_credential(
        &self,
        user: &str,
        mechanism: crate::security::scram::ScramMechanism,
    ) -> Option<crate::security::scram::ScramCredential> {
        self.metadata()
            .scram_credentials
            .get(&(user.to_owned(), mechanism))
            .cloned()
    }
}
