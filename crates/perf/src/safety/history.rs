//! The history of a verify run: every send with its outcome, every assignment a group member
//! received, every record a consumer polled (in poll order, with the group member and
//! generation in group mode), the group's final committed offsets, and the final read of every
//! partition. One JSON object per line when written to a file, the first describing the run.

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
    /// Acknowledged as already written (an idempotent producer's retry answered
    /// DUPLICATE_SEQUENCE_NUMBER): written, at an offset the answer does not give.
    AckedDuplicate,
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
    /// Request latency in microseconds (from the first attempt to the last answer).
    pub latency_us: u64,
    /// How many times the same batch was sent again after an unknown outcome (idempotent
    /// producers only; 0 otherwise).
    pub retries: u32,
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

/// One record polled by a tailing consumer or a group member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Poll {
    /// Which consumer polled it (assign-mode consumers first, then group members).
    pub consumer: u32,
    /// The group member id the coordinator gave it (group mode only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// The group generation of the assignment it polled under (group mode only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<i32>,
    /// What it read.
    #[serde(flatten)]
    pub read: Read,
}

/// A partition a group member was assigned in one generation, and where it started reading
/// (the group's committed offset then, or the log start when none was committed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Assignment {
    /// The consumer (as in [`Poll::consumer`]).
    pub consumer: u32,
    /// Its member id.
    pub member: String,
    /// The generation.
    pub generation: i32,
    /// The partition.
    pub partition: i32,
    /// The first offset it fetched.
    pub start_offset: i64,
}

/// A partition's committed offset in the group when the run ended (the next offset the group
/// would read; -1 when nothing was committed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Committed {
    /// Partition.
    pub partition: i32,
    /// Committed offset.
    pub offset: i64,
}

/// What kind of run made the history.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RunInfo {
    /// The partitions of the topic (0..partitions).
    pub partitions: i32,
    /// How long the producers ran, in milliseconds.
    pub run_ms: u64,
    /// Whether the producers were idempotent (producer id, sequence numbers, retries of the
    /// same batch).
    pub idempotent: bool,
    /// The consumer group the group members joined (none without group members).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

/// Everything a run observed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// What kind of run it was.
    pub info: RunInfo,
    /// Every send, in any order.
    pub sends: Vec<Send>,
    /// Every assignment of a group member.
    pub assignments: Vec<Assignment>,
    /// Every poll; for one (consumer, generation, partition) in poll order.
    pub polls: Vec<Poll>,
    /// The group's committed offsets at the end (group mode only).
    pub committed: Vec<Committed>,
    /// The final read of every partition from the log start to the high watermark.
    pub final_read: Vec<Read>,
}

/// One line of the history file.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HistoryLine<'a> {
    /// The run's description (the first line).
    Run(&'a RunInfo),
    /// A send.
    Send(&'a Send),
    /// A group member's assignment.
    Assignment(&'a Assignment),
    /// A poll.
    Poll(&'a Poll),
    /// A committed offset of the group at the end.
    Committed(&'a Committed),
    /// A record of the final read.
    Final(&'a Read),
}

impl History {
    /// Writes the history as JSON lines: the run, sends, assignments, polls, committed
    /// offsets, then the final read.
    pub fn write_jsonl(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        let lines = std::iter::once(HistoryLine::Run(&self.info))
            .chain(self.sends.iter().map(HistoryLine::Send))
            .chain(self.assignments.iter().map(HistoryLine::Assignment))
            .chain(self.polls.iter().map(HistoryLine::Poll))
            .chain(self.committed.iter().map(HistoryLine::Committed))
            .chain(self.final_read.iter().map(HistoryLine::Final));
        for line in lines {
            serde_json::to_writer(&mut *out, &line)?;
            out.write_all(b"\n")?;
        }
        Ok(())
    }
}
