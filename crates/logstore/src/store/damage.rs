//! Damage found while running: the note reads leave, the scrubber's reports, and the
//! repair that cuts the log before the first damaged entry.

use std::sync::atomic::Ordering;

use super::LogStore;
use crate::error::{LogStoreError, Result};
use crate::recovery::scan;
use crate::repair::{self, RepairMarker};

impl LogStore {
    /// Notes that a read found entry `index` (or one before it in its segment) damaged, and
    /// returns the error unchanged. Only corruption is noted.
    pub(super) fn note_damage(&self, e: LogStoreError, index: u64) -> LogStoreError {
        if matches!(e, LogStoreError::Corruption { .. }) {
            self.damaged_from.fetch_min(index, Ordering::AcqRel);
        }
        e
    }

    /// Notes damage found outside the store's own reads (a scrubber's verification).
    pub fn report_damage(&self, index: u64) {
        self.damaged_from.fetch_min(index, Ordering::AcqRel);
    }

    /// The lowest Raft index a read (or [`LogStore::report_damage`]) found damaged since the
    /// last [`LogStore::repair`]; the damaged entry is at or after it in its segment.
    pub fn damaged_from(&self) -> Option<u64> {
        match self.damaged_from.load(Ordering::Acquire) {
            u64::MAX => None,
            i => Some(i),
        }
    }

    /// What the log lost to corruption and has not got back (written by recovery or by
    /// [`LogStore::repair`], removed by [`LogStore::finish_repair`]).
    pub fn repair_marker(&self) -> Option<RepairMarker> {
        self.repair_marker
    }

    /// Cuts the log before its first damaged entry, so that what is left is intact and the
    /// Raft layer can fetch the rest again from a healthy replica. The segment holding
    /// `suspect_index` is scanned (CRC of every frame) to find the first bad frame; the cut
    /// is at that frame or at `suspect_index`, whichever is lower. Writes the repair marker
    /// (durably, before the cut) with the end the log had. Returns `None`, and cuts nothing,
    /// when `suspect_index` is no longer in the log (retention deleted its segment, or an
    /// earlier repair or a truncation removed it) or when the scan finds every frame of its
    /// segment intact (a read error that did not come from the bytes on disk): a repair never
    /// cuts entries it cannot show damaged, which may be committed ones this replica counts
    /// for. Durable when it returns.
    pub fn repair(&mut self, suspect_index: u64) -> Result<Option<RepairMarker>> {
        let Some((k, first_bad, indexes)) = self.scan_for_damage(suspect_index)? else {
            return Ok(None);
        };
        // The indexes loaded for this segment may point into the damage; the scan's are
        // exact up to it.
        self.segments[k].replace_indexes(indexes);
        let marker = repair::save(
            &self.dir,
            RepairMarker {
                first_bad_index: first_bad,
                lost_last_index: self.last_index(),
                lost_last_term: self.last_term(),
            },
        )?;
        self.repair_marker = Some(marker);
        self.truncate_suffix(first_bad)?;
        Ok(Some(marker))
    }

    /// Whether the bytes on disk show the damage a read or the scrubber noted at
    /// `suspect_index` ([`LogStore::damaged_from`]): the first damaged Raft index, found by
    /// scanning (CRC of every frame) the segment holding the suspect; `None` when the suspect
    /// is no longer in the log or its segment scans intact. Clears the note either way; cuts
    /// nothing.
    pub fn confirm_damage(&self, suspect_index: u64) -> Result<Option<u64>> {
        Ok(self
            .scan_for_damage(suspect_index)?
            .map(|(_, first_bad, _)| first_bad))
    }

    /// Clears the damage note and scans the segment holding `suspect_index`: (the segment's
    /// position, the first bad index, the scan's indexes) when a frame in it is bad.
    fn scan_for_damage(
        &self,
        suspect_index: u64,
    ) -> Result<Option<(usize, u64, crate::index::SparseIndexes)>> {
        self.damaged_from.store(u64::MAX, Ordering::Release);
        if suspect_index > self.last_index() || suspect_index < self.first_index() {
            return Ok(None);
        }
        let k = self.segment_for_index(suspect_index);
        let seg = &self.segments[k];
        let data = seg.read_all()?;
        let sc = scan(
            &data,
            0,
            &seg.header,
            None,
            self.config.index_interval_bytes,
        );
        drop(data);
        Ok(sc.stop.map(|_| {
            (
                k,
                (sc.summary.last_index + 1).min(suspect_index),
                sc.indexes,
            )
        }))
    }

    /// Removes the repair marker: the log is whole again (the caller checked it holds what
    /// the marker says was lost, fetched from a healthy replica). Durable when it returns.
    pub fn finish_repair(&mut self) -> Result<()> {
        if self.repair_marker.take().is_some() {
            repair::remove(&self.dir)?;
        }
        Ok(())
    }
}
