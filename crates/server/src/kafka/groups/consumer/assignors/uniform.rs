//! The uniform assignor (Kafka 4's default server-side assignor, `uniform`): balance first, then
//! stickiness.
//!
//! **Homogeneous groups** (every member that subscribes to anything subscribes to the same
//! topics): with `P` partitions and `N` such members, every member gets `P / N` partitions and
//! `P % N` of them one more, so sizes differ by at most one. A member keeps the partitions of its
//! current assignment it still subscribes to, up to its quota; the extra slots go first to
//! members that already hold more than `P / N`, so the fewest partitions move: a member joining
//! `N` others takes about `P / (N + 1)` partitions and nothing else moves; a member leaving
//! moves only its own partitions.
//!
//! **Heterogeneous groups**: members keep the current partitions they still subscribe to; the
//! unowned partitions go, topic by topic (topics with the fewest subscribers first), each to its
//! least loaded subscriber; then partitions move, one at a time, from a member to a less loaded
//! subscriber of the partition's topic while the member holds at least two more, until no such
//! move remains (bounded by [`MAX_BALANCE_PASSES`]). The result is balanced as far as single
//! moves can make it: no partition's owner holds more than one partition more than another
//! subscriber of its topic. Every move lowers the sum of squared member sizes, so it ends.
//!
//! Racks are not used. Ties always go to the lower member index (member id order), so the result
//! is a function of the spec.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use super::spec_index::{SpecIndex, NO_OWNER};
use super::{Assignor, GroupAssignment, GroupSpec};

/// The most passes over all partitions the heterogeneous balancing makes (each pass that moves
/// nothing ends it; the bound only guards against a pathological spec).
const MAX_BALANCE_PASSES: usize = 1_000;

/// Kafka's `uniform` assignor (see the module doc).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct UniformAssignor;

impl Assignor for UniformAssignor {
    fn name(&self) -> &'static str {
        "uniform"
    }

    fn assign(&self, group: &GroupSpec) -> GroupAssignment {
        let index = SpecIndex::new(group);
        let owners = if index.is_homogeneous() {
            assign_homogeneous(&index)
        } else {
            assign_heterogeneous(&index)
        };
        index.to_group_assignment(&owners)
    }
}

/// The owner of every global partition when all subscribing members subscribe to the same
/// topics (see the module doc).
fn assign_homogeneous(index: &SpecIndex<'_>) -> Vec<u32> {
    let partition_count = index.partition_count();
    let mut owners = vec![NO_OWNER; partition_count];
    let subscribers: Vec<u32> = (0..index.members.len())
        .filter(|&member| !index.subscriptions[member].is_empty())
        .map(|member| member as u32)
        .collect();
    if subscribers.is_empty() || partition_count == 0 {
        return owners;
    }
    let min_quota = partition_count / subscribers.len();
    let mut extras_left = partition_count % subscribers.len();

    // What every member may keep, first come first served should two claim one partition.
    let mut kept: Vec<Vec<usize>> = Vec::with_capacity(subscribers.len());
    for &member in &subscribers {
        let mut mine = Vec::new();
        for partition in index.keepable(member as usize) {
            if owners[partition] == NO_OWNER {
                owners[partition] = member;
                mine.push(partition);
            }
        }
        kept.push(mine);
    }

    // Quotas: the extra slots go first to members already above the minimum (they keep one
    // more), then in member order.
    let mut quotas = vec![min_quota; subscribers.len()];
    for (quota, mine) in quotas.iter_mut().zip(&kept) {
        if extras_left == 0 {
            break;
        }
        if mine.len() > min_quota {
            *quota += 1;
            extras_left -= 1;
        }
    }
    for quota in quotas.iter_mut() {
        if extras_left == 0 {
            break;
        }
        if *quota == min_quota {
            *quota += 1;
            extras_left -= 1;
        }
    }

    // Give up what is above quota, then fill every member up to its quota.
    for (mine, &quota) in kept.iter_mut().zip(&quotas) {
        if mine.len() > quota {
            for partition in mine.drain(quota..) {
                owners[partition] = NO_OWNER;
            }
        }
    }
    let unowned: Vec<usize> = (0..partition_count)
        .filter(|&partition| owners[partition] == NO_OWNER)
        .collect();
    // The quotas add up to the partition count, so the unowned partitions fill them exactly.
    let mut unowned = unowned.into_iter();
    for ((&member, mine), &quota) in subscribers.iter().zip(&kept).zip(&quotas) {
        for partition in unowned.by_ref().take(quota.saturating_sub(mine.len())) {
            owners[partition] = member;
        }
    }
    owners
}

/// Member sizes, with every topic's subscribers ordered by (size, member index) so the least
/// loaded subscriber of a topic is found in O(log n).
struct Loads<'s> {
    /// Partitions per member index.
    sizes: Vec<u32>,
    /// Per topic index: its subscribers as (size, member index).
    by_topic: Vec<BTreeSet<(u32, u32)>>,
    /// Every member's subscribed topic indices.
    subscriptions: &'s [Vec<usize>],
}

impl<'s> Loads<'s> {
    fn new(index: &'s SpecIndex<'_>, sizes: Vec<u32>) -> Loads<'s> {
        let mut by_topic = vec![BTreeSet::new(); index.topics.len()];
        for (member, topics) in index.subscriptions.iter().enumerate() {
            for &topic in topics {
                by_topic[topic].insert((sizes[member], member as u32));
            }
        }
        Loads {
            sizes,
            by_topic,
            subscriptions: &index.subscriptions,
        }
    }

    /// The least loaded subscriber of `topic` and its size (lowest index among equals).
    fn least_loaded(&self, topic: usize) -> Option<(u32, u32)> {
        self.by_topic[topic].first().copied()
    }

    /// Moves one partition's worth of size from member `from` to member `to`.
    fn shift(&mut self, from: u32, to: u32) {
        self.resize(from, self.sizes[from as usize] - 1);
        self.resize(to, self.sizes[to as usize] + 1);
    }

    fn resize(&mut self, member: u32, size: u32) {
        let old = self.sizes[member as usize];
        for &topic in &self.subscriptions[member as usize] {
            self.by_topic[topic].remove(&(old, member));
            self.by_topic[topic].insert((size, member));
        }
        self.sizes[member as usize] = size;
    }
}

/// The owner of every global partition when members subscribe to different topics (see the
/// module doc).
fn assign_heterogeneous(index: &SpecIndex<'_>) -> Vec<u32> {
    let member_count = index.members.len();
    let mut owners = vec![NO_OWNER; index.partition_count()];
    let mut sizes = vec![0u32; member_count];
    for (member, size) in sizes.iter_mut().enumerate() {
        for partition in index.keepable(member) {
            if owners[partition] == NO_OWNER {
                owners[partition] = member as u32;
                *size += 1;
            }
        }
    }

    // Unowned partitions to the least loaded subscriber, scarce topics first.
    let mut subscribers: Vec<Vec<u32>> = vec![Vec::new(); index.topics.len()];
    for (member, topics) in index.subscriptions.iter().enumerate() {
        for &topic in topics {
            subscribers[topic].push(member as u32);
        }
    }
    let mut topic_order: Vec<usize> = (0..index.topics.len()).collect();
    topic_order.sort_by_key(|&topic| (subscribers[topic].len(), topic));
    for topic in topic_order {
        let range = index.partitions_of(topic);
        if !owners[range.clone()].contains(&NO_OWNER) {
            continue;
        }
        let mut heap: BinaryHeap<Reverse<(u32, u32)>> = subscribers[topic]
            .iter()
            .map(|&member| Reverse((sizes[member as usize], member)))
            .collect();
        for partition in range {
            if owners[partition] != NO_OWNER {
                continue;
            }
            let Some(Reverse((size, member))) = heap.pop() else {
                break;
            };
            owners[partition] = member;
            sizes[member as usize] = size + 1;
            heap.push(Reverse((size + 1, member)));
        }
    }

    // Single moves towards balance until none helps.
    let mut loads = Loads::new(index, sizes);
    for _ in 0..MAX_BALANCE_PASSES {
        let mut moved = false;
        for topic in 0..index.topics.len() {
            for partition in index.partitions_of(topic) {
                let owner = owners[partition];
                if owner == NO_OWNER {
                    continue;
                }
                let Some((least_size, least)) = loads.least_loaded(topic) else {
                    break;
                };
                if loads.sizes[owner as usize] > least_size + 1 {
                    owners[partition] = least;
                    loads.shift(owner, least);
                    moved = true;
                }
            }
        }
        if !moved {
            break;
        }
    }
    owners
}
