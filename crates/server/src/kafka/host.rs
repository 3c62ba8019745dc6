//! What the Kafka handlers need of the node they run on, one narrow trait per API family, so
//! that a handler names what it uses instead of taking the whole `Node` (and `kafka/` stops
//! importing `node/`, see "Layout rules" in the crate README). The node implements each
//! (`node/listeners.rs`); a test can implement one with a fake.
//!
//! - [`UsersHost`]: the user-credential APIs ([`crate::kafka::users`]).

use std::sync::RwLockReadGuard;

use crate::metadata::proposer::MetadataProposer;
use crate::metadata::ClusterMeta;
use crate::security::scram::{ScramCredential, ScramMechanism};

/// What DescribeUserScramCredentials and AlterUserScramCredentials
/// ([`crate::kafka::users`]) need: the replicated metadata as applied on this node (its SCRAM
/// credentials) and the one path that commits metadata commands.
pub trait UsersHost: Send + Sync + 'static {
    /// The replicated cluster metadata as this node has applied it (held briefly: every
    /// apply waits for the guard).
    fn metadata(&self) -> RwLockReadGuard<'_, ClusterMeta>;

    /// The one path that commits metadata commands (request ids, retries, deduplication).
    fn metadata_proposer(&self) -> &MetadataProposer;

    /// The replicated SCRAM credential of `user` for `mechanism` (not a bootstrap one from the
    /// configuration), if any.
    fn replicated_scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Option<ScramCredential> {
        self.metadata()
            .scram_credentials
            .get(&(user.to_owned(), mechanism))
            .cloned()
    }
}
