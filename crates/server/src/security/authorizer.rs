//! The decision: may this principal, from this host, do this operation on this resource?
//!
//! Kafka's rules (its `StandardAuthorizer`):
//! 1. With `authorizer = "none"` everything is allowed (vdl's behaviour without security).
//! 2. A super user (`super_users`) is allowed everything.
//! 3. The bindings that apply are those of the resource's type whose pattern covers the name
//!    (LITERAL equal or `*`, PREFIXED a prefix) and whose entry names the principal (or
//!    `User:*`) and the host (or `*`).
//! 4. A DENY for the operation (or ALL) among them denies: deny wins.
//! 5. Otherwise an ALLOW for the operation, for ALL, or for an operation that implies it
//!    ([`AclOperation::allow_implies`]) allows.
//! 6. Otherwise, when no binding at all exists for the resource (whoever it names),
//!    `allow_everyone_if_no_acl_found` decides (default false: denied). Else denied.

use std::collections::HashSet;

use crate::security::acl::{AclOperation, AclPermission, AclSet, PatternType, ResourceType};
use crate::security::Principal;

/// Whether requests are checked against ACLs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthorizerMode {
    /// No checks: every request is allowed (the default).
    #[default]
    None,
    /// Kafka's ACL authorizer.
    Acl,
}

/// The authorizer's configuration and decisions; the ACLs themselves come with each call (they
/// live in the replicated metadata).
#[derive(Debug, Clone, Default)]
pub struct Authorizer {
    mode: AuthorizerMode,
    super_users: HashSet<String>,
    allow_everyone_if_no_acl_found: bool,
}

impl Authorizer {
    /// An authorizer in `mode`, with `super_users` (Kafka's `Type:name` strings) and the
    /// `allow.everyone.if.no.acl.found` rule.
    pub fn new(
        mode: AuthorizerMode,
        super_users: impl IntoIterator<Item = String>,
        allow_everyone_if_no_acl_found: bool,
    ) -> Authorizer {
        Authorizer {
            mode,
            super_users: super_users.into_iter().collect(),
            allow_everyone_if_no_acl_found,
        }
    }

    /// True when requests are checked (`authorizer = "acl"`).
    pub fn is_enabled(&self) -> bool {
        self.mode == AuthorizerMode::Acl
    }

    /// Whether `principal` is a super user.
    pub fn is_super_user(&self, principal: &Principal) -> bool {
        self.super_users.contains(&principal.to_string())
    }

    /// Whether `principal` connecting from `host` may do `operation` on the resource
    /// `resource_type`/`name`, under `acls` (the rules in the module documentation).
    pub fn authorize(
        &self,
        acls: &AclSet,
        principal: &Principal,
        host: &str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        if !self.is_enabled() || self.is_super_user(principal) {
            return true;
        }
        let who = principal.to_string();
        let mut any_for_resource = false;
        let mut allowed = false;
        for b in acls
            .of_type(resource_type)
            .filter(|b| b.pattern_matches(name))
        {
            any_for_resource = true;
            if !b.entry_matches(&who, host) {
                continue;
            }
            match b.permission {
                AclPermission::Deny if b.operation.deny_covers(operation) => return false,
                AclPermission::Allow if b.operation.allow_implies(operation) => allowed = true,
                _ => {}
            }
        }
        allowed || (!any_for_resource && self.allow_everyone_if_no_acl_found)
    }

    /// Whether `principal` from `host` may do `operation` on at least one resource of
    /// `resource_type` (Kafka's `authorizeByResourceType`, used by InitProducerId without a
    /// transactional id: WRITE on any topic): some ALLOW binding for it that no DENY binding
    /// covers entirely (a DENY on `*`, on the same literal name, or on a prefix of the
    /// allowed name or prefix). With no binding of the type at all,
    /// `allow_everyone_if_no_acl_found` decides.
    pub fn authorize_any(
        &self,
        acls: &AclSet,
        principal: &Principal,
        host: &str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool {
        if !self.is_enabled() || self.is_super_user(principal) {
            return true;
        }
        let who = principal.to_string();
        let applicable: Vec<_> = acls
            .of_type(resource_type)
            .filter(|b| b.entry_matches(&who, host))
            .collect();
        let denies: Vec<_> = applicable
            .iter()
            .filter(|b| b.permission == AclPermission::Deny && b.operation.deny_covers(operation))
            .collect();
        let denied_everything = denies
            .iter()
            .any(|d| d.pattern_type == PatternType::Literal && d.resource_name == "*");
        if denied_everything {
            return false;
        }
        let covered = |name: &str, pattern: PatternType| {
            denies.iter().any(|d| match d.pattern_type {
                PatternType::Literal => pattern == PatternType::Literal && d.resource_name == name,
                PatternType::Prefixed => name.starts_with(&d.resource_name),
            })
        };
        let allowed = applicable.iter().any(|b| {
            b.permission == AclPermission::Allow
                && b.operation.allow_implies(operation)
                && !covered(&b.resource_name, b.pattern_type)
        });
        allowed
            || (self.allow_everyone_if_no_acl_found && acls.of_type(resource_type).next().is_none())
    }

    /// Kafka's "authorized operations" bit field for a resource: bit `code` set for each of
    /// `operations` the principal may do (Metadata and DescribeGroups/Cluster report it).
    pub fn authorized_operations(
        &self,
        acls: &AclSet,
        principal: &Principal,
        host: &str,
        resource_type: ResourceType,
        name: &str,
        operations: &[AclOperation],
    ) -> i32 {
        operations
            .iter()
            .filter(|op| self.authorize(acls, principal, host, **op, resource_type, name))
            .fold(0, |bits, op| bits | (1 << op.code()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::acl::AclBinding;

    fn acl(
        name: &str,
        pattern: PatternType,
        principal: &str,
        op: AclOperation,
        permission: AclPermission,
    ) -> AclBinding {
        AclBinding {
            resource_type: ResourceType::Topic,
            resource_name: name.into(),
            pattern_type: pattern,
            principal: principal.into(),
            host: "*".into(),
            operation: op,
            permission,
        }
    }

    fn on(allow_everyone: bool) -> Authorizer {
        Authorizer::new(
            AuthorizerMode::Acl,
            ["User:admin".to_string()],
            allow_everyone,
        )
    }

    use AclOperation::*;
    use AclPermission::*;
    use PatternType::*;

    #[test]
    fn off_allows_everything_and_on_denies_without_acls() {
        let acls = AclSet::default();
        let alice = Principal::user("alice");
        let off = Authorizer::default();
        assert!(!off.is_enabled());
        assert!(off.authorize(&acls, &alice, "1.2.3.4", Write, ResourceType::Topic, "t"));
        assert!(!on(false).authorize(&acls, &alice, "1.2.3.4", Write, ResourceType::Topic, "t"));
        assert!(!on(false).authorize_any(&acls, &alice, "h", Write, ResourceType::Topic));
    }

    #[test]
    fn super_users_are_allowed_everything_even_when_denied() {
        let mut acls = AclSet::default();
        acls.insert(acl("t", Literal, "User:admin", All, Deny));
        let a = on(false);
        assert!(a.authorize(
            &acls,
            &Principal::user("admin"),
            "h",
            Delete,
            ResourceType::Topic,
            "t"
        ));
        assert!(!a.authorize(
            &acls,
            &Principal::user("bob"),
            "h",
            Read,
            ResourceType::Topic,
            "t"
        ));
    }

    #[test]
    fn deny_wins_over_allow() {
        let mut acls = AclSet::default();
        acls.insert(acl("t", Literal, "User:*", All, Allow));
        acls.insert(acl("t", Literal, "User:alice", Write, Deny));
        let a = on(false);
        let alice = Principal::user("alice");
        assert!(!a.authorize(&acls, &alice, "h", Write, ResourceType::Topic, "t"));
        assert!(a.authorize(&acls, &alice, "h", Read, ResourceType::Topic, "t"));
        // A deny of WRITE does not deny the DESCRIBE that READ implies.
        assert!(a.authorize(&acls, &alice, "h", Describe, ResourceType::Topic, "t"));
        assert!(a.authorize(
            &acls,
            &Principal::user("bob"),
            "h",
            Write,
            ResourceType::Topic,
            "t"
        ));
        // A prefixed deny wins over a literal allow.
        acls.insert(acl("t", Prefixed, "User:bob", Read, Deny));
        assert!(!a.authorize(
            &acls,
            &Principal::user("bob"),
            "h",
            Read,
            ResourceType::Topic,
            "t"
        ));
    }

    #[test]
    fn prefixed_and_implied_operations() {
        let mut acls = AclSet::default();
        acls.insert(acl("orders-", Prefixed, "User:alice", Read, Allow));
        acls.insert(acl("cfg", Literal, "User:alice", AlterConfigs, Allow));
        let a = on(false);
        let alice = Principal::user("alice");
        assert!(a.authorize(&acls, &alice, "h", Read, ResourceType::Topic, "orders-eu"));
        assert!(a.authorize(
            &acls,
            &alice,
            "h",
            Describe,
            ResourceType::Topic,
            "orders-eu"
        ));
        assert!(!a.authorize(&acls, &alice, "h", Write, ResourceType::Topic, "orders-eu"));
        assert!(!a.authorize(&acls, &alice, "h", Read, ResourceType::Topic, "orders"));
        assert!(!a.authorize(&acls, &alice, "h", Read, ResourceType::Group, "orders-eu"));
        assert!(a.authorize(
            &acls,
            &alice,
            "h",
            DescribeConfigs,
            ResourceType::Topic,
            "cfg"
        ));
        assert!(!a.authorize(&acls, &alice, "h", Describe, ResourceType::Topic, "cfg"));
        let bits = a.authorized_operations(
            &acls,
            &alice,
            "h",
            ResourceType::Topic,
            "orders-1",
            &[Read, Write, Describe],
        );
        assert_eq!(bits, (1 << 3) | (1 << 8));
    }

    #[test]
    fn hosts_must_match() {
        let mut acls = AclSet::default();
        let mut b = acl("t", Literal, "User:alice", Read, Allow);
        b.host = "10.0.0.1".into();
        acls.insert(b);
        let a = on(false);
        let alice = Principal::user("alice");
        assert!(a.authorize(&acls, &alice, "10.0.0.1", Read, ResourceType::Topic, "t"));
        assert!(!a.authorize(&acls, &alice, "10.0.0.2", Read, ResourceType::Topic, "t"));
    }

    #[test]
    fn allow_everyone_applies_only_to_resources_without_any_acl() {
        let mut acls = AclSet::default();
        acls.insert(acl("guarded", Literal, "User:alice", Read, Allow));
        let a = on(true);
        let bob = Principal::user("bob");
        assert!(a.authorize(&acls, &bob, "h", Write, ResourceType::Topic, "open"));
        assert!(!a.authorize(&acls, &bob, "h", Read, ResourceType::Topic, "guarded"));
        assert!(!on(false).authorize(&acls, &bob, "h", Write, ResourceType::Topic, "open"));
    }

    #[test]
    fn any_resource_of_a_type() {
        let a = on(false);
        let alice = Principal::user("alice");
        let mut acls = AclSet::default();
        acls.insert(acl("logs-", Prefixed, "User:alice", Write, Allow));
        assert!(a.authorize_any(&acls, &alice, "h", Write, ResourceType::Topic));
        assert!(!a.authorize_any(&acls, &alice, "h", Write, ResourceType::Group));
        // A deny on a shorter prefix covers the allowed prefix entirely.
        acls.insert(acl("log", Prefixed, "User:alice", Write, Deny));
        assert!(!a.authorize_any(&acls, &alice, "h", Write, ResourceType::Topic));
        acls.insert(acl("other", Literal, "User:alice", All, Allow));
        assert!(a.authorize_any(&acls, &alice, "h", Write, ResourceType::Topic));
        acls.insert(acl("*", Literal, "User:*", Write, Deny));
        assert!(!a.authorize_any(&acls, &alice, "h", Write, ResourceType::Topic));
    }
}
