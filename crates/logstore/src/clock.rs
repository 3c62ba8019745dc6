//! The wall clock for deciding that data is old enough to delete.
//!
//! Retention by time compares record timestamps with "now" from the wall clock, and the wall
//! clock can jump: an operator's mistake, a VM resumed from a snapshot, NTP stepping a clock
//! that was far off. A jump forward must not make data look old and be deleted early; a jump
//! back only delays deletion. [`retention_now_ms`] is therefore the smaller of the wall clock
//! and the wall clock at the anchor (when the process opened its first store) advanced by
//! the monotonic clock since: a forward jump is ignored (until a restart re-anchors), a
//! backward jump is followed. Deletion
//! can only come late, never early. (NTP's gradual slewing is a few parts per million: the
//! two clocks agree to seconds over months.)

use std::sync::OnceLock;
use std::time::Instant;

/// The wall clock (ms since the Unix epoch) and the monotonic clock when the anchor was taken.
static ANCHOR: OnceLock<(u64, Instant)> = OnceLock::new();

/// Milliseconds since the Unix epoch by the wall clock, 0 if it is before the epoch.
pub fn wall_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Takes the anchor now unless it was taken before. [`crate::LogStore::open`] calls it, so
/// the anchor is no later than the first store's opening: taken lazily by the first
/// retention pass instead, a jump between start and that pass (a pass that found nothing to
/// delete does not ask for "now") became the anchor, and the jumped node deleted early.
pub fn anchor_retention_clock() {
    ANCHOR.get_or_init(|| (wall_now_ms(), Instant::now()));
}

/// "Now" for retention decisions: never ahead of the anchored monotonic clock (see the module
/// documentation).
pub fn retention_now_ms() -> u64 {
    let &(wall_at_anchor, anchor) = ANCHOR.get_or_init(|| (wall_now_ms(), Instant::now()));
    let anchored = wall_at_anchor.saturating_add(anchor.elapsed().as_millis() as u64);
    wall_now_ms().min(anchored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_now_follows_the_wall_clock_when_it_does_not_jump() {
        let a = retention_now_ms();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = retention_now_ms();
        assert!(b >= a + 15, "{a} {b}");
        assert!(wall_now_ms().abs_diff(b) < 1_000);
    }
}
