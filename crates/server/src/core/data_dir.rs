//! The data directory's layout: where each stream's and topic partition's files live, the
//! migration from the layout before partitions, the layout before topic incarnations that is
//! refused, and finding the directories of deleted topic incarnations.

use std::path::{Path, PathBuf};

use thiserror::Error;

/// A topic directory from before partitions could not be moved to partition 0's.
#[derive(Debug, Error)]
#[error("cannot rename to {}: {source}", to.display())]
pub struct MigrateError {
    /// The directory from before partitions.
    pub from: PathBuf,
    /// Partition 0's directory.
    pub to: PathBuf,
    /// The file system's error.
    pub source: std::io::Error,
}

/// One node's data directory and where everything lives in it:
/// - `streams/<name>`: a stream configured at start (`[streams] initial`);
/// - `topics/<name>~<incarnation>-<partition>`: one partition of one incarnation of a topic
///   (`~` is not allowed in topic names, so no two incarnations or topics share a directory);
/// - `topics/<name>~<incarnation>`: a single-partition topic written before partitions existed
///   (moved to partition 0's directory when found).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataDir {
    root: PathBuf,
}

/// The topic name and incarnation of a directory name under `topics/`
/// (`<name>~<incarnation>-<partition>`, or `<name>~<incarnation>` from before partitions);
/// `None` for a name of neither form.
pub fn parse_topic_dir(file: &str) -> Option<(&str, u64)> {
    let (name, rest) = file.rsplit_once('~')?;
    let incarnation = rest.split_once('-').map_or(rest, |(i, _)| i);
    Some((name, incarnation.parse::<u64>().ok()?))
}

impl DataDir {
    /// The layout under `root`.
    pub fn new(root: impl Into<PathBuf>) -> DataDir {
        DataDir { root: root.into() }
    }

    /// The data directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Directory of a stream configured at start (`[streams] initial`).
    pub fn stream_dir(&self, name: &str) -> PathBuf {
        self.root.join("streams").join(name)
    }

    /// Directory of one partition of one incarnation of a topic:
    /// `topics/<name>~<incarnation>-<partition>`.
    pub fn topic_dir(&self, name: &str, incarnation: u64, partition: u32) -> PathBuf {
        self.root
            .join("topics")
            .join(format!("{name}~{incarnation}-{partition}"))
    }

    /// Directory a single-partition topic had before partitions existed:
    /// `topics/<name>~<incarnation>`.
    pub fn topic_dir_before_partitions(&self, name: &str, incarnation: u64) -> PathBuf {
        self.root
            .join("topics")
            .join(format!("{name}~{incarnation}"))
    }

    /// Every directory of incarnation `incarnation` of topic `name` on disk: its partitions'
    /// (whatever their count) and the one from before partitions.
    pub fn topic_dirs_on_disk(&self, name: &str, incarnation: u64) -> Vec<PathBuf> {
        let prefix = format!("{name}~{incarnation}-");
        let mut dirs = Vec::new();
        let legacy = self.topic_dir_before_partitions(name, incarnation);
        if legacy.exists() {
            dirs.push(legacy);
        }
        let Ok(entries) = std::fs::read_dir(self.root.join("topics")) else {
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
    /// partition 0's (one rename, then the parent directory synced). Returns whether it moved
    /// one (nothing to move, or partition 0's directory already there: `false`).
    pub fn migrate_topic_dir(&self, name: &str, incarnation: u64) -> Result<bool, MigrateError> {
        let old = self.topic_dir_before_partitions(name, incarnation);
        let new = self.topic_dir(name, incarnation, 0);
        if !old.exists() || new.exists() {
            return Ok(false);
        }
        let fail = |source: std::io::Error| MigrateError {
            from: old.clone(),
            to: new.clone(),
            source,
        };
        std::fs::rename(&old, &new).map_err(fail)?;
        if let Some(parent) = new.parent() {
            std::fs::File::open(parent)
                .and_then(|d| d.sync_all())
                .map_err(fail)?;
        }
        Ok(true)
    }

    /// A directory under `streams/` that is not one of the streams configured at start
    /// (`initial_streams`): a topic kept by bare name, in the layout before topic incarnations.
    /// `None` when there is none.
    pub fn old_layout_dir(&self, initial_streams: &[String]) -> Option<PathBuf> {
        let entries = std::fs::read_dir(self.root.join("streams")).ok()?;
        entries.flatten().find_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            (!initial_streams.contains(&name)).then(|| entry.path())
        })
    }

    /// The directories under `topics/` of incarnations created at or before `index` for which
    /// `keep(name, incarnation)` is false (a metadata state at `index` no longer holds them:
    /// they were deleted by then), with their topic and incarnation. Streams configured at
    /// start (incarnation 0) are never among them.
    pub fn deleted_topic_dirs(
        &self,
        index: u64,
        keep: impl Fn(&str, u64) -> bool,
    ) -> Vec<(String, u64, PathBuf)> {
        let Ok(entries) = std::fs::read_dir(self.root.join("topics")) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for entry in entries.flatten() {
            let file = entry.file_name();
            let file = file.to_string_lossy();
            let Some((name, incarnation)) = parse_topic_dir(&file) else {
                continue;
            };
            if incarnation == 0 || incarnation > index || keep(name, incarnation) {
                continue;
            }
            found.push((name.to_owned(), incarnation, entry.path()));
        }
        found.sort();
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(label: &str) -> DataDir {
        let dir =
            std::env::temp_dir().join(format!("vdl-core-data-dir-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("topics")).unwrap();
        DataDir::new(dir)
    }

    #[test]
    fn directory_names_keep_topics_incarnations_and_partitions_apart() {
        let d = DataDir::new("/data");
        assert_eq!(d.stream_dir("s"), Path::new("/data/streams/s"));
        assert_eq!(d.topic_dir("t", 7, 2), Path::new("/data/topics/t~7-2"));
        assert_eq!(
            d.topic_dir_before_partitions("t", 7),
            Path::new("/data/topics/t~7")
        );
        assert_eq!(parse_topic_dir("t~7-2"), Some(("t", 7)));
        assert_eq!(parse_topic_dir("t~7"), Some(("t", 7)));
        assert_eq!(parse_topic_dir("a-b~12-0"), Some(("a-b", 12)));
        assert_eq!(parse_topic_dir("t"), None);
        assert_eq!(parse_topic_dir("t~x-1"), None);
    }

    #[test]
    fn dirs_on_disk_are_one_incarnations_partitions_and_its_old_directory() {
        let d = temp("on-disk");
        for name in ["t~5-0", "t~5-1", "t~5", "t~50-0", "t~5-x", "u~5-0"] {
            std::fs::create_dir_all(d.root().join("topics").join(name)).unwrap();
        }
        let mut found: Vec<String> = d
            .topic_dirs_on_disk("t", 5)
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        found.sort();
        assert_eq!(found, ["t~5", "t~5-0", "t~5-1"]);
        let _ = std::fs::remove_dir_all(d.root());
    }

    #[test]
    fn a_directory_from_before_partitions_moves_to_partition_0_once() {
        let d = temp("migrate");
        let old = d.topic_dir_before_partitions("t", 3);
        std::fs::create_dir_all(&old).unwrap();
        std::fs::write(old.join("f"), b"x").unwrap();
        assert!(d.migrate_topic_dir("t", 3).unwrap());
        assert!(!old.exists());
        assert_eq!(
            std::fs::read(d.topic_dir("t", 3, 0).join("f")).unwrap(),
            b"x"
        );
        assert!(!d.migrate_topic_dir("t", 3).unwrap());
        let _ = std::fs::remove_dir_all(d.root());
    }

    #[test]
    fn deleted_incarnations_are_those_up_to_the_index_not_kept() {
        let d = temp("deleted");
        for name in ["a~3-0", "a~9-0", "b~4", "c~0-0", "d~20-1", "junk"] {
            std::fs::create_dir_all(d.root().join("topics").join(name)).unwrap();
        }
        let found: Vec<(String, u64)> = d
            .deleted_topic_dirs(10, |n, i| n == "a" && i == 9)
            .into_iter()
            .map(|(n, i, _)| (n, i))
            .collect();
        assert_eq!(found, [("a".to_owned(), 3), ("b".to_owned(), 4)]);
        let _ = std::fs::remove_dir_all(d.root());
    }

    #[test]
    fn a_topic_under_streams_is_the_old_layout() {
        let d = temp("old-layout");
        std::fs::create_dir_all(d.stream_dir("configured")).unwrap();
        assert_eq!(d.old_layout_dir(&["configured".to_owned()]), None);
        std::fs::create_dir_all(d.stream_dir("orders")).unwrap();
        assert_eq!(
            d.old_layout_dir(&["configured".to_owned()]),
            Some(d.stream_dir("orders"))
        );
        let _ = std::fs::remove_dir_all(d.root());
    }
}
