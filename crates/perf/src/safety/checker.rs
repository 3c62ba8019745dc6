//! Finds, in a [`History`], the anomalies of Jepsen's Kafka (queue) workload, per partition
//! and in total:
//! - lost: acknowledged, absent from the final read;
//! - duplicate: one value at two or more (partition, offset) positions;
//! - inconsistent offset: one offset read with different values, or an acknowledged value
//!   found at another position than the one acknowledged;
//! - non-monotonic poll: a consumer seeing a partition's offsets go backwards or repeat
//!   (a group member: within one generation's assignment);
//! - poll skip: a consumer jumping over offsets that the final read shows exist (a group
//!   member: within one generation's assignment, starting from the offset it was assigned at);
//! - lost by the group: acknowledged, below the group's final committed offset, and polled by
//!   no group member (the group moved past a record nobody read);
//! - unseen: acknowledged but polled by no consumer, and group-unseen: by no group member
//!   (reported; not a safety failure: Jepsen's "unseen" at the end of a run);
//! - redelivered: a record a group member polled that another member or generation had polled
//!   before, after a rebalance resumed from an older committed offset (at-least-once delivery:
//!   counted, not a safety failure).
//!
//! Every duplicate value is a safety failure: values are unique, a plain producer never sends
//! one twice, and an idempotent producer's retries of one batch must be written once.
//!
//! Plus availability (the longest window without an acknowledged send), latency and the
//! idempotent producers' retries.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use super::history::{History, SendOutcome};

/// How many example values are kept per anomaly kind.
pub const MAX_EXAMPLES: usize = 10;

/// Counts of each anomaly.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Anomalies {
    /// Acknowledged sends.
    pub acked: u64,
    /// Sends with an unknown outcome (error or timeout).
    pub unknown: u64,
    /// Acknowledged values missing from the final read.
    pub lost: u64,
    /// Values found at more than one position.
    pub duplicate: u64,
    /// Offsets read with different values, plus values found away from their acknowledged offset.
    pub inconsistent_offsets: u64,
    /// Polls at an offset not after the same consumer's previous poll of the partition.
    pub non_monotonic_poll: u64,
    /// Jumps of a consumer over offsets the final read holds.
    pub poll_skip: u64,
    /// Acknowledged values no consumer polled.
    pub unseen: u64,
    /// Acknowledged values below the group's final committed offset that no group member
    /// polled.
    pub group_lost: u64,
    /// Acknowledged values no group member polled (group mode).
    pub group_unseen: u64,
    /// Group polls of an offset another member or generation had polled before.
    pub group_redelivered: u64,
}

impl Anomalies {
    /// Whether no safety anomaly was found (unseen, group unseen and group redelivered are not
    /// safety anomalies).
    pub fn is_safe(&self) -> bool {
        self.lost == 0
            && self.duplicate == 0
            && self.inconsistent_offsets == 0
            && self.non_monotonic_poll == 0
            && self.poll_skip == 0
            && self.group_lost == 0
    }

    fn add(&mut self, o: &Anomalies) {
        self.acked += o.acked;
        self.unknown += o.unknown;
        self.lost += o.lost;
        self.duplicate += o.duplicate;
        self.inconsistent_offsets += o.inconsistent_offsets;
        self.non_monotonic_poll += o.non_monotonic_poll;
        self.poll_skip += o.poll_skip;
        self.unseen += o.unseen;
        self.group_lost += o.group_lost;
        self.group_unseen += o.group_unseen;
        self.group_redelivered += o.group_redelivered;
    }
}

/// The checker's verdict.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Report {
    /// Whether no safety anomaly was found.
    pub safe: bool,
    /// Totals over all partitions.
    pub total: Anomalies,
    /// By partition index.
    pub partitions: BTreeMap<i32, Anomalies>,
    /// Records in the final read.
    pub final_records: u64,
    /// Records polled by all consumers.
    pub polled_records: u64,
    /// Records polled by group members.
    pub group_polled_records: u64,
    /// Distinct group generations members were assigned partitions in.
    pub group_generations: u64,
    /// Whether the producers were idempotent.
    pub idempotent: bool,
    /// Times an idempotent producer sent a batch again after an unknown outcome.
    pub produce_retries: u64,
    /// Sends answered DUPLICATE_SEQUENCE_NUMBER (already written; counted as acked).
    pub acked_duplicate: u64,
    /// Longest time without an acknowledged send, in milliseconds (from the start, between
    /// acknowledgements, to the end of the run).
    pub longest_unavailable_ms: u64,
    /// Median latency of acknowledged sends, in milliseconds.
    pub produce_latency_ms_p50: f64,
    /// 99th percentile latency of acknowledged sends, in milliseconds.
    pub produce_latency_ms_p99: f64,
    /// Up to [`MAX_EXAMPLES`] descriptions per anomaly kind.
    pub examples: BTreeMap<&'static str, Vec<String>>,
    /// The transactional checker's verdict (transactional runs; its anomalies count in `safe`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub txn: Option<super::txn_checker::TxnReport>,
}

impl Report {
    fn note(&mut self, partition: i32, kind: &'static str, example: impl FnOnce() -> String) {
        let a = self.partitions.entry(partition).or_default();
        match kind {
            "lost" => a.lost += 1,
            "duplicate" => a.duplicate += 1,
            "inconsistent_offsets" => a.inconsistent_offsets += 1,
            "non_monotonic_poll" => a.non_monotonic_poll += 1,
            "poll_skip" => a.poll_skip += 1,
            "unseen" => a.unseen += 1,
            "group_lost" => a.group_lost += 1,
            "group_unseen" => a.group_unseen += 1,
            "group_redelivered" => a.group_redelivered += 1,
            other => unreachable!("unknown anomaly kind {other}"),
        }
        let list = self.examples.entry(kind).or_default();
        if list.len() < MAX_EXAMPLES {
            list.push(example());
        }
    }
}

/// Checks a history.
pub fn check(h: &History) -> Report {
    let mut report = Report::default();
    for p in 0..h.info.partitions {
        report.partitions.insert(p, Anomalies::default());
    }

    // Every position each value was read at, and every value each position was read with.
    let mut positions_of: HashMap<&str, BTreeSet<(i32, i64)>> = HashMap::new();
    let mut values_at: BTreeMap<(i32, i64), BTreeSet<&str>> = BTreeMap::new();
    let reads = h.final_read.iter().chain(h.polls.iter().map(|p| &p.read));
    for r in reads {
        positions_of
            .entry(r.value.as_str())
            .or_default()
            .insert((r.partition, r.offset));
        values_at
            .entry((r.partition, r.offset))
            .or_default()
            .insert(r.value.as_str());
    }
    let final_values: HashMap<&str, (i32, i64)> = h
        .final_read
        .iter()
        .map(|r| (r.value.as_str(), (r.partition, r.offset)))
        .collect();
    let final_offsets: BTreeSet<(i32, i64)> = h
        .final_read
        .iter()
        .map(|r| (r.partition, r.offset))
        .collect();
    let polled_values: BTreeSet<&str> = h.polls.iter().map(|p| p.read.value.as_str()).collect();
    let group_mode = h.info.group.is_some();
    let group_polled: BTreeSet<&str> = h
        .polls
        .iter()
        .filter(|p| p.generation.is_some())
        .map(|p| p.read.value.as_str())
        .collect();
    let committed: HashMap<i32, i64> = h
        .committed
        .iter()
        .map(|c| (c.partition, c.offset))
        .collect();

    for (value, positions) in &positions_of {
        if positions.len() > 1 {
            let first = positions.iter().next().map_or(0, |p| p.0);
            report.note(first, "duplicate", || format!("{value} at {positions:?}"));
        }
    }
    for ((partition, offset), values) in &values_at {
        if values.len() > 1 {
            report.note(*partition, "inconsistent_offsets", || {
                format!("offset {partition}/{offset} read as {values:?}")
            });
        }
    }

    let mut ack_times_ms = Vec::new();
    let mut latencies_us = Vec::new();
    for s in &h.sends {
        report.produce_retries += u64::from(s.retries);
        let a = report.partitions.entry(s.partition).or_default();
        let offset = match s.outcome {
            SendOutcome::Acked { offset } => Some(offset),
            SendOutcome::AckedDuplicate => None,
            SendOutcome::Unknown { .. } => {
                a.unknown += 1;
                continue;
            }
        };
        a.acked += 1;
        report.acked_duplicate += u64::from(offset.is_none());
        ack_times_ms.push(s.done_ms);
        latencies_us.push(s.latency_us);
        let value = s.value.as_str();
        let at = |o: Option<i64>| o.map_or("?".to_string(), |o| o.to_string());
        if !final_values.contains_key(value) {
            report.note(s.partition, "lost", || {
                format!("{value} acknowledged at {}/{}", s.partition, at(offset))
            });
        }
        if let (Some(seen), Some(offset)) = (positions_of.get(value), offset) {
            let acked_at = (s.partition, offset);
            if seen.iter().any(|pos| *pos != acked_at) {
                report.note(s.partition, "inconsistent_offsets", || {
                    format!("{value} acknowledged at {acked_at:?}, read at {seen:?}")
                });
            }
        }
        if !polled_values.contains(value) {
            report.note(s.partition, "unseen", || value.to_string());
        }
        if group_mode && !group_polled.contains(value) {
            // Where the value is: its acknowledged offset, or where the final read found it.
            let position = offset.or_else(|| final_values.get(value).map(|p| p.1));
            let below_commit = position
                .zip(committed.get(&s.partition))
                .is_some_and(|(o, c)| o < *c);
            if below_commit {
                report.note(s.partition, "group_lost", || {
                    format!(
                        "{value} at {}/{} is below the group's committed offset {} and no \
                         member polled it",
                        s.partition,
                        at(position),
                        committed[&s.partition]
                    )
                });
            } else {
                report.note(s.partition, "group_unseen", || value.to_string());
            }
        }
    }

    // Poll order, per consumer, generation (group members) and partition. A group member's
    // assignment starts at its start offset: polling past it is a skip like any other.
    let mut last: HashMap<(u32, Option<i32>, i32), i64> = HashMap::new();
    for a in &h.assignments {
        last.insert(
            (a.consumer, Some(a.generation), a.partition),
            a.start_offset - 1,
        );
    }
    let generation_of = |g: Option<i32>| g.map_or(String::new(), |g| format!(" generation {g}"));
    for p in &h.polls {
        let (partition, offset) = (p.read.partition, p.read.offset);
        let key = (p.consumer, p.generation, partition);
        if let Some(prev) = last.insert(key, offset) {
            if offset <= prev {
                report.note(partition, "non_monotonic_poll", || {
                    format!(
                        "consumer {}{} polled {partition}/{offset} after {prev}",
                        p.consumer,
                        generation_of(p.generation)
                    )
                });
            } else if final_offsets
                .range((partition, prev + 1)..(partition, offset))
                .next()
                .is_some()
            {
                report.note(partition, "poll_skip", || {
                    format!(
                        "consumer {}{} jumped {partition}/{prev} -> {offset}",
                        p.consumer,
                        generation_of(p.generation)
                    )
                });
            }
        }
    }

    // Re-delivery in the group: the same offset polled under another (member, generation).
    let mut first_poller: HashMap<(i32, i64), (u32, i32)> = HashMap::new();
    for p in &h.polls {
        let Some(generation) = p.generation else {
            continue;
        };
        let (partition, offset) = (p.read.partition, p.read.offset);
        let by = (p.consumer, generation);
        let first = *first_poller.entry((partition, offset)).or_insert(by);
        if first != by {
            report.note(partition, "group_redelivered", || {
                format!(
                    "{partition}/{offset} polled by consumer {} generation {} after consumer {} \
                     generation {}",
                    by.0, by.1, first.0, first.1
                )
            });
        }
    }
    report.group_polled_records = h.polls.iter().filter(|p| p.generation.is_some()).count() as u64;
    report.group_generations = h
        .assignments
        .iter()
        .map(|a| a.generation)
        .collect::<BTreeSet<_>>()
        .len() as u64;
    report.idempotent = h.info.idempotent;

    for a in report.partitions.values() {
        let a = *a;
        report.total.add(&a);
    }
    report.txn = h.info.transactional.then(|| super::txn_checker::check(h));
    report.safe = report.total.is_safe() && report.txn.as_ref().is_none_or(|t| t.safe);
    report.final_records = h.final_read.len() as u64;
    report.polled_records = h.polls.len() as u64;
    report.longest_unavailable_ms = longest_gap_ms(ack_times_ms, h.info.run_ms);
    latencies_us.sort_unstable();
    report.produce_latency_ms_p50 = percentile_ms(&latencies_us, 0.50);
    report.produce_latency_ms_p99 = percentile_ms(&latencies_us, 0.99);
    report
}

/// The report as text: totals, one line per partition, then examples of each anomaly.
pub fn render(r: &Report) -> String {
    use std::fmt::Write as _;
    let line = |a: &Anomalies| {
        format!(
            "acked={} unknown={} lost={} duplicate={} inconsistent_offsets={} \
             non_monotonic_poll={} poll_skip={} group_lost={} unseen={} group_unseen={} \
             group_redelivered={}",
            a.acked,
            a.unknown,
            a.lost,
            a.duplicate,
            a.inconsistent_offsets,
            a.non_monotonic_poll,
            a.poll_skip,
            a.group_lost,
            a.unseen,
            a.group_unseen,
            a.group_redelivered
        )
    };
    let mut s = String::new();
    let verdict = if r.safe { "SAFE" } else { "UNSAFE" };
    let _ = writeln!(s, "verify: {verdict}");
    let _ = writeln!(s, "total: {}", line(&r.total));
    for (p, a) in &r.partitions {
        let _ = writeln!(s, "partition {p}: {}", line(a));
    }
    let _ = writeln!(
        s,
        "final_records={} polled_records={} longest_unavailable_ms={} \
         produce_latency_ms_p50={:.2} produce_latency_ms_p99={:.2}",
        r.final_records,
        r.polled_records,
        r.longest_unavailable_ms,
        r.produce_latency_ms_p50,
        r.produce_latency_ms_p99
    );
    let _ = writeln!(
        s,
        "group_polled_records={} group_generations={} idempotent={} produce_retries={} \
         acked_duplicate={}",
        r.group_polled_records,
        r.group_generations,
        r.idempotent,
        r.produce_retries,
        r.acked_duplicate
    );
    for (kind, examples) in &r.examples {
        for e in examples {
            let _ = writeln!(s, "{kind}: {e}");
        }
    }
    if let Some(t) = &r.txn {
        s.push_str(&super::txn_checker::render(t));
    }
    s
}

/// The longest interval between 0, each of `times_ms` (acknowledgements, commits) and
/// `end_ms`.
pub(super) fn longest_gap_ms(mut times_ms: Vec<u64>, end_ms: u64) -> u64 {
    times_ms.sort_unstable();
    let mut prev = 0;
    let mut longest = 0;
    for t in times_ms.into_iter().chain(std::iter::once(end_ms)) {
        longest = longest.max(t.saturating_sub(prev));
        prev = prev.max(t);
    }
    longest
}

/// The `q` quantile of sorted microsecond values, in milliseconds (0 when empty).
pub(super) fn percentile_ms(sorted_us: &[u64], q: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let i = ((sorted_us.len() as f64 - 1.0) * q).round() as usize;
    sorted_us[i.min(sorted_us.len() - 1)] as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::safety::history::{Assignment, Committed, Poll, Read, RunInfo, Send};

    fn read(partition: i32, offset: i64, value: &str) -> Read {
        Read {
            partition,
            offset,
            value: value.to_string(),
        }
    }

    fn acked(value: &str, partition: i32, offset: i64, done_ms: u64) -> Send {
        Send {
            value: value.to_string(),
            partition,
            done_ms,
            latency_us: 1000 + offset as u64 * 1000,
            retries: 0,
            outcome: SendOutcome::Acked { offset },
        }
    }

    fn poll(consumer: u32, partition: i32, offset: i64, value: &str) -> Poll {
        Poll {
            consumer,
            member: None,
            generation: None,
            at_us: None,
            read: read(partition, offset, value),
        }
    }

    /// Two partitions, three acknowledged values, an unknown one that was written, two
    /// consumers that saw everything in order.
    fn clean() -> History {
        History {
            info: RunInfo {
                partitions: 2,
                run_ms: 1000,
                ..RunInfo::default()
            },
            sends: vec![
                acked("p0-0", 0, 0, 100),
                acked("p0-1", 1, 0, 400),
                acked("p1-0", 0, 1, 700),
                Send {
                    value: "p1-1".into(),
                    partition: 1,
                    done_ms: 900,
                    latency_us: 5_000_000,
                    retries: 0,
                    outcome: SendOutcome::Unknown {
                        error: "CLIENT_TIMEOUT".into(),
                    },
                },
            ],
            polls: vec![
                poll(0, 0, 0, "p0-0"),
                poll(0, 0, 1, "p1-0"),
                poll(0, 1, 0, "p0-1"),
                poll(1, 1, 0, "p0-1"),
                poll(1, 1, 1, "p1-1"),
                poll(1, 0, 0, "p0-0"),
                poll(1, 0, 1, "p1-0"),
            ],
            final_read: vec![
                read(0, 0, "p0-0"),
                read(0, 1, "p1-0"),
                read(1, 0, "p0-1"),
                read(1, 1, "p1-1"),
            ],
            ..History::default()
        }
    }

    #[test]
    fn a_clean_history_passes() {
        let r = check(&clean());
        assert!(r.safe, "{r:?}");
        assert_eq!(
            r.total,
            Anomalies {
                acked: 3,
                unknown: 1,
                ..Anomalies::default()
            }
        );
        assert_eq!(r.partitions[&0].acked, 2);
        assert_eq!(r.final_records, 4);
        assert_eq!(r.polled_records, 7);
        assert_eq!(r.longest_unavailable_ms, 300);
        assert_eq!(r.produce_latency_ms_p50, 1.0);
        assert_eq!(r.produce_latency_ms_p99, 2.0);
    }

    #[test]
    fn a_lost_record_is_found() {
        let mut h = clean();
        h.final_read.retain(|r| r.value != "p1-0");
        h.polls.retain(|p| p.read.value != "p1-0");
        let r = check(&h);
        assert!(!r.safe);
        assert_eq!(r.total.lost, 1);
        assert_eq!(r.partitions[&0].lost, 1);
        assert_eq!(r.total.unseen, 1);
        assert_eq!(r.examples["lost"], vec!["p1-0 acknowledged at 0/1"]);
    }

    #[test]
    fn a_duplicate_is_found() {
        let mut h = clean();
        h.final_read.push(read(1, 2, "p0-0"));
        let r = check(&h);
        assert!(!r.safe);
        assert_eq!(r.total.duplicate, 1);
        // p0-0 was acknowledged at 0/0 and is also at 1/2.
        assert_eq!(r.total.inconsistent_offsets, 1);
    }

    #[test]
    fn an_offset_read_with_two_values_is_inconsistent() {
        let mut h = clean();
        // Consumer 1 read another value at 1/1 than the final read.
        h.polls[4] = poll(1, 1, 1, "p9-9");
        let r = check(&h);
        assert!(!r.safe);
        assert_eq!(r.total.inconsistent_offsets, 1);
        assert_eq!(r.partitions[&1].inconsistent_offsets, 1);
        assert_eq!(r.total.duplicate, 0);
    }

    #[test]
    fn a_value_away_from_its_acknowledged_offset_is_inconsistent() {
        let mut h = clean();
        h.sends[0].outcome = SendOutcome::Acked { offset: 5 };
        let r = check(&h);
        assert!(!r.safe);
        assert_eq!(r.total.inconsistent_offsets, 1);
        assert_eq!(r.total.lost, 0);
    }

    #[test]
    fn offsets_going_backwards_are_non_monotonic() {
        let mut h = clean();
        h.polls.push(poll(0, 0, 0, "p0-0"));
        let r = check(&h);
        assert!(!r.safe);
        assert_eq!(r.total.non_monotonic_poll, 1);
        assert_eq!(r.total.poll_skip, 0);
    }

    #[test]
    fn jumping_over_existing_offsets_is_a_skip() {
        let mut h = clean();
        h.final_read.push(read(0, 2, "p2-0"));
        h.final_read.push(read(0, 3, "p2-1"));
        h.polls.push(poll(0, 0, 3, "p2-1"));
        let r = check(&h);
        assert!(!r.safe);
        assert_eq!(r.total.poll_skip, 1);
        assert_eq!(r.examples["poll_skip"], vec!["consumer 0 jumped 0/1 -> 3"]);
    }

    #[test]
    fn a_jump_over_offsets_that_do_not_exist_is_not_a_skip() {
        let mut h = clean();
        // Offset 2 is absent (e.g. a transaction marker): 1 -> 3 skips nothing.
        h.final_read.push(read(0, 3, "p2-1"));
        h.polls.push(poll(0, 0, 3, "p2-1"));
        assert!(check(&h).safe);
    }

    #[test]
    fn unseen_is_reported_but_safe() {
        let mut h = clean();
        h.polls.retain(|p| p.read.value != "p0-1");
        let r = check(&h);
        assert!(r.safe);
        assert_eq!(r.total.unseen, 1);
    }

    #[test]
    fn no_acknowledgement_means_the_whole_run_was_unavailable() {
        let mut h = clean();
        h.sends.clear();
        assert_eq!(check(&h).longest_unavailable_ms, 1000);
    }

    #[test]
    fn the_text_report_says_safe_or_unsafe() {
        let text = render(&check(&clean()));
        assert!(text.starts_with("verify: SAFE\n"), "{text}");
        assert!(
            text.contains("total: acked=3 unknown=1 lost=0 duplicate=0"),
            "{text}"
        );
        let mut h = clean();
        h.final_read.clear();
        let text = render(&check(&h));
        assert!(text.starts_with("verify: UNSAFE\n"), "{text}");
        assert!(text.contains("lost: p0-0 acknowledged at 0/0"), "{text}");
    }

    #[test]
    fn history_lines_are_json() {
        let mut out = Vec::new();
        clean().write_jsonl(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 1 + 4 + 7 + 4);
        assert_eq!(lines[0]["type"], "run");
        assert_eq!(lines[0]["partitions"], 2);
        assert_eq!(lines[0]["idempotent"], false);
        assert_eq!(lines[1]["type"], "send");
        assert_eq!(lines[1]["outcome"], "acked");
        assert_eq!(lines[1]["offset"], 0);
        assert_eq!(lines[1]["retries"], 0);
        assert_eq!(lines[4]["error"], "CLIENT_TIMEOUT");
        assert_eq!(lines[5]["type"], "poll");
        assert_eq!(lines[5]["consumer"], 0);
        assert!(lines[5].get("generation").is_none());
        assert_eq!(lines[15]["type"], "final");

        let mut out = Vec::new();
        grouped().write_jsonl(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["group"], "g");
        let of = |t: &str| lines.iter().filter(|l| l["type"] == t).collect::<Vec<_>>();
        assert_eq!(of("assignment")[0]["member"], "m-a");
        assert_eq!(of("assignment")[0]["start_offset"], 0);
        let group_poll = of("poll").into_iter().find(|l| l["consumer"] == 2).unwrap();
        assert_eq!(group_poll["generation"], 1);
        assert_eq!(group_poll["member"], "m-a");
        assert_eq!(of("committed").len(), 2);
    }

    fn group_poll(
        consumer: u32,
        generation: i32,
        partition: i32,
        offset: i64,
        value: &str,
    ) -> Poll {
        Poll {
            consumer,
            member: Some(format!("m-{}", (b'a' + consumer as u8 - 2) as char)),
            generation: Some(generation),
            at_us: None,
            read: read(partition, offset, value),
        }
    }

    fn assigned(consumer: u32, generation: i32, partition: i32, start_offset: i64) -> Assignment {
        Assignment {
            consumer,
            member: format!("m-{}", (b'a' + consumer as u8 - 2) as char),
            generation,
            partition,
            start_offset,
        }
    }

    /// The clean history plus a group of two members (consumers 2 and 3): in generation 1
    /// member a holds both partitions and reads 0/0 and 1/0 (committing 0/1, but its commit
    /// of 1/1 fails); in generation 2 b takes partition 1, resumes at the committed 1/0 and
    /// reads 1/0 again (re-delivery) and 1/1; a reads 0/1. Final commits: 0/2, 1/2.
    fn grouped() -> History {
        let mut h = clean();
        h.info.group = Some("g".into());
        h.assignments = vec![
            assigned(2, 1, 0, 0),
            assigned(2, 1, 1, 0),
            assigned(2, 2, 0, 1),
            assigned(3, 2, 1, 0),
        ];
        h.polls.extend([
            group_poll(2, 1, 0, 0, "p0-0"),
            group_poll(2, 1, 1, 0, "p0-1"),
            group_poll(2, 2, 0, 1, "p1-0"),
            group_poll(3, 2, 1, 0, "p0-1"),
            group_poll(3, 2, 1, 1, "p1-1"),
        ]);
        h.committed = vec![
            Committed {
                partition: 0,
                offset: 2,
            },
            Committed {
                partition: 1,
                offset: 2,
            },
        ];
        h
    }

    #[test]
    fn rebalance_redelivery_is_counted_not_an_anomaly() {
        let r = check(&grouped());
        assert!(r.safe, "{r:?}");
        assert_eq!(r.total.group_redelivered, 1);
        assert_eq!(r.partitions[&1].group_redelivered, 1);
        assert_eq!(
            r.examples["group_redelivered"],
            vec!["1/0 polled by consumer 3 generation 2 after consumer 2 generation 1"]
        );
        assert_eq!(r.total.non_monotonic_poll, 0);
        assert_eq!(r.total.poll_skip, 0);
        assert_eq!((r.total.group_lost, r.total.group_unseen), (0, 0));
        assert_eq!(r.group_polled_records, 5);
        assert_eq!(r.group_generations, 2);
    }

    #[test]
    fn a_record_below_the_groups_commit_that_no_member_polled_is_lost_by_the_group() {
        let mut h = grouped();
        // Nobody in the group read p1-0 at 0/1, yet the group committed 0/2.
        h.polls
            .retain(|p| !(p.generation.is_some() && p.read.value == "p1-0"));
        h.assignments[2].start_offset = 2;
        let r = check(&h);
        assert!(!r.safe);
        assert_eq!(r.total.group_lost, 1);
        assert_eq!(r.partitions[&0].group_lost, 1);
        assert_eq!(r.total.lost, 0);
        assert_eq!(
            r.examples["group_lost"],
            vec!["p1-0 at 0/1 is below the group's committed offset 2 and no member polled it"]
        );
    }

    #[test]
    fn a_record_above_the_groups_commit_is_only_unseen_by_the_group() {
        let mut h = grouped();
        h.polls
            .retain(|p| !(p.generation.is_some() && p.read.value == "p1-0"));
        h.committed[0].offset = 1;
        h.assignments[2].start_offset = 1;
        let r = check(&h);
        assert!(r.safe, "{r:?}");
        assert_eq!((r.total.group_lost, r.total.group_unseen), (0, 1));
    }

    #[test]
    fn a_group_member_going_backwards_within_a_generation_is_non_monotonic() {
        let mut h = grouped();
        h.polls.push(group_poll(3, 2, 1, 0, "p0-1"));
        let r = check(&h);
        assert!(!r.safe);
        assert_eq!(r.total.non_monotonic_poll, 1);
        assert_eq!(
            r.examples["non_monotonic_poll"],
            vec!["consumer 3 generation 2 polled 1/0 after 1"]
        );
    }

    #[test]
    fn a_group_member_skipping_within_a_generation_is_a_skip() {
        let mut h = grouped();
        // Member b was assigned partition 1 at offset 0 but its first poll is 1/1.
        h.polls.retain(|p| !(p.consumer == 3 && p.read.offset == 0));
        let r = check(&h);
        assert!(!r.safe);
        assert_eq!(r.total.poll_skip, 1);
        assert_eq!(
            r.examples["poll_skip"],
            vec!["consumer 3 generation 2 jumped 1/-1 -> 1"]
        );
        // Polled by member a in generation 1, so not lost by the group.
        assert_eq!(r.total.group_lost, 0);
    }

    #[test]
    fn retries_and_duplicate_sequence_answers_are_reported() {
        let mut h = clean();
        h.info.idempotent = true;
        h.sends[0].retries = 2;
        h.sends[1].retries = 1;
        h.sends[1].outcome = SendOutcome::AckedDuplicate;
        let r = check(&h);
        assert!(r.safe, "{r:?}");
        assert!(r.idempotent);
        assert_eq!(r.produce_retries, 3);
        assert_eq!(r.acked_duplicate, 1);
        assert_eq!(r.total.acked, 3);
        // A retried batch written twice is a duplicate.
        h.final_read.push(read(1, 2, "p0-1"));
        let r = check(&h);
        assert!(!r.safe);
        assert_eq!(r.total.duplicate, 1);
    }
}
