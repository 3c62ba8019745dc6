//! Replica placement: which nodes hold each partition of a topic, and which of them should lead.
//!
//! A topic's replica lists are chosen once, by the node that proposes the `CreateTopic` (or
//! `CreatePartitions`) metadata command, and travel in the command, so every node applies the
//! same lists and a later change of the member list never moves existing data. The lists follow
//! Kafka's rack-unaware assignment: partition `p`'s first replica (its preferred leader) is
//! member `(start + p) % n`, so leaders take turns over the nodes; its followers sit at offsets
//! `1 + (shift + j) % (n - 1)` from it (`j` = 0, 1, ...), where `shift` grows by one each time
//! `p` wraps around the members, so followers spread as evenly as leaders. `start` and `shift`
//! are drawn at random per topic (as Kafka does), so topics do not all start on the same node.
//! With `p` partitions and replication factor `r` over `n` nodes, each node holds `p * r / n`
//! replicas and leads `p / n` partitions (rounded either way).
//!
//! Commands written before placement carry no lists: their partitions live on every member,
//! led by the member [`every_member`] puts first (the rotation those versions used).

use std::collections::HashSet;

/// The replica lists of partitions `first..count` of a topic over `members` (ascending node
/// ids): `replication_factor` distinct members each, the preferred leader first, laid out from
/// `start` and `shift` as the module documentation says. The list of partition `p` depends only
/// on `p`, `start` and `shift`, so a topic grown later continues the same pattern.
pub fn assign(
    members: &[u64],
    replication_factor: usize,
    first: u32,
    count: u32,
    start: usize,
    shift: usize,
) -> Vec<Vec<u64>> {
    let n = members.len();
    assert!(n > 0, "a cluster has at least one member");
    assert!(
        (1..=n).contains(&replication_factor),
        "replication factor {replication_factor} with {n} members"
    );
    (first..count)
        .map(|p| {
            let p = p as usize;
            let leader = (start + p) % n;
            // Kafka moves the followers on by one each time the leaders wrap around.
            let shift = shift + p / n;
            let mut replicas = Vec::with_capacity(replication_factor);
            replicas.push(members[leader]);
            for j in 0..replication_factor - 1 {
                // n > 1 here: replication_factor <= n and this loop runs only when it is >= 2.
                let offset = 1 + (shift + j) % (n - 1);
                replicas.push(members[(leader + offset) % n]);
            }
            replicas
        })
        .collect()
}

/// The `start` and `shift` of an existing topic whose partition 0 has `replicas`, so new
/// partitions continue its pattern; `None` when they cannot be recovered (a topic from before
/// placement, on every member, or members that changed since).
pub fn pattern_of(members: &[u64], replicas: &[u64]) -> Option<(usize, usize)> {
    let n = members.len();
    let position = |id: &u64| members.iter().position(|m| m == id);
    let start = position(replicas.first()?)?;
    let Some(second) = replicas.get(1) else {
        return Some((start, 0));
    };
    let offset = (position(second)? + n - start) % n;
    (offset >= 1).then(|| (start, offset - 1))
}

/// A random `(start, shift)` for a new topic over `n` members (Kafka draws both at random).
pub fn random_pattern(n: usize) -> (usize, usize) {
    use std::hash::{BuildHasher, Hasher};
    // std's RandomState is seeded from the operating system's randomness per process and
    // varies per instance; mixing in the clock makes two draws in a row differ too.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(nanos);
    let r = h.finish();
    let n = n.max(1) as u64;
    ((r % n) as usize, ((r / n) % n) as usize)
}

/// The replicas of partition `partition` of a topic created before placement: every member,
/// starting at the member drawn from the topic's name and incarnation and taking turns
/// partition after partition (so leaders spread), as those versions placed them.
pub fn every_member(members: &[u64], name: &str, incarnation: u64, partition: u32) -> Vec<u64> {
    if members.is_empty() {
        return Vec::new();
    }
    let n = members.len() as u64;
    let start = crate::replication::ids::group_id_for_topic(name, incarnation, 0) % n;
    let first = ((start + u64::from(partition)) % n) as usize;
    let mut replicas = members.to_vec();
    replicas.rotate_left(first);
    replicas
}

/// Why a replica list in a metadata command is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadAssignment {
    /// The command lists a different number of partitions than it creates.
    #[error("{given} replica lists for {expected} partitions")]
    Count {
        /// Lists in the command.
        given: usize,
        /// Partitions the command creates or grows to.
        expected: usize,
    },
    /// A partition without replicas.
    #[error("partition {0} has no replicas")]
    Empty(usize),
    /// A replica that is not a member of the cluster.
    #[error("partition {partition}: node {node} is not a member")]
    NotMember {
        /// The partition.
        partition: usize,
        /// The node named.
        node: u64,
    },
    /// A node named twice for one partition.
    #[error("partition {partition}: node {node} listed twice")]
    Duplicate {
        /// The partition.
        partition: usize,
        /// The node named.
        node: u64,
    },
}

/// Checks the replica lists of a command creating (or growing to) `expected` partitions: one
/// list per partition, each non-empty, of distinct members.
pub fn check(lists: &[Vec<u64>], expected: usize, members: &[u64]) -> Result<(), BadAssignment> {
    if lists.len() != expected {
        return Err(BadAssignment::Count {
            given: lists.len(),
            expected,
        });
    }
    for (partition, list) in lists.iter().enumerate() {
        if list.is_empty() {
            return Err(BadAssignment::Empty(partition));
        }
        let mut seen = HashSet::with_capacity(list.len());
        for node in list {
            if !members.contains(node) {
                return Err(BadAssignment::NotMember {
                    partition,
                    node: *node,
                });
            }
            if !seen.insert(*node) {
                return Err(BadAssignment::Duplicate {
                    partition,
                    node: *node,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn counts(lists: &[Vec<u64>]) -> (HashMap<u64, usize>, HashMap<u64, usize>) {
        let mut hosted = HashMap::new();
        let mut led = HashMap::new();
        for l in lists {
            *led.entry(l[0]).or_insert(0) += 1;
            for r in l {
                *hosted.entry(*r).or_insert(0) += 1;
            }
        }
        (hosted, led)
    }

    /// The example: 10 partitions, replication factor 3, 5 nodes: each node holds 6
    /// replicas and leads 2 partitions, whatever the random start and shift.
    #[test]
    fn replicas_and_leaders_spread_evenly() {
        let members = [1, 2, 3, 4, 5];
        for start in 0..5 {
            for shift in 0..5 {
                let lists = assign(&members, 3, 0, 10, start, shift);
                check(&lists, 10, &members).unwrap();
                let (hosted, led) = counts(&lists);
                assert!(hosted.values().all(|c| *c == 6), "{hosted:?}");
                assert!(led.values().all(|c| *c == 2), "{led:?}");
                assert_eq!(hosted.len(), 5);
            }
        }
        // Every cluster size and factor: distinct replicas, balanced within one.
        for n in 1..=7usize {
            let members: Vec<u64> = (1..=n as u64).map(|i| i * 10).collect();
            for rf in 1..=n {
                for partitions in [1u32, 3, 7, 12, 30] {
                    let (start, shift) = random_pattern(n);
                    let lists = assign(&members, rf, 0, partitions, start, shift);
                    check(&lists, partitions as usize, &members).unwrap();
                    assert!(lists.iter().all(|l| l.len() == rf));
                    let (hosted, led) = counts(&lists);
                    let most = hosted.values().max().unwrap();
                    let least = if hosted.len() < n {
                        &0
                    } else {
                        hosted.values().min().unwrap()
                    };
                    assert!(
                        most - least <= rf,
                        "n {n} rf {rf} p {partitions}: {hosted:?}"
                    );
                    let most = led.values().max().unwrap();
                    let least = if led.len() < n {
                        &0
                    } else {
                        led.values().min().unwrap()
                    };
                    assert!(most - least <= 1, "leaders n {n} rf {rf}: {led:?}");
                }
            }
        }
    }

    /// A grown topic continues its pattern: the lists of new partitions are those the topic
    /// would have had with that many partitions from the start.
    #[test]
    fn growth_continues_the_pattern() {
        let members = [1, 2, 3, 4, 5];
        for (start, shift) in [(0, 0), (3, 2), (4, 3)] {
            let all = assign(&members, 3, 0, 12, start, shift);
            let pattern = pattern_of(&members, &all[0]).unwrap();
            assert_eq!(pattern.0, start);
            assert_eq!(assign(&members, 3, 7, 12, pattern.0, pattern.1), all[7..]);
        }
        assert_eq!(pattern_of(&members, &[9, 1]), None, "not a member");
        assert_eq!(pattern_of(&members, &[2]), Some((1, 0)));
    }

    /// Topics from before placement: every member, rotated to the old preferred leader.
    #[test]
    fn old_topics_live_on_every_member() {
        let members = [1, 2, 3];
        let leaders: HashSet<u64> = (0..3)
            .map(|p| {
                let r = every_member(&members, "t", 7, p);
                let mut sorted = r.clone();
                sorted.sort_unstable();
                assert_eq!(sorted, members);
                r[0]
            })
            .collect();
        assert_eq!(leaders.len(), 3);
    }

    #[test]
    fn bad_lists_are_refused() {
        let m = [1, 2, 3];
        assert!(check(&[vec![1, 2]], 2, &m).is_err());
        assert!(check(&[vec![]], 1, &m).is_err());
        assert!(check(&[vec![1, 4]], 1, &m).is_err());
        assert!(check(&[vec![1, 1]], 1, &m).is_err());
        assert!(check(&[vec![3, 1]], 1, &m).is_ok());
    }
}
