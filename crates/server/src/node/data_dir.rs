//! The node's side of the data directory's layout (see [`crate::core::data_dir`]): the paths
//! it serves and the layout it refuses (removing deleted topics' directories is the core's, see
//! [`crate::core::effects::bring_in_line`]).

use std::path::PathBuf;

use crate::core::data_dir::MigrateError;

use super::{Node, NodeError};

impl From<MigrateError> for NodeError {
    fn from(e: MigrateError) -> NodeError {
        NodeError::Directory {
            dir: e.from.clone(),
            message: e.to_string(),
        }
    }
}

impl Node {
    /// Directory of a stream configured at start (`[streams] initial`).
    pub fn stream_dir(&self, name: &str) -> PathBuf {
        self.data_dir.stream_dir(name)
    }

    /// Directory of one partition of one incarnation of a topic:
    /// `topics/<name>~<incarnation>-<partition>` (`~` is not allowed in topic names, so no two
    /// incarnations or topics share a directory).
    pub fn topic_dir(&self, name: &str, incarnation: u64, partition: u32) -> PathBuf {
        self.data_dir.topic_dir(name, incarnation, partition)
    }

    /// Refuses a data directory written before topic incarnations: `streams/` then holds topics
    /// by bare name, which are not among the streams configured at start.
    pub(super) fn refuse_old_layout(&self) -> Result<(), NodeError> {
        match self.data_dir.old_layout_dir(&self.config.initial_streams) {
            Some(dir) => Err(NodeError::OldLayout { dir }),
            None => Ok(()),
        }
    }
}
