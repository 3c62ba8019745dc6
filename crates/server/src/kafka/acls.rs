//! CreateAcls, DescribeAcls and DeleteAcls: managing the replicated ACLs, as Kafka 3.9 does.
//!
//! - Without an authorizer (`authorizer = "none"`) every answer is SECURITY_DISABLED, as
//!   Kafka answers when no authorizer is configured.
//! - Creating and deleting need ALTER on the cluster, describing DESCRIBE on the cluster
//!   (CLUSTER_AUTHORIZATION_FAILED otherwise).
//! - A creation is checked as Kafka's controller checks new ACLs (INVALID_REQUEST with
//!   Kafka's message otherwise); the valid ones of a request are committed in one metadata
//!   command. Creating an ACL that exists is no error. Beyond [`MAX_ACLS`] in all, the
//!   creations answer POLICY_VIOLATION.
//! - A deletion first commits a no-op barrier (so this node has applied every ACL change
//!   committed before the request), then finds the ACLs each filter matches and commits their
//!   removal; the response lists them per filter.

use std::sync::Arc;
use std::time::Duration;

use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::Response;
use kafka_proto::messages::create_acls_request::CreateAclsRequest;
use kafka_proto::messages::create_acls_response::{AclCreationResult, CreateAclsResponse};
use kafka_proto::messages::delete_acls_request::DeleteAclsRequest;
use kafka_proto::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl, DeleteAclsResponse,
};
use kafka_proto::messages::describe_acls_request::DescribeAclsRequest;
use kafka_proto::messages::describe_acls_response::{
    AclDescription, DescribeAclsResource, DescribeAclsResponse,
};

use crate::kafka::access::Access;
use crate::kafka::error_codes::{append_error_code, Proposal};
use crate::kafka::host::AclsHost;
use crate::kafka::reply::{self, Reply};
use crate::metadata::MetaCommand;
use crate::security::acl::{AclBinding, AclBindingFilter, AclOperation, MAX_ACLS};

/// How long an ACL change waits for the metadata commit.
const ACL_COMMIT_TIMEOUT: Duration = Duration::from_secs(30);

/// Kafka's message when no authorizer is configured.
const NO_AUTHORIZER: &str = "No Authorizer is configured.";

/// Why a request as a whole is refused, if it is: no authorizer, or the principal lacks
/// `operation` on the cluster.
fn refusal<H: AclsHost>(
    node: &H,
    access: &Access,
    operation: AclOperation,
) -> Option<(ErrorCode, String)> {
    if !node.authorizer().is_enabled() {
        return Some((ErrorCode::SecurityDisabled, NO_AUTHORIZER.to_owned()));
    }
    if !access.cluster(operation) {
        return Some((
            ErrorCode::ClusterAuthorizationFailed,
            "Cluster authorization failed.".to_owned(),
        ));
    }
    None
}

/// Handles CreateAcls.
pub fn create_acls<H: AclsHost>(
    node: &Arc<H>,
    access: &Access,
    req: CreateAclsRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let refused = refusal(node.as_ref(), access, AclOperation::Alter);
    let node = node.clone();
    reply::later(correlation_id, version, async move {
        let mut results: Vec<AclCreationResult> = Vec::with_capacity(req.creations.len());
        let mut valid: Vec<(usize, AclBinding)> = Vec::new();
        for (i, c) in req.creations.iter().enumerate() {
            let mut r = AclCreationResult {
                error_message: None,
                ..Default::default()
            };
            if let Some((code, message)) = &refused {
                r.error_code = code.code();
                r.error_message = Some(message.clone());
            } else {
                match AclBinding::from_kafka(
                    c.resource_type,
                    &c.resource_name,
                    c.resource_pattern_type,
                    &c.principal,
                    &c.host,
                    c.operation,
                    c.permission_type,
                ) {
                    Ok(b) => valid.push((i, b)),
                    Err(e) => {
                        r.error_code = ErrorCode::InvalidRequest.code();
                        r.error_message = Some(e.to_string());
                    }
                }
            }
            results.push(r);
        }
        let new_count = {
            let meta = node.metadata();
            valid.iter().filter(|(_, b)| !meta.acls.contains(b)).count() + meta.acls.len()
        };
        if new_count > MAX_ACLS {
            for (i, _) in valid.drain(..) {
                results[i].error_code = ErrorCode::PolicyViolation.code();
                results[i].error_message =
                    Some(format!("the cluster holds at most {MAX_ACLS} ACLs"));
            }
        }
        if !valid.is_empty() {
            let cmd = MetaCommand::CreateAcls {
                acls: valid.iter().map(|(_, b)| b.clone()).collect(),
            };
            if let Err(e) = node
                .metadata_proposer()
                .propose(&cmd, ACL_COMMIT_TIMEOUT)
                .await
            {
                for (i, _) in &valid {
                    results[*i].error_code = append_error_code(&e, Proposal::MetadataChange).code();
                    results[*i].error_message = Some(e.to_string());
                }
            }
        }
        Response::CreateAcls(CreateAclsResponse {
            results,
            ..Default::default()
        })
    })
}

/// Handles DescribeAcls: the matching ACLs grouped by resource pattern.
pub fn describe_acls<H: AclsHost>(
    node: &H,
    access: &Access,
    req: &DescribeAclsRequest,
) -> DescribeAclsResponse {
    let mut response = DescribeAclsResponse {
        error_message: None,
        ..Default::default()
    };
    if let Some((code, message)) = refusal(node, access, AclOperation::Describe) {
        response.error_code = code.code();
        response.error_message = Some(message);
        return response;
    }
    let filter = match AclBindingFilter::from_kafka(
        req.resource_type_filter,
        req.resource_name_filter.as_deref(),
        req.pattern_type_filter,
        req.principal_filter.as_deref(),
        req.host_filter.as_deref(),
        req.operation,
        req.permission_type,
    ) {
        Ok(f) => f,
        Err(e) => {
            response.error_code = ErrorCode::InvalidRequest.code();
            response.error_message = Some(e.to_string());
            return response;
        }
    };
    let meta = node.metadata();
    // Bindings are ordered by resource type, name, pattern type first: one resource's ACLs
    // are contiguous.
    for b in meta.acls.matching(&filter) {
        let same = response.resources.last().is_some_and(|r| {
            r.resource_type == b.resource_type.code()
                && r.resource_name == b.resource_name
                && r.pattern_type == b.pattern_type.code()
        });
        if !same {
            response.resources.push(DescribeAclsResource {
                resource_type: b.resource_type.code(),
                resource_name: b.resource_name.clone(),
                pattern_type: b.pattern_type.code(),
                ..Default::default()
            });
        }
        if let Some(r) = response.resources.last_mut() {
            r.acls.push(AclDescription {
                principal: b.principal.clone(),
                host: b.host.clone(),
                operation: b.operation.code(),
                permission_type: b.permission.code(),
                ..Default::default()
            });
        }
    }
    response
}

/// Handles DeleteAcls.
pub fn delete_acls<H: AclsHost>(
    node: &Arc<H>,
    access: &Access,
    req: DeleteAclsRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let refused = refusal(node.as_ref(), access, AclOperation::Alter);
    let node = node.clone();
    reply::later(correlation_id, version, async move {
        let mut results: Vec<DeleteAclsFilterResult> = Vec::with_capacity(req.filters.len());
        let mut filters: Vec<(usize, AclBindingFilter)> = Vec::new();
        for (i, f) in req.filters.iter().enumerate() {
            let mut r = DeleteAclsFilterResult {
                error_message: None,
                ..Default::default()
            };
            if let Some((code, message)) = &refused {
                r.error_code = code.code();
                r.error_message = Some(message.clone());
            } else {
                match AclBindingFilter::from_kafka(
                    f.resource_type_filter,
                    f.resource_name_filter.as_deref(),
                    f.pattern_type_filter,
                    f.principal_filter.as_deref(),
                    f.host_filter.as_deref(),
                    f.operation,
                    f.permission_type,
                ) {
                    Ok(filter) => filters.push((i, filter)),
                    Err(e) => {
                        r.error_code = ErrorCode::InvalidRequest.code();
                        r.error_message = Some(e.to_string());
                    }
                }
            }
            results.push(r);
        }
        if !filters.is_empty() {
            let outcome = delete_matching(node.as_ref(), &filters).await;
            for (i, filter) in &filters {
                match &outcome {
                    Ok(deleted) => {
                        results[*i].matching_acls = deleted
                            .iter()
                            .filter(|b| filter.matches(b))
                            .map(matching_acl)
                            .collect();
                    }
                    Err((code, message)) => {
                        results[*i].error_code = code.code();
                        results[*i].error_message = Some(message.clone());
                    }
                }
            }
        }
        Response::DeleteAcls(DeleteAclsResponse {
            filter_results: results,
            ..Default::default()
        })
    })
}

/// Commits the removal of every ACL one of `filters` matches (after a barrier, see the module
/// documentation) and returns them.
async fn delete_matching<H: AclsHost>(
    node: &H,
    filters: &[(usize, AclBindingFilter)],
) -> Result<Vec<AclBinding>, (ErrorCode, String)> {
    let failed = |e: crate::replication::group::AppendError| {
        (
            append_error_code(&e, Proposal::MetadataChange),
            e.to_string(),
        )
    };
    node.metadata_proposer()
        .propose(&MetaCommand::barrier(), ACL_COMMIT_TIMEOUT)
        .await
        .map_err(failed)?;
    let doomed: Vec<AclBinding> = {
        let meta = node.metadata();
        meta.acls
            .iter()
            .filter(|b| filters.iter().any(|(_, f)| f.matches(b)))
            .cloned()
            .collect()
    };
    if !doomed.is_empty() {
        node.metadata_proposer()
            .propose(
                &MetaCommand::DeleteAcls {
                    acls: doomed.clone(),
                },
                ACL_COMMIT_TIMEOUT,
            )
            .await
            .map_err(failed)?;
    }
    Ok(doomed)
}

fn matching_acl(b: &AclBinding) -> DeleteAclsMatchingAcl {
    DeleteAclsMatchingAcl {
        error_code: 0,
        error_message: None,
        resource_type: b.resource_type.code(),
        resource_name: b.resource_name.clone(),
        pattern_type: b.pattern_type.code(),
        principal: b.principal.clone(),
        host: b.host.clone(),
        operation: b.operation.code(),
        permission_type: b.permission.code(),
        ..Default::default()
    }
}
