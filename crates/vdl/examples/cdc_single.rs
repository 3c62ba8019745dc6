//! A key-value "database" that writes every change to an embedded single-node vdl log before
//! applying it, and rebuilds its state from the log when it starts again.
//!
//! Run: `cargo run -p vdl --example cdc_single` (a few seconds; data in a temporary
//! directory, removed at the end). It writes changes, "restarts" (shuts the log down and opens
//! it again from disk), rebuilds the table from the log and checks it equals the one before.

use std::collections::BTreeMap;
use std::path::Path;

use vdl::{Log, Offset, Record, Stream};

/// The change stream's name (a Kafka topic of the same name when served over Kafka).
const CHANGES: &str = "kv-changes";

/// An in-memory table whose every change is first made durable in the log.
struct Db {
    changes: Stream,
    table: BTreeMap<String, String>,
    /// The offset of the next change to apply when rebuilding.
    applied: Offset,
}

impl Db {
    /// Opens the table: replays every change in the log.
    async fn open(log: &Log) -> vdl::Result<Db> {
        let changes = log.stream(CHANGES).await?;
        let mut db = Db {
            changes,
            table: BTreeMap::new(),
            applied: Offset::start(0),
        };
        loop {
            let batch = db.changes.read_range(db.applied, u64::MAX).await?;
            let Some(last) = batch.last() else { break };
            db.applied = last.offset.next();
            for change in &batch {
                db.apply(change.key.as_deref(), change.value.as_deref());
            }
        }
        Ok(db)
    }

    fn apply(&mut self, key: Option<&[u8]>, value: Option<&[u8]>) {
        let key = String::from_utf8_lossy(key.unwrap_or_default()).into_owned();
        match value {
            Some(v) => self
                .table
                .insert(key, String::from_utf8_lossy(v).into_owned()),
            // A null value (a Kafka tombstone) deletes the key.
            None => self.table.remove(&key),
        };
    }

    /// Sets `key` to `value`: durable in the log first, then applied.
    async fn put(&mut self, key: &str, value: &str) -> vdl::Result<()> {
        let at = self
            .changes
            .append(Record::keyed(key.to_owned(), value.to_owned()).with_header("op", "put"))
            .await?;
        self.apply(Some(key.as_bytes()), Some(value.as_bytes()));
        self.applied = at.next();
        Ok(())
    }

    /// Deletes `key`.
    async fn delete(&mut self, key: &str) -> vdl::Result<()> {
        let at = self
            .changes
            .append(Record {
                key: Some(key.to_owned().into()),
                headers: vec![("op".into(), Some("delete".into()))],
                ..Record::default()
            })
            .await?;
        self.table.remove(key);
        self.applied = at.next();
        Ok(())
    }

    /// Moves `amount` from one counter to another: both changes commit together or neither.
    async fn transfer(&mut self, from: &str, to: &str, amount: i64) -> vdl::Result<()> {
        let value =
            |k: &str| -> i64 { self.table.get(k).and_then(|v| v.parse().ok()).unwrap_or(0) };
        let (a, b) = (value(from) - amount, value(to) + amount);
        let at = self
            .changes
            .append_atomic(vec![
                Record::keyed(from.to_owned(), a.to_string()).with_header("op", "transfer"),
                Record::keyed(to.to_owned(), b.to_string()).with_header("op", "transfer"),
            ])
            .await?;
        self.apply(Some(from.as_bytes()), Some(a.to_string().as_bytes()));
        self.apply(Some(to.as_bytes()), Some(b.to_string().as_bytes()));
        self.applied = at[1].next();
        Ok(())
    }
}

/// The example's work in `dir`: returns (changes written, keys in the table).
pub async fn run(dir: &Path) -> vdl::Result<(u64, usize)> {
    let before = {
        let log = Log::open_single(dir).await?;
        let mut db = Db::open(&log).await?;
        for i in 0..500u32 {
            let key = format!("user-{}", i % 50);
            match i % 10 {
                9 => db.delete(&key).await?,
                5 => db.transfer("account-a", "account-b", 3).await?,
                _ => db.put(&key, &format!("profile v{i}")).await?,
            }
        }
        println!(
            "wrote {} changes; table has {} keys; shutting down",
            db.applied.offset,
            db.table.len()
        );
        let state = (db.table.clone(), db.applied);
        log.shutdown().await;
        state
    };
    let log = Log::open_single(dir).await?;
    let db = Db::open(&log).await?;
    println!(
        "restarted: rebuilt {} keys from {} changes in the log",
        db.table.len(),
        db.applied.offset
    );
    assert_eq!(
        db.table, before.0,
        "the rebuilt table equals the table before the restart"
    );
    assert_eq!(db.applied, before.1);
    assert_eq!(db.table.get("account-b").map(String::as_str), Some("150"));
    log.shutdown().await;
    Ok((before.1.offset, before.0.len()))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> vdl::Result<()> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (changes, keys) = run(dir.path()).await?;
    println!("ok: {changes} changes, {keys} keys, state identical after restart");
    Ok(())
}
