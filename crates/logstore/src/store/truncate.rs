//! Cutting the log: truncating a conflicting suffix and installing a snapshot.

use std::fs::File;

use super::LogStore;
use crate::entry::EntryKind;
use crate::error::{io_err, LogStoreError, Result};
use crate::fsutil::{fdatasync, fsync_dir, remove_if_exists};
use crate::segment::{
    create_segment_file, now_ms, open_rw, Segment, SegmentHeader, SEGMENT_HEADER_LEN,
};

impl LogStore {
    /// Removes entries `from_index..=last_index()` (conflicting entries, raft-rs semantics).
    /// Durable when it returns. `from_index > last_index()` does nothing; below
    /// `first_index()` is an error.
    pub fn truncate_suffix(&mut self, from_index: u64) -> Result<()> {
        if from_index > self.last_index() {
            return Ok(());
        }
        if from_index < self.first_index() {
            return Err(LogStoreError::Compacted {
                index: from_index,
                first_index: self.first_index(),
            });
        }
        let interval = self.config.index_interval_bytes;
        let k = self.segment_for_index(from_index);
        let seg = &self.segments[k];
        // Where the cut goes is found from the entry before it, never from the first entry
        // cut: a repair cuts at a damaged frame, whose header may be unreadable (a flipped
        // bit in its index or length made the cut fail, and the damage was never repaired).
        let (pos, new_next_offset, new_last_term, new_last_pos) =
            if from_index == seg.header.base_index {
                (
                    SEGMENT_HEADER_LEN,
                    seg.header.base_offset,
                    seg.header.prev_term,
                    0,
                )
            } else {
                let (p, hh) = seg.locate_index(from_index - 1, interval)?;
                (p + hh.total_len(), hh.next_offset(), hh.term, p)
            };
        let mut idx = (*seg.indexes(interval)?).clone();
        idx.truncate(pos, new_next_offset);
        // Exact max timestamp of what remains: the time index bounds everything before the
        // last offset-index entry; scan from there.
        let mut max_ts = idx.time.last().map_or(i64::MIN, |&(t, _)| t);
        let mut p = idx.offset.last().map_or(SEGMENT_HEADER_LEN, |&(_, p)| p);
        while p < pos {
            let hh = seg.read_frame_header(p)?;
            if hh.kind == EntryKind::Records {
                max_ts = max_ts.max(hh.max_timestamp);
            }
            p += hh.total_len();
        }
        idx.max_timestamp = max_ts;
        // Durable before anything is cut: a crash in between must not leave a checkpoint
        // that the entries written again after the cut would pass unmapped.
        self.lower_cleaner_checkpoint(new_next_offset)?;
        // The one step that needs new disk space goes first, so a full disk fails the
        // truncation with nothing changed (the caller retries once space returns): a sealed
        // segment is never truncated in place (readers may hold slices of its map), its kept
        // prefix is copied to a temp file that replaces it below.
        let prefix_copy = if seg.sealed() {
            let tmp = seg.path.with_extension("log.tmp");
            let written = seg.map().and_then(|data| {
                let f = File::create(&tmp).map_err(io_err(&tmp))?;
                crate::fs::fs()
                    .write_all_at(&f, &tmp, &data[..pos as usize], 0)
                    .map_err(io_err(&tmp))?;
                fdatasync(&f, &tmp);
                Ok(())
            });
            if let Err(e) = written {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
            Some(tmp)
        } else {
            None
        };

        self.reserve.detach();
        self.cache.truncate_from(from_index);
        // Later segments go first, newest first, so a crash leaves a contiguous prefix.
        while self.segments.len() > k + 1 {
            let s = self.segments.pop().expect("len > k + 1");
            remove_if_exists(&s.index_path)?;
            remove_if_exists(&s.path)?;
        }
        // The index file of the segment being cut would claim entries that no longer exist.
        remove_if_exists(&self.segments[k].index_path)?;
        fsync_dir(&self.dir)?;
        let dir = self.dir.clone();
        let seg = &mut self.segments[k];
        if let Some(tmp) = prefix_copy {
            // The kept prefix, written above, replaces the sealed segment.
            crate::fs::fs()
                .rename(&tmp, &seg.path)
                .map_err(io_err(&seg.path))?;
            fsync_dir(&dir)?;
            seg.reactivate(open_rw(&seg.path)?);
        } else {
            let file = seg.active_file();
            file.write(|f| f.set_len(pos))?.map_err(io_err(&seg.path))?;
            file.read(|f| fdatasync(f, &seg.path))?;
            file.mark_synced();
        }
        seg.len = pos;
        seg.last_index = from_index - 1;
        seg.last_term = new_last_term;
        seg.next_offset = new_next_offset;
        seg.last_entry_pos = new_last_pos;
        seg.max_timestamp = max_ts;
        seg.set_indexes(idx);
        self.reserve
            .attach(&seg.path, pos, pos, self.config.segment_bytes);
        self.synced_len = pos;
        self.checkpoint_len = 0;
        self.durable_index = self.durable_index.min(from_index - 1);
        // A truncation into a version-1 segment made it active again.
        self.upgrade_active_segment();
        Ok(())
    }

    /// Discards the whole log and restarts it right after `index` (a Raft snapshot at
    /// `index`/`term` was installed): afterwards `first_index() == index + 1`,
    /// `term(index) == term`, and the next record gets offset `next_offset`. Durable when it
    /// returns; atomic across crashes (recovery drops whichever generation is older).
    pub fn install_snapshot(&mut self, index: u64, term: u64, next_offset: u64) -> Result<()> {
        if index == u64::MAX {
            return Err(LogStoreError::InvalidArgument(
                "snapshot index u64::MAX".into(),
            ));
        }
        self.reserve.detach();
        for s in &self.segments {
            remove_if_exists(&s.index_path)?;
        }
        let generation = self.generation + 1;
        let header = SegmentHeader::new(index + 1, next_offset, term, generation, now_ms());
        // Commit point: the new-generation segment exists durably.
        let (path, file) = create_segment_file(&self.dir, &header)?;
        self.reserve.attach(
            &path,
            SEGMENT_HEADER_LEN,
            SEGMENT_HEADER_LEN,
            self.config.segment_bytes,
        );
        self.generation = generation;
        let old = std::mem::take(&mut self.segments);
        self.segments.push(Segment::new_empty(
            header,
            path.clone(),
            file,
            &self.dir,
            &self.open_segments,
        ));
        for s in old {
            if s.path != path {
                remove_if_exists(&s.path)?;
            }
        }
        fsync_dir(&self.dir)?;
        self.cache.clear();
        self.synced_len = SEGMENT_HEADER_LEN;
        self.checkpoint_len = 0;
        self.durable_index = index;
        Ok(())
    }
}
