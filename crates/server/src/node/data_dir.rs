//! The data directory's layout: where each stream's and topic partition's files live, the
//! migration from the layout before partitions, and removing deleted topics' directories.

use std::path::PathBuf;

use super::{Node, NodeError};

impl Node {
    /// Directory of a stream configured at start (`[streams] initial`).
    pub fn stream_dir(&self, name: &str) -> PathBuf {
        self.config.data_dir.join("streams").join(name)
    }

    /// Directory of one partition of one incarnation of a topic:
    /// `topics/<name>~<incarnation>-<partition>` (`~` is not allowed in topic names, so no two
    /// incarnations or topics share a directory).
    pub fn topic_dir(&self, name: &str, incarnation: u64, partition: u32) -> PathBuf {
        self.config
            .data_dir
            .join("topics")
            .join(format!("{name}~{incarnation}-{partition}"))
    }

    /// Directory a single-partition topic had before partitions existed:
    /// `topics/<name>~<incarnation>`. Renamed to partition 0's directory when found.
    pub(super) fn topic_dir_before_partitions(&self, name: &str, incarnation: u64) -> PathBuf {
        self.config
            .data_dir
            .join("topics")
            .join(format!("{name}~{incarnation}"))
    }

    /// Every directory of incarnation `incarnation` of topic `name` on disk: its partitions'
    /// (whatever their count) and the one from before partitions.
    pub(super) fn topic_dirs_on_disk(&self, name: &str, incarnation: u64) -> Vec<PathBuf> {
        let prefix = format!("{name}~{incarnation}-");
        let mut dirs = Vec::new();
        let legacy = self.topic_dir_before_partitions(name, incarnation);
        if legacy.exists() {
            dirs.push(legacy);
        }
        let Ok(entries) = std::fs::read_dir(self.config.data_dir.join("topics")) else {
            return dirs;
        };
        for entry in entries.flatten() {
            let file = entry.file_name();
            let file = file.to_string_lossy();
            let is_partition = file
                .strip_prefix(&prefix)
                .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
            if is_partition {
                dirs.push(entry.path());
            }
        }
        dirs
    }

    /// Moves a single-partition topic's directory from the layout before partitions to
    /// partition 0's (one rename, then the parent directory synced).
    pub(super) fn migrate_topic_dir(&self, name: &str, incarnation: u64) -> Result<(), NodeError> {
        let old = self.topic_dir_before_partitions(name, incarnation);
        let new = self.topic_dir(name, incarnation, 0);
        if !old.exists() || new.exists() {
            return Ok(());
        }
        let fail = |e: std::io::Error| NodeError::Directory {
            dir: old.clone(),
            message: format!("cannot rename to {}: {e}", new.display()),
        };
        std::fs::rename(&old, &new).map_err(fail)?;
        if let Some(parent) = new.parent() {
            std::fs::File::open(parent)
                .and_then(|d| d.sync_all())
                .map_err(fail)?;
        }
        tracing::info!(topic = %name, from = %old.display(), to = %new.display(), "moved a topic to the partitioned layout");
        Ok(())
    }

    /// Refuses a data directory written before topic incarnations: `streams/` then holds topics
    /// by bare name, which are not among the streams configured at start.
    pub(super) fn refuse_old_layout(&self) -> Result<(), NodeError> {
        let Ok(entries) = std::fs::read_dir(self.config.data_dir.join("streams")) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !self.config.initial_streams.contains(&name) {
                return Err(NodeError::OldLayout { dir: entry.path() });
            }
        }
        Ok(())
    }

    /// Removes the directories under `topics/` of incarnations created at or before `index`
    /// that are not in `topics` (the metadata state at `index`): they were deleted by then.
    pub(super) fn remove_deleted_topic_dirs(
        &self,
        index: u64,
        topics: &[(String, crate::metadata::TopicMeta)],
    ) {
        let Ok(entries) = std::fs::read_dir(self.config.data_dir.join("topics")) else {
            return;
        };
        for entry in entries.flatten() {
            let file = entry.file_name();
            let file = file.to_string_lossy();
            // `<name>~<incarnation>-<partition>`, or `<name>~<incarnation>` (before partitions).
            let Some((name, rest)) = file.rsplit_once('~') else {
                continue;
            };
            let incarnation = rest.split_once('-').map_or(rest, |(i, _)| i);
            let Ok(incarnation) = incarnation.parse::<u64>() else {
                continue;
            };
            let alive = topics
                .iter()
                .any(|(n, t)| n == name && t.created_at_index == incarnation);
            if incarnation == 0 || incarnation > index || alive {
                continue;
            }
            if self
                .partitions(name)
                .iter()
                .any(|s| s.incarnation == incarnation)
            {
                continue;
            }
            tracing::info!(topic = %name, incarnation, dir = %entry.path().display(), "removing the data of a topic incarnation deleted before the metadata snapshot");
            if let Err(e) = std::fs::remove_dir_all(entry.path()) {
                tracing::warn!(topic = %name, incarnation, "removing a deleted topic's data failed: {e}");
            }
        }
    }
}
