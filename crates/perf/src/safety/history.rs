//! The history of a verify run: every send with its outcome (or, in a transactional run, every
//! transaction with its values and outcome), every assignment a group member received, every
//! record a consumer polled (in poll order, with the group member and generation in group
//! mode), the group's final committed offsets, and the final read of every partition. One JSON object per line when written to a file, the first describing the run.

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
    /// When the Fetch answer that held it arrived, in microseconds since the run started
    /// (transactional runs' tailers; the read-before-commit check compares it with the
    /// transaction's first EndTxn).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at_us: Option<u64>,
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
    /// Whether the producers were transactional (their writes are in `txns`, not `sends`) and
    /// every read was read_committed.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub transactional: bool,
}

/// How a transaction ended, as its producer knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum TxnOutcome {
    /// EndTxn(commit) was answered without error: every value must be visible.
    Committed,
    /// EndTxn(abort) was answered without error: no value may be visible.
    Aborted,
    /// A second producer with the same transactional id was initialised while this
    /// transaction was open (the fencing check): no value may be visible.
    Fenced,
    /// The end is not known (an EndTxn that failed or timed out, a fenced producer, a produce
    /// that failed and an abort that failed too): all values visible or none.
    Unknown {
        /// The error's kind (Kafka error name or client failure).
        error: String,
    },
}

/// One value of a transaction and the partition it was sent to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TxnWrite {
    /// The unique value (`t<producer>-<transaction>-<index>`).
    pub value: String,
    /// The partition.
    pub partition: i32,
    /// The offset the Produce answer gave it (none when the produce failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<i64>,
}

/// One transaction of a transactional producer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Txn {
    /// The producer (its `transactional.id` is `vdl-perf-verify-<topic>-<producer>`; the
    /// fencing check's producers come after the workload's).
    pub producer: u32,
    /// The transactional id.
    pub transactional_id: String,
    /// The producer id and epoch it wrote with.
    pub producer_id: i64,
    /// The producer epoch.
    pub producer_epoch: i16,
    /// Its values, in the order they were sent.
    pub writes: Vec<TxnWrite>,
    /// Whether EndTxn(commit) was ever sent for it (false: it was never asked to commit, so
    /// no value may be visible whatever its outcome).
    pub commit_requested: bool,
    /// When the first EndTxn was sent, in microseconds since the run started (none: never).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_sent_us: Option<u64>,
    /// When the outcome was known, in milliseconds since the run started.
    pub done_ms: u64,
    /// From the first produce to the outcome, in microseconds.
    pub latency_us: u64,
    /// How it ended.
    #[serde(flatten)]
    pub outcome: TxnOutcome,
    /// What a fenced producer managed after the second producer fenced it (a write or a
    /// commit that was answered without error; the fencing check only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub zombie_accepted: Vec<String>,
}

/// Everything a run observed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// What kind of run it was.
    pub info: RunInfo,
    /// Every send, in any order (none in a transactional run).
    pub sends: Vec<Send>,
    /// Every transaction (transactional runs).
    pub txns: Vec<Txn>,
    /// Every assignment of a group member.
    pub assignments: Vec<Assignment>,
    /// Every poll; for one (consumer, generation, partition) in poll order.
    pub polls: Vec<Poll>,
    /// The group's committed offsets at the end (group mode only).
    pub committed: Vec<Committed>,
    /// The final read of every partition from the log start to the high watermark (at
    /// read_committed: to the last stable offset).
    pub final_read: Vec<Read>,
    /// Where the final read of each partition of a transactional run ended.
    pub final_bounds: Vec<FinalBound>,
}

/// The bounds of a transactional run's final read of one partition: its last stable offset,
/// once it reached the high watermark or the wait for it ended, and the high watermark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FinalBound {
    /// Partition.
    pub partition: i32,
    /// The last stable offset the final read stopped at.
    pub last_stable_offset: i64,
    /// The high watermark when the producers had stopped.
    pub high_watermark: i64,
}

/// One line of the history file.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HistoryLine<'a> {
    /// The run's description (the first line).
    Run(&'a RunInfo),
    /// A send.
    Send(&'a Send),
    /// A transaction.
    Txn(&'a Txn),
    /// A group member's assignment.
    Assignment(&'a Assignment),
    /// A poll.
    Poll(&'a Poll),
    /// A committed offset of the group at the end.
    Committed(&'a Committed),
    /// A record of the final read.
    Final(&'a Read),
    /// Where a transactional run's final read of a partition ended.
    Bound(&'a FinalBound),
}

impl History {
    /// Writes the history as JSON lines: the run, sends, transactions, assignments, polls,
    /// committed offsets, the final read, then its bounds.
    pub fn write_jsonl(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        let lines = std::iter::once(HistoryLine::Run(&self.info))
            .chain(self.sends.iter().map(HistoryLine::Send))
            .chain(self.txns.iter().map(HistoryLine::Txn))
            .chain(self.assignments.iter().map(HistoryLine::Assignment))
            .chain(self.polls.iter().map(HistoryLine::Poll))
            .chain(self.committed.iter().map(HistoryLine::Committed))
            .chain(self.final_read.iter().map(HistoryLine::Final))
            .chain(self.final_bounds.iter().map(HistoryLine::Bound));
        for line in lines {
            serde_json::to_writer(&mut *out, &line)?;
            out.write_all(b"\n")?;
        }
        Ok(())
    }
}
