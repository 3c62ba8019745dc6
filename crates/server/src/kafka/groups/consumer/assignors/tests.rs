//! The promises of [`Assignor::assign`] for both assignors, their balance and stickiness, and
//! [`select`]/[`by_name`]; a seeded randomized check over many generated specs.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use kafka_proto::Uuid;

use super::*;

fn topic(n: u64) -> Uuid {
    Uuid::from_u64_pair(0x1000 + n, n)
}

fn member(topics: &[u64]) -> MemberSpec {
    MemberSpec {
        subscribed: topics.iter().map(|&n| topic(n)).collect(),
        ..MemberSpec::default()
    }
}

/// A spec with `members` (id, topics subscribed) and `topics` (topic, partition count).
fn spec(members: &[(&str, &[u64])], topics: &[(u64, u32)]) -> GroupSpec {
    GroupSpec {
        members: members
            .iter()
            .map(|(id, subs)| (id.to_string(), member(subs)))
            .collect(),
        partitions_by_topic: topics.iter().map(|&(n, count)| (topic(n), count)).collect(),
    }
}

/// `group` with every member's current assignment set from `assignment`.
fn with_current(mut group: GroupSpec, assignment: &GroupAssignment) -> GroupSpec {
    for (id, spec) in group.members.iter_mut() {
        spec.current = assignment.get(id).cloned().unwrap_or_default();
    }
    group
}

/// Owner of every (topic, partition) in `assignment`.
fn owners(assignment: &GroupAssignment) -> BTreeMap<(Uuid, i32), String> {
    let mut owners = BTreeMap::new();
    for (id, topics) in assignment {
        for (topic, partitions) in topics {
            for &partition in partitions {
                owners.insert((*topic, partition), id.clone());
            }
        }
    }
    owners
}

fn size(assignment: &Assignment) -> usize {
    assignment.values().map(BTreeSet::len).sum()
}

/// How many partitions owned in both `before` and `after` changed owner, plus how many owned
/// in `after` were not owned before.
fn moved(before: &GroupAssignment, after: &GroupAssignment) -> usize {
    let before = owners(before);
    owners(after)
        .iter()
        .filter(|(partition, owner)| before.get(partition) != Some(owner))
        .count()
}

/// The promises of `Assignor::assign`: every member has an entry; every partition of a
/// subscribed topic is assigned exactly once, to a subscriber; nothing else; no empty sets.
fn check_valid(group: &GroupSpec, assignment: &GroupAssignment) {
    assert_eq!(
        assignment.keys().collect::<Vec<_>>(),
        group.members.keys().collect::<Vec<_>>(),
        "one entry per member"
    );
    let mut seen = BTreeSet::new();
    for (id, topics) in assignment {
        let spec = &group.members[id];
        for (topic, partitions) in topics {
            assert!(!partitions.is_empty(), "{id}: empty set for a topic");
            assert!(
                spec.subscribed.contains(topic),
                "{id} got a topic it does not subscribe to"
            );
            let count = group.partitions_by_topic.get(topic).copied().unwrap_or(0) as i32;
            for &partition in partitions {
                assert!(
                    (0..count).contains(&partition),
                    "{id}: partition {partition} of {count}"
                );
                assert!(seen.insert((*topic, partition)), "partition assigned twice");
            }
        }
    }
    let subscribed: BTreeSet<Uuid> = group
        .members
        .values()
        .flat_map(|m| m.subscribed.iter().copied())
        .collect();
    let expected: usize = subscribed
        .iter()
        .map(|t| group.partitions_by_topic.get(t).copied().unwrap_or(0) as usize)
        .sum();
    assert_eq!(seen.len(), expected, "every subscribed partition assigned");
}

/// Uniform's balance: no partition's owner holds two more than another subscriber of its topic
/// (with equal subscriptions: sizes differ by at most one).
fn check_balanced(group: &GroupSpec, assignment: &GroupAssignment) {
    let mut least_by_topic: BTreeMap<Uuid, usize> = BTreeMap::new();
    for (id, spec) in &group.members {
        let member_size = size(&assignment[id]);
        for topic in &spec.subscribed {
            let least = least_by_topic.entry(*topic).or_insert(member_size);
            *least = (*least).min(member_size);
        }
    }
    for (owner, topics) in assignment {
        let owner_size = size(&assignment[owner]);
        for topic in topics.keys() {
            let least = least_by_topic[topic];
            assert!(
                owner_size <= least + 1,
                "{owner} has {owner_size}, a subscriber has {least}"
            );
        }
    }
}

fn check_homogeneous_sizes(assignment: &GroupAssignment) {
    let sizes: Vec<usize> = assignment.values().map(size).collect();
    let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
    assert!(max - min <= 1, "sizes {min}..{max}");
}

#[test]
fn names_and_lookup() {
    assert_eq!(by_name("uniform").map(|a| a.name()), Some("uniform"));
    assert_eq!(by_name("range").map(|a| a.name()), Some("range"));
    assert!(by_name("Uniform").is_none());
    assert!(by_name("sticky").is_none());
    assert!(by_name(DEFAULT_ASSIGNOR).is_some());
}

#[test]
fn select_picks_the_most_named_known_assignor() {
    assert_eq!(select(std::iter::empty()), "uniform");
    assert_eq!(select([None, None].into_iter()), "uniform");
    assert_eq!(select([Some("range"), None].into_iter()), "range");
    assert_eq!(
        select([Some("range"), Some("uniform"), Some("range")].into_iter()),
        "range"
    );
    // A tie goes to the first in preference order, whatever the member order.
    assert_eq!(
        select([Some("range"), Some("uniform")].into_iter()),
        "uniform"
    );
    assert_eq!(
        select([Some("uniform"), Some("range")].into_iter()),
        "uniform"
    );
    // Unknown names are not counted.
    assert_eq!(
        select([Some("x"), Some("x"), Some("range")].into_iter()),
        "range"
    );
    assert_eq!(select([Some("x")].into_iter()), "uniform");
}

#[test]
fn empty_groups_and_topics() {
    for assignor in ASSIGNORS {
        assert!(assignor.assign(&GroupSpec::default()).is_empty());
        let group = spec(&[("a", &[]), ("b", &[1])], &[(1, 0)]);
        let assignment = assignor.assign(&group);
        check_valid(&group, &assignment);
        assert!(assignment.values().all(BTreeMap::is_empty));
        // A subscribed topic missing from the partition counts has no partitions.
        let group = spec(&[("a", &[1, 2])], &[(1, 2)]);
        let assignment = assignor.assign(&group);
        check_valid(&group, &assignment);
        assert_eq!(size(&assignment["a"]), 2);
    }
}

#[test]
fn uniform_homogeneous_is_balanced() {
    let group = spec(
        &[("a", &[1, 2]), ("b", &[1, 2]), ("c", &[1, 2])],
        &[(1, 7), (2, 4)],
    );
    let assignment = UniformAssignor.assign(&group);
    check_valid(&group, &assignment);
    let mut sizes: Vec<usize> = assignment.values().map(size).collect();
    sizes.sort();
    assert_eq!(sizes, [3, 4, 4]);
}

#[test]
fn uniform_adding_a_member_moves_only_its_share() {
    let names: Vec<String> = (0..6).map(|i| format!("m{i}")).collect();
    let members: Vec<(&str, &[u64])> = names.iter().map(|n| (n.as_str(), &[1u64][..])).collect();
    let five = spec(&members[..5], &[(1, 60)]);
    let before = UniformAssignor.assign(&five);
    let six = with_current(spec(&members, &[(1, 60)]), &before);
    let after = UniformAssignor.assign(&six);
    check_valid(&six, &after);
    check_homogeneous_sizes(&after);
    assert_eq!(size(&after["m5"]), 10);
    assert_eq!(
        moved(&before, &after),
        10,
        "only the new member's share moves"
    );
}

#[test]
fn uniform_removing_a_member_moves_only_its_partitions() {
    let group = spec(
        &[("a", &[1]), ("b", &[1]), ("c", &[1]), ("d", &[1])],
        &[(1, 10)],
    );
    let before = UniformAssignor.assign(&group);
    let gone = size(&before["b"]);
    let three = with_current(
        spec(&[("a", &[1]), ("c", &[1]), ("d", &[1])], &[(1, 10)]),
        &before,
    );
    let after = UniformAssignor.assign(&three);
    check_valid(&three, &after);
    check_homogeneous_sizes(&after);
    assert_eq!(moved(&before, &after), gone);
    for id in ["a", "c", "d"] {
        assert!(
            before[id].iter().all(|(t, ps)| ps.is_subset(&after[id][t])),
            "{id} kept all"
        );
    }
}

#[test]
fn uniform_drops_what_it_may_not_keep() {
    // a's current: a topic it left, a partition that no longer exists, and one b also claims.
    let mut group = spec(&[("a", &[1]), ("b", &[1])], &[(1, 4), (2, 4)]);
    let a = group.members.get_mut("a").unwrap();
    a.current.insert(topic(2), [0, 1].into());
    a.current.insert(topic(1), [0, 1, 9, -1].into());
    group
        .members
        .get_mut("b")
        .unwrap()
        .current
        .insert(topic(1), [1, 2].into());
    let assignment = UniformAssignor.assign(&group);
    check_valid(&group, &assignment);
    assert_eq!(assignment["a"][&topic(1)], [0, 1].into());
    assert_eq!(assignment["b"][&topic(1)], [2, 3].into());
}

#[test]
fn uniform_heterogeneous_balances_as_subscriptions_allow() {
    // c alone subscribes to topic 2, so it takes all of it and less of topic 1.
    let group = spec(
        &[("a", &[1]), ("b", &[1]), ("c", &[1, 2])],
        &[(1, 9), (2, 3)],
    );
    let assignment = UniformAssignor.assign(&group);
    check_valid(&group, &assignment);
    check_balanced(&group, &assignment);
    assert_eq!(assignment["c"][&topic(2)].len(), 3);
    let sizes: Vec<usize> = assignment.values().map(size).collect();
    assert_eq!(sizes, [4, 4, 4]);
    // A new subscriber of topic 1 only takes its share, from the biggest.
    let mut members: Vec<(&str, &[u64])> = vec![("a", &[1]), ("b", &[1]), ("c", &[1, 2])];
    members.push(("d", &[1]));
    let bigger = with_current(spec(&members, &[(1, 9), (2, 3)]), &assignment);
    let after = UniformAssignor.assign(&bigger);
    check_valid(&bigger, &after);
    check_balanced(&bigger, &after);
    assert_eq!(moved(&assignment, &after), size(&after["d"]));
}

#[test]
fn range_assigns_contiguous_co_partitioned_ranges() {
    // Kafka's documented example: M0 [T1P0, T1P1, T2P0, T2P1], M1 [T1P2, T2P2].
    let group = spec(&[("m0", &[1, 2]), ("m1", &[1, 2])], &[(1, 3), (2, 3)]);
    let assignment = RangeAssignor.assign(&group);
    check_valid(&group, &assignment);
    let expected = |ps: &[i32]| -> Assignment {
        [
            (topic(1), ps.iter().copied().collect()),
            (topic(2), ps.iter().copied().collect()),
        ]
        .into()
    };
    assert_eq!(assignment["m0"], expected(&[0, 1]));
    assert_eq!(assignment["m1"], expected(&[2]));
}

#[test]
fn range_per_topic_subscribers_and_more_members_than_partitions() {
    let group = spec(
        &[("a", &[1]), ("b", &[1, 2]), ("c", &[2]), ("d", &[2])],
        &[(1, 5), (2, 2)],
    );
    let assignment = RangeAssignor.assign(&group);
    check_valid(&group, &assignment);
    assert_eq!(assignment["a"], [(topic(1), [0, 1, 2].into())].into());
    assert_eq!(
        assignment["b"],
        [(topic(1), [3, 4].into()), (topic(2), [0].into())].into()
    );
    assert_eq!(assignment["c"], [(topic(2), [1].into())].into());
    assert!(assignment["d"].is_empty());
}

#[test]
fn range_orders_static_members_by_instance_id() {
    let mut group = spec(&[("x", &[1]), ("y", &[1]), ("z", &[1])], &[(1, 3)]);
    group.members.get_mut("z").unwrap().instance_id = Some("i0".into());
    group.members.get_mut("x").unwrap().instance_id = Some("i1".into());
    let assignment = RangeAssignor.assign(&group);
    check_valid(&group, &assignment);
    assert_eq!(assignment["z"][&topic(1)], [0].into());
    assert_eq!(assignment["x"][&topic(1)], [1].into());
    assert_eq!(assignment["y"][&topic(1)], [2].into());
    // Static member i0 rejoins under a new member id: same partitions.
    let mut rejoined = group.clone();
    let spec_z = rejoined.members.remove("z").unwrap();
    rejoined.members.insert("w".into(), spec_z);
    let again = RangeAssignor.assign(&rejoined);
    assert_eq!(again["w"], assignment["z"]);
    assert_eq!(again["x"], assignment["x"]);
}

/// A small seeded generator (xorshift64*), so the randomized check needs no crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A random spec: up to 12 members, up to 5 topics of up to 20 partitions, random
/// subscriptions (homogeneous one time in three), random (possibly invalid, overlapping)
/// current assignments.
fn random_spec(rng: &mut Rng) -> GroupSpec {
    let topics = 1 + rng.below(5);
    let mut group = GroupSpec::default();
    for t in 0..topics {
        group
            .partitions_by_topic
            .insert(topic(t), rng.below(21) as u32);
    }
    let homogeneous = rng.below(3) == 0;
    let shared: BTreeSet<Uuid> = (0..topics)
        .filter(|_| rng.below(2) == 0)
        .map(topic)
        .collect();
    for m in 0..rng.below(13) {
        let subscribed = if homogeneous {
            shared.clone()
        } else {
            (0..topics)
                .filter(|_| rng.below(2) == 0)
                .map(topic)
                .collect()
        };
        let mut current = Assignment::new();
        for t in 0..topics + 1 {
            for p in 0..22 {
                if rng.below(8) == 0 {
                    current.entry(topic(t)).or_default().insert(p);
                }
            }
        }
        let instance_id = (rng.below(2) == 0).then(|| format!("i{}", rng.below(20)));
        group.members.insert(
            format!("m{m:02}"),
            MemberSpec {
                subscribed,
                rack: None,
                instance_id,
                current,
            },
        );
    }
    group
}

#[test]
fn randomized_specs_keep_every_promise() {
    let mut rng = Rng(0x05ee_d848);
    for round in 0..400 {
        let group = random_spec(&mut rng);
        for assignor in ASSIGNORS {
            let assignment = assignor.assign(&group);
            check_valid(&group, &assignment);
            assert_eq!(
                assignor.assign(&group),
                assignment,
                "round {round}: deterministic"
            );
            // An assignment it made is kept as it is (range: recomputed the same).
            let settled = with_current(group.clone(), &assignment);
            assert_eq!(
                assignor.assign(&settled),
                assignment,
                "round {round}: stable"
            );
            if assignor.name() == "uniform" {
                check_balanced(&group, &assignment);
                if spec_index::SpecIndex::new(&group).is_homogeneous() {
                    let subscribing: GroupAssignment = assignment
                        .iter()
                        .filter(|(id, _)| !group.members[*id].subscribed.is_empty())
                        .map(|(id, a)| (id.clone(), a.clone()))
                        .collect();
                    if !subscribing.is_empty() {
                        check_homogeneous_sizes(&subscribing);
                    }
                }
            }
        }
    }
}

#[test]
fn randomized_membership_changes_move_few_partitions() {
    let mut rng = Rng(0xfeed_4b1d);
    for round in 0..200 {
        let members = 2 + rng.below(10) as usize;
        let partitions = rng.below(50) as u32;
        let names: Vec<String> = (0..=members).map(|i| format!("m{i:02}")).collect();
        let all: Vec<(&str, &[u64])> = names.iter().map(|n| (n.as_str(), &[0u64][..])).collect();
        let before = UniformAssignor.assign(&spec(&all[..members], &[(0, partitions)]));
        // One joins: at most its ceil share moves.
        let joined = with_current(spec(&all, &[(0, partitions)]), &before);
        let after = UniformAssignor.assign(&joined);
        let share = (partitions as usize).div_ceil(members + 1);
        assert!(
            moved(&before, &after) <= share,
            "round {round}: join moved too much"
        );
        // One leaves: only its partitions move.
        let leaver = rng.below(members as u64) as usize;
        let mut rest = all[..members].to_vec();
        rest.remove(leaver);
        let left = with_current(spec(&rest, &[(0, partitions)]), &before);
        let after = UniformAssignor.assign(&left);
        assert_eq!(
            moved(&before, &after),
            size(&before[&names[leaver]]),
            "round {round}: leave"
        );
    }
}

/// 10,000 members on one topic of 10,000 partitions (the coordinator assigns on every epoch
/// bump): correct, balanced, and a member joining moves one partition. Prints the times.
#[test]
fn large_group_assigns_quickly() {
    let mut group = GroupSpec::default();
    group.partitions_by_topic.insert(topic(0), 10_000);
    for m in 0..10_000 {
        group.members.insert(format!("member-{m:05}"), member(&[0]));
    }
    for assignor in ASSIGNORS {
        let started = Instant::now();
        let assignment = assignor.assign(&group);
        let fresh_ms = started.elapsed().as_secs_f64() * 1e3;
        check_valid(&group, &assignment);
        assert!(assignment.values().all(|a| size(a) == 1));
        let mut next = with_current(group.clone(), &assignment);
        next.members.insert("member-zzzzz".into(), member(&[0]));
        let started = Instant::now();
        let again = assignor.assign(&next);
        let sticky_ms = started.elapsed().as_secs_f64() * 1e3;
        check_valid(&next, &again);
        if assignor.name() == "uniform" {
            assert_eq!(
                moved(&assignment, &again),
                0,
                "the newcomer gets nothing: 10,000 < 10,001"
            );
        }
        eprintln!(
            "{}: 10,000 members x 10,000 partitions: {fresh_ms:.1} ms fresh, {sticky_ms:.1} ms \
             with current assignments and one more member",
            assignor.name()
        );
    }
}

/// 10,000 members with different subscriptions (one to three of ten topics of 1,000
/// partitions): correct and balanced, fresh and after one member leaves. Prints the times.
#[test]
fn large_heterogeneous_group_assigns_quickly() {
    let mut group = GroupSpec::default();
    for t in 0..10 {
        group.partitions_by_topic.insert(topic(t), 1_000);
    }
    for m in 0..10_000u64 {
        let topics: Vec<u64> = (0..1 + m % 3).map(|k| (m * 7 + k * 3) % 10).collect();
        group
            .members
            .insert(format!("member-{m:05}"), member(&topics));
    }
    let started = Instant::now();
    let assignment = UniformAssignor.assign(&group);
    let fresh_ms = started.elapsed().as_secs_f64() * 1e3;
    check_valid(&group, &assignment);
    let mut next = with_current(group.clone(), &assignment);
    next.members.remove("member-00004");
    let started = Instant::now();
    let again = UniformAssignor.assign(&next);
    let sticky_ms = started.elapsed().as_secs_f64() * 1e3;
    check_valid(&next, &again);
    check_balanced(&next, &again);
    assert_eq!(
        moved(&assignment, &again),
        size(&assignment["member-00004"])
    );
    eprintln!(
        "uniform, heterogeneous: 10,000 members x 10 topics x 1,000 partitions: {fresh_ms:.1} ms \
         fresh, {sticky_ms:.1} ms after one member left"
    );
}
