//! Forwards raft-rs's `slog` records to `tracing`, so Raft's own messages (elections, leader
//! changes, rejected votes) appear in the node's log under the target `raft`. raft-rs's info
//! lines (every election step, every group's start) are internals: they are logged at debug
//! (`RUST_LOG=raft=debug` shows them); the node logs one info line per leadership change
//! itself. Warnings and errors keep their level.

use std::fmt::Write as _;

/// A slog drain writing each record as a `tracing` event with target `raft`.
pub struct TracingDrain;

struct KvText(String);

impl slog::Serializer for KvText {
    fn emit_arguments(&mut self, key: slog::Key, val: &std::fmt::Arguments) -> slog::Result {
        let _ = write!(self.0, " {key}={val}");
        Ok(())
    }
}

impl slog::Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &slog::Record, values: &slog::OwnedKVList) -> Result<(), slog::Never> {
        let mut kv = KvText(String::new());
        let _ = slog::KV::serialize(&record.kv(), record, &mut kv);
        let _ = slog::KV::serialize(values, record, &mut kv);
        let msg = record.msg();
        match record.level() {
            slog::Level::Critical | slog::Level::Error => {
                tracing::error!(target: "raft", "{msg}{}", kv.0)
            }
            slog::Level::Warning => tracing::warn!(target: "raft", "{msg}{}", kv.0),
            slog::Level::Info | slog::Level::Debug => {
                tracing::debug!(target: "raft", "{msg}{}", kv.0)
            }
            slog::Level::Trace => tracing::trace!(target: "raft", "{msg}{}", kv.0),
        }
        Ok(())
    }
}

/// A logger for one Raft group, tagged with the stream name.
pub fn group_logger(stream: &str) -> slog::Logger {
    slog::Logger::root(TracingDrain, slog::o!("stream" => stream.to_owned()))
}
