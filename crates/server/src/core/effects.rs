//! What an applied metadata command means for one node: the one dispatch of the metadata
//! group's [`Effect`]s onto the node-specific actions of an [`EffectHost`] (the node, or a
//! simulated node), and bringing a node in line with a metadata state loaded from, or
//! installed as, a snapshot. The node and the deterministic simulation both carry out their
//! metadata replica's effects through here, so they open, drop and reconcile the same way.

use crate::metadata::{Effect, TopicMeta};

use super::data_dir::DataDir;

/// The actions of one node that the metadata's effects call for. The node carries them out
/// on its runtime; the simulation on its simulated replicas.
pub trait EffectHost {
    /// Why a topic's partitions could not be opened (logged; the metadata goes on).
    type OpenError: std::fmt::Display;
    /// This node's data directory.
    fn data_dir(&self) -> &DataDir;
    /// The topics open here that are not streams configured at start, with the incarnation
    /// open (see [`super::catalog::Catalog::open_topic_incarnations`]).
    fn open_topic_incarnations(&self) -> Vec<(String, u64)>;
    /// Opens the partitions of incarnation `incarnation` of topic `name` placed here that are
    /// not open yet (see [`super::topics::open_topic`]).
    fn open_topic(
        &mut self,
        name: &str,
        incarnation: u64,
        replicas: &[Vec<u64>],
    ) -> Result<(), Self::OpenError>;
    /// Stops topic `name`'s groups here (of `incarnation` only, when given) and deletes their
    /// data (see [`super::topics::drop_topic`]).
    fn drop_topic(&mut self, name: &str, incarnation: Option<u64>);
    /// Applies the topic's current config overrides to its partitions open here.
    fn apply_topic_settings(&mut self, name: &str, incarnation: u64);
    /// Raises a partition's log start offset to `offset` (DeleteRecords).
    fn delete_records_before(&mut self, name: &str, incarnation: u64, partition: u32, offset: u64);
    /// Hands a partition's leadership to its preferred replica, if this node leads it.
    fn hand_leadership_to(&mut self, name: &str, incarnation: u64, partition: u32, preferred: u64);
    /// Makes the node match the replicated member list and replica lists.
    fn reconcile_membership(&mut self);
    /// Records node `id`'s admin address.
    fn note_admin_address(&mut self, id: u64, address: String);
    /// A transaction was decided, or a partition asked to join one: wakes the transaction
    /// tasks here (the marker writer, the coordinator's handler of those requests).
    fn note_transaction_work(&mut self);
}

/// Carries out on `host` what one applied metadata command asks of it, in log order. A topic
/// that cannot be opened is logged (the metadata group goes on; the node retries when the
/// metadata next asks, e.g. at its next start).
pub fn carry_out<H: EffectHost + ?Sized>(host: &mut H, effect: Effect) {
    match effect {
        Effect::OpenTopic(name, incarnation, replicas) => {
            if let Err(e) = host.open_topic(&name, incarnation, &replicas) {
                tracing::error!(topic = %name, incarnation, "cannot open the stream of a created topic: {e}");
            }
        }
        Effect::DropTopic(name, incarnation) => host.drop_topic(&name, incarnation),
        Effect::TopicConfigChanged(name, incarnation) => {
            host.apply_topic_settings(&name, incarnation)
        }
        Effect::RecordsDeleted(name, incarnation, partition, offset) => {
            host.delete_records_before(&name, incarnation, partition, offset)
        }
        Effect::ElectPreferred(name, incarnation, partition, preferred) => {
            host.hand_leadership_to(&name, incarnation, partition, preferred)
        }
        Effect::MembershipChanged => host.reconcile_membership(),
        Effect::AdminAddress(id, address) => host.note_admin_address(id, address),
        Effect::TransactionWork => host.note_transaction_work(),
    }
}

/// Brings `host` in line with the metadata state `topics` just loaded from a snapshot at
/// `index`, as applying the entries it covers would have: removes what is left on disk of
/// topic incarnations created at or before `index` that the state does not hold (their delete
/// is covered by the snapshot; a crash may have left their files) and that are not open here,
/// opens every topic's partitions placed here (an incarnation whose delete is later in the log
/// stays closed), sets their records floors, and with `reconcile` (a snapshot installed from
/// the leader while running) first drops the incarnations open here that the state no longer
/// has, and applies every topic's configs. Streams configured at start (incarnation 0) are
/// left alone.
pub fn bring_in_line<H: EffectHost + ?Sized>(
    host: &mut H,
    index: u64,
    topics: &[(String, TopicMeta)],
    reconcile: bool,
) {
    if reconcile {
        let open = host.open_topic_incarnations();
        let current = |name: &str| {
            topics
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, t)| t.created_at_index)
        };
        for (name, incarnation) in super::topics::stale_incarnations(&open, current) {
            host.drop_topic(&name, Some(incarnation));
        }
    }
    let open = host.open_topic_incarnations();
    let keep = |name: &str, incarnation: u64| {
        topics
            .iter()
            .any(|(n, t)| n == name && t.created_at_index == incarnation)
            || open.iter().any(|(n, i)| n == name && *i == incarnation)
    };
    for (name, incarnation, dir) in host.data_dir().deleted_topic_dirs(index, keep) {
        tracing::info!(topic = %name, incarnation, dir = %dir.display(), "removing the data of a topic incarnation deleted before the metadata snapshot");
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            tracing::warn!(topic = %name, incarnation, "removing a deleted topic's data failed: {e}");
        }
    }
    for (name, t) in topics {
        if let Err(e) = host.open_topic(name, t.created_at_index, &t.replicas) {
            tracing::error!(topic = %name, incarnation = t.created_at_index, "cannot open a topic of the metadata snapshot: {e}");
        }
        if reconcile {
            host.apply_topic_settings(name, t.created_at_index);
        }
        for (partition, floor) in (0u32..).zip(&t.deleted_before) {
            if *floor > 0 {
                host.delete_records_before(name, t.created_at_index, partition, *floor);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Records the actions asked of it; `open` is the catalog's open incarnations.
    struct Recorder {
        data_dir: DataDir,
        open: Vec<(String, u64)>,
        calls: Vec<String>,
    }

    impl EffectHost for Recorder {
        type OpenError = String;

        fn data_dir(&self) -> &DataDir {
            &self.data_dir
        }

        fn open_topic_incarnations(&self) -> Vec<(String, u64)> {
            self.open.clone()
        }

        fn open_topic(&mut self, name: &str, i: u64, r: &[Vec<u64>]) -> Result<(), String> {
            self.calls.push(format!("open {name}~{i} {r:?}"));
            Err("refused".to_owned())
        }

        fn drop_topic(&mut self, name: &str, i: Option<u64>) {
            self.open.retain(|(n, _)| n != name);
            self.calls.push(format!("drop {name} {i:?}"));
        }

        fn apply_topic_settings(&mut self, name: &str, i: u64) {
            self.calls.push(format!("settings {name}~{i}"));
        }

        fn delete_records_before(&mut self, name: &str, i: u64, p: u32, offset: u64) {
            self.calls.push(format!("floor {name}~{i}-{p} {offset}"));
        }

        fn hand_leadership_to(&mut self, name: &str, i: u64, p: u32, preferred: u64) {
            self.calls.push(format!("elect {name}~{i}-{p} {preferred}"));
        }

        fn reconcile_membership(&mut self) {
            self.calls.push("membership".to_owned());
        }

        fn note_admin_address(&mut self, id: u64, address: String) {
            self.calls.push(format!("admin {id} {address}"));
        }

        fn note_transaction_work(&mut self) {
            self.calls.push("transaction work".to_owned());
        }
    }

    fn recorder(label: &str, open: Vec<(String, u64)>) -> Recorder {
        let dir =
            std::env::temp_dir().join(format!("vdl-core-effects-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("topics")).unwrap();
        Recorder {
            data_dir: DataDir::new(dir),
            open,
            calls: Vec::new(),
        }
    }

    fn topic(incarnation: u64, deleted_before: Vec<u64>) -> TopicMeta {
        TopicMeta {
            created_at_index: incarnation,
            partitions: 1,
            replicas: vec![vec![1, 2]],
            configs: BTreeMap::new(),
            deleted_before,
            moving: BTreeMap::new(),
        }
    }

    #[test]
    fn each_effect_is_its_hosts_action() {
        let mut h = recorder("dispatch", Vec::new());
        for effect in [
            Effect::OpenTopic("t".into(), 5, vec![vec![1]]),
            Effect::DropTopic("t".into(), Some(5)),
            Effect::TopicConfigChanged("t".into(), 5),
            Effect::RecordsDeleted("t".into(), 5, 1, 40),
            Effect::ElectPreferred("t".into(), 5, 0, 2),
            Effect::MembershipChanged,
            Effect::AdminAddress(3, "a:1".into()),
        ] {
            carry_out(&mut h, effect);
        }
        assert_eq!(
            h.calls,
            [
                "open t~5 [[1]]",
                "drop t Some(5)",
                "settings t~5",
                "floor t~5-1 40",
                "elect t~5-0 2",
                "membership",
                "admin 3 a:1"
            ]
        );
        let _ = std::fs::remove_dir_all(h.data_dir.root());
    }

    #[test]
    fn a_snapshot_drops_stale_incarnations_removes_deleted_files_and_opens_the_rest() {
        let mut h = recorder(
            "snapshot",
            vec![("gone".to_owned(), 3), ("kept".to_owned(), 4)],
        );
        let topics_dir = h.data_dir.root().join("topics");
        // Deleted before the snapshot at 20: its files go. Created after it: kept (the
        // replay decides). Open here: kept.
        for name in ["old~2-0", "late~30-0", "kept~4-0", "other~6-0"] {
            std::fs::create_dir_all(topics_dir.join(name)).unwrap();
        }
        let topics = vec![
            ("kept".to_owned(), topic(4, vec![0, 7])),
            ("other".to_owned(), topic(6, Vec::new())),
        ];
        bring_in_line(&mut h, 20, &topics, true);
        assert_eq!(
            h.calls,
            [
                "drop gone Some(3)",
                "open kept~4 [[1, 2]]",
                "settings kept~4",
                "floor kept~4-1 7",
                "open other~6 [[1, 2]]",
                "settings other~6"
            ]
        );
        assert!(!topics_dir.join("old~2-0").exists());
        for left in ["late~30-0", "kept~4-0", "other~6-0"] {
            assert!(topics_dir.join(left).exists(), "{left}");
        }
        // At start: nothing is dropped and no configs are applied.
        let mut h2 = recorder("start", Vec::new());
        bring_in_line(&mut h2, 20, &topics[..1], false);
        assert_eq!(h2.calls, ["open kept~4 [[1, 2]]", "floor kept~4-1 7"]);
        let _ = std::fs::remove_dir_all(h.data_dir.root());
        let _ = std::fs::remove_dir_all(h2.data_dir.root());
    }
}
