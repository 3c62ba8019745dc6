//! The hard state, the lost-vote marker and the configuration state of a [`LogStore`].

use super::LogStore;
use crate::error::Result;
use crate::fsutil::{fsync_dir, remove_if_exists};
use crate::hard_state::{self, ConfState, HardState};

impl LogStore {
    /// Durably replaces the hard state: in place (one slot of the `hardstate` file, pwrite +
    /// fdatasync), so it needs no new disk space, except for the first save and the first
    /// after damage or after a version-1 file (temp file, fsync, rename, fsync dir).
    pub fn save_hard_state(&mut self, hs: &HardState) -> Result<()> {
        let seq = self.hard_state_seq + 1;
        hard_state::save_hard_state(&self.dir, hs, seq, self.hard_state_in_place)?;
        self.hard_state_seq = seq;
        self.hard_state_in_place = true;
        self.hard_state = *hs;
        self.hard_state_damage = None;
        Ok(())
    }

    /// The last saved hard state (default when never saved, or when the file was damaged:
    /// see [`LogStore::hard_state_damage`]).
    pub fn hard_state(&self) -> HardState {
        self.hard_state
    }

    /// Why the `hardstate` file could not be read at open (a CRC mismatch, bad magic, ...),
    /// naming the file; `None` when it was intact or missing. Cleared by the next
    /// [`LogStore::save_hard_state`]. The caller must not guess the lost term and vote: vdl
    /// takes them from the current leader before this replica votes again.
    pub fn hard_state_damage(&self) -> Option<&str> {
        self.hard_state_damage.as_deref()
    }

    /// Whether the votes this replica cast are unknown: its `hardstate` file was found
    /// damaged, at this open or at an earlier one, and the caller has not said it rebuilt
    /// them ([`LogStore::clear_vote_unknown`]). Kept in a marker file (`vote_unknown`),
    /// written when the damage is found, so a hard state saved meanwhile (the term of a
    /// leader followed) does not make a restart forget it.
    pub fn vote_unknown(&self) -> bool {
        self.vote_unknown
    }

    /// The caller rebuilt the votes (and saved the hard state that says so): removes the
    /// marker, durably.
    pub fn clear_vote_unknown(&mut self) -> Result<()> {
        if self.vote_unknown {
            remove_if_exists(&self.dir.join(hard_state::VOTE_UNKNOWN_FILE))?;
            fsync_dir(&self.dir)?;
            self.vote_unknown = false;
        }
        Ok(())
    }

    /// Durably replaces the configuration state: overwrites one of the `confstate` file's two
    /// slots in place (pwrite + fdatasync, no new disk space), except for the first save of a
    /// store and the first after a version-1 file (temp file, fsync, rename, fsync dir).
    pub fn save_conf_state(&mut self, cs: &ConfState) -> Result<()> {
        let seq = self.conf_state_seq + 1;
        hard_state::save_conf_state(&self.dir, cs, seq, self.conf_state_in_place)?;
        self.conf_state_seq = seq;
        self.conf_state_in_place = true;
        self.conf_state = cs.clone();
        Ok(())
    }

    /// The last saved configuration state (default when never saved).
    pub fn conf_state(&self) -> &ConfState {
        &self.conf_state
    }
}
