//! A node's security state: SCRAM credential look-ups, the authorizer, authentication
//! counters, and the ACL catch-up after start.

use std::sync::Arc;
use std::time::Duration;

use super::Node;
use crate::metadata::MetaCommand;
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

    /// Whether this node's ACLs are known to be current: a metadata barrier committed after
    /// this node started has been applied here, so every ACL change committed before the start
    /// (also ones this node had not heard were committed when it stopped) is applied. Until
    /// then, with the ACL authorizer, only super users are allowed anything: a node must not
    /// decide with a DENY it has not replayed yet. Always true without an authorizer.
    pub fn acls_current(&self) -> bool {
        self.acls_current.load(std::sync::atomic::Ordering::Acquire)
    }

    /// With the ACL authorizer, commits one metadata barrier (retried every 200 ms, 5 s per
    /// attempt, until it commits or the node ends) and then marks the ACLs current.
    pub(super) fn start_acl_catch_up(self: &Arc<Self>) {
        use std::sync::atomic::Ordering;
        if !self.authorizer.is_enabled() {
            self.acls_current.store(true, Ordering::Release);
            return;
        }
        if self.acls_current() {
            return;
        }
        let node = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let Some(n) = node.upgrade() else {
                    return;
                };
                if n.metadata_group().is_none() {
                    return;
                }
                match n
                    .metadata_proposer()
                    .propose(&MetaCommand::barrier(), Duration::from_secs(5))
                    .await
                {
                    Ok(_) => {
                        n.acls_current.store(true, Ordering::Release);
                        tracing::info!("ACLs caught up with the cluster metadata");
                        return;
                    }
                    Err(e) => tracing::debug!("ACL catch-up barrier not committed yet: {e}"),
                }
                drop(n);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
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
