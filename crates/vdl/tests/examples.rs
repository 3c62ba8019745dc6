//! Runs the examples' code (the same functions their `main` calls) so they stay correct.

#[path = "../examples/cdc_single.rs"]
#[allow(dead_code)]
mod cdc_single;

#[path = "../examples/cdc_cluster.rs"]
#[allow(dead_code)]
mod cdc_cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cdc_single_rebuilds_its_table_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (changes, keys) = cdc_single::run(dir.path()).await.unwrap();
    assert_eq!(changes, 550);
    assert!(keys > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cdc_cluster_tailer_sees_every_change_once_across_a_leader_kill() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(cdc_cluster::run(dir.path(), 200).await.unwrap(), 200);
}
