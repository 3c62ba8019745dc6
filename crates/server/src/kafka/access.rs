//! What the principal of one request may do: the node's authorizer applied to the
//! connection's principal and host, with the ACLs the node has applied from the metadata.
//!
//! Every handler that touches a resource asks its [`Access`] first, with the operation Kafka
//! 3.9's `KafkaApis` requires for that API (see the table in docs/security.md). With
//! `authorizer = "none"` every answer is yes and no lock is taken (nor the node asked). Until
//! the node's ACLs are current after a start ([`AccessHost::acls_current`]), only super users
//! are allowed anything.

use std::sync::Arc;

use crate::kafka::connection::ConnectionContext;
use crate::kafka::host::AccessHost;
use crate::security::acl::{AclOperation, ResourceType, CLUSTER_RESOURCE_NAME};
use crate::security::Principal;

/// Kafka's "authorized operations" value when they were not asked for (`Int.MinValue`).
pub const OPERATIONS_NOT_REQUESTED: i32 = i32::MIN;

/// The operations Kafka reports as authorized for a topic (Metadata v8+).
pub const TOPIC_OPERATIONS: &[AclOperation] = &[
    AclOperation::Read,
    AclOperation::Write,
    AclOperation::Create,
    AclOperation::Delete,
    AclOperation::Alter,
    AclOperation::Describe,
    AclOperation::DescribeConfigs,
    AclOperation::AlterConfigs,
];

/// The operations Kafka reports as authorized for a consumer group (DescribeGroups v3+).
pub const GROUP_OPERATIONS: &[AclOperation] = &[
    AclOperation::Read,
    AclOperation::Delete,
    AclOperation::Describe,
];

/// The operations Kafka reports as authorized for the cluster (DescribeCluster, Metadata v8-10).
pub const CLUSTER_OPERATIONS: &[AclOperation] = &[
    AclOperation::Create,
    AclOperation::Alter,
    AclOperation::Describe,
    AclOperation::ClusterAction,
    AclOperation::DescribeConfigs,
    AclOperation::AlterConfigs,
    AclOperation::IdempotentWrite,
];

/// One request's principal and host, and the node deciding for them. Cheap to clone into a
/// handler's future. The node is seen as an [`AccessHost`] trait object (one `Access` type for
/// every handler); it is asked only when an authorizer is configured, once per resource
/// checked, never per record.
#[derive(Clone)]
pub struct Access {
    node: Arc<dyn AccessHost>,
    /// Whether the node's authorizer checks requests (`authorizer = "acl"`; fixed at start).
    enabled: bool,
    principal: Principal,
    host: String,
}

impl Access {
    /// The access of requests arriving on `conn`, decided by `node`.
    pub fn new<H: AccessHost>(node: &Arc<H>, conn: &ConnectionContext) -> Access {
        // Without an authorizer the host is never asked for: not formatted per request.
        let enabled = node.authorizer().is_enabled();
        let node: Arc<dyn AccessHost> = node.clone();
        Access {
            node,
            enabled,
            principal: conn.principal.clone(),
            // As Kafka prints a client address in ACLs (`InetAddress.getHostAddress`).
            host: if enabled {
                crate::security::acl::kafka_host(conn.peer.ip())
            } else {
                String::new()
            },
        }
    }

    /// True when requests are checked at all (`authorizer = "acl"`).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Whether the principal may do `operation` on `resource_type`/`name`.
    pub fn allows(&self, operation: AclOperation, resource_type: ResourceType, name: &str) -> bool {
        if !self.enabled {
            return true;
        }
        let authorizer = self.node.authorizer();
        if !self.node.acls_current() {
            return authorizer.is_super_user(&self.principal);
        }
        authorizer.authorize(
            &self.node.metadata().acls,
            &self.principal,
            &self.host,
            operation,
            resource_type,
            name,
        )
    }

    /// `operation` on topic `name`.
    pub fn topic(&self, operation: AclOperation, name: &str) -> bool {
        self.allows(operation, ResourceType::Topic, name)
    }

    /// `operation` on consumer group `group`.
    pub fn group(&self, operation: AclOperation, group: &str) -> bool {
        self.allows(operation, ResourceType::Group, group)
    }

    /// `operation` on the cluster.
    pub fn cluster(&self, operation: AclOperation) -> bool {
        self.allows(operation, ResourceType::Cluster, CLUSTER_RESOURCE_NAME)
    }

    /// `operation` on transactional id `id`.
    pub fn transactional_id(&self, operation: AclOperation, id: &str) -> bool {
        self.allows(operation, ResourceType::TransactionalId, id)
    }

    /// `operation` on at least one topic (Kafka's `authorizeByResourceType`).
    pub fn any_topic(&self, operation: AclOperation) -> bool {
        if !self.enabled {
            return true;
        }
        let authorizer = self.node.authorizer();
        if !self.node.acls_current() {
            return authorizer.is_super_user(&self.principal);
        }
        authorizer.authorize_any(
            &self.node.metadata().acls,
            &self.principal,
            &self.host,
            operation,
            ResourceType::Topic,
        )
    }

    /// Kafka's authorized-operations bit field of a resource, over `operations`.
    pub fn operations(
        &self,
        resource_type: ResourceType,
        name: &str,
        operations: &[AclOperation],
    ) -> i32 {
        let authorizer = self.node.authorizer();
        if authorizer.is_enabled()
            && !self.node.acls_current()
            && !authorizer.is_super_user(&self.principal)
        {
            return 0;
        }
        authorizer.authorized_operations(
            &self.node.metadata().acls,
            &self.principal,
            &self.host,
            resource_type,
            name,
            operations,
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{RwLock, RwLockReadGuard};

    use super::*;
    use crate::kafka::host::MetadataAccess;
    use crate::metadata::proposer::MetadataProposer;
    use crate::metadata::ClusterMeta;
    use crate::security::authorizer::{Authorizer, AuthorizerMode};

    /// A host that is not a node: an authorizer, whether the ACLs are current, and how often
    /// the metadata (the ACLs) was read.
    struct Host {
        authorizer: Authorizer,
        current: AtomicBool,
        reads: AtomicUsize,
        meta: Arc<RwLock<ClusterMeta>>,
        proposer: MetadataProposer,
    }

    impl Host {
        fn new(mode: AuthorizerMode, allow_everyone_if_no_acl_found: bool) -> Arc<Host> {
            let meta = Arc::new(RwLock::new(ClusterMeta::new(vec![1])));
            Arc::new(Host {
                authorizer: Authorizer::new(
                    mode,
                    ["User:admin".to_string()],
                    allow_everyone_if_no_acl_found,
                ),
                current: AtomicBool::new(false),
                reads: AtomicUsize::new(0),
                proposer: MetadataProposer::new(1, 1, Arc::default(), meta.clone()),
                meta,
            })
        }

        fn reads(&self) -> usize {
            self.reads.load(Ordering::SeqCst)
        }
    }

    impl MetadataAccess for Host {
        fn metadata(&self) -> RwLockReadGuard<'_, ClusterMeta> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            self.meta.read().unwrap()
        }

        fn metadata_proposer(&self) -> &MetadataProposer {
            &self.proposer
        }
    }

    impl AccessHost for Host {
        fn authorizer(&self) -> &Authorizer {
            &self.authorizer
        }

        fn acls_current(&self) -> bool {
            !self.authorizer.is_enabled() || self.current.load(Ordering::SeqCst)
        }
    }

    fn conn(user: &str) -> ConnectionContext {
        let mut conn =
            ConnectionContext::unauthenticated("127.0.0.1:9000".parse().unwrap(), "PLAINTEXT");
        conn.principal = Principal::user(user);
        conn
    }

    #[test]
    fn without_an_authorizer_everything_is_allowed_and_the_acls_are_not_read() {
        let host = Host::new(AuthorizerMode::None, false);
        let access = Access::new(&host, &conn("alice"));
        assert!(!access.enabled());
        assert!(access.topic(AclOperation::Write, "t"));
        assert!(access.group(AclOperation::Read, "g"));
        assert!(access.cluster(AclOperation::Alter));
        assert!(access.transactional_id(AclOperation::Write, "tx"));
        assert!(access.any_topic(AclOperation::Read));
        assert_eq!(host.reads(), 0, "no lock taken without an authorizer");
    }

    #[test]
    fn until_the_acls_are_current_only_super_users_are_allowed() {
        // With allow.everyone.if.no.acl.found, anyone may once the (empty) ACLs are current.
        let host = Host::new(AuthorizerMode::Acl, true);
        let alice = Access::new(&host, &conn("alice"));
        let admin = Access::new(&host, &conn("admin"));
        assert!(alice.enabled());
        assert!(!alice.topic(AclOperation::Write, "t"));
        assert!(!alice.any_topic(AclOperation::Read));
        assert_eq!(
            alice.operations(ResourceType::Topic, "t", TOPIC_OPERATIONS),
            0
        );
        assert!(admin.topic(AclOperation::Write, "t"));
        assert!(admin.any_topic(AclOperation::Read));
        assert_eq!(host.reads(), 0, "not decided on ACLs that are not current");

        host.current.store(true, Ordering::SeqCst);
        assert!(alice.topic(AclOperation::Write, "t"));
        assert!(alice.cluster(AclOperation::Describe));
        assert!(host.reads() > 0, "decided on the metadata's ACLs");
    }
}
