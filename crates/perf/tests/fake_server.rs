//! Produce and consume against the in-process fake server: counts, dense offsets, gap
//! detection, NOT_LEADER_OR_FOLLOWER handling, pipelining and the fixed rate.

use std::sync::atomic::Ordering;
use std::time::Duration;

use kafka_proto::records::Compression;
use vdl_perf::consume::{self, ConsumeConfig};
use vdl_perf::env::Env;
use vdl_perf::fake_server::FakeServer;
use vdl_perf::produce::{self, ProduceConfig};
use vdl_perf::progress::ProgressMode;
use vdl_perf::units::StartOffset;

fn produce_cfg(topic: &str, messages: u64, batch: usize) -> ProduceConfig {
    ProduceConfig {
        topic: topic.into(),
        partition: Some(0),
        messages,
        message_size: 100,
        batch,
        threads: 1,
        in_flight: 1,
        acks: -1,
        compression: Compression::None,
        duration: Duration::from_secs(20),
        rate: None,
        keys: None,
    }
}

fn consume_cfg(topic: &str, fetch_size: usize) -> ConsumeConfig {
    ConsumeConfig {
        topic: topic.into(),
        partition: Some(0),
        threads: 1,
        from: StartOffset::Earliest,
        messages: None,
        fetch_size,
        max_wait_ms: 10,
        duration: Duration::from_secs(20),
        verify_crc: true,
    }
}

async fn server() -> (FakeServer, Env) {
    let s = FakeServer::start("127.0.0.1:0", 1).await.unwrap();
    let env = Env::new(
        &s.addr().to_string(),
        Duration::from_secs(5),
        ProgressMode::Quiet,
    );
    (s, env)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_then_consume_counts_match_and_offsets_are_dense() {
    let (s, env) = server().await;
    let p = produce::run(&env.fresh(), &produce_cfg("t", 1000, 7))
        .await
        .unwrap();
    assert_eq!(p.records, 1000);
    assert_eq!(p.requests, 143); // 142 full batches of 7 and one of 6
    assert_eq!(p.error_total(), 0);
    assert!(p.latency.count == 143 && p.latency.max_ms > 0.0);
    assert!(p.rtt_ms.is_some());
    assert!((p.payload_mb_per_s * 1e6 * p.elapsed_s - 100_000.0).abs() < 1.0);
    assert_eq!(s.end_offset("t", 0), 1000);

    // Small fetches: many requests, each cut at the size limit.
    let c = consume::run(&env.fresh(), &consume_cfg("t", 1024))
        .await
        .unwrap();
    assert_eq!(c.records, 1000);
    assert_eq!(c.error_total(), 0, "{:?}", c.errors);
    assert_eq!(c.gaps, 0);
    assert!(c.requests > 10);

    // From an offset in the middle of a batch: records before it are skipped, not counted.
    let mut cfg = consume_cfg("t", 1 << 20);
    cfg.from = StartOffset::Offset(10);
    let c = consume::run(&env.fresh(), &cfg).await.unwrap();
    assert_eq!(c.records, 990);
    assert_eq!(c.error_total(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skipped_offset_is_counted_as_a_gap() {
    let (s, env) = server().await;
    s.faults().skip_offset.store(25, Ordering::Relaxed);
    produce::run(&env.fresh(), &produce_cfg("g", 100, 10))
        .await
        .unwrap();
    assert_eq!(s.end_offset("g", 0), 101);
    let c = consume::run(&env.fresh(), &consume_cfg("g", 1 << 20))
        .await
        .unwrap();
    assert_eq!(c.records, 100);
    assert_eq!(c.gaps, 1);
    assert_eq!(c.errors.get("OFFSET_GAP"), Some(&1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_leader_is_counted_and_metadata_refreshed() {
    let (s, env) = server().await;
    s.faults().not_leader_produces.store(3, Ordering::Relaxed);
    let before = s.metadata_requests();
    let mut cfg = produce_cfg("nl", 200, 10);
    cfg.in_flight = 4;
    let p = produce::run(&env.fresh(), &cfg).await.unwrap();
    assert_eq!(p.records, 200, "every record is acknowledged in the end");
    assert!(
        p.errors.get("NOT_LEADER_OR_FOLLOWER").copied().unwrap_or(0) >= 1,
        "{:?}",
        p.errors
    );
    // Initial lookups (topic, rtt probe, worker) plus at least one refresh per error.
    assert!(
        s.metadata_requests() - before > 3,
        "{}",
        s.metadata_requests()
    );
    assert_eq!(s.faults().not_leader_produces.load(Ordering::Relaxed), 0);
    let c = consume::run(&env.fresh(), &consume_cfg("nl", 1 << 20))
        .await
        .unwrap();
    // Requests in flight behind a failed one were appended but their answers were dropped
    // with the connection, so they are sent again (at-least-once, no idempotence): the log
    // may hold more than 200 records, but densely.
    assert!(s.end_offset("nl", 0) >= 200);
    assert_eq!((c.records, c.gaps), (s.end_offset("nl", 0) as u64, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_threads_produce_everything() {
    let (s, env) = server().await;
    let mut cfg = produce_cfg("pipe", 3000, 5);
    cfg.threads = 3;
    cfg.in_flight = 8;
    cfg.compression = Compression::Lz4;
    let p = produce::run(&env.fresh(), &cfg).await.unwrap();
    assert_eq!(p.records, 3000);
    assert_eq!(p.requests, 600);
    assert_eq!(s.end_offset("pipe", 0), 3000);
    let mut c = consume_cfg("pipe", 64 << 10);
    c.threads = 2;
    let r = consume::run(&env.fresh(), &c).await.unwrap();
    assert_eq!(r.records, 6000, "each consumer reads everything");
    assert_eq!(r.error_total(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_rate_and_duration_bound_the_run() {
    let (_s, env) = server().await;
    let mut cfg = produce_cfg("rate", 1_000_000, 1);
    cfg.rate = Some(200.0);
    cfg.duration = Duration::from_millis(500);
    let p = produce::run(&env.fresh(), &cfg).await.unwrap();
    assert!(
        (90..=101).contains(&p.requests),
        "about 100 requests at 200/s for 0.5 s, got {}",
        p.requests
    );
    assert!(p.elapsed_s < 1.5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consuming_from_latest_reads_only_new_records() {
    let (_s, env) = server().await;
    produce::run(&env.fresh(), &produce_cfg("late", 50, 10))
        .await
        .unwrap();
    let mut cfg = consume_cfg("late", 1 << 20);
    cfg.from = StartOffset::Latest;
    cfg.messages = Some(30);
    let consumer = {
        let env = env.fresh();
        tokio::spawn(async move { consume::run(&env, &cfg).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    produce::run(&env.fresh(), &produce_cfg("late", 30, 10))
        .await
        .unwrap();
    let c = consumer.await.unwrap().unwrap();
    assert_eq!((c.records, c.gaps), (30, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_an_error_not_a_hang() {
    // A port nobody listens on: bind, take the port, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let env = Env::new(
        &format!("127.0.0.1:{port}"),
        Duration::from_millis(500),
        ProgressMode::Quiet,
    );
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        produce::run(&env, &produce_cfg("x", 10, 1)),
    )
    .await
    .expect("gives up in time");
    assert!(r.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_one_means_one_unanswered_request() {
    let (s, env) = server().await;
    s.faults()
        .produce_delay_us
        .store(2000, std::sync::atomic::Ordering::Relaxed);
    // Synchronous: the next request goes out only after the previous answer.
    let p = produce::run(&env.fresh(), &produce_cfg("sync", 40, 1))
        .await
        .unwrap();
    assert_eq!(p.records, 40);
    assert_eq!(
        s.pipelined_produces(),
        0,
        "a request was sent before the previous answer"
    );
    // And the detector works: with 4 in flight, requests wait behind unanswered ones.
    let mut cfg = produce_cfg("piped", 40, 1);
    cfg.in_flight = 4;
    produce::run(&env.fresh(), &cfg).await.unwrap();
    assert!(s.pipelined_produces() > 0);
}

/// `--partitions`: a topic with the asked-for count is ready once every partition has a
/// leader; one that exists with another count is refused, naming both counts.
#[tokio::test]
async fn ensure_partitions_accepts_the_count_and_refuses_another() {
    let s = FakeServer::start("127.0.0.1:0", 8).await.unwrap();
    let env = Env::new(
        &s.addr().to_string(),
        Duration::from_secs(5),
        ProgressMode::Quiet,
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    env.cluster
        .ensure_partitions("p8", 8, deadline)
        .await
        .expect("8 partitions");
    let err = env
        .cluster
        .ensure_partitions("p8", 4, deadline)
        .await
        .expect_err("4 is not 8");
    assert!(
        err.to_string().contains("exists with 8 partitions"),
        "{err}"
    );
}
