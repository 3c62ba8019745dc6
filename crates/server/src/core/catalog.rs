//! The catalog of one node: the partitions of topics (and streams configured at start) open
//! here, by topic name and partition index, whatever the handle on a partition's group is (the
//! node's [`LogStream`], or a simulated replica).

use std::collections::BTreeMap;

use crate::replication::stream::LogStream;

/// What the catalog needs to know of a handle on one open partition.
pub trait PartitionHandle: Clone {
    /// The incarnation of the topic the partition belongs to (0: a stream configured at
    /// start).
    fn incarnation(&self) -> u64;
    /// The partition's Raft group id.
    fn group(&self) -> u64;
}

impl PartitionHandle for LogStream {
    fn incarnation(&self) -> u64 {
        self.incarnation
    }

    fn group(&self) -> u64 {
        self.group
    }
}

/// The partitions open on one node, by topic name, then partition index. Iteration is in
/// name, then partition order.
#[derive(Debug, Clone)]
pub struct Catalog<H> {
    topics: BTreeMap<String, BTreeMap<u32, H>>,
}

impl<H> Default for Catalog<H> {
    fn default() -> Self {
        Catalog {
            topics: BTreeMap::new(),
        }
    }
}

impl<H: PartitionHandle> Catalog<H> {
    /// An empty catalog.
    pub fn new() -> Catalog<H> {
        Catalog::default()
    }

    /// The handle on partition `partition` of topic `name`, if it is open here.
    pub fn get(&self, name: &str, partition: u32) -> Option<&H> {
        self.topics.get(name).and_then(|p| p.get(&partition))
    }

    /// Handles on the partitions of topic `name` open here, in partition order (empty when
    /// none is).
    pub fn partitions(&self, name: &str) -> Vec<H> {
        self.topics
            .get(name)
            .map(|p| p.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The incarnation of topic `name` open here (that of its first open partition).
    pub fn open_incarnation(&self, name: &str) -> Option<u64> {
        self.topics
            .get(name)
            .and_then(|p| p.values().next())
            .map(H::incarnation)
    }

    /// Names of the topics with a partition open here, sorted.
    pub fn names(&self) -> Vec<String> {
        self.topics.keys().cloned().collect()
    }

    /// Every open partition, with its topic and index, in name then partition order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u32, &H)> {
        self.topics
            .iter()
            .flat_map(|(name, parts)| parts.iter().map(move |(p, h)| (name.as_str(), *p, h)))
    }

    /// Every open partition's handle, in name then partition order.
    pub fn handles(&self) -> Vec<H> {
        self.iter().map(|(_, _, h)| h.clone()).collect()
    }

    /// How many partitions are open here.
    pub fn len(&self) -> usize {
        self.topics.values().map(BTreeMap::len).sum()
    }

    /// Whether no partition is open here.
    pub fn is_empty(&self) -> bool {
        self.topics.is_empty()
    }

    /// The topic and partition whose group is `group`, if one is open here.
    pub fn owner_of_group(&self, group: u64) -> Option<(String, u32)> {
        self.iter()
            .find(|(_, _, h)| h.group() == group)
            .map(|(name, p, _)| (name.to_owned(), p))
    }

    /// The topics open here that are not streams configured at start, with the incarnation
    /// open.
    pub fn open_topic_incarnations(&self) -> Vec<(String, u64)> {
        self.topics
            .iter()
            .filter_map(|(name, parts)| {
                let incarnation = parts.values().next()?.incarnation();
                (incarnation != 0).then(|| (name.clone(), incarnation))
            })
            .collect()
    }

    /// Records `handle` as partition `partition` of topic `name`; returns the handle that was
    /// there (a partition opened twice, which the callers rule out).
    pub fn insert(&mut self, name: &str, partition: u32, handle: H) -> Option<H> {
        self.topics
            .entry(name.to_owned())
            .or_default()
            .insert(partition, handle)
    }

    /// Forgets partition `partition` of topic `name` (and the topic once none is left);
    /// returns its handle.
    pub fn remove_partition(&mut self, name: &str, partition: u32) -> Option<H> {
        let parts = self.topics.get_mut(name)?;
        let removed = parts.remove(&partition);
        if parts.is_empty() {
            self.topics.remove(name);
        }
        removed
    }

    /// Forgets every partition of topic `name`; returns their handles.
    pub fn remove_topic(&mut self, name: &str) -> Vec<H> {
        self.topics
            .remove(name)
            .map(|p| p.into_values().collect())
            .unwrap_or_default()
    }

    /// Forgets everything (the node stops).
    pub fn clear(&mut self) {
        self.topics.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq, Eq)]
    struct H(u64, u64);

    impl PartitionHandle for H {
        fn incarnation(&self) -> u64 {
            self.0
        }
        fn group(&self) -> u64 {
            self.1
        }
    }

    #[test]
    fn partitions_are_found_by_topic_and_index_and_forgotten() {
        let mut c = Catalog::new();
        assert!(c.is_empty());
        assert_eq!(c.insert("t", 1, H(5, 11)), None);
        assert_eq!(c.insert("t", 0, H(5, 10)), None);
        assert_eq!(c.insert("s", 0, H(0, 20)), None);
        assert_eq!(c.insert("t", 0, H(5, 10)), Some(H(5, 10)));
        assert_eq!(c.len(), 3);
        assert_eq!(c.get("t", 1), Some(&H(5, 11)));
        assert_eq!(c.partitions("t"), [H(5, 10), H(5, 11)]);
        assert_eq!(c.names(), ["s", "t"]);
        assert_eq!(c.open_incarnation("t"), Some(5));
        assert_eq!(c.open_topic_incarnations(), [("t".to_owned(), 5)]);
        assert_eq!(c.owner_of_group(11), Some(("t".to_owned(), 1)));
        assert_eq!(c.owner_of_group(99), None);
        assert_eq!(c.remove_partition("t", 0), Some(H(5, 10)));
        assert_eq!(c.remove_partition("t", 1), Some(H(5, 11)));
        assert_eq!(c.names(), ["s"]);
        assert_eq!(c.remove_topic("s"), [H(0, 20)]);
        assert!(c.is_empty());
    }
}
