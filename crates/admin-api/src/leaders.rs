//! The leadership endpoints: `POST /partitions/{topic}/{partition}/leader?to=N&timeout_ms=T`
//! (answers [`LeaderTransferred`] once N leads) and `POST /leaders/balance?timeout_ms=T`
//! (answers [`LeadersBalanced`]: status 200 when every move happened, 504 with the same
//! document when some did not within the timeout).

use serde::{Deserialize, Serialize};

/// The answer of a leader transfer that happened. Fields in alphabetical order (the wire
/// order since the first release).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderTransferred {
    /// Milliseconds from the request to the new leader being in place.
    pub elapsed_ms: u64,
    /// The node that leads now (the one asked for).
    pub leader: u64,
    /// Partition index.
    pub partition: u32,
    /// Topic name.
    pub topic: String,
}

/// The answer of a leader balance. Fields in alphabetical order (the wire order since the
/// first release).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeadersBalanced {
    /// Partitions whose leader was not their preferred replica (the first of their replica
    /// list), each asked to move.
    pub asked: u64,
    /// How many of them are led by their preferred replica now.
    pub moved: u64,
    /// The others, as `topic-partition` (empty on status 200).
    pub not_moved: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transfer_answer_round_trips_with_its_wire_bytes() {
        let t = LeaderTransferred {
            elapsed_ms: 12,
            leader: 3,
            partition: 1,
            topic: "t".into(),
        };
        let text = serde_json::to_string(&t).unwrap();
        assert_eq!(
            text,
            r#"{"elapsed_ms":12,"leader":3,"partition":1,"topic":"t"}"#
        );
        assert_eq!(serde_json::from_str::<LeaderTransferred>(&text).unwrap(), t);
    }

    #[test]
    fn a_balance_answer_round_trips_with_its_wire_bytes() {
        let b = LeadersBalanced {
            asked: 2,
            moved: 1,
            not_moved: vec!["t-0".into()],
        };
        let text = serde_json::to_string(&b).unwrap();
        assert_eq!(text, r#"{"asked":2,"moved":1,"not_moved":["t-0"]}"#);
        assert_eq!(serde_json::from_str::<LeadersBalanced>(&text).unwrap(), b);
    }
}
