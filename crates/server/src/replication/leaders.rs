//! Who leads the partitions a node does not host: leader reports carried by the liveness pings.
//!
//! A node knows the leader of each Raft group it is a replica of (its `Visible`), but with
//! replica placement most nodes host only some partitions, and Metadata at any node must still
//! name every partition's leader. So each node tells its peers which groups it leads: a liveness
//! ping (see [`crate::replication::liveness`]) carries, in its `context` bytes, the node's whole
//! list of `(group id, term)` it leads as of now. It is attached when the list changed since the
//! last one sent, and at least every [`REPORT_REFRESH`] (a peer that restarted, or a ping dropped
//! by a full queue, learns it then); other pings stay empty. A receiver keeps each peer's latest
//! list, and answers "who leads group g" with the peer claiming it in the highest term; Metadata
//! also drops a claimed leader that is not connected now (a node killed before it could report its
//! loss). An older node ignores the bytes; pings from one carry none and change nothing.
//!
//! Encoding: one version byte ([`REPORT_VERSION`]) then 16 bytes per group (group id, term; both
//! big-endian u64). A report that does not decode, or lists more than the receiver's limit, is
//! ignored (the peer keeps its previous report).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};

/// First byte of an encoded report.
pub const REPORT_VERSION: u8 = 1;
/// Bytes per reported group.
const ENTRY_BYTES: usize = 16;
/// A node's report is sent again at least this often even when nothing changed.
pub const REPORT_REFRESH: Duration = Duration::from_secs(1);

/// Encodes the groups a node leads, `(group id, term)` each.
pub fn encode(led: &[(u64, u64)]) -> Bytes {
    let mut b = BytesMut::with_capacity(1 + led.len() * ENTRY_BYTES);
    b.put_u8(REPORT_VERSION);
    for (group, term) in led {
        b.put_u64(*group);
        b.put_u64(*term);
    }
    b.freeze()
}

/// Why a report was ignored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// Another version, or a length that is not a whole number of entries.
    #[error("not a leader report (version or length)")]
    Malformed,
    /// More groups than the receiver accepts from one node.
    #[error("{0} groups reported, more than the limit")]
    TooMany(usize),
}

/// Decodes a report of at most `max_groups` groups. Empty input is not a report (`Ok(None)`):
/// pings without one.
pub fn decode(bytes: &[u8], max_groups: usize) -> Result<Option<Vec<(u64, u64)>>, ReportError> {
    let Some((&version, body)) = bytes.split_first() else {
        return Ok(None);
    };
    if version != REPORT_VERSION || body.len() % ENTRY_BYTES != 0 {
        return Err(ReportError::Malformed);
    }
    let count = body.len() / ENTRY_BYTES;
    if count > max_groups {
        return Err(ReportError::TooMany(count));
    }
    let word = |b: &[u8]| {
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        u64::from_be_bytes(a)
    };
    Ok(Some(
        body.chunks_exact(ENTRY_BYTES)
            .map(|e| (word(&e[..8]), word(&e[8..])))
            .collect(),
    ))
}

/// The latest report of each peer.
#[derive(Debug)]
pub struct LeaderBook {
    /// Most groups taken from one peer's report.
    max_groups: usize,
    /// Per peer (only configured peers): group id -> term it claims to lead in.
    reports: Mutex<HashMap<u64, HashMap<u64, u64>>>,
    /// The peers a report was taken from since the book was made (with the node).
    heard: Mutex<HashSet<u64>>,
}

impl LeaderBook {
    /// A book for reports from `peers`, each of at most `max_groups` groups.
    pub fn new(peers: &[u64], max_groups: usize) -> LeaderBook {
        LeaderBook {
            max_groups,
            reports: Mutex::new(peers.iter().map(|p| (*p, HashMap::new())).collect()),
            heard: Mutex::new(HashSet::new()),
        }
    }

    /// Takes reports from a member added at runtime too; a known peer keeps its report.
    pub fn add_peer(&self, peer: u64) {
        self.reports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(peer)
            .or_default();
    }

    /// Takes the report in a ping's `context` from `peer` (it replaces the peer's previous
    /// one); pings without a report, reports that do not decode, and unknown peers change
    /// nothing.
    pub fn record(&self, peer: u64, context: &[u8]) -> Result<(), ReportError> {
        let Some(led) = decode(context, self.max_groups)? else {
            return Ok(());
        };
        let mut reports = self.reports.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(report) = reports.get_mut(&peer) {
            *report = led.into_iter().collect();
            self.heard
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(peer);
        }
        Ok(())
    }

    /// Whether a report from `peer` was taken since this book was made (an empty one counts).
    pub fn has_reported(&self, peer: u64) -> bool {
        self.heard
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&peer)
    }

    /// The node that reports leading `group` in the highest term, with that term.
    pub fn leader_of(&self, group: u64) -> Option<(u64, u64)> {
        let reports = self.reports.lock().unwrap_or_else(|e| e.into_inner());
        reports
            .iter()
            .filter_map(|(peer, led)| led.get(&group).map(|term| (*peer, *term)))
            .max_by_key(|(peer, term)| (*term, *peer))
    }
}

/// A count of the leadership changes among a node's groups (a group's published leader or term
/// moved), so the liveness loop reads every group's state again only after one (and once per
/// [`REPORT_REFRESH`]) instead of on every ping: with 10,000 groups that read, ten times a
/// second, was half of an idle node's CPU.
#[derive(Debug, Default)]
pub struct LeadershipChanges(AtomicU64);

impl LeadershipChanges {
    /// Counts one change; called by a group after it published the change (so a reader that
    /// sees the new count also sees the new state).
    pub fn note(&self) {
        self.0.fetch_add(1, Ordering::Release);
    }

    /// The number of changes so far; read it before reading the groups' states.
    pub fn count(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

/// When a node attaches its report to the pings: on change, and every [`REPORT_REFRESH`].
#[derive(Debug, Default)]
pub struct ReportSchedule {
    last: Vec<(u64, u64)>,
    sent_at: Option<Instant>,
}

impl ReportSchedule {
    /// Whether the last report was sent [`REPORT_REFRESH`] ago or more (or none was sent).
    pub fn stale(&self, now: Instant) -> bool {
        self.sent_at
            .is_none_or(|at| now.saturating_duration_since(at) >= REPORT_REFRESH)
    }

    /// The report to attach to this round of pings, given the groups led now (sorted by the
    /// caller or not: they are sorted here), or `None` when the peers have it already.
    pub fn due(&mut self, mut led: Vec<(u64, u64)>, now: Instant) -> Option<Bytes> {
        led.sort_unstable();
        if !self.stale(now) && led == self.last {
            return None;
        }
        let report = encode(&led);
        self.last = led;
        self.sent_at = Some(now);
        Some(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_round_trip_and_bad_ones_are_ignored() {
        let led = vec![(7, 3), (u64::MAX, 1)];
        assert_eq!(decode(&encode(&led), 2).unwrap(), Some(led.clone()));
        assert_eq!(decode(&[], 2).unwrap(), None);
        assert_eq!(decode(&encode(&[]), 0).unwrap(), Some(vec![]));
        assert_eq!(decode(&encode(&led), 1), Err(ReportError::TooMany(2)));
        assert_eq!(decode(&[2], 5), Err(ReportError::Malformed));
        let mut cut = encode(&led).to_vec();
        cut.pop();
        assert_eq!(decode(&cut, 5), Err(ReportError::Malformed));
    }

    /// The highest term wins; a report replaces the peer's previous one; strangers are
    /// ignored.
    #[test]
    fn the_book_names_the_leader_of_the_highest_term() {
        let book = LeaderBook::new(&[2, 3], 10);
        book.record(2, &[]).unwrap();
        assert!(!book.has_reported(2), "a ping without a report");
        book.record(2, &encode(&[(100, 4), (200, 1)])).unwrap();
        book.record(3, &encode(&[(100, 5)])).unwrap();
        book.record(9, &encode(&[(100, 50)])).unwrap();
        assert!(book.has_reported(2) && book.has_reported(3) && !book.has_reported(9));
        assert_eq!(book.leader_of(100), Some((3, 5)));
        assert_eq!(book.leader_of(200), Some((2, 1)));
        // Node 2 no longer leads 200; an empty ping keeps the report.
        book.record(2, &encode(&[(100, 4)])).unwrap();
        book.record(2, &[]).unwrap();
        assert_eq!(book.leader_of(200), None);
        assert_eq!(book.leader_of(100), Some((3, 5)));
        assert!(book.record(2, &[7, 7]).is_err());
        assert_eq!(book.leader_of(100), Some((3, 5)));
    }

    #[test]
    fn a_report_is_sent_on_change_and_refreshed() {
        let mut s = ReportSchedule::default();
        let t = Instant::now();
        assert!(s.due(vec![(1, 1)], t).is_some(), "first");
        assert!(s.due(vec![(1, 1)], t + Duration::from_millis(10)).is_none());
        assert!(s.due(vec![(1, 2)], t + Duration::from_millis(20)).is_some());
        assert!(s.due(vec![(1, 2)], t + REPORT_REFRESH * 2).is_some());
    }
}
