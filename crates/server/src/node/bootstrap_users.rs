//! Bootstrap SCRAM users become ordinary metadata, as in Kafka (`kafka-storage format
//! --add-scram`).
//!
//! The users of `[[security.scram_users]]` let a new cluster's first client authenticate. The
//! first time the metadata group has a leader and no import is recorded, that leader commits
//! [`MetaCommand::ImportScramUsers`] with its configured credentials (the record and how it
//! applies: [`crate::security::scram_import`]); applying it adds each credential whose user
//! and mechanism has none in the metadata yet and records the import.
//! From then on every node consults only the replicated credentials
//! ([`credential`]): a bootstrap user can be deleted or rotated through the Kafka API
//! (`kafka-configs.sh --alter --delete-config SCRAM-SHA-256 --entity-type users`), and the
//! configured password does not come back, also after a restart. Until the import is applied
//! on a node, that node uses the configured credentials where no replicated one exists (the
//! behaviour before the import existed).
//!
//! A cluster whose nodes list different bootstrap users imports those of the node that led
//! when the import was first committed; entries added to the configuration after the import
//! are ignored (logged at start). A cluster that has never been configured with bootstrap users
//! records no import until it is.

use std::sync::Arc;
use std::time::Duration;

use super::Node;
use crate::metadata::MetaCommand;
use crate::security::scram::{ScramCredential, ScramMechanism};
use crate::security::scram_import::ImportedCredential;

/// How often a node checks whether it should commit the import (and whether it is done).
const IMPORT_POLL: Duration = Duration::from_millis(500);

/// How long one attempt to commit the import waits.
const IMPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// The SCRAM credential of `user` for `mechanism` on `node`: the replicated one; before the
/// bootstrap users were imported, else the configured one.
pub(super) fn credential(
    node: &Node,
    user: &str,
    mechanism: ScramMechanism,
) -> Option<ScramCredential> {
    let configured = {
        let meta = node.metadata();
        if let Some(c) = meta.scram_credentials.get(&(user.to_owned(), mechanism)) {
            return Some(c.clone());
        }
        !meta.scram_users_imported
    };
    if configured {
        node.config().security.scram_user(user, mechanism).cloned()
    } else {
        None
    }
}

/// The configured bootstrap users as an import command.
fn import_command(node: &Node) -> MetaCommand {
    MetaCommand::ImportScramUsers {
        credentials: node
            .config()
            .security
            .scram_users
            .iter()
            .map(|u| ImportedCredential {
                user: u.name.clone(),
                mechanism: u.credential.mechanism.kafka_type(),
                salt: u.credential.salt.clone(),
                iterations: u.credential.iterations,
                stored_key: u.credential.stored_key.clone(),
                server_key: u.credential.server_key.clone(),
            })
            .collect(),
    }
}

/// When `node` has bootstrap users configured, starts a task that commits their import once
/// this node leads the metadata group and no import is recorded (retried every 500 ms); it
/// ends when an import is applied on this node or the node is gone. With the import already
/// recorded, logs that the configured users are ignored.
pub(super) fn start_import(node: &Arc<Node>) {
    if node.config().security.scram_users.is_empty() {
        return;
    }
    if node.metadata().scram_users_imported {
        tracing::info!(
            "bootstrap SCRAM users were imported earlier: [[security.scram_users]] is not \
             consulted (manage users with AlterUserScramCredentials)"
        );
        return;
    }
    let weak = Arc::downgrade(node);
    tokio::spawn(async move {
        loop {
            let Some(node) = weak.upgrade() else {
                return;
            };
            if node.metadata().scram_users_imported {
                return;
            }
            let Some(group) = node.metadata_group() else {
                return;
            };
            if group.visible().leader == node.config().id {
                match node
                    .metadata_proposer()
                    .propose(&import_command(&node), IMPORT_TIMEOUT)
                    .await
                {
                    Ok(_) => {}
                    Err(e) => tracing::debug!("bootstrap SCRAM user import not committed: {e}"),
                }
            }
            drop(node);
            tokio::time::sleep(IMPORT_POLL).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn imported(user: &str, mechanism: i8, tag: u8) -> ImportedCredential {
        ImportedCredential {
            user: user.into(),
            mechanism,
            salt: vec![tag; 16],
            iterations: 4096,
            stored_key: vec![tag; 32],
            server_key: vec![tag; 32],
        }
    }

    /// The import adds only what is missing (a replicated credential wins), applies once, and
    /// a credential deleted after it stays deleted.
    #[test]
    fn import_applies_once_and_deletions_stick() {
        let mut meta = crate::metadata::ClusterMeta::new(vec![1]);
        meta.apply_to_state(
            5,
            None,
            MetaCommand::UpsertScramCredential {
                user: "admin".into(),
                mechanism: 2,
                salt: vec![9; 16],
                iterations: 8192,
                stored_key: vec![9; 64],
                server_key: vec![9; 64],
            },
        );
        let import = MetaCommand::ImportScramUsers {
            credentials: vec![
                imported("admin", 2, 1),
                imported("admin", 1, 2),
                imported("bob", 7, 3),
                imported("", 1, 4),
            ],
        };
        meta.apply_to_state(6, None, import.clone());
        assert!(meta.scram_users_imported);
        let key = |m| ("admin".to_string(), m);
        assert_eq!(
            meta.scram_credentials[&key(ScramMechanism::Sha512)].iterations,
            8192
        );
        assert_eq!(
            meta.scram_credentials[&key(ScramMechanism::Sha256)].salt,
            vec![2; 16]
        );
        assert_eq!(meta.scram_credentials.len(), 2);
        meta.apply_to_state(
            7,
            None,
            MetaCommand::DeleteScramCredential {
                user: "admin".into(),
                mechanism: 1,
            },
        );
        // A second import (another node's, or a retry) changes nothing.
        meta.apply_to_state(8, None, import);
        assert!(!meta
            .scram_credentials
            .contains_key(&key(ScramMechanism::Sha256)));
        // The record survives a snapshot.
        let wire = meta.to_snapshot(8, 1);
        let back = crate::metadata::ClusterMeta::from_snapshot(vec![1], wire);
        assert!(back.scram_users_imported);
        assert_eq!(back.scram_credentials.len(), 1);
    }
}
