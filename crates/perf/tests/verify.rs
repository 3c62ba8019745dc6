//! `vdl-perf verify` end to end against the in-process fake server: the producers' values are
//! acknowledged, polled by every consumer and found by the final read, and the checker finds
//! no anomaly; a value removed from the final read is then reported lost.

use std::time::Duration;

use vdl_perf::fake_server::FakeServer;
use vdl_perf::safety::checker::check;
use vdl_perf::safety::history::SendOutcome;
use vdl_perf::safety::run::{run, VerifyConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_against_the_fake_server_is_safe() {
    let server = FakeServer::start("127.0.0.1:0", 2).await.unwrap();
    let cfg = VerifyConfig {
        bootstrap: server.addr().to_string(),
        topic: "verify".into(),
        partitions: 2,
        duration: Duration::from_secs(5),
        producers: 2,
        consumers: 2,
        group_consumers: 0,
        idempotent: false,
        max_records: 400,
        request_timeout: Duration::from_secs(5),
        transactions: None,
    };
    let mut history = tokio::time::timeout(Duration::from_secs(60), run(cfg))
        .await
        .expect("bounded run")
        .unwrap();
    // --max-records stops the producers at 400 sends in all.
    assert_eq!(history.sends.len(), 400);
    assert!(history
        .sends
        .iter()
        .all(|s| matches!(s.outcome, SendOutcome::Acked { .. })));
    assert_eq!(
        server.end_offset("verify", 0) + server.end_offset("verify", 1),
        400
    );
    let report = check(&history);
    assert!(report.safe, "{report:?}");
    assert_eq!(report.total.acked, 400);
    assert_eq!(report.total.unseen, 0);
    assert_eq!(report.final_records, 400);
    assert_eq!(report.polled_records, 800);
    assert_eq!(report.partitions[&0].acked, 200);

    history.final_read.pop();
    let report = check(&history);
    assert!(!report.safe);
    assert_eq!(report.total.lost, 1);
}
