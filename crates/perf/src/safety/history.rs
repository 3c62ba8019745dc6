//! The history of a verify run: every send with its outcome, every record a tailing consumer
//! polled (in poll order), and the final read of every partition. One JSON object per line
//! when written to a file.

use serde::Serialize;

/// How a send ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum SendOutcome {
    /// Acknowledged (acks=all) at this offset.
    Acked {
        /// The offset the broker gave the record.
        offset: i64,
    },
    /// An error or a timeout: the record may or may not have been written.
    Unknown {
        /// The error's kind (Kafka error name or client failure).
        error: String,
    },
}

/// One produced value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Send {
    /// The unique value (`p<producer>-<sequence>`).
    pub value: String,
    /// The partition it was sent to.
    pub partition: i32,
    /// When the answer came, in milliseconds since the run started.
    pub done_ms: u64,
    /// Request latency in microseconds.
    pub latency_us: u64,
    /// What happened.
    #[serde(flatten)]
    pub outcome: SendOutcome,
}

/// One record as a reader saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Read {
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// The value (lossy UTF-8; values this tool writes are ASCII).
    pub value: String,
}

/// One record polled by a tailing consumer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Poll {
    /// Which consumer polled it.
    pub consumer: u32,
    /// What it read.
    #[serde(flatten)]
    pub read: Read,
}

/// Everything a run observed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// The partitions of the topic (0..partitions).
    pub partitions: i32,
    /// How long the producers ran, in milliseconds.
    pub run_ms: u64,
    /// Every send, in any order.
    pub sends: Vec<Send>,
    /// Every poll; for one (consumer, partition) in poll order.
    pub polls: Vec<Poll>,
    /// The final read of every partition from the log start to the high watermark.
    pub final_read: Vec<Read>,
}

/// One line of the history file.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HistoryLine<'a> {
    /// A send.
    Send(&'a Send),
    /// A poll.
    Poll(&'a Poll),
    /// A record of the final read.
    Final(&'a Read),
}

impl History {
    /// Writes the history as JSON lines: sends, then polls, then the final read.
    pub fn write_jsonl(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        let lines = self
            .sends
            .iter()
            .map(HistoryLine::Send)
            .chain(self.polls.iter().map(HistoryLine::Poll))
            .chain(self.final_read.iter().map(HistoryLine::Final));
        for line in lines {
            serde_json::to_writer(&mut *out, &line)?;
            out.write_all(b"\n")?;
        }
        Ok(())
    }
}
