//! Users: DescribeUserScramCredentials and AlterUserScramCredentials over the replicated SCRAM
//! credentials (what `kafka-configs.sh --entity-type users` manages), and DescribeClientQuotas,
//! which `kafka-configs.sh --describe --entity-type users` asks too (vdl has no quotas: the
//! answer lists none).
//!
//! Kafka 3.9's rules and errors:
//! - Altering needs ALTER on the cluster, describing DESCRIBE on the cluster (and quotas
//!   DESCRIBE_CONFIGS on the cluster): CLUSTER_AUTHORIZATION_FAILED otherwise.
//! - Alterations are answered per user, in the order users first appear. A user whose
//!   alterations include an error gets the first one and none of them is applied:
//!   UNACCEPTABLE_CREDENTIAL for an empty user name or iterations outside 4096..=16384,
//!   DUPLICATE_RESOURCE for a user altered twice in one request (any two alterations, whatever
//!   their mechanisms: checked against Kafka 3.9, which refuses `--add-config SCRAM-SHA-256=..
//!   --delete-config SCRAM-SHA-512` for one user),
//!   UNSUPPORTED_SASL_MECHANISM for a mechanism other than SCRAM-SHA-256/512,
//!   RESOURCE_NOT_FOUND for deleting a credential that does not exist. vdl also refuses an
//!   empty salt and a salted password whose length is not the hash's (UNACCEPTABLE_CREDENTIAL):
//!   no client sends them, and a credential built from them could never be used; and a new
//!   credential beyond [`MAX_CREDENTIALS`] in the cluster (POLICY_VIOLATION).
//! - The server keeps the salt, the iterations and the keys derived from the salted password
//!   (StoredKey, ServerKey), never the salted password itself.
//! - Describing a user without credentials is RESOURCE_NOT_FOUND, a user named twice
//!   DUPLICATE_RESOURCE; no users (null or empty) describes every user with a credential.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::Response;
use kafka_proto::messages::alter_user_scram_credentials_request::AlterUserScramCredentialsRequest;
use kafka_proto::messages::alter_user_scram_credentials_response::{
    AlterUserScramCredentialsResponse, AlterUserScramCredentialsResult,
};
use kafka_proto::messages::describe_user_scram_credentials_request::DescribeUserScramCredentialsRequest;
use kafka_proto::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResponse, DescribeUserScramCredentialsResult,
};

use crate::kafka::access::Access;
use crate::kafka::error_codes::{append_error_code, Proposal};
use crate::kafka::host::UsersHost;
use crate::kafka::reply::{self, Reply};
use crate::metadata::MetaCommand;
use crate::security::acl::AclOperation;
use crate::security::scram::{
    ScramCredential, ScramMechanism, MAX_CREDENTIALS, MAX_ITERATIONS, MIN_ITERATIONS,
};

/// How long a credential change waits for the metadata commit.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(30);

/// Handles DescribeUserScramCredentials.
pub fn describe_user_scram_credentials<H: UsersHost>(
    node: &H,
    access: &Access,
    req: &DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let mut response = DescribeUserScramCredentialsResponse {
        error_message: None,
        ..Default::default()
    };
    if !access.cluster(AclOperation::Describe) {
        response.error_code = ErrorCode::ClusterAuthorizationFailed.code();
        response.error_message = Some("Cluster authorization failed.".into());
        return response;
    }
    let meta = node.metadata();
    let mut by_user: BTreeMap<&str, Vec<CredentialInfo>> = BTreeMap::new();
    for ((user, mechanism), credential) in &meta.scram_credentials {
        by_user.entry(user).or_default().push(CredentialInfo {
            mechanism: mechanism.kafka_type(),
            iterations: i32::try_from(credential.iterations).unwrap_or(i32::MAX),
            ..Default::default()
        });
    }
    let wanted: Vec<String> = match &req.users {
        Some(users) if !users.is_empty() => users.iter().map(|u| u.name.clone()).collect(),
        _ => by_user.keys().map(|u| (*u).to_owned()).collect(),
    };
    let mut count: HashMap<&str, usize> = HashMap::new();
    for u in &wanted {
        *count.entry(u).or_default() += 1;
    }
    let mut answered = HashSet::new();
    for user in &wanted {
        if !answered.insert(user.as_str()) {
            continue;
        }
        let mut r = DescribeUserScramCredentialsResult {
            user: user.clone(),
            error_message: None,
            ..Default::default()
        };
        if count[user.as_str()] > 1 {
            r.error_code = ErrorCode::DuplicateResource.code();
            r.error_message = Some(
                "Cannot describe SCRAM credentials for the same user twice in a single request"
                    .into(),
            );
        } else {
            match by_user.get(user.as_str()) {
                Some(infos) => r.credential_infos = infos.clone(),
                None => {
                    r.error_code = ErrorCode::ResourceNotFound.code();
                    r.error_message = Some(format!(
                        "Attempt to describe a user credential that does not exist: {user}"
                    ));
                }
            }
        }
        response.results.push(r);
    }
    response
}

/// One alteration of a request, checked.
enum Alteration {
    Delete(ScramMechanism),
    Upsert(ScramCredential),
}

/// Checks one user's alterations against the request's duplicates and the stored credentials;
/// the first error found, or what to commit.
fn check_user<H: UsersHost>(
    node: &H,
    user: &str,
    req: &AlterUserScramCredentialsRequest,
    alterations: &HashMap<&str, usize>,
) -> Result<Vec<Alteration>, (ErrorCode, String)> {
    let unacceptable = |m: &str| Err((ErrorCode::UnacceptableCredential, m.to_owned()));
    if user.is_empty() {
        return unacceptable("Username must not be empty");
    }
    let mechanism_of = |code: i8| {
        ScramMechanism::from_kafka_type(code).ok_or((
            ErrorCode::UnsupportedSaslMechanism,
            "Unknown SCRAM mechanism".to_owned(),
        ))
    };
    if alterations.get(user).copied().unwrap_or(0) > 1 {
        return Err((
            ErrorCode::DuplicateResource,
            "A user credential cannot be altered twice in the same request".into(),
        ));
    }
    let deletions = req.deletions.iter().filter(|d| d.name == user);
    let upsertions = req.upsertions.iter().filter(|u| u.name == user);
    let mut out = Vec::new();
    for d in deletions {
        let mechanism = mechanism_of(d.mechanism)?;
        if node.replicated_scram_credential(user, mechanism).is_none() {
            return Err((
                ErrorCode::ResourceNotFound,
                "Attempt to delete a user credential that does not exist".into(),
            ));
        }
        out.push(Alteration::Delete(mechanism));
    }
    for u in upsertions {
        let mechanism = mechanism_of(u.mechanism)?;
        let stored = node.metadata().scram_credentials.len();
        if stored >= MAX_CREDENTIALS && node.replicated_scram_credential(user, mechanism).is_none()
        {
            return Err((
                ErrorCode::PolicyViolation,
                format!("the cluster holds at most {MAX_CREDENTIALS} SCRAM credentials"),
            ));
        }
        if u.iterations < MIN_ITERATIONS as i32 {
            return unacceptable("Too few iterations");
        }
        if u.iterations > MAX_ITERATIONS as i32 {
            return unacceptable("Too many iterations");
        }
        if u.salt.is_empty() {
            return unacceptable("The salt must not be empty");
        }
        if u.salted_password.len() != mechanism.hash_len() {
            return unacceptable("The salted password is not of the mechanism's hash length");
        }
        out.push(Alteration::Upsert(ScramCredential::from_salted_password(
            mechanism,
            u.salt.to_vec(),
            u.iterations as u32,
            &u.salted_password,
        )));
    }
    Ok(out)
}

/// Handles AlterUserScramCredentials.
pub fn alter_user_scram_credentials<H: UsersHost>(
    node: &Arc<H>,
    access: &Access,
    req: AlterUserScramCredentialsRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let authorized = access.cluster(AclOperation::Alter);
    let node = node.clone();
    reply::later(correlation_id, version, async move {
        // Users in order of first appearance, and how many alterations each has.
        let mut users: Vec<&str> = Vec::new();
        let mut alterations: HashMap<&str, usize> = HashMap::new();
        let names = req
            .deletions
            .iter()
            .map(|d| d.name.as_str())
            .chain(req.upsertions.iter().map(|u| u.name.as_str()));
        for name in names {
            let count = alterations.entry(name).or_default();
            if *count == 0 {
                users.push(name);
            }
            *count += 1;
        }
        // Deletions are checked against what every node committed before this request.
        let barrier = if authorized {
            node.metadata_proposer()
                .propose(&MetaCommand::barrier(), COMMIT_TIMEOUT)
                .await
                .err()
        } else {
            None
        };
        let mut results = Vec::with_capacity(users.len());
        for user in users {
            let mut r = AlterUserScramCredentialsResult {
                user: user.to_owned(),
                error_message: None,
                ..Default::default()
            };
            let outcome = if !authorized {
                Err((
                    ErrorCode::ClusterAuthorizationFailed,
                    "Cluster authorization failed.".to_owned(),
                ))
            } else if let Some(e) = &barrier {
                Err((
                    append_error_code(e, Proposal::MetadataChange),
                    e.to_string(),
                ))
            } else {
                match check_user(&*node, user, &req, &alterations) {
                    Ok(alterations) => apply(&*node, user, alterations).await,
                    Err(e) => Err(e),
                }
            };
            if let Err((code, message)) = outcome {
                r.error_code = code.code();
                r.error_message = Some(message);
            }
            results.push(r);
        }
        Response::AlterUserScramCredentials(AlterUserScramCredentialsResponse {
            results,
            ..Default::default()
        })
    })
}

/// Commits one user's checked alterations.
async fn apply<H: UsersHost>(
    node: &H,
    user: &str,
    alterations: Vec<Alteration>,
) -> Result<(), (ErrorCode, String)> {
    for a in alterations {
        let cmd = match a {
            Alteration::Delete(mechanism) => MetaCommand::DeleteScramCredential {
                user: user.to_owned(),
                mechanism: mechanism.kafka_type(),
            },
            Alteration::Upsert(c) => MetaCommand::UpsertScramCredential {
                user: user.to_owned(),
                mechanism: c.mechanism.kafka_type(),
                salt: c.salt,
                iterations: c.iterations,
                stored_key: c.stored_key,
                server_key: c.server_key,
            },
        };
        node.metadata_proposer()
            .propose(&cmd, COMMIT_TIMEOUT)
            .await
            .map_err(|e| {
                (
                    append_error_code(&e, Proposal::MetadataChange),
                    e.to_string(),
                )
            })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::RwLock;

    use kafka_proto::messages::alter_user_scram_credentials_request::{
        ScramCredentialDeletion, ScramCredentialUpsertion,
    };

    use super::*;
    use crate::kafka::host::MetadataAccess;
    use crate::metadata::proposer::MetadataProposer;
    use crate::metadata::ClusterMeta;

    /// A host with only the metadata (no node, no group): enough for the checks.
    struct Host {
        meta: Arc<RwLock<ClusterMeta>>,
        proposer: MetadataProposer,
    }

    impl Host {
        fn with(credentials: &[(&str, ScramMechanism)]) -> Host {
            let mut meta = ClusterMeta::new(vec![1]);
            for (user, mechanism) in credentials {
                meta.scram_credentials.insert(
                    ((*user).to_owned(), *mechanism),
                    ScramCredential::generate(*mechanism, "pw", 4096),
                );
            }
            let meta = Arc::new(RwLock::new(meta));
            Host {
                proposer: MetadataProposer::new(1, 1, Arc::default(), meta.clone()),
                meta,
            }
        }
    }

    impl MetadataAccess for Host {
        fn metadata(&self) -> std::sync::RwLockReadGuard<'_, ClusterMeta> {
            self.meta.read().unwrap()
        }
        fn metadata_proposer(&self) -> &MetadataProposer {
            &self.proposer
        }
    }

    impl UsersHost for Host {
        fn replicated_scram_credential(
            &self,
            user: &str,
            mechanism: ScramMechanism,
        ) -> Option<ScramCredential> {
            let meta = self.meta.read().unwrap();
            meta.scram_credentials
                .get(&(user.to_owned(), mechanism))
                .cloned()
        }
    }

    fn upsert(
        name: &str,
        mechanism: i8,
        iterations: i32,
        salted_len: usize,
    ) -> ScramCredentialUpsertion {
        ScramCredentialUpsertion {
            name: name.into(),
            mechanism,
            iterations,
            salt: bytes::Bytes::from_static(b"NaCl"),
            salted_password: bytes::Bytes::from(vec![7; salted_len]),
            ..Default::default()
        }
    }

    fn delete(name: &str, mechanism: i8) -> ScramCredentialDeletion {
        ScramCredentialDeletion {
            name: name.into(),
            mechanism,
            ..Default::default()
        }
    }

    /// The first error of a user's alterations, or how many alterations would be committed.
    fn check(
        host: &Host,
        user: &str,
        req: &AlterUserScramCredentialsRequest,
    ) -> Result<usize, ErrorCode> {
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for name in req
            .deletions
            .iter()
            .map(|d| d.name.as_str())
            .chain(req.upsertions.iter().map(|u| u.name.as_str()))
        {
            *counts.entry(name).or_default() += 1;
        }
        check_user(host, user, req, &counts)
            .map(|a| a.len())
            .map_err(|(code, _)| code)
    }

    /// Kafka 3.9's per-user checks, through a host that is not a node.
    #[test]
    fn alterations_are_checked_against_the_hosts_credentials() {
        let host = Host::with(&[("alice", ScramMechanism::Sha256)]);
        let req = |deletions, upsertions| AlterUserScramCredentialsRequest {
            deletions,
            upsertions,
            ..Default::default()
        };
        let sha512 = ScramMechanism::Sha512.hash_len();
        // A deletion of a stored credential and an upsertion are accepted.
        assert_eq!(
            check(&host, "alice", &req(vec![delete("alice", 1)], vec![])),
            Ok(1)
        );
        assert_eq!(
            check(
                &host,
                "bob",
                &req(vec![], vec![upsert("bob", 2, 4096, sha512)])
            ),
            Ok(1)
        );
        // Deleting what is not stored, twice one user, an unknown mechanism, an empty name.
        assert_eq!(
            check(&host, "alice", &req(vec![delete("alice", 2)], vec![])),
            Err(ErrorCode::ResourceNotFound)
        );
        assert_eq!(
            check(
                &host,
                "alice",
                &req(
                    vec![delete("alice", 1)],
                    vec![upsert("alice", 2, 4096, sha512)]
                )
            ),
            Err(ErrorCode::DuplicateResource)
        );
        assert_eq!(
            check(
                &host,
                "bob",
                &req(vec![], vec![upsert("bob", 3, 4096, sha512)])
            ),
            Err(ErrorCode::UnsupportedSaslMechanism)
        );
        assert_eq!(
            check(&host, "", &req(vec![], vec![upsert("", 2, 4096, sha512)])),
            Err(ErrorCode::UnacceptableCredential)
        );
        // Iterations out of bounds, a salted password not of the hash's length.
        for bad in [
            upsert("bob", 2, MIN_ITERATIONS as i32 - 1, sha512),
            upsert("bob", 2, MAX_ITERATIONS as i32 + 1, sha512),
            upsert("bob", 2, 4096, sha512 - 1),
        ] {
            assert_eq!(
                check(&host, "bob", &req(vec![], vec![bad])),
                Err(ErrorCode::UnacceptableCredential)
            );
        }
    }
}
