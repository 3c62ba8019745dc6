//! The embedded `consumer` protocol of classic groups (Kafka's ConsumerProtocolSubscription
//! and ConsumerProtocolAssignment, versions 0-3, big-endian, not flexible): what a classic
//! member's JoinGroup metadata subscribes to and owns, and the assignment its SyncGroup gets.
//! Every read is bounds-checked; malformed input yields None, never a panic.

use std::collections::BTreeMap;

/// The protocol type of consumers in classic groups.
pub(crate) const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// A decoded ConsumerProtocolSubscription.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Subscription {
    /// Its version (0-3; a later one is read as 3).
    pub(crate) version: i16,
    /// Subscribed topic names.
    pub(crate) topics: Vec<String>,
    /// Owned partitions by topic name (v1+).
    pub(crate) owned: BTreeMap<String, Vec<i32>>,
    /// Rack (v3+).
    pub(crate) rack: Option<String>,
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let out = self.buf.get(self.at..end)?;
        self.at = end;
        Some(out)
    }

    fn i16(&mut self) -> Option<i16> {
        let b = self.take(2)?;
        Some(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self) -> Option<i32> {
        let b = self.take(4)?;
        Some(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A nullable STRING (None for null).
    fn string(&mut self) -> Option<Option<String>> {
        let len = self.i16()?;
        if len < 0 {
            return Some(None);
        }
        let b = self.take(usize::try_from(len).ok()?)?;
        Some(Some(String::from_utf8_lossy(b).into_owned()))
    }

    /// An ARRAY's length (null: 0), bounded by the bytes left (each element takes at least
    /// `min_size` bytes), so a forged count allocates nothing.
    fn array_len(&mut self, min_size: usize) -> Option<usize> {
        let n = self.i32()?;
        let n = usize::try_from(n.max(0)).ok()?;
        (n.saturating_mul(min_size) <= self.buf.len().saturating_sub(self.at)).then_some(n)
    }

    /// Nullable BYTES, skipped.
    fn skip_bytes(&mut self) -> Option<()> {
        let len = self.i32()?;
        if len > 0 {
            self.take(usize::try_from(len).ok()?)?;
        }
        Some(())
    }

    fn topic_partitions(&mut self) -> Option<BTreeMap<String, Vec<i32>>> {
        let mut out: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for _ in 0..self.array_len(6)? {
            let topic = self.string()?.unwrap_or_default();
            let n = self.array_len(4)?;
            let mut ps = Vec::with_capacity(n);
            for _ in 0..n {
                ps.push(self.i32()?);
            }
            out.entry(topic).or_default().extend(ps);
        }
        Some(out)
    }
}

/// Decodes a ConsumerProtocolSubscription (None when it does not parse).
pub(crate) fn decode_subscription(metadata: &[u8]) -> Option<Subscription> {
    let mut r = Reader {
        buf: metadata,
        at: 0,
    };
    let version = r.i16()?;
    if version < 0 {
        return None;
    }
    let mut s = Subscription {
        version: version.min(3),
        ..Subscription::default()
    };
    for _ in 0..r.array_len(2)? {
        s.topics.push(r.string()?.unwrap_or_default());
    }
    r.skip_bytes()?;
    if version >= 1 {
        s.owned = r.topic_partitions()?;
    }
    if version >= 2 {
        r.i32()?;
    }
    if version >= 3 {
        s.rack = r.string()?;
    }
    Some(s)
}

/// Decodes a ConsumerProtocolAssignment's partitions by topic name (None when it does not
/// parse).
pub(crate) fn decode_assignment(bytes: &[u8]) -> Option<BTreeMap<String, Vec<i32>>> {
    let mut r = Reader { buf: bytes, at: 0 };
    let version = r.i16()?;
    if version < 0 {
        return None;
    }
    r.topic_partitions()
}

/// Encodes a ConsumerProtocolAssignment of `version` (0-3; all share one layout) giving
/// `partitions` by topic name, without user data.
pub(crate) fn encode_assignment(version: i16, partitions: &BTreeMap<String, Vec<i32>>) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&version.clamp(0, 3).to_be_bytes());
    let topics: Vec<(&String, &Vec<i32>)> =
        partitions.iter().filter(|(_, ps)| !ps.is_empty()).collect();
    out.extend_from_slice(&(topics.len() as i32).to_be_bytes());
    for (topic, ps) in topics {
        let name = topic.as_bytes();
        let len = name.len().min(i16::MAX as usize);
        out.extend_from_slice(&(len as i16).to_be_bytes());
        out.extend_from_slice(&name[..len]);
        out.extend_from_slice(&(ps.len() as i32).to_be_bytes());
        for p in ps {
            out.extend_from_slice(&p.to_be_bytes());
        }
    }
    out.extend_from_slice(&(-1i32).to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subscription_v1(topics: &[&str], owned: &[(&str, &[i32])]) -> Vec<u8> {
        let mut out = vec![0, 1];
        out.extend_from_slice(&(topics.len() as i32).to_be_bytes());
        for t in topics {
            out.extend_from_slice(&(t.len() as i16).to_be_bytes());
            out.extend_from_slice(t.as_bytes());
        }
        out.extend_from_slice(&(-1i32).to_be_bytes());
        let owned: BTreeMap<String, Vec<i32>> = owned
            .iter()
            .map(|(t, ps)| ((*t).to_owned(), ps.to_vec()))
            .collect();
        // Owned partitions have the layout of an assignment's partitions.
        let enc = encode_assignment(0, &owned);
        out.extend_from_slice(&enc[2..enc.len() - 4]);
        out
    }

    #[test]
    fn subscription_round_trips_topics_and_owned_partitions() {
        let s =
            decode_subscription(&subscription_v1(&["a", "b"], &[("a", &[0, 2])])).expect("parses");
        assert_eq!(s.version, 1);
        assert_eq!(s.topics, vec!["a".to_owned(), "b".to_owned()]);
        assert_eq!(s.owned.get("a"), Some(&vec![0, 2]));
    }

    #[test]
    fn assignment_round_trips() {
        let mut a = BTreeMap::new();
        a.insert("t".to_owned(), vec![1, 3]);
        assert_eq!(decode_assignment(&encode_assignment(3, &a)), Some(a));
    }

    #[test]
    fn malformed_input_is_refused_without_panicking() {
        let good = subscription_v1(&["a"], &[("a", &[0])]);
        for n in 0..good.len() {
            let _ = decode_subscription(&good[..n]);
        }
        assert_eq!(decode_subscription(&[0, 0, 0x7f, 0xff, 0xff, 0xff]), None);
        assert_eq!(decode_assignment(&[0, 0, 0x7f, 0xff, 0xff, 0xff]), None);
    }
}
