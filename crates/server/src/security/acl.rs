//! Kafka's ACL model: bindings (a resource pattern and an access control entry), the filters
//! DescribeAcls and DeleteAcls select bindings with, and their Kafka wire codes.
//!
//! A binding says: `principal` connecting from `host` is allowed (or denied) `operation` on the
//! resources of `resource_type` whose name equals `resource_name` (LITERAL; `*` is every name)
//! or starts with it (PREFIXED). The codes are Kafka's `ResourceType`, `PatternType`,
//! `AclOperation` and `AclPermissionType` codes, so bindings go to and from the wire unchanged.
//! Which bindings decide a request is the [`crate::security::authorizer`]'s job.

use std::collections::BTreeSet;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The name of the one cluster resource (Kafka's `kafka-cluster`).
pub const CLUSTER_RESOURCE_NAME: &str = "kafka-cluster";
/// The resource name and host that match every name or host (`*`).
pub const WILDCARD: &str = "*";
/// The principal that matches every principal (`User:*`).
pub const WILDCARD_PRINCIPAL: &str = "User:*";

/// Why a binding or a filter from a request is not acceptable (Kafka answers INVALID_REQUEST).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0}")]
pub struct InvalidAcl(pub String);

macro_rules! kafka_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $code:literal, $text:literal;)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)*
        }

        impl $name {
            /// Every value, in code order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// Kafka's wire code.
            pub fn code(self) -> i8 {
                match self {
                    $($name::$variant => $code,)*
                }
            }

            /// The value of a Kafka wire code; `None` for UNKNOWN, ANY and codes not listed.
            pub fn from_code(code: i8) -> Option<$name> {
                match code {
                    $($code => Some($name::$variant),)*
                    _ => None,
                }
            }

            /// Kafka's name (`TOPIC`, `READ`, ...).
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }
        }
    };
}

/// Kafka's code for ANY in every ACL enum (a filter matching every value).
pub const ANY_CODE: i8 = 1;
/// Kafka's code for MATCH in a pattern type filter.
pub const MATCH_CODE: i8 = 2;

kafka_enum!(
    /// The kinds of resource an ACL can name (Kafka's `ResourceType`, those vdl has).
    ResourceType {
        /// A topic.
        Topic = 2, "TOPIC";
        /// A consumer group.
        Group = 3, "GROUP";
        /// The cluster (one resource, [`CLUSTER_RESOURCE_NAME`]).
        Cluster = 4, "CLUSTER";
        /// A transactional id.
        TransactionalId = 5, "TRANSACTIONAL_ID";
    }
);

kafka_enum!(
    /// How a binding's resource name matches names (Kafka's `PatternType`).
    PatternType {
        /// The name itself (or every name for `*`).
        Literal = 3, "LITERAL";
        /// Every name starting with it.
        Prefixed = 4, "PREFIXED";
    }
);

kafka_enum!(
    /// What an ACL allows or denies (Kafka's `AclOperation`).
    AclOperation {
        /// Every operation.
        All = 2, "ALL";
        /// Read (fetch, consume in a group).
        Read = 3, "READ";
        /// Write (produce).
        Write = 4, "WRITE";
        /// Create (topics).
        Create = 5, "CREATE";
        /// Delete (topics, records, groups).
        Delete = 6, "DELETE";
        /// Alter (partitions, ACLs, credentials).
        Alter = 7, "ALTER";
        /// Describe (see that it exists).
        Describe = 8, "DESCRIBE";
        /// Inter-broker actions.
        ClusterAction = 9, "CLUSTER_ACTION";
        /// Read configs.
        DescribeConfigs = 10, "DESCRIBE_CONFIGS";
        /// Change configs.
        AlterConfigs = 11, "ALTER_CONFIGS";
        /// Idempotent produce (a producer id without a transactional id).
        IdempotentWrite = 12, "IDEMPOTENT_WRITE";
        /// Create delegation tokens.
        CreateTokens = 13, "CREATE_TOKENS";
        /// Describe delegation tokens.
        DescribeTokens = 14, "DESCRIBE_TOKENS";
    }
);

kafka_enum!(
    /// Whether a binding allows or denies (Kafka's `AclPermissionType`).
    AclPermission {
        /// Denies; a matching DENY wins over any ALLOW.
        Deny = 2, "DENY";
        /// Allows.
        Allow = 3, "ALLOW";
    }
);

impl AclOperation {
    /// The operations an ALLOW for `self` also allows, as in Kafka: DESCRIBE is implied by READ,
    /// WRITE, DELETE and ALTER; DESCRIBE_CONFIGS by ALTER_CONFIGS; ALL implies everything.
    pub fn allow_implies(self, wanted: AclOperation) -> bool {
        use AclOperation::*;
        self == wanted
            || self == All
            || (wanted == Describe && matches!(self, Read | Write | Delete | Alter))
            || (wanted == DescribeConfigs && self == AlterConfigs)
    }

    /// Whether a DENY for `self` denies `wanted` (the operation itself or ALL; a DENY of READ
    /// does not deny DESCRIBE, as in Kafka).
    pub fn deny_covers(self, wanted: AclOperation) -> bool {
        self == wanted || self == AclOperation::All
    }
}

/// One ACL: a resource pattern and an access control entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AclBinding {
    /// The resource type (first: bindings of one type are contiguous in an [`AclSet`]).
    pub resource_type: ResourceType,
    /// The resource name or prefix; `*` with LITERAL is every name.
    pub resource_name: String,
    /// LITERAL or PREFIXED.
    pub pattern_type: PatternType,
    /// The principal, Kafka's `Type:name` (`User:*`: everyone).
    pub principal: String,
    /// The client host (IP address as Kafka prints it; `*`: any).
    pub host: String,
    /// The operation.
    pub operation: AclOperation,
    /// ALLOW or DENY.
    pub permission: AclPermission,
}

impl AclBinding {
    /// A binding from a CreateAcls creation's fields, checked as Kafka's controller checks new
    /// ACLs: known resource type, LITERAL or PREFIXED, a known operation (not ANY), ALLOW or
    /// DENY, a non-empty resource name and a principal of the form `Type:name`.
    #[allow(clippy::too_many_arguments)]
    pub fn from_kafka(
        resource_type: i8,
        resource_name: &str,
        pattern_type: i8,
        principal: &str,
        host: &str,
        operation: i8,
        permission: i8,
    ) -> Result<AclBinding, InvalidAcl> {
        let resource_type = ResourceType::from_code(resource_type)
            .ok_or_else(|| InvalidAcl(format!("Invalid resourceType {resource_type}")))?;
        let pattern_type = PatternType::from_code(pattern_type)
            .ok_or_else(|| InvalidAcl(format!("Invalid patternType {pattern_type}")))?;
        let operation = AclOperation::from_code(operation)
            .ok_or_else(|| InvalidAcl(format!("Invalid operation {operation}")))?;
        let permission = AclPermission::from_code(permission)
            .ok_or_else(|| InvalidAcl(format!("Invalid permissionType {permission}")))?;
        if resource_name.is_empty() {
            return Err(InvalidAcl("Resource name should not be empty".into()));
        }
        if crate::security::Principal::parse(principal).is_none() {
            return Err(InvalidAcl(format!(
                "Could not parse principal from `{principal}` (no colon is present separating \
                 the principal type from the principal name)"
            )));
        }
        if host.is_empty() {
            return Err(InvalidAcl("Host should not be empty".into()));
        }
        Ok(AclBinding {
            resource_type,
            resource_name: resource_name.to_owned(),
            pattern_type,
            principal: principal.to_owned(),
            host: host.to_owned(),
            operation,
            permission,
        })
    }

    /// Whether this binding's pattern covers the resource `name` of its type.
    pub fn pattern_matches(&self, name: &str) -> bool {
        match self.pattern_type {
            PatternType::Literal => self.resource_name == name || self.resource_name == WILDCARD,
            PatternType::Prefixed => name.starts_with(&self.resource_name),
        }
    }

    /// Whether this binding's entry is about `principal` (`Type:name`) connecting from `host`
    /// (the client address as [`kafka_host`] writes it). The binding's host matches when it is
    /// `*`, the same string, or another textual form of the same IP address (`::1` for
    /// `0:0:0:0:0:0:0:1`, `::ffff:10.0.0.1` for `10.0.0.1`): Kafka compares the strings only,
    /// so there a rule written in another form never matches (a DENY that silently does not
    /// apply); vdl applies it.
    pub fn entry_matches(&self, principal: &str, host: &str) -> bool {
        (self.principal == principal || self.principal == WILDCARD_PRINCIPAL)
            && (self.host == host || self.host == WILDCARD || same_address(&self.host, host))
    }
}

/// A client address as Kafka writes it in ACLs (Java's `InetAddress.getHostAddress()`): IPv4
/// dotted (also for an IPv4-mapped IPv6 address, which Java turns into an `Inet4Address`), IPv6
/// as eight lowercase hexadecimal groups without leading zeros and without `::` compression,
/// e.g. `0:0:0:0:0:0:0:1`. (A scope id, `%eth0`, is not kept: vdl's ACLs never name one.)
pub fn kafka_host(ip: IpAddr) -> String {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => {
            let groups = v6.segments().map(|g| format!("{g:x}"));
            groups.join(":")
        }
    }
}

/// Whether two host strings are IP addresses naming the same address.
fn same_address(a: &str, b: &str) -> bool {
    let parse = |s: &str| s.parse::<IpAddr>().ok().map(|ip| ip.to_canonical());
    match (parse(a), parse(b)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// How a filter selects pattern types (Kafka's `PatternType` in a filter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternFilter {
    /// Any pattern type; a name must equal the binding's name.
    Any,
    /// Every binding that would apply to the named resource: LITERAL bindings of the name or
    /// `*`, PREFIXED bindings that are a prefix of it.
    Match,
    /// Exactly this pattern type.
    Exactly(PatternType),
}

/// Selects bindings (DescribeAcls, DeleteAcls): `None` fields match anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclBindingFilter {
    /// The resource type; `None`: ANY.
    pub resource_type: Option<ResourceType>,
    /// The resource name; `None`: any.
    pub resource_name: Option<String>,
    /// The pattern type selection.
    pub pattern: PatternFilter,
    /// The principal; `None`: any.
    pub principal: Option<String>,
    /// The host; `None`: any.
    pub host: Option<String>,
    /// The operation; `None`: ANY.
    pub operation: Option<AclOperation>,
    /// The permission; `None`: ANY.
    pub permission: Option<AclPermission>,
}

impl AclBindingFilter {
    /// A filter from a DescribeAcls request or DeleteAcls filter's fields. UNKNOWN codes (and
    /// codes Kafka does not define) are refused, as Kafka refuses filters with unknown parts.
    #[allow(clippy::too_many_arguments)]
    pub fn from_kafka(
        resource_type: i8,
        resource_name: Option<&str>,
        pattern_type: i8,
        principal: Option<&str>,
        host: Option<&str>,
        operation: i8,
        permission: i8,
    ) -> Result<AclBindingFilter, InvalidAcl> {
        let resource_type = match resource_type {
            ANY_CODE => None,
            code => Some(
                ResourceType::from_code(code)
                    .ok_or_else(|| InvalidAcl(format!("Invalid resourceType {code}")))?,
            ),
        };
        let pattern = match pattern_type {
            ANY_CODE => PatternFilter::Any,
            MATCH_CODE => PatternFilter::Match,
            code => PatternFilter::Exactly(
                PatternType::from_code(code)
                    .ok_or_else(|| InvalidAcl(format!("Invalid patternType {code}")))?,
            ),
        };
        let operation = match operation {
            ANY_CODE => None,
            code => Some(
                AclOperation::from_code(code)
                    .ok_or_else(|| InvalidAcl(format!("Invalid operation {code}")))?,
            ),
        };
        let permission = match permission {
            ANY_CODE => None,
            code => Some(
                AclPermission::from_code(code)
                    .ok_or_else(|| InvalidAcl(format!("Invalid permissionType {code}")))?,
            ),
        };
        Ok(AclBindingFilter {
            resource_type,
            resource_name: resource_name.map(str::to_owned),
            pattern,
            principal: principal.map(str::to_owned),
            host: host.map(str::to_owned),
            operation,
            permission,
        })
    }

    /// Whether `binding` is selected (Kafka's `AclBindingFilter.matches`).
    pub fn matches(&self, binding: &AclBinding) -> bool {
        if self
            .resource_type
            .is_some_and(|t| t != binding.resource_type)
        {
            return false;
        }
        if let PatternFilter::Exactly(p) = self.pattern {
            if p != binding.pattern_type {
                return false;
            }
        }
        if let Some(name) = &self.resource_name {
            let name_ok = match self.pattern {
                PatternFilter::Any | PatternFilter::Exactly(_) => *name == binding.resource_name,
                PatternFilter::Match => binding.pattern_matches(name),
            };
            if !name_ok {
                return false;
            }
        }
        self.principal
            .as_ref()
            .is_none_or(|p| *p == binding.principal)
            && self.host.as_ref().is_none_or(|h| *h == binding.host)
            && self.operation.is_none_or(|o| o == binding.operation)
            && self.permission.is_none_or(|p| p == binding.permission)
    }
}

/// Most ACLs a cluster holds (they are in every metadata snapshot and walked by every check of
/// their resource type): CreateAcls beyond it answers POLICY_VIOLATION, and a command that
/// would pass it anyway adds nothing more.
pub const MAX_ACLS: usize = 100_000;

/// Every ACL of the cluster, ordered by resource type first (so one type's bindings are one
/// range of the set).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AclSet {
    bindings: BTreeSet<AclBinding>,
}

impl AclSet {
    /// Adds a binding; false when it was there already.
    pub fn insert(&mut self, binding: AclBinding) -> bool {
        self.bindings.insert(binding)
    }

    /// Whether the binding is there.
    pub fn contains(&self, binding: &AclBinding) -> bool {
        self.bindings.contains(binding)
    }

    /// Removes a binding; false when it was not there.
    pub fn remove(&mut self, binding: &AclBinding) -> bool {
        self.bindings.remove(binding)
    }

    /// Every binding, in order.
    pub fn iter(&self) -> impl Iterator<Item = &AclBinding> {
        self.bindings.iter()
    }

    /// The bindings of one resource type.
    pub fn of_type(&self, resource_type: ResourceType) -> impl Iterator<Item = &AclBinding> {
        self.bindings
            .iter()
            .skip_while(move |b| b.resource_type < resource_type)
            .take_while(move |b| b.resource_type == resource_type)
    }

    /// The bindings `filter` selects, in order.
    pub fn matching<'a>(
        &'a self,
        filter: &'a AclBindingFilter,
    ) -> impl Iterator<Item = &'a AclBinding> {
        self.bindings.iter().filter(|b| filter.matches(b))
    }

    /// Number of bindings.
    pub fn len(&self) -> usize {
        self.bindings.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.bindings.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Client addresses are written as Java's `InetAddress.getHostAddress()` writes them.
    #[test]
    fn client_hosts_are_written_as_kafka_writes_them() {
        let host = |s: &str| kafka_host(s.parse().unwrap());
        assert_eq!(host("::1"), "0:0:0:0:0:0:0:1");
        assert_eq!(host("fe80::1:abcd"), "fe80:0:0:0:0:0:1:abcd");
        assert_eq!(
            host("2001:DB8:0:0:8:800:200C:417A"),
            "2001:db8:0:0:8:800:200c:417a"
        );
        assert_eq!(host("::ffff:10.0.0.1"), "10.0.0.1");
        assert_eq!(host("127.0.0.1"), "127.0.0.1");
    }

    /// A rule's host matches the client in Kafka's form, in any other textual form of the same
    /// address, and `*`; never another address or a non-address string.
    #[test]
    fn hosts_match_by_address() {
        let mut b = binding("t", PatternType::Literal, AclOperation::Read);
        let client = kafka_host("::1".parse().unwrap());
        for rule in ["0:0:0:0:0:0:0:1", "::1", "0::1", "0000:0000::0001", "*"] {
            b.host = rule.into();
            assert!(b.entry_matches("User:alice", &client), "{rule}");
        }
        for rule in ["::2", "127.0.0.1", "localhost", ""] {
            b.host = rule.into();
            assert!(!b.entry_matches("User:alice", &client), "{rule}");
        }
        let v4 = kafka_host("::ffff:10.0.0.1".parse().unwrap());
        for rule in ["10.0.0.1", "::ffff:10.0.0.1", "::ffff:a00:1"] {
            b.host = rule.into();
            assert!(b.entry_matches("User:alice", &v4), "{rule}");
        }
        b.host = "10.0.0.2".into();
        assert!(!b.entry_matches("User:alice", &v4));
    }

    fn binding(name: &str, pattern: PatternType, op: AclOperation) -> AclBinding {
        AclBinding {
            resource_type: ResourceType::Topic,
            resource_name: name.into(),
            pattern_type: pattern,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: op,
            permission: AclPermission::Allow,
        }
    }

    #[test]
    fn codes_round_trip_and_unknown_codes_are_refused() {
        for t in ResourceType::ALL {
            assert_eq!(ResourceType::from_code(t.code()), Some(*t));
        }
        for o in AclOperation::ALL {
            assert_eq!(AclOperation::from_code(o.code()), Some(*o));
        }
        assert_eq!(AclOperation::from_code(ANY_CODE), None);
        assert_eq!(AclOperation::from_code(0), None);
        assert_eq!(AclOperation::IdempotentWrite.name(), "IDEMPOTENT_WRITE");
        // Creations must name a concrete type, pattern, operation and permission.
        let ok = AclBinding::from_kafka(2, "t", 3, "User:alice", "*", 3, 3).unwrap();
        assert_eq!(ok, binding("t", PatternType::Literal, AclOperation::Read));
        for bad in [
            AclBinding::from_kafka(1, "t", 3, "User:a", "*", 3, 3),
            AclBinding::from_kafka(2, "t", 2, "User:a", "*", 3, 3),
            AclBinding::from_kafka(2, "t", 3, "User:a", "*", 1, 3),
            AclBinding::from_kafka(2, "t", 3, "User:a", "*", 3, 1),
            AclBinding::from_kafka(2, "", 3, "User:a", "*", 3, 3),
            AclBinding::from_kafka(2, "t", 3, "alice", "*", 3, 3),
        ] {
            assert!(bad.is_err(), "{bad:?}");
        }
    }

    #[test]
    fn patterns_match_literal_wildcard_and_prefixes() {
        assert!(
            binding("orders", PatternType::Literal, AclOperation::Read).pattern_matches("orders")
        );
        assert!(
            !binding("orders", PatternType::Literal, AclOperation::Read).pattern_matches("orders2")
        );
        assert!(binding("*", PatternType::Literal, AclOperation::Read).pattern_matches("x"));
        assert!(binding("ord", PatternType::Prefixed, AclOperation::Read).pattern_matches("orders"));
        assert!(!binding("ord", PatternType::Prefixed, AclOperation::Read).pattern_matches("or"));
        // A prefixed `*` is the literal prefix "*", not a wildcard.
        assert!(!binding("*", PatternType::Prefixed, AclOperation::Read).pattern_matches("x"));
    }

    #[test]
    fn implied_operations_are_kafkas() {
        use AclOperation::*;
        for op in [Read, Write, Delete, Alter, Describe, All] {
            assert!(op.allow_implies(Describe), "{op:?}");
        }
        assert!(!Create.allow_implies(Describe));
        assert!(AlterConfigs.allow_implies(DescribeConfigs));
        assert!(!DescribeConfigs.allow_implies(AlterConfigs));
        assert!(!Read.allow_implies(Write));
        assert!(All.allow_implies(IdempotentWrite));
        assert!(!Read.deny_covers(Describe));
        assert!(All.deny_covers(Describe));
    }

    #[test]
    fn filters_select_as_kafka_does() {
        let mut set = AclSet::default();
        set.insert(binding("orders", PatternType::Literal, AclOperation::Read));
        set.insert(binding("ord", PatternType::Prefixed, AclOperation::Write));
        set.insert(binding("*", PatternType::Literal, AclOperation::Describe));
        let mut group = binding("g", PatternType::Literal, AclOperation::Read);
        group.resource_type = ResourceType::Group;
        set.insert(group);
        let all = AclBindingFilter::from_kafka(1, None, 1, None, None, 1, 1).unwrap();
        assert_eq!(set.matching(&all).count(), 4);
        assert_eq!(set.of_type(ResourceType::Topic).count(), 3);
        assert_eq!(set.of_type(ResourceType::Group).count(), 1);
        // ANY pattern with a name: exact names only.
        let any = AclBindingFilter::from_kafka(2, Some("orders"), 1, None, None, 1, 1).unwrap();
        assert_eq!(set.matching(&any).count(), 1);
        // MATCH: everything that applies to `orders`.
        let m = AclBindingFilter::from_kafka(2, Some("orders"), 2, None, None, 1, 1).unwrap();
        assert_eq!(set.matching(&m).count(), 3);
        // Exactly PREFIXED.
        let p = AclBindingFilter::from_kafka(2, None, 4, Some("User:alice"), None, 4, 3).unwrap();
        assert_eq!(set.matching(&p).count(), 1);
        let nobody =
            AclBindingFilter::from_kafka(1, None, 1, Some("User:bob"), None, 1, 1).unwrap();
        assert_eq!(set.matching(&nobody).count(), 0);
        assert!(AclBindingFilter::from_kafka(0, None, 1, None, None, 1, 1).is_err());
    }
}
