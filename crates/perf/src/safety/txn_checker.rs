//! Finds, in the history of a transactional run, the anomalies transactions must not show
//! (every read is read_committed):
//! - txn_lost: a value of a committed transaction missing from the final read;
//! - aborted_read: a value of a transaction that was aborted, or never asked to commit (an
//!   abortable error, an abort whose answer was lost), seen by the final read or a tailer;
//! - torn_transaction: a transaction some but not all of whose values the final read holds
//!   (whatever its outcome: one whose EndTxn answer was lost must be all or nothing);
//! - read_uncommitted: a value a tailer received before its transaction's first EndTxn(commit)
//!   was even sent;
//! - fencing: a value of a fenced producer's transaction visible, or a write or commit of the
//!   fenced producer accepted after the second producer's InitProducerId;
//! - phantom: a value read that no transaction wrote;
//! - stuck_lso: a partition whose last stable offset never reached its high watermark after
//!   every producer had ended or re-initialised (a hanging transaction).
//!
//! Plus counts of outcomes, unknown outcomes resolved by the final read (all visible: it
//! committed; none: it aborted), committed values no tailer polled (unseen: not a failure),
//! commit latency and the longest time without a commit.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::checker::{longest_gap_ms, percentile_ms, MAX_EXAMPLES};
use super::history::{History, TxnOutcome};

/// Counts of transactions, values and anomalies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TxnCounts {
    /// Transactions whose EndTxn(commit) was answered without error.
    pub committed: u64,
    /// Transactions whose EndTxn(abort) was answered without error.
    pub aborted: u64,
    /// Transactions of the fencing check's fenced producer.
    pub fenced: u64,
    /// Transactions whose outcome the producer does not know.
    pub unknown: u64,
    /// Of those, all of whose values the final read holds (they committed).
    pub unknown_visible: u64,
    /// Of those, none of whose values the final read holds (they aborted).
    pub unknown_invisible: u64,
    /// Values of committed transactions.
    pub committed_values: u64,
    /// Committed values missing from the final read.
    pub txn_lost: u64,
    /// Values of aborted (or never committed) transactions that were read.
    pub aborted_read: u64,
    /// Transactions partly visible in the final read.
    pub torn_transaction: u64,
    /// Values a tailer received before their transaction's EndTxn(commit) was sent.
    pub read_uncommitted: u64,
    /// Fenced values read, and a fenced producer's writes or commits accepted.
    pub fencing: u64,
    /// Values read that no transaction wrote.
    pub phantom: u64,
    /// Partitions whose last stable offset stayed below the high watermark.
    pub stuck_lso: u64,
    /// Committed values no tailer polled (not a failure).
    pub unseen: u64,
}

impl TxnCounts {
    /// Whether no transactional anomaly was found.
    pub fn is_safe(&self) -> bool {
        self.txn_lost == 0
            && self.aborted_read == 0
            && self.torn_transaction == 0
            && self.read_uncommitted == 0
            && self.fencing == 0
            && self.phantom == 0
            && self.stuck_lso == 0
    }
}

/// The transactional checker's verdict.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TxnReport {
    /// Whether no transactional anomaly was found.
    pub safe: bool,
    /// Counts.
    pub total: TxnCounts,
    /// Median time from a transaction's first produce to its commit's answer, milliseconds.
    pub commit_latency_ms_p50: f64,
    /// 99th percentile of the same.
    pub commit_latency_ms_p99: f64,
    /// Longest time without a committed transaction, in milliseconds (from the start,
    /// between commits, to the end of the run).
    pub longest_without_commit_ms: u64,
    /// Up to [`MAX_EXAMPLES`] descriptions per anomaly kind.
    pub examples: BTreeMap<&'static str, Vec<String>>,
}

impl TxnReport {
    fn note(&mut self, kind: &'static str, example: impl FnOnce() -> String) {
        let t = &mut self.total;
        match kind {
            "txn_lost" => t.txn_lost += 1,
            "aborted_read" => t.aborted_read += 1,
            "torn_transaction" => t.torn_transaction += 1,
            "read_uncommitted" => t.read_uncommitted += 1,
            "fencing" => t.fencing += 1,
            "phantom" => t.phantom += 1,
            "stuck_lso" => t.stuck_lso += 1,
            "unseen" => t.unseen += 1,
            other => unreachable!("unknown anomaly kind {other}"),
        }
        let list = self.examples.entry(kind).or_default();
        if list.len() < MAX_EXAMPLES {
            list.push(example());
        }
    }
}

/// Checks the transactions of a history.
pub fn check(h: &History) -> TxnReport {
    let mut report = TxnReport::default();
    let final_at: HashMap<&str, (i32, i64)> = h
        .final_read
        .iter()
        .map(|r| (r.value.as_str(), (r.partition, r.offset)))
        .collect();
    // The earliest time a tailer received each value (and where).
    let mut first_polled: HashMap<&str, (u64, i32, i64)> = HashMap::new();
    let mut polled_any: HashMap<&str, (i32, i64)> = HashMap::new();
    for p in &h.polls {
        let value = p.read.value.as_str();
        polled_any.insert(value, (p.read.partition, p.read.offset));
        if let Some(at) = p.at_us {
            let e = first_polled
                .entry(value)
                .or_insert((at, p.read.partition, p.read.offset));
            if at < e.0 {
                *e = (at, p.read.partition, p.read.offset);
            }
        }
    }
    let mut written: HashMap<&str, ()> = HashMap::new();
    let mut commit_times_ms = Vec::new();
    let mut latencies_us = Vec::new();

    for t in &h.txns {
        let name = format!(
            "{} (pid {} epoch {})",
            t.transactional_id, t.producer_id, t.producer_epoch
        );
        for w in &t.writes {
            written.insert(w.value.as_str(), ());
        }
        let visible: Vec<&str> = t
            .writes
            .iter()
            .filter(|w| final_at.contains_key(w.value.as_str()))
            .map(|w| w.value.as_str())
            .collect();
        let (n, n_visible) = (t.writes.len(), visible.len());
        if n_visible > 0 && n_visible < n {
            report.note("torn_transaction", || {
                format!(
                    "{name}: {n_visible} of {n} values visible ({visible:?}), {:?}",
                    t.outcome
                )
            });
        }
        let must_be_invisible = match &t.outcome {
            TxnOutcome::Committed => {
                report.total.committed += 1;
                report.total.committed_values += n as u64;
                commit_times_ms.push(t.done_ms);
                latencies_us.push(t.latency_us);
                for w in &t.writes {
                    let value = w.value.as_str();
                    if !final_at.contains_key(value) {
                        report.note("txn_lost", || {
                            format!(
                                "{value} of committed {name} (written at {}/{:?})",
                                w.partition, w.offset
                            )
                        });
                    } else if !polled_any.contains_key(value) {
                        report.note("unseen", || value.to_string());
                    }
                }
                false
            }
            TxnOutcome::Aborted => {
                report.total.aborted += 1;
                true
            }
            TxnOutcome::Fenced => {
                report.total.fenced += 1;
                for a in &t.zombie_accepted {
                    report.note("fencing", || format!("fenced {name}: {a} accepted"));
                }
                true
            }
            TxnOutcome::Unknown { .. } => {
                report.total.unknown += 1;
                if n_visible == n {
                    report.total.unknown_visible += 1;
                } else if n_visible == 0 {
                    report.total.unknown_invisible += 1;
                }
                !t.commit_requested
            }
        };
        for w in &t.writes {
            let value = w.value.as_str();
            let seen = final_at
                .get(value)
                .map(|p| ("the final read", *p))
                .or_else(|| polled_any.get(value).map(|p| ("a tailer", *p)));
            if must_be_invisible {
                if let Some((by, (partition, offset))) = seen {
                    let kind = if matches!(t.outcome, TxnOutcome::Fenced) {
                        "fencing"
                    } else {
                        "aborted_read"
                    };
                    report.note(kind, || {
                        format!(
                            "{value} of {name} ({:?}, commit requested: {}) read by {by} at \
                             {partition}/{offset}",
                            t.outcome, t.commit_requested
                        )
                    });
                }
                continue;
            }
            if let Some(&(at_us, partition, offset)) = first_polled.get(value) {
                if t.end_sent_us.is_none_or(|end| at_us < end) {
                    report.note("read_uncommitted", || {
                        format!(
                            "{value} of {name} received at {partition}/{offset} at {at_us} us, \
                             EndTxn(commit) sent at {:?} us",
                            t.end_sent_us
                        )
                    });
                }
            }
        }
    }
    for (value, (partition, offset)) in final_at.iter().chain(polled_any.iter()) {
        if !written.contains_key(value) {
            report.note("phantom", || format!("{value:?} at {partition}/{offset}"));
        }
    }
    for b in &h.final_bounds {
        if b.last_stable_offset < b.high_watermark {
            report.note("stuck_lso", || {
                format!(
                    "partition {}: last stable offset {} below the high watermark {}",
                    b.partition, b.last_stable_offset, b.high_watermark
                )
            });
        }
    }
    report.safe = report.total.is_safe();
    report.longest_without_commit_ms = longest_gap_ms(commit_times_ms, h.info.run_ms);
    latencies_us.sort_unstable();
    report.commit_latency_ms_p50 = percentile_ms(&latencies_us, 0.50);
    report.commit_latency_ms_p99 = percentile_ms(&latencies_us, 0.99);
    report
}

/// The transactional part of the text report.
pub fn render(r: &TxnReport) -> String {
    use std::fmt::Write as _;
    let t = &r.total;
    let mut s = String::new();
    let verdict = if r.safe { "SAFE" } else { "UNSAFE" };
    let _ = writeln!(s, "transactions: {verdict}");
    let _ = writeln!(
        s,
        "txns: committed={} aborted={} fenced={} unknown={} (visible={} invisible={}) \
         committed_values={} unseen={}",
        t.committed,
        t.aborted,
        t.fenced,
        t.unknown,
        t.unknown_visible,
        t.unknown_invisible,
        t.committed_values,
        t.unseen
    );
    let _ = writeln!(
        s,
        "txn anomalies: txn_lost={} aborted_read={} torn_transaction={} read_uncommitted={} \
         fencing={} phantom={} stuck_lso={}",
        t.txn_lost,
        t.aborted_read,
        t.torn_transaction,
        t.read_uncommitted,
        t.fencing,
        t.phantom,
        t.stuck_lso
    );
    let _ = writeln!(
        s,
        "commit_latency_ms_p50={:.2} commit_latency_ms_p99={:.2} longest_without_commit_ms={}",
        r.commit_latency_ms_p50, r.commit_latency_ms_p99, r.longest_without_commit_ms
    );
    for (kind, examples) in &r.examples {
        for e in examples {
            let _ = writeln!(s, "{kind}: {e}");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::safety::history::{FinalBound, Poll, Read, RunInfo, Txn, TxnWrite};

    fn txn(producer: u32, n: u64, outcome: TxnOutcome, values: &[(&str, i32)]) -> Txn {
        Txn {
            producer,
            transactional_id: format!("tid-{producer}"),
            producer_id: i64::from(producer),
            producer_epoch: 0,
            writes: values
                .iter()
                .map(|(v, p)| TxnWrite {
                    value: v.to_string(),
                    partition: *p,
                    offset: Some(0),
                })
                .collect(),
            commit_requested: !matches!(outcome, TxnOutcome::Aborted),
            end_sent_us: Some(1_000 * n),
            done_ms: 10 * n,
            latency_us: 1_000,
            outcome,
            zombie_accepted: Vec::new(),
        }
    }

    fn read(partition: i32, offset: i64, value: &str) -> Read {
        Read {
            partition,
            offset,
            value: value.to_string(),
        }
    }

    fn poll(at_us: u64, partition: i32, offset: i64, value: &str) -> Poll {
        Poll {
            consumer: 0,
            member: None,
            generation: None,
            at_us: Some(at_us),
            read: read(partition, offset, value),
        }
    }

    /// A committed transaction over two partitions, an aborted one, a fenced one and an
    /// unknown one that committed, all read as they must be.
    fn clean() -> History {
        let unknown = TxnOutcome::Unknown {
            error: "CLIENT_TIMEOUT".into(),
        };
        History {
            info: RunInfo {
                partitions: 2,
                run_ms: 100,
                transactional: true,
                ..RunInfo::default()
            },
            txns: vec![
                txn(0, 1, TxnOutcome::Committed, &[("a", 0), ("b", 1)]),
                txn(0, 2, TxnOutcome::Aborted, &[("c", 0), ("d", 1)]),
                txn(1, 3, TxnOutcome::Fenced, &[("z", 0)]),
                txn(2, 4, unknown, &[("e", 0), ("f", 1)]),
            ],
            polls: vec![poll(1_500, 0, 0, "a"), poll(4_500, 1, 5, "f")],
            final_read: vec![
                read(0, 0, "a"),
                read(1, 0, "b"),
                read(0, 4, "e"),
                read(1, 5, "f"),
            ],
            final_bounds: vec![FinalBound {
                partition: 0,
                last_stable_offset: 6,
                high_watermark: 6,
            }],
            ..History::default()
        }
    }

    #[test]
    fn a_clean_history_passes() {
        let r = check(&clean());
        assert!(r.safe, "{r:?}");
        let t = r.total;
        assert_eq!((t.committed, t.aborted, t.fenced, t.unknown), (1, 1, 1, 1));
        assert_eq!((t.unknown_visible, t.committed_values, t.unseen), (1, 2, 1));
        assert_eq!(r.examples["unseen"], vec!["b"]);
        assert_eq!(r.longest_without_commit_ms, 90);
    }

    #[test]
    fn a_lost_committed_value_is_found_and_the_transaction_is_torn() {
        let mut h = clean();
        h.final_read.retain(|r| r.value != "b");
        let r = check(&h);
        assert!(!r.safe);
        assert_eq!((r.total.txn_lost, r.total.torn_transaction), (1, 1));
    }

    #[test]
    fn aborted_and_fenced_values_read_are_found() {
        let mut h = clean();
        h.final_read.push(read(0, 2, "c"));
        h.polls.push(poll(9_000, 0, 3, "z"));
        let r = check(&h);
        assert!(!r.safe);
        assert_eq!(r.total.aborted_read, 1);
        assert_eq!(r.total.fencing, 1);
        // c without d: the aborted transaction is torn as well.
        assert_eq!(r.total.torn_transaction, 1);
    }

    #[test]
    fn an_unknown_outcome_must_be_all_or_nothing() {
        let mut h = clean();
        h.final_read.retain(|r| r.value != "e");
        let r = check(&h);
        assert_eq!(r.total.torn_transaction, 1);
        assert_eq!(r.total.txn_lost, 0);
        // Never asked to commit: nothing of it may be read at all.
        let mut h = clean();
        h.txns[3].commit_requested = false;
        let r = check(&h);
        assert_eq!(r.total.aborted_read, 2);
    }

    #[test]
    fn a_read_before_the_commit_was_sent_is_found() {
        let mut h = clean();
        // "a"'s transaction sent EndTxn at 1000 us; a tailer had it at 900 us.
        h.polls[0].at_us = Some(900);
        let r = check(&h);
        assert!(!r.safe);
        assert_eq!(r.total.read_uncommitted, 1);
    }

    #[test]
    fn fencing_violations_phantoms_and_a_stuck_lso_are_found() {
        let mut h = clean();
        h.txns[2].zombie_accepted.push("EndTxn(commit)".into());
        h.final_read.push(read(1, 9, "nobody-wrote-this"));
        h.final_bounds[0].last_stable_offset = 3;
        let r = check(&h);
        assert!(!r.safe);
        assert_eq!(
            (r.total.fencing, r.total.phantom, r.total.stuck_lso),
            (1, 1, 1)
        );
    }
}
