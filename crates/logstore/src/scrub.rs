//! Verifying sealed segments in the background (a scrubber), without holding the store.
//!
//! [`LogStore::scrub_target`] hands out a sealed segment's bytes (a slice of its memory map,
//! which stays valid after the store drops or replaces the segment: sealed files are never
//! written in place), so the verification runs without the store's lock and at whatever
//! pace the caller sets. A bad frame is reported as the first damaged Raft index; the caller
//! passes it to [`LogStore::report_damage`] and the Raft layer repairs the log.

use std::path::PathBuf;

use bytes::Bytes;

use crate::entry::check_frame;
use crate::segment::{SegmentHeader, MAX_FRAME_LEN, SEGMENT_HEADER_LEN};
use crate::store::LogStore;

/// One sealed segment's bytes, to be verified.
pub struct ScrubTarget {
    path: PathBuf,
    header: SegmentHeader,
    data: Bytes,
}

/// What a verification found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScrubOutcome {
    /// Bytes whose frames were CRC-checked.
    pub bytes_verified: u64,
    /// The first damaged entry, with the byte position and the reason; `None`: intact.
    pub damage: Option<(u64, u64, String)>,
}

/// Bytes verified between two calls of the pacing callback of [`ScrubTarget::verify`].
pub const SCRUB_STEP_BYTES: u64 = 256 * 1024;

impl ScrubTarget {
    /// The segment file.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The segment's first Raft index.
    pub fn base_index(&self) -> u64 {
        self.header.base_index
    }

    /// The segment's length in bytes.
    pub fn len_bytes(&self) -> u64 {
        self.data.len() as u64
    }

    /// CRC-checks every frame and that each continues the one before (index), calling `pace`
    /// with the bytes verified since its last call about every [`SCRUB_STEP_BYTES`] (the
    /// caller sleeps there to keep its rate). Stops at the first bad frame.
    pub fn verify(&self, mut pace: impl FnMut(u64)) -> ScrubOutcome {
        let mut pos = SEGMENT_HEADER_LEN;
        let mut expected = self.header.base_index;
        let mut since_pace = 0u64;
        let end = self.data.len() as u64;
        let mut damage = None;
        while pos < end {
            match check_frame(&self.data[pos as usize..], MAX_FRAME_LEN) {
                Ok(h) if h.index == expected => {
                    pos += h.total_len();
                    since_pace += h.total_len();
                    expected += 1;
                }
                Ok(h) => {
                    damage = Some((
                        expected,
                        pos,
                        format!("frame has index {}, expected {expected}", h.index),
                    ));
                    break;
                }
                Err(e) => {
                    damage = Some((expected, pos, format!("{e:?}")));
                    break;
                }
            }
            if since_pace >= SCRUB_STEP_BYTES {
                pace(since_pace);
                since_pace = 0;
            }
        }
        pace(since_pace);
        ScrubOutcome {
            bytes_verified: pos.min(end),
            damage,
        }
    }
}

impl LogStore {
    /// The first Raft indexes of the sealed segments (the ones a scrubber verifies).
    pub fn sealed_segment_bases(&self) -> Vec<u64> {
        self.sealed_segments()
            .map(|s| s.header.base_index)
            .collect()
    }

    /// The sealed segment starting at `base_index`, to verify without holding the store;
    /// `None` when there is no such sealed segment any more.
    pub fn scrub_target(&self, base_index: u64) -> crate::Result<Option<ScrubTarget>> {
        let Some(seg) = self
            .sealed_segments()
            .find(|s| s.header.base_index == base_index)
        else {
            return Ok(None);
        };
        Ok(Some(ScrubTarget {
            path: seg.path.clone(),
            header: seg.header,
            data: seg.map()?,
        }))
    }
}
