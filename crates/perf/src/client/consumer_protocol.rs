//! The embedded "consumer" protocol of a classic consumer group, as the Java client encodes it:
//! the subscription a member sends in JoinGroup, the assignment the leader sends in SyncGroup
//! (both version 0), and the range assignor that computes assignments on the client.

use bytes::Bytes;

/// Why an assignment from the coordinator could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed consumer assignment: {0}")]
pub struct AssignmentError(&'static str);

/// A ConsumerProtocolSubscription v0 of one topic (what a Java consumer sends in JoinGroup).
pub fn subscription(topic: &str) -> Bytes {
    let mut b = Vec::with_capacity(12 + topic.len());
    b.extend_from_slice(&0i16.to_be_bytes());
    b.extend_from_slice(&1i32.to_be_bytes());
    b.extend_from_slice(&(topic.len() as i16).to_be_bytes());
    b.extend_from_slice(topic.as_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes());
    Bytes::from(b)
}

/// A ConsumerProtocolAssignment v0 giving `partitions` of `topic` (no user data).
pub fn assignment(topic: &str, partitions: &[i32]) -> Bytes {
    let mut b = Vec::with_capacity(16 + topic.len() + 4 * partitions.len());
    b.extend_from_slice(&0i16.to_be_bytes());
    b.extend_from_slice(&1i32.to_be_bytes());
    b.extend_from_slice(&(topic.len() as i16).to_be_bytes());
    b.extend_from_slice(topic.as_bytes());
    b.extend_from_slice(&(partitions.len() as i32).to_be_bytes());
    for p in partitions {
        b.extend_from_slice(&p.to_be_bytes());
    }
    b.extend_from_slice(&(-1i32).to_be_bytes());
    Bytes::from(b)
}

/// Reads the partitions of `topic` from a ConsumerProtocolAssignment (any version: later
/// versions only append fields). An empty buffer is an empty assignment (what a coordinator
/// sends a member the leader gave nothing). Every length is bounds-checked.
pub fn assigned_partitions(data: &[u8], topic: &str) -> Result<Vec<i32>, AssignmentError> {
    if data.is_empty() {
        return Ok(Vec::new());
    }
    let mut r = Reader { data, at: 0 };
    let _version = r.i16()?;
    let topics = r.count()?;
    let mut out = Vec::new();
    for _ in 0..topics {
        let name_len = usize::try_from(r.i16()?).map_err(|_| AssignmentError("null topic"))?;
        let name = r.take(name_len)?;
        let partitions = r.count()?;
        for _ in 0..partitions {
            let p = r.i32()?;
            if name == topic.as_bytes() {
                out.push(p);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], AssignmentError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|e| *e <= self.data.len())
            .ok_or(AssignmentError("truncated"))?;
        let s = &self.data[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn i16(&mut self) -> Result<i16, AssignmentError> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }
    fn i32(&mut self) -> Result<i32, AssignmentError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// An array length: at most what the remaining bytes could hold (4 bytes an element at
    /// least), so a hostile count cannot make a reader loop long.
    fn count(&mut self) -> Result<usize, AssignmentError> {
        let n = usize::try_from(self.i32()?).map_err(|_| AssignmentError("negative count"))?;
        if n > (self.data.len() - self.at) / 2 {
            return Err(AssignmentError("count larger than the data"));
        }
        Ok(n)
    }
}

/// The range assignor (Kafka's `RangeAssignor` for one topic): members sorted by id, each gets
/// a contiguous range of `partitions / members` partitions, the first `partitions % members`
/// one more. Returns (member id, partitions) in member order; every partition exactly once.
pub fn range_assign(member_ids: &[String], partitions: i32) -> Vec<(String, Vec<i32>)> {
    let mut members: Vec<&String> = member_ids.iter().collect();
    members.sort();
    members.dedup();
    let n = members.len() as i32;
    if n == 0 {
        return Vec::new();
    }
    let (each, extra) = (partitions / n, partitions % n);
    let mut next = 0;
    members
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            let count = each + i32::from((i as i32) < extra);
            let ps: Vec<i32> = (next..next + count).collect();
            next += count;
            (m.clone(), ps)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscription_is_a_consumer_protocol_subscription() {
        let b = subscription("t1");
        assert_eq!(
            &b[..],
            &[0, 0, 0, 0, 0, 1, 0, 2, b't', b'1', 255, 255, 255, 255]
        );
    }

    #[test]
    fn assignments_round_trip_and_keep_only_the_topic() {
        let b = assignment("t1", &[2, 0]);
        assert_eq!(assigned_partitions(&b, "t1").unwrap(), vec![0, 2]);
        assert_eq!(assigned_partitions(&b, "t2").unwrap(), Vec::<i32>::new());
        assert_eq!(assigned_partitions(&[], "t1").unwrap(), Vec::<i32>::new());
    }

    #[test]
    fn malformed_assignments_are_errors() {
        let b = assignment("t1", &[0, 1, 2]);
        for cut in 1..b.len() - 4 {
            assert!(
                assigned_partitions(&b[..cut], "t1").is_err(),
                "cut at {cut}"
            );
        }
        // A huge partition count.
        let mut bad = b.to_vec();
        bad[10..14].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(assigned_partitions(&bad, "t1").is_err());
    }

    #[test]
    fn range_gives_every_partition_once_in_contiguous_ranges() {
        let ids: Vec<String> = ["b", "a", "c"].iter().map(|s| s.to_string()).collect();
        let got = range_assign(&ids, 7);
        assert_eq!(
            got,
            vec![
                ("a".to_string(), vec![0, 1, 2]),
                ("b".to_string(), vec![3, 4]),
                ("c".to_string(), vec![5, 6]),
            ]
        );
        let got = range_assign(&ids, 2);
        assert_eq!(got[2].1, Vec::<i32>::new());
        assert!(range_assign(&[], 3).is_empty());
    }
}
