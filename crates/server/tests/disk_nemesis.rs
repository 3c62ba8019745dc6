//! Disk nemesis (issue 16): each disk fault injected many times into three real `vdl`
//! processes under a continuous acks=all workload, with the promise checked after every
//! nemesis: every acknowledged record is present at its acknowledged offset on every replica,
//! no value is written twice, no offset holds two different values, nothing partial is visible.
//!
//! Faults go through the file-system seam (`logstore::FaultInjectingFs`, one control file per
//! node). Nemeses, each `VDL_DISK_NEMESIS_ROUNDS` injections (default 2, leader and follower
//! once each; the documented run in `docs/reliability.md` uses 20):
//!
//! * `fsync_eio`: every fsync of one node fails with EIO; the node must stop (exit status
//!   70) while the others keep committing, then restart cleanly and catch up.
//! * `enospc`: every write of one node fails with ENOSPC; its produces are answered with an
//!   error, and once space returns it appends and catches up again.
//! * `power_cut_one` / `power_cut_all`: one node, or all three at once, killed with SIGKILL
//!   and every write not fsynced dropped (the first one of each file torn in half).
//! * `slow_follower`: one follower's fsyncs 400 ms slower; the produce latency median must
//!   follow the faster quorum, not the slow disk.
//!
//! Each nemesis prints one line per injection (`DISK_NEMESIS_INJECTION ...`) and a summary
//! (`DISK_NEMESIS name=... anomalies`), then asserts that no anomaly was found. The nemeses run
//! one at a time (a lock), so the latency comparison does not share the cores with another.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::batch;
use common::faults::{control, create, faulty_cluster, leader_of, set_faults, tag, Acked};
use common::kafka::KafkaConn;
use common::procs::ProcCluster;

/// Records per produced batch.
const RECORDS_PER_BATCH: u32 = 5;
/// Bytes per record value.
const VALUE_BYTES: usize = 100;
/// Longest any one wait of the nemesis (an exit, a catch-up, a produce succeeding again).
const STEP_LIMIT: Duration = Duration::from_secs(60);
/// Concurrent producers of the workload (so that nodes have writes in flight when cut).
const PRODUCERS: usize = 3;
/// The workload stops on its own after this long, whatever happens to the test.
const WORKLOAD_LIMIT: Duration = Duration::from_secs(45 * 60);
/// And each producer after this many produce attempts (its history stays below ~100 MB).
const WORKLOAD_MAX_ATTEMPTS: usize = 500_000;
/// Pause between two produces of the workload (it shares two cores with three nodes).
const WORKLOAD_PAUSE: Duration = Duration::from_millis(2);
/// The slow follower's extra fsync time.
const SLOW_FSYNC_MS: u64 = 400;
/// KAFKA_STORAGE_ERROR.
const STORAGE_ERROR: i16 = 56;

/// Injections per nemesis: `VDL_DISK_NEMESIS_ROUNDS` (1 to 200), default 2.
fn rounds() -> usize {
    std::env::var("VDL_DISK_NEMESIS_ROUNDS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(2)
        .clamp(1, 200)
}

/// The nemeses run one at a time: each runs three nodes and a workload on a small machine.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

// ---- the workload --------------------------------------------------------------------------

/// One acknowledged produce.
#[derive(Debug, Clone)]
struct Ack {
    sent_at: Instant,
    acked_at: Instant,
    base: u64,
    value: Vec<u8>,
}

/// One failed produce: an error code, or -1 for a connection or timeout error.
#[derive(Debug, Clone, Copy)]
struct Failure {
    at: Instant,
    code: i16,
}

/// What the workload did: every value it sent (acknowledged or not), what was acknowledged
/// and what failed, in order.
#[derive(Debug, Default)]
struct History {
    sent: HashMap<Vec<u8>, u32>,
    acks: Vec<Ack>,
    failures: Vec<Failure>,
}

impl History {
    fn acks_between(&self, from: Instant, to: Instant) -> impl Iterator<Item = &Ack> {
        self.acks
            .iter()
            .filter(move |a| a.acked_at >= from && a.acked_at <= to)
    }

    fn failures_between(&self, from: Instant, to: Instant) -> impl Iterator<Item = &Failure> {
        self.failures
            .iter()
            .filter(move |f| f.at >= from && f.at <= to)
    }

    /// The longest window in [from, to] without an acknowledgement.
    fn longest_gap(&self, from: Instant, to: Instant) -> Duration {
        let mut last = from;
        let mut longest = Duration::ZERO;
        for a in self.acks_between(from, to) {
            longest = longest.max(a.acked_at - last);
            last = a.acked_at;
        }
        longest.max(to.saturating_duration_since(last))
    }
}

/// `PRODUCERS` threads sending unique values with acks=all, one batch at a time each, to
/// whichever broker accepts them (each moves on to the next broker at every error).
struct Workload {
    stop: Arc<AtomicBool>,
    history: Arc<Mutex<History>>,
    threads: Vec<JoinHandle<()>>,
}

impl Workload {
    fn start(brokers: Vec<SocketAddr>, topic: &str) -> Workload {
        let stop = Arc::new(AtomicBool::new(false));
        let history = Arc::new(Mutex::new(History::default()));
        let threads = (0..PRODUCERS)
            .map(|k| {
                let (s, h, b) = (stop.clone(), history.clone(), brokers.clone());
                let prefix = format!("{topic}-p{k}");
                let topic = topic.to_owned();
                std::thread::spawn(move || produce_loop(&b, &topic, &prefix, k, &s, &h))
            })
            .collect();
        Workload {
            stop,
            history,
            threads,
        }
    }

    fn history(&self) -> std::sync::MutexGuard<'_, History> {
        self.history.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits (up to `STEP_LIMIT`) until a produce is acknowledged after `t`; returns when.
    fn wait_acked_after(&self, t: Instant, what: &str) -> Instant {
        let deadline = Instant::now() + STEP_LIMIT;
        loop {
            if let Some(a) = self.history().acks.last().filter(|a| a.acked_at > t) {
                return a.acked_at;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: no produce acknowledged within {STEP_LIMIT:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the producers and returns their history.
    fn finish(mut self) -> History {
        self.stop.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            t.join().expect("a workload thread panicked");
        }
        std::mem::take(&mut *self.history())
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// One producer of the workload: values `prefix-SEQ-xxx`, starting at broker `first`.
fn produce_loop(
    brokers: &[SocketAddr],
    topic: &str,
    prefix: &str,
    first: usize,
    stop: &AtomicBool,
    history: &Mutex<History>,
) {
    let deadline = Instant::now() + WORKLOAD_LIMIT;
    let mut conn: Option<KafkaConn> = None;
    let mut broker = first % brokers.len();
    for seq in 0..WORKLOAD_MAX_ATTEMPTS {
        if stop.load(Ordering::Acquire) || Instant::now() > deadline {
            return;
        }
        let value = tag(prefix, seq, VALUE_BYTES);
        history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .sent
            .insert(value.clone(), RECORDS_PER_BATCH);
        let data = batch(RECORDS_PER_BATCH, &value);
        let sent_at = Instant::now();
        let answer = match conn.as_mut() {
            Some(c) => c.produce(topic, data),
            None => KafkaConn::connect(brokers[broker]).and_then(|mut c| {
                let r = c.produce(topic, data);
                conn = Some(c);
                r
            }),
        };
        // Timed under the lock: the history is in time order across producers.
        let mut h = history.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        match answer {
            Ok((0, base)) => h.acks.push(Ack {
                sent_at,
                acked_at: now,
                base: u64::try_from(base).expect("an acknowledged offset"),
                value,
            }),
            other => {
                let code = other.map_or(-1, |(code, _)| code);
                h.failures.push(Failure { at: now, code });
                drop(h);
                conn = None;
                broker = (broker + 1) % brokers.len();
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        }
        drop(h);
        std::thread::sleep(WORKLOAD_PAUSE);
    }
}

// ---- the cluster -----------------------------------------------------------------------------

/// A three-node cluster on the fault-injecting file system with one topic and a workload.
struct Bench {
    /// Kept (not removed) when the test fails, for its logs.
    dir: Option<tempfile::TempDir>,
    cluster: ProcCluster,
    topic: &'static str,
}

impl Bench {
    fn start(topic: &'static str) -> Bench {
        let dir = tempfile::Builder::new()
            .prefix("disknemesis-")
            .tempdir()
            .unwrap();
        // Retention by time off: every acknowledged record is read back from the start.
        let cluster = faulty_cluster(dir.path(), "retention_hours = 10000000");
        create(&cluster.kafka, topic);
        Bench {
            dir: Some(dir),
            cluster,
            topic,
        }
    }

    fn path(&self) -> &Path {
        self.dir.as_ref().expect("the test directory").path()
    }

    fn leader(&self) -> usize {
        leader_of(&self.cluster.kafka, self.topic)
    }

    /// A node that is not the leader: the first (`which` even) or the second.
    fn follower(&self, which: usize) -> usize {
        let leader = self.leader();
        let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
        followers[which % 2]
    }

    /// Node `i`'s replica of partition 0 from its admin API: (high watermark, log end offset).
    fn replica(&self, i: usize) -> Option<(u64, u64)> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(5)))
            .build()
            .into();
        let url = format!("http://{}/replicas", self.cluster.admin[i]);
        let text = agent
            .get(&url)
            .call()
            .ok()?
            .into_body()
            .read_to_string()
            .ok()?;
        let json: serde_json::Value = serde_json::from_str(&text).ok()?;
        json["replicas"].as_array()?.iter().find_map(|r| {
            (r["topic"] == self.topic && r["partition"] == 0).then(|| {
                (
                    r["high_watermark"].as_u64().unwrap_or(0),
                    r["log_end_offset"].as_u64().unwrap_or(0),
                )
            })
        })
    }

    /// Waits (up to `STEP_LIMIT`) until every node in `nodes` holds what the leader had
    /// committed when asked; returns when.
    fn wait_in_sync(&self, nodes: &[usize]) -> Instant {
        let deadline = Instant::now() + STEP_LIMIT;
        loop {
            let leader = self.leader();
            if let Some((committed, _)) = self.replica(leader) {
                if nodes
                    .iter()
                    .all(|&i| self.replica(i).is_some_and(|(_, end)| end >= committed))
                {
                    return Instant::now();
                }
            }
            if Instant::now() >= deadline {
                let states: Vec<_> = (0..3).map(|i| self.replica(i)).collect();
                panic!(
                    "nodes {nodes:?} did not catch up within {STEP_LIMIT:?}; (high watermark, \
                     log end) per node: {states:?}; leader {}; the first one's log:\n{}",
                    leader + 1,
                    self.cluster.log_tail(nodes[0])
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits (up to `STEP_LIMIT`) until node `i` exits; returns its exit status.
    fn wait_exit(&mut self, i: usize) -> std::process::ExitStatus {
        let deadline = Instant::now() + STEP_LIMIT;
        loop {
            if let Some(status) = self.cluster.exited(i) {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "node {} did not stop; its log:\n{}",
                i + 1,
                self.cluster.log_tail(i)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Makes node `i` lead partition 0 (admin leader transfer), waiting until it says so.
    fn lead_on(&self, i: usize) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(25)))
            .http_status_as_error(false)
            .build()
            .into();
        let url = format!(
            "http://{}/partitions/{}/0/leader?to={}&timeout_ms=20000",
            self.cluster.admin[i],
            self.topic,
            i + 1
        );
        let deadline = Instant::now() + STEP_LIMIT;
        loop {
            let _ = agent.post(&url).send_empty();
            let answer =
                KafkaConn::connect(self.cluster.kafka[i]).and_then(|mut c| c.metadata(self.topic));
            if matches!(answer, Ok((0, leader, _)) if leader == i as i32 + 1) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "node {} never took the lead",
                i + 1
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Node `i`'s log, read from it while it leads, up to its high watermark and `end` at
    /// least. The read starts over when the lead moves away meanwhile (the preferred-leader
    /// rebalance moves it).
    fn read_replica(&self, i: usize, end: u64) -> Acked {
        let deadline = Instant::now() + STEP_LIMIT;
        let mut last = String::new();
        'attempt: loop {
            assert!(
                Instant::now() < deadline,
                "node {}: could not read its log up to {end} while it led; last answer: {last}",
                i + 1
            );
            self.lead_on(i);
            let mut got = Acked::new();
            let mut offset = 0u64;
            let mut target = end;
            while offset < target {
                let answer = KafkaConn::connect(self.cluster.kafka[i])
                    .and_then(|mut c| c.fetch(self.topic, offset as i64));
                let records = match answer {
                    Ok((0, hw, _, records)) => {
                        target = target.max(u64::try_from(hw).unwrap_or(0));
                        records
                    }
                    other => {
                        last = format!("at {offset}: {other:?}");
                        std::thread::sleep(Duration::from_millis(100));
                        continue 'attempt;
                    }
                };
                if records.is_empty() {
                    // Not yet committed in the new leader's term.
                    last = format!("at {offset}: nothing yet");
                    std::thread::sleep(Duration::from_millis(50));
                    if Instant::now() >= deadline {
                        continue 'attempt;
                    }
                    continue;
                }
                for (base, count, value) in common::split_batches(&records) {
                    got.insert(base, (count, value));
                    offset = base + u64::from(count);
                }
            }
            return got;
        }
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Some(dir) = self.dir.take() {
                eprintln!(
                    "the nodes' logs and data are kept in {}",
                    dir.keep().display()
                );
            }
        }
    }
}

// ---- the checker -----------------------------------------------------------------------------

/// Anomalies of a final read, as Jepsen's Kafka workload names them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Anomalies {
    /// Acknowledged batches missing from a replica's log.
    lost: usize,
    /// Values found at more than one offset.
    duplicate: usize,
    /// Offsets holding different values on different replicas, and acknowledged values
    /// found at another offset than acknowledged.
    inconsistent: usize,
    /// Batches read that were never sent whole (unknown value or another record count).
    partial: usize,
}

impl Anomalies {
    fn total(&self) -> usize {
        self.lost + self.duplicate + self.inconsistent + self.partial
    }
}

/// Checks one read per replica against the history.
fn check(history: &History, reads: &[Acked]) -> Anomalies {
    let mut a = Anomalies::default();
    let mut at_offset: BTreeMap<u64, BTreeSet<&(u32, Vec<u8>)>> = BTreeMap::new();
    for read in reads {
        let mut offsets_of: HashMap<&[u8], Vec<u64>> = HashMap::new();
        for (base, entry) in read {
            at_offset.entry(*base).or_default().insert(entry);
            offsets_of.entry(&entry.1).or_default().push(*base);
            if history.sent.get(&entry.1) != Some(&entry.0) {
                a.partial += 1;
            }
        }
        a.duplicate += offsets_of.values().filter(|o| o.len() > 1).count();
        for ack in &history.acks {
            match read.get(&ack.base) {
                Some((_, v)) if *v == ack.value => {}
                _ if offsets_of.contains_key(ack.value.as_slice()) => a.inconsistent += 1,
                _ => a.lost += 1,
            }
        }
    }
    a.inconsistent += at_offset.values().filter(|s| s.len() > 1).count();
    a
}

/// The checker is not vacuous: each anomaly planted in a read is counted as what it is.
#[test]
fn the_checker_finds_each_anomaly() {
    let now = Instant::now();
    let mut history = History::default();
    for (base, v) in [(0u64, "a"), (5, "b"), (10, "c")] {
        history.sent.insert(v.into(), RECORDS_PER_BATCH);
        history.acks.push(Ack {
            sent_at: now,
            acked_at: now,
            base,
            value: v.into(),
        });
    }
    history.sent.insert(b"unacked".to_vec(), RECORDS_PER_BATCH);
    let read = |entries: &[(u64, u32, &str)]| -> Acked {
        entries
            .iter()
            .map(|&(b, n, v)| (b, (n, v.as_bytes().to_vec())))
            .collect()
    };
    let good = read(&[(0, 5, "a"), (5, 5, "b"), (10, 5, "c"), (15, 5, "unacked")]);
    let clean = check(&history, &[good.clone(), good.clone(), good.clone()]);
    assert_eq!(clean, Anomalies::default());
    let lost = read(&[(0, 5, "a"), (5, 5, "b")]);
    let duplicate = read(&[(0, 5, "a"), (5, 5, "b"), (10, 5, "c"), (15, 5, "c")]);
    let moved = read(&[(0, 5, "a"), (5, 5, "c"), (10, 5, "b")]);
    let partial = read(&[(0, 5, "a"), (5, 3, "b"), (10, 5, "c"), (15, 5, "?")]);
    assert_eq!(check(&history, &[good.clone(), lost]).lost, 1);
    assert_eq!(check(&history, &[good.clone(), duplicate]).duplicate, 1);
    // b and c each at another offset than acknowledged, and offsets 5 and 10 differing
    // between the two replicas.
    assert_eq!(check(&history, &[good.clone(), moved]).inconsistent, 4);
    // A batch of b with 3 records, an unknown value (and offset 5 differing).
    let a = check(&history, &[good, partial]);
    assert_eq!((a.partial, a.inconsistent), (2, 2));
}

/// The end (offset after the last record) of what was acknowledged.
fn acked_end(history: &History) -> u64 {
    history
        .acks
        .iter()
        .map(|a| a.base + u64::from(RECORDS_PER_BATCH))
        .max()
        .unwrap_or(0)
}

// ---- figures ---------------------------------------------------------------------------------

/// What one injection measured.
#[derive(Debug, Clone, Copy)]
struct Injection {
    acked_records: u64,
    produce_errors: usize,
    /// Longest window without an acknowledged produce, from the fault until recovered.
    gap: Duration,
    /// From the fault until the faulted nodes are back in sync and a produce was
    /// acknowledged after the fault ended.
    recovery: Duration,
    /// From the end of the fault (space back, node restarted) until back in sync.
    resync: Duration,
}

/// Milliseconds of the `q` quantile (0..=1) of `v` (sorted here).
fn quantile_ms(v: &mut [Duration], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort();
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v[i].as_secs_f64() * 1000.0
}

/// Measures one injection between `from` (fault injected), `fault_ended` and `recovered`.
fn measure(
    history: &History,
    from: Instant,
    fault_ended: Instant,
    recovered: Instant,
) -> Injection {
    let acked_batches = history.acks_between(from, recovered).count() as u64;
    Injection {
        acked_records: acked_batches * u64::from(RECORDS_PER_BATCH),
        produce_errors: history.failures_between(from, recovered).count(),
        gap: history.longest_gap(from, recovered),
        recovery: recovered - from,
        resync: recovered - fault_ended,
    }
}

fn print_injection(
    name: &str,
    round: usize,
    target: &str,
    node: usize,
    m: &Injection,
    extra: &str,
) {
    println!(
        "DISK_NEMESIS_INJECTION name={name} round={round} target={target} node={} acked_records={} \
         produce_errors={} gap_ms={} recovery_ms={} resync_ms={}{extra}",
        node + 1,
        m.acked_records,
        m.produce_errors,
        m.gap.as_millis(),
        m.recovery.as_millis(),
        m.resync.as_millis(),
    );
}

/// Reads every replica, checks the history, prints the summary line and asserts no anomaly.
fn finish(mut bench: Bench, workload: Workload, name: &str, injections: &[Injection], extra: &str) {
    let history = workload.finish();
    let end = acked_end(&history);
    let reads: Vec<Acked> = (0..3).map(|i| bench.read_replica(i, end)).collect();
    let a = check(&history, &reads);
    let mut gaps: Vec<Duration> = injections.iter().map(|m| m.gap).collect();
    let mut recoveries: Vec<Duration> = injections.iter().map(|m| m.recovery).collect();
    let mut resyncs: Vec<Duration> = injections.iter().map(|m| m.resync).collect();
    println!(
        "DISK_NEMESIS name={name} injections={} acked_records={} acked_during_faults={} \
         produce_errors={} lost={} duplicate={} inconsistent={} partial={} gap_ms_p50={:.0} \
         gap_ms_max={:.0} recovery_ms_p50={:.0} recovery_ms_max={:.0} resync_ms_p50={:.0} \
         resync_ms_max={:.0}{extra}",
        injections.len(),
        history.acks.len() as u64 * u64::from(RECORDS_PER_BATCH),
        injections.iter().map(|m| m.acked_records).sum::<u64>(),
        history.failures.len(),
        a.lost,
        a.duplicate,
        a.inconsistent,
        a.partial,
        quantile_ms(&mut gaps, 0.5),
        quantile_ms(&mut gaps, 1.0),
        quantile_ms(&mut recoveries, 0.5),
        quantile_ms(&mut recoveries, 1.0),
        quantile_ms(&mut resyncs, 0.5),
        quantile_ms(&mut resyncs, 1.0),
    );
    assert_eq!(a.total(), 0, "{name}: anomalies found: {a:?}");
    assert!(!history.acks.is_empty(), "{name}: nothing was acknowledged");
    bench.cluster.assert_all_running();
}

/// Starts a nemesis: the lock, a cluster, a workload, a first acknowledgement.
fn begin(topic: &'static str) -> (std::sync::MutexGuard<'static, ()>, Bench, Workload) {
    let guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let bench = Bench::start(topic);
    let workload = Workload::start(bench.cluster.kafka.clone(), topic);
    workload.wait_acked_after(Instant::now(), "the first produce");
    (guard, bench, workload)
}

fn target_name(round: usize) -> &'static str {
    if round % 2 == 0 {
        "leader"
    } else {
        "follower"
    }
}

// ---- the nemeses -----------------------------------------------------------------------------

/// fsync EIO on the leader and a follower alternately: the node exits (status 70, the file
/// named), the other two keep committing, and a restart catches up.
#[test]
fn fsync_eio_nemesis() {
    let (_guard, mut bench, workload) = begin("disk-eio");
    let mut injections = Vec::new();
    let mut fail_stop = Vec::new();
    for round in 0..rounds() {
        let node = if round % 2 == 0 {
            bench.leader()
        } else {
            bench.follower(round / 2)
        };
        let reported_before = bench
            .cluster
            .log(node)
            .matches("Input/output error")
            .count();
        let from = Instant::now();
        set_faults(bench.path(), node, "fsync=eio\n");
        let status = bench.wait_exit(node);
        let exited = Instant::now();
        fail_stop.push(exited - from);
        assert_eq!(
            status.code(),
            Some(70),
            "node {} did not fail-stop; its log:\n{}",
            node + 1,
            bench.cluster.log_tail(node)
        );
        assert!(
            bench
                .cluster
                .log(node)
                .matches("Input/output error")
                .count()
                > reported_before,
            "node {}: the EIO is not reported; its log:\n{}",
            node + 1,
            bench.cluster.log_tail(node)
        );
        // The majority commits without it.
        workload.wait_acked_after(exited, "the two remaining nodes");
        set_faults(bench.path(), node, "");
        bench.cluster.kill(node);
        bench.cluster.spawn(node);
        let fault_ended = Instant::now();
        workload.wait_acked_after(fault_ended, "after the restart");
        let recovered = bench.wait_in_sync(&[node]);
        bench.cluster.assert_all_running();
        let m = measure(&workload.history(), from, fault_ended, recovered);
        print_injection(
            "fsync_eio",
            round,
            target_name(round),
            node,
            &m,
            &format!(" fail_stop_ms={}", (exited - from).as_millis()),
        );
        injections.push(m);
    }
    let extra = format!(
        " fail_stop_ms_p50={:.0} fail_stop_ms_max={:.0}",
        quantile_ms(&mut fail_stop, 0.5),
        quantile_ms(&mut fail_stop, 1.0)
    );
    finish(bench, workload, "fsync_eio", &injections, &extra);
}

/// ENOSPC on every write of the leader and a follower alternately: the leader's produces are
/// answered KAFKA_STORAGE_ERROR (the others take over), a follower's fault does not stop
/// commits; once space returns the node appends and catches up. A hard-state write that
/// fails is fail-stop: such a node is restarted (counted).
#[test]
fn enospc_nemesis() {
    let (_guard, mut bench, workload) = begin("disk-enospc");
    let mut injections = Vec::new();
    let mut storage_errors = 0;
    let mut restarts = 0;
    for round in 0..rounds() {
        let leader_target = round % 2 == 0;
        let node = if leader_target {
            bench.leader()
        } else {
            bench.follower(round / 2)
        };
        let from = Instant::now();
        set_faults(bench.path(), node, "write=enospc\n");
        // Hold the fault until its effect is seen: an error answered to a produce (leader),
        // or produces acknowledged by the other two (follower); then a little longer.
        let deadline = Instant::now() + STEP_LIMIT;
        loop {
            let seen = {
                let h = workload.history();
                if leader_target {
                    h.failures_between(from, Instant::now())
                        .any(|f| f.code == STORAGE_ERROR)
                } else {
                    h.acks_between(from + Duration::from_millis(300), Instant::now())
                        .count()
                        >= 5
                }
            };
            if seen {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {}: no effect of ENOSPC seen (leader: {leader_target})",
                node + 1
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(300));
        set_faults(bench.path(), node, "");
        if bench.cluster.exited(node).is_some() {
            restarts += 1;
            bench.cluster.kill(node);
            bench.cluster.spawn(node);
        }
        let fault_ended = Instant::now();
        workload.wait_acked_after(fault_ended, "after space returned");
        let recovered = bench.wait_in_sync(&[node]);
        bench.cluster.assert_all_running();
        let h = workload.history();
        let errors = h
            .failures_between(from, fault_ended)
            .filter(|f| f.code == STORAGE_ERROR)
            .count();
        storage_errors += errors;
        let m = measure(&h, from, fault_ended, recovered);
        drop(h);
        print_injection(
            "enospc",
            round,
            target_name(round),
            node,
            &m,
            &format!(" storage_errors={errors}"),
        );
        injections.push(m);
    }
    let extra = format!(" storage_errors={storage_errors} fail_stop_restarts={restarts}");
    finish(bench, workload, "enospc", &injections, &extra);
}

/// Power cuts: `victims` picks the nodes of each round; each is killed with SIGKILL, loses
/// every write it had not fsynced (torn), and starts again.
fn power_cut_nemesis(name: &str, topic: &'static str, all: bool) {
    let (_guard, mut bench, workload) = begin(topic);
    let mut injections = Vec::new();
    let mut dropped_writes = 0;
    let mut cuts_losing_writes = 0;
    for round in 0..rounds() {
        let victims: Vec<usize> = if all {
            (0..3).collect()
        } else if round % 2 == 0 {
            vec![bench.leader()]
        } else {
            vec![bench.follower(round / 2)]
        };
        // Let some produces be acknowledged since the last cut.
        workload.wait_acked_after(Instant::now(), "before the cut");
        std::thread::sleep(Duration::from_millis(300));
        wait_for_unsynced_write(bench.path(), &victims);
        let from = Instant::now();
        for &v in &victims {
            bench.cluster.kill(v);
        }
        let mut dropped = 0;
        for &v in &victims {
            dropped += logstore::simulate_power_cut(&control(bench.path(), v), true).unwrap();
        }
        dropped_writes += dropped;
        if dropped > 0 {
            cuts_losing_writes += 1;
        }
        for &v in &victims {
            bench.cluster.spawn(v);
        }
        let fault_ended = Instant::now();
        workload.wait_acked_after(fault_ended, "after the power returned");
        let recovered = bench.wait_in_sync(&victims);
        bench.cluster.assert_all_running();
        let m = measure(&workload.history(), from, fault_ended, recovered);
        let target = if all { "all" } else { target_name(round) };
        print_injection(
            name,
            round,
            target,
            victims[0],
            &m,
            &format!(" dropped_writes={dropped}"),
        );
        injections.push(m);
    }
    finish(
        bench,
        workload,
        name,
        &injections,
        &format!(" dropped_writes={dropped_writes} cuts_losing_writes={cuts_losing_writes}"),
    );
}

/// Waits (up to 2 s) until one of `nodes` has a write in its journal that is not yet
/// fsynced (the journal's last line is a write), so that the cut that follows loses or tears
/// it; returns either way (a cut after synced writes only is a valid cut too).
fn wait_for_unsynced_write(dir: &Path, nodes: &[usize]) {
    use std::io::{Read, Seek, SeekFrom};
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        for &i in nodes {
            let Ok(mut f) = std::fs::File::open(logstore::fs::journal_path(&control(dir, i)))
            else {
                continue;
            };
            let len = f.metadata().map_or(0, |m| m.len());
            let mut tail = Vec::new();
            if f.seek(SeekFrom::Start(len.saturating_sub(512))).is_ok()
                && f.read_to_end(&mut tail).is_ok()
            {
                let tail = String::from_utf8_lossy(&tail);
                if tail.ends_with('\n') && tail.lines().last().is_some_and(|l| l.starts_with("W "))
                {
                    return;
                }
            }
        }
    }
}

/// A power cut of the leader and a follower alternately.
#[test]
fn power_cut_one_node_nemesis() {
    power_cut_nemesis("power_cut_one", "disk-cut-one", false);
}

/// A power cut of all three nodes at once: nothing acknowledged may be lost.
#[test]
fn power_cut_all_nodes_nemesis() {
    power_cut_nemesis("power_cut_all", "disk-cut-all", true);
}

/// One follower's fsyncs 400 ms slower (each follower in turn): the produce latency median
/// while it is slow is compared with the median of the window just before, without a fault.
#[test]
fn slow_follower_disk_nemesis() {
    const WINDOW: Duration = Duration::from_millis(1500);
    let (_guard, mut bench, workload) = begin("disk-slow");
    let latencies = |from: Instant, to: Instant| -> Vec<Duration> {
        workload
            .history()
            .acks_between(from, to)
            .filter(|a| a.sent_at >= from)
            .map(|a| a.acked_at - a.sent_at)
            .collect()
    };
    let mut injections = Vec::new();
    let (mut all_base, mut all_slow) = (Vec::new(), Vec::new());
    let mut lagging = 0;
    for round in 0..rounds() {
        let node = bench.follower(round);
        let base_from = Instant::now();
        std::thread::sleep(WINDOW);
        let mut base = latencies(base_from, Instant::now());
        let from = Instant::now();
        set_faults(
            bench.path(),
            node,
            &format!("fsync_delay_ms={SLOW_FSYNC_MS}\n"),
        );
        let slow_from = Instant::now();
        // The fault is real: at some moment of the window the slow follower's log ends behind
        // what the leader committed (sampled through the window: right after one of its slow
        // fsyncs it may have caught up for an instant).
        let mut behind = 0;
        while slow_from.elapsed() < WINDOW {
            let leader = bench.leader();
            if let (Some((committed, _)), Some((_, end))) =
                (bench.replica(leader), bench.replica(node))
            {
                behind = behind.max(committed.saturating_sub(end));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut slow = latencies(slow_from, Instant::now());
        if behind > 0 {
            lagging += 1;
        }
        set_faults(bench.path(), node, "");
        let fault_ended = Instant::now();
        workload.wait_acked_after(fault_ended, "after the disk was fast again");
        let recovered = bench.wait_in_sync(&[node]);
        bench.cluster.assert_all_running();
        let m = measure(&workload.history(), from, fault_ended, recovered);
        print_injection(
            "slow_follower",
            round,
            "follower",
            node,
            &m,
            &format!(
                " latency_ms_p50_base={:.1} latency_ms_p50_slow={:.1} samples_base={} samples_slow={} \
                 records_behind={behind}",
                quantile_ms(&mut base, 0.5),
                quantile_ms(&mut slow, 0.5),
                base.len(),
                slow.len()
            ),
        );
        all_base.extend(base);
        all_slow.extend(slow);
        injections.push(m);
    }
    let base_ms = quantile_ms(&mut all_base, 0.5);
    let slow_ms = quantile_ms(&mut all_slow, 0.5);
    let extra = format!(
        " latency_ms_p50_base={base_ms:.1} latency_ms_p50_slow={slow_ms:.1} latency_ms_p99_base={:.1} \
         latency_ms_p99_slow={:.1} slow_fsync_ms={SLOW_FSYNC_MS} followers_behind={lagging}",
        quantile_ms(&mut all_base, 0.99),
        quantile_ms(&mut all_slow, 0.99),
    );
    assert!(
        all_slow.len() >= 10,
        "too few produces while the follower was slow"
    );
    assert!(
        lagging > 0,
        "no slow follower was ever behind: the fault did nothing"
    );
    finish(bench, workload, "slow_follower", &injections, &extra);
    // Lenient: a leader waiting for the slow disk would take at least its 400 ms per commit.
    assert!(
        slow_ms < (3.0 * base_ms).max(base_ms + 100.0) && slow_ms < SLOW_FSYNC_MS as f64 / 2.0,
        "the produce latency median follows the slow follower: {slow_ms:.1} ms with it slow, \
         {base_ms:.1} ms before"
    );
}
