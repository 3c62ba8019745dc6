//! Topic ids: how a topic's Kafka id follows from its name and incarnation ([`topic_id`]),
//! and the index from id back to name that the metadata keeps beside its topics
//! ([`TopicIds`]), so a request naming topics by id (Fetch v13+, DeleteTopics v6+,
//! Metadata v10+) finds each in one hash look-up instead of hashing every topic's name.

use std::collections::HashMap;

use kafka_proto::Uuid;

/// A topic's id: derived from its name and incarnation (the Raft index of the command that
/// created it), so every node gives the same id without coordination and a topic created again
/// under the same name gets a new id, as in Kafka. Never the all-zero UUID (Kafka's "no id").
pub fn topic_id(name: &str, incarnation: u64) -> Uuid {
    let mut a: u64 = 0xcbf2_9ce4_8422_2325;
    let mut b: u64 = 0x8422_2325_cbf2_9ce4;
    let tail = incarnation.to_be_bytes();
    let bytes = name
        .as_bytes()
        .iter()
        .chain(if incarnation == 0 { &[][..] } else { &tail[..] });
    for byte in bytes {
        a = (a ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        b = (b ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3 ^ 0x9e37_79b9);
    }
    // Version-4-style bits, so tools printing it see a well-formed UUID.
    let a = (a & !0xf000) | 0x4000;
    let b = (b & !(0xc0 << 56)) | (0x80 << 56);
    Uuid::from_u64_pair(a, b)
}

/// The names of the metadata's topics by id: one entry per topic of
/// [`crate::metadata::ClusterMeta::topics`], kept with it by every change of that map (create,
/// delete, snapshot load). An id of an earlier incarnation of a name is not in it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct TopicIds {
    names: HashMap<Uuid, String>,
}

impl TopicIds {
    /// Records topic `name` of `incarnation`.
    pub(super) fn insert(&mut self, name: &str, incarnation: u64) {
        self.names
            .insert(topic_id(name, incarnation), name.to_owned());
    }

    /// Forgets topic `name` of `incarnation`.
    pub(super) fn remove(&mut self, name: &str, incarnation: u64) {
        let removed = self.names.remove(&topic_id(name, incarnation));
        debug_assert!(
            removed.as_deref() == Some(name),
            "topic {name} of {incarnation} was not indexed"
        );
    }

    /// The name of the topic with id `id`, if one of the indexed topics has it.
    pub fn name(&self, id: Uuid) -> Option<&str> {
        self.names.get(&id).map(String::as_str)
    }

    /// How many topics are indexed.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether no topic is indexed.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::topic_id;
    use crate::metadata::tests::{create, id as rid};
    use crate::metadata::{ClusterMeta, MetaCommand};

    /// The id index follows the topics through creates, deletes, a name created again and a
    /// snapshot: every topic's id finds its name, an earlier incarnation's id finds nothing.
    #[test]
    fn topic_ids_follow_creates_deletes_and_snapshots() {
        let mut m = ClusterMeta::new(vec![1, 2, 3]);
        for (i, name) in ["a", "b", "c"].iter().enumerate() {
            m.apply(10 + i as u64, rid(i as u64 + 1), create(name));
        }
        m.apply(
            20,
            rid(10),
            MetaCommand::DeleteTopic {
                name: "b".into(),
                incarnation: None,
            },
        );
        m.apply(21, rid(11), create("b"));
        let check = |m: &ClusterMeta| {
            assert_eq!(m.topic_ids().len(), m.topics.len());
            for (name, t) in &m.topics {
                let found = m.topic_name_by_id(topic_id(name, t.created_at_index));
                assert_eq!(found, Some(name.as_str()));
            }
            assert_eq!(
                m.topic_name_by_id(topic_id("b", 11)),
                None,
                "b's first incarnation"
            );
            assert_eq!(m.topic_name_by_id(topic_id("b", 21)), Some("b"));
            assert_eq!(m.topic_name_by_id(kafka_proto::Uuid::ZERO), None);
        };
        check(&m);
        let bytes = crate::metadata::codec::encode_snapshot(&m.to_snapshot(21, 1));
        let wire = crate::metadata::codec::decode_snapshot(&bytes).unwrap();
        let back = ClusterMeta::from_snapshot(vec![1, 2, 3], wire);
        check(&back);
    }
}
