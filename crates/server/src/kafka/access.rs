//! What the principal of one request may do: the node's authorizer applied to the
//! connection's principal and host, with the ACLs the node has applied from the metadata.
//!
//! Every handler that touches a resource asks its [`Access`] first, with the operation Kafka
//! 3.9's `KafkaApis` requires for that API (see the table in docs/security.md). With
//! `authorizer = "none"` every answer is yes and no lock is taken. Until the node's ACLs are
//! current after a start ([`Node::acls_current`]), only super users are allowed anything.

use std::sync::Arc;

use crate::kafka::connection::ConnectionContext;
use crate::node::Node;
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
/// handler's future.
#[derive(Clone)]
pub struct Access {
    node: Arc<Node>,
    principal: Principal,
    host: String,
}

impl Access {
    /// The access of requests arriving on `conn`.
    pub fn new(node: &Arc<Node>, conn: &ConnectionContext) -> Access {
        // Without an authorizer the host is never asked for: not formatted per request.
        let enabled = node.authorizer().is_enabled();
        Access {
            node: node.clone(),
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
        self.node.authorizer().is_enabled()
    }

    /// Whether the principal may do `operation` on `resource_type`/`name`.
    pub fn allows(&self, operation: AclOperation, resource_type: ResourceType, name: &str) -> bool {
        let authorizer = self.node.authorizer();
        if !authorizer.is_enabled() {
            return true;
        }
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
        let authorizer = self.node.authorizer();
        if !authorizer.is_enabled() {
            return true;
        }
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
