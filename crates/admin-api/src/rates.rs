//! The node-wide flow limits: `GET /rates` (answers [`Rates`]) and `PUT /rates` (body
//! [`RatesUpdate`]; answers the [`Rates`] in force once the change is committed).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The seven limits' names, as on the wire and in the configuration, in the order they are
/// printed.
pub const FLOW_LIMIT_NAMES: [&str; 7] = [
    "produce_requests_per_sec",
    "produce_bytes_per_sec",
    "catchup_read_requests_per_sec",
    "catchup_read_bytes_per_sec",
    "tail_read_requests_per_sec",
    "tail_read_bytes_per_sec",
    "catchup_replication_bytes_per_sec",
];

/// The limits in force (the same on every node) and this node's throttling counters. Each
/// limit is a whole number per second, `None` (`null`) when unlimited. Fields in alphabetical
/// order (the wire order since the first release).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rates {
    /// Catch-up fetched bytes per second.
    pub catchup_read_bytes_per_sec: Option<u64>,
    /// Catch-up fetch requests per second.
    pub catchup_read_requests_per_sec: Option<u64>,
    /// Bytes per second of catch-up replication a leader sends.
    #[serde(default)]
    pub catchup_replication_bytes_per_sec: Option<u64>,
    /// Produced record bytes per second.
    pub produce_bytes_per_sec: Option<u64>,
    /// Produce requests per second.
    pub produce_requests_per_sec: Option<u64>,
    /// Tail fetched bytes per second.
    pub tail_read_bytes_per_sec: Option<u64>,
    /// Tail fetch requests per second.
    pub tail_read_requests_per_sec: Option<u64>,
    /// Milliseconds of throttling this node imposed so far.
    pub throttle_time_ms_total: u64,
    /// Requests this node throttled so far.
    pub throttled_requests: u64,
}

impl Rates {
    /// The limit named `name` (one of [`FLOW_LIMIT_NAMES`]); `None` for another name.
    pub fn limit(&self, name: &str) -> Option<Option<u64>> {
        let mut rates = *self;
        rates.limit_mut(name).map(|limit| *limit)
    }

    /// The limit named `name` (one of [`FLOW_LIMIT_NAMES`]), to change it; `None` for another
    /// name. The one place a limit's name is tied to its field (the server's flow settings
    /// read and change their limits through it).
    pub fn limit_mut(&mut self, name: &str) -> Option<&mut Option<u64>> {
        Some(match name {
            "produce_requests_per_sec" => &mut self.produce_requests_per_sec,
            "produce_bytes_per_sec" => &mut self.produce_bytes_per_sec,
            "catchup_read_requests_per_sec" => &mut self.catchup_read_requests_per_sec,
            "catchup_read_bytes_per_sec" => &mut self.catchup_read_bytes_per_sec,
            "tail_read_requests_per_sec" => &mut self.tail_read_requests_per_sec,
            "tail_read_bytes_per_sec" => &mut self.tail_read_bytes_per_sec,
            "catchup_replication_bytes_per_sec" => &mut self.catchup_replication_bytes_per_sec,
            _ => return None,
        })
    }
}

/// The body of `PUT /rates`: some limits by name (of [`FLOW_LIMIT_NAMES`]), each a whole
/// number per second or `None` (`null`: unlimited; 0 means unlimited too). Limits not named
/// keep their values. The server answers 400 naming an unknown limit or a bad value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RatesUpdate(pub BTreeMap<String, Option<u64>>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_round_trip_with_their_wire_bytes() {
        let r = Rates {
            produce_bytes_per_sec: Some(1000),
            throttled_requests: 3,
            throttle_time_ms_total: 70,
            ..Rates::default()
        };
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(
            text,
            r#"{"catchup_read_bytes_per_sec":null,"catchup_read_requests_per_sec":null,"catchup_replication_bytes_per_sec":null,"produce_bytes_per_sec":1000,"produce_requests_per_sec":null,"tail_read_bytes_per_sec":null,"tail_read_requests_per_sec":null,"throttle_time_ms_total":70,"throttled_requests":3}"#
        );
        assert_eq!(serde_json::from_str::<Rates>(&text).unwrap(), r);
        for name in FLOW_LIMIT_NAMES {
            assert!(r.limit(name).is_some(), "{name}");
        }
        assert_eq!(r.limit("produce_bytes_per_sec"), Some(Some(1000)));
        assert_eq!(r.limit("nope"), None);
        let mut changed = r;
        *changed.limit_mut("tail_read_bytes_per_sec").unwrap() = Some(7);
        assert_eq!(changed.tail_read_bytes_per_sec, Some(7));
        assert_eq!(changed.limit("tail_read_bytes_per_sec"), Some(Some(7)));
        assert!(changed.limit_mut("nope").is_none());
    }

    #[test]
    fn an_update_round_trips() {
        let mut u = RatesUpdate::default();
        u.0.insert("produce_bytes_per_sec".into(), Some(5));
        u.0.insert("tail_read_bytes_per_sec".into(), None);
        let text = serde_json::to_string(&u).unwrap();
        assert_eq!(
            text,
            r#"{"produce_bytes_per_sec":5,"tail_read_bytes_per_sec":null}"#
        );
        assert_eq!(serde_json::from_str::<RatesUpdate>(&text).unwrap(), u);
    }
}
