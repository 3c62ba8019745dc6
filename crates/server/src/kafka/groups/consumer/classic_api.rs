//! The classic membership handlers' share for consumer-protocol groups: JoinGroup, SyncGroup,
//! Heartbeat and LeaveGroup on a consumer group with members are served by its classic-type
//! members ([`super::classic_ops`]), with this node's topics, settings and assignors as their
//! context; a JoinGroup or LeaveGroup that changed the group is answered once the group's
//! record is written (as a ConsumerGroupHeartbeat is).

use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_proto::error_code::ErrorCode;

use super::super::limits::COMMIT_TIMEOUT;
use super::super::node_coordinator::{coordinator, coordinator_term};
use super::super::types::{JoinOutcome, JoinParams, SyncOutcome, SyncParams};
use super::heartbeat_api::{assignor, settings, NodeTopics};
use super::types::Context;
use crate::kafka::host::GroupsHost;

/// Runs `f` with this node's consumer group context.
fn with_context<H: GroupsHost, R>(node: &H, f: impl FnOnce(&Context<'_>) -> R) -> R {
    let settings = settings(node);
    let topics = NodeTopics(node);
    let ctx = Context {
        topics: &topics,
        settings: &settings,
        assignor: &assignor,
    };
    f(&ctx)
}

/// Waits until the coordinator's record `seq` of term `term` is written: false when this node
/// stops coordinating first (after [`COMMIT_TIMEOUT`] it gives up waiting: true).
pub(crate) async fn record_written<H: GroupsHost>(node: &Arc<H>, term: u64, seq: u64) -> bool {
    if seq == 0 {
        return true;
    }
    let mut stored = coordinator(node).stored_receiver();
    let deadline = tokio::time::Instant::now() + COMMIT_TIMEOUT;
    loop {
        if *stored.borrow_and_update() >= seq {
            return true;
        }
        if coordinator_term(node) != Some(term) {
            return false;
        }
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!("answering before a consumer group's record is written");
            return true;
        }
        let _ = tokio::time::timeout(Duration::from_millis(100), stored.changed()).await;
    }
}

/// A classic JoinGroup on a consumer group with members: None when `p.group_id` is not one
/// (the classic path serves it); otherwise the answer once its record is written.
pub(in crate::kafka::groups) fn join<H: GroupsHost>(
    node: &Arc<H>,
    term: u64,
    p: &JoinParams,
) -> Option<impl std::future::Future<Output = JoinOutcome>> {
    let c = coordinator(node);
    if !c.is_consumer_group(&p.group_id) {
        return None;
    }
    let (o, seq) = with_context(&**node, |ctx| {
        c.consumer_classic_join(term, p, ctx, Instant::now())
    })?;
    let node = node.clone();
    Some(async move {
        if record_written(&node, term, seq).await {
            o
        } else {
            JoinOutcome::error(ErrorCode::NotCoordinator, &o.member_id)
        }
    })
}

/// A classic SyncGroup on a consumer group: None when `p.group_id` is not one.
pub(in crate::kafka::groups) fn sync<H: GroupsHost>(
    node: &Arc<H>,
    term: u64,
    p: &SyncParams,
) -> Option<SyncOutcome> {
    let c = coordinator(node);
    if !c.is_consumer_group(&p.group_id) {
        return None;
    }
    with_context(&**node, |ctx| {
        c.consumer_classic_sync(term, p, ctx, Instant::now())
    })
}

/// A classic Heartbeat on a consumer group: None when `group_id` is not one.
pub(crate) fn heartbeat<H: GroupsHost>(
    node: &Arc<H>,
    term: u64,
    group_id: &str,
    generation_id: i32,
    member_id: &str,
    instance_id: Option<&str>,
) -> Option<ErrorCode> {
    let c = coordinator(node);
    if !c.is_consumer_group(group_id) {
        return None;
    }
    with_context(&**node, |ctx| {
        c.consumer_classic_heartbeat(
            term,
            group_id,
            generation_id,
            member_id,
            instance_id,
            ctx,
            Instant::now(),
        )
    })
}

/// A classic LeaveGroup on a consumer group: None when `group_id` is not one; otherwise one
/// error per member once the group's record is written.
pub(crate) fn leave<H: GroupsHost>(
    node: &Arc<H>,
    term: u64,
    group_id: &str,
    members: &[(String, Option<String>)],
) -> Option<impl std::future::Future<Output = Vec<ErrorCode>>> {
    let c = coordinator(node);
    if !c.is_consumer_group(group_id) {
        return None;
    }
    let (errors, seq) = c.consumer_classic_leave(term, group_id, members)?;
    let node = node.clone();
    let n = members.len();
    Some(async move {
        if record_written(&node, term, seq).await {
            errors
        } else {
            vec![ErrorCode::NotCoordinator; n]
        }
    })
}

/// Downgrades the consumer groups a tick left with classic members only (see
/// [`super::super::coordinator::Coordinator::downgrade_after_tick`]).
pub(crate) fn downgrade_after_tick<H: GroupsHost>(node: &Arc<H>) {
    let Some(term) = coordinator_term(node) else {
        return;
    };
    let c = coordinator(node);
    with_context(&**node, |ctx| {
        c.downgrade_after_tick(term, ctx, Instant::now())
    });
}
