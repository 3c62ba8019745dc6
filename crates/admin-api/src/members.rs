//! The membership endpoints: `GET /members` (a list of [`MemberView`]), `POST
//! /members?timeout_ms=N` (body [`AddMember`], answers the added [`MemberView`] once it is a
//! voter of the metadata group), `DELETE /members/{id}?timeout_ms=N` (answers
//! [`RemovedMember`]).

use serde::{Deserialize, Serialize};

/// Where a member is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemberState {
    /// Added, not yet a voter of the metadata group (catching up as a learner, or not
    /// running yet).
    Joining,
    /// A voter of the metadata group.
    Voter,
    /// Being removed: its replicas are moving away, or it is still a metadata voter.
    Leaving,
    /// Removed: it holds nothing and votes nowhere; it can be stopped.
    Removed,
}

impl MemberState {
    /// Its name on the wire (`joining`, `voter`, `leaving`, `removed`).
    pub fn as_str(self) -> &'static str {
        match self {
            MemberState::Joining => "joining",
            MemberState::Voter => "voter",
            MemberState::Leaving => "leaving",
            MemberState::Removed => "removed",
        }
    }
}

/// One member as `GET /members` lists it (ascending by id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberView {
    /// Raft id.
    pub id: u64,
    /// Name.
    pub name: String,
    /// Raft peer address.
    pub peer_addr: String,
    /// Kafka address (as announced by its hello while connected; else as added).
    pub kafka_addr: String,
    /// Its state.
    pub state: MemberState,
    /// Connected to the node answering (or that node itself).
    pub live: bool,
    /// Partition replicas it holds (the new replicas of moving partitions included).
    pub replicas: u64,
}

/// The body of `POST /members`. The server refuses unknown fields in it (a misspelt option
/// is an error, not silently ignored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddMember {
    /// Its Raft id: non-zero, never used before.
    pub id: u64,
    /// Its Raft peer address, IP:PORT.
    pub peer: String,
    /// Its Kafka address, HOST:PORT.
    pub kafka: String,
    /// Its name (absent: `vdl<id>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The answer of `DELETE /members/{id}` once the member is removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemovedMember {
    /// The id removed: it holds no replica and votes nowhere.
    pub removed: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_round_trip_with_their_wire_bytes() {
        let list = vec![MemberView {
            id: 4,
            name: "vdl4".into(),
            peer_addr: "127.0.0.1:3".into(),
            kafka_addr: "127.0.0.1:4".into(),
            state: MemberState::Joining,
            live: false,
            replicas: 0,
        }];
        let text = serde_json::to_string(&list).unwrap();
        assert_eq!(
            text,
            r#"[{"id":4,"name":"vdl4","peer_addr":"127.0.0.1:3","kafka_addr":"127.0.0.1:4","state":"joining","live":false,"replicas":0}]"#
        );
        assert_eq!(
            serde_json::from_str::<Vec<MemberView>>(&text).unwrap(),
            list
        );
        for s in [
            MemberState::Joining,
            MemberState::Voter,
            MemberState::Leaving,
            MemberState::Removed,
        ] {
            let text = serde_json::to_string(&s).unwrap();
            assert_eq!(text, format!("\"{}\"", s.as_str()));
            assert_eq!(serde_json::from_str::<MemberState>(&text).unwrap(), s);
        }
    }

    #[test]
    fn the_add_body_round_trips_and_refuses_unknown_fields() {
        let add = AddMember {
            id: 4,
            peer: "127.0.0.1:9".into(),
            kafka: "h:1".into(),
            name: None,
        };
        let text = serde_json::to_string(&add).unwrap();
        assert_eq!(text, r#"{"id":4,"peer":"127.0.0.1:9","kafka":"h:1"}"#);
        assert_eq!(serde_json::from_str::<AddMember>(&text).unwrap(), add);
        let named = AddMember {
            name: Some("n".into()),
            ..add
        };
        let text = serde_json::to_string(&named).unwrap();
        assert_eq!(serde_json::from_str::<AddMember>(&text).unwrap(), named);
        assert!(
            serde_json::from_str::<AddMember>(r#"{"id":4,"peer":"p","kafka":"k","nmae":"x"}"#)
                .is_err()
        );
    }

    #[test]
    fn the_removal_answer_round_trips() {
        let r = RemovedMember { removed: 3 };
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(text, r#"{"removed":3}"#);
        assert_eq!(serde_json::from_str::<RemovedMember>(&text).unwrap(), r);
    }
}
