//! The cleaner's key map (Kafka's "dedupe buffer"): key -> latest offset, in a fixed memory
//! budget.
//!
//! Open addressing with linear probing over one preallocated array of slots; a slot is a
//! 128-bit digest of the key and the latest offset seen for it (24 bytes, the key itself is
//! not kept, so a slot's size does not depend on the key's). The digest is two SipHash-1-3
//! hashes (std's `DefaultHasher`) of the key prefixed with two different tag bytes, i.e. two
//! independent 64-bit hashes. Two different keys with the same digest would make the cleaner
//! drop the older one's latest record (data loss), so the digest must practically never
//! collide: among n distinct keys the chance of any collision is about n^2 / 2^129, for a
//! billion keys (far past what one pass maps) about 1.5 * 10^-21, far below the chance of an
//! undetected disk or memory error (Kafka's map uses 128-bit MD5 digests for the same
//! reason). The digest is never stored on disk, so `DefaultHasher` changing between Rust
//! releases does not matter.
//!
//! A map outlives its pass: [`KeyMap::reset`] empties it for the next one in place (one
//! write over the slots, none when it holds nothing), so a cleaner that keeps its map
//! allocates it once, as Kafka's cleaner thread keeps its dedupe buffer, instead of
//! allocating and faulting in the whole budget every pass.
//!
//! Inserting a new key beyond the load limit (90% of the slots, as Kafka's
//! `log.cleaner.io.buffer.load.factor`) is refused ([`KeyMapFull`]): the caller ends the
//! dirty range it maps at that record, and the next pass goes on from there.

use std::hash::Hasher;

/// Bytes per slot: 16 digest bytes and an 8-byte offset.
pub const KEY_MAP_SLOT_BYTES: usize = 24;
/// Share of the slots that may be used (the rest keeps probe sequences short).
const LOAD_LIMIT: f64 = 0.9;

/// A key map insert was refused: the map holds as many keys as its budget allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the key map is full ({keys} keys)")]
pub struct KeyMapFull {
    /// Keys held.
    pub keys: usize,
}

/// One slot: the key's digest and its latest offset + 1 (0: the slot is empty).
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    digest: [u64; 2],
    offset_plus_one: u64,
}

/// Key digest -> latest offset, in a fixed budget (see the module docs).
#[derive(Debug)]
pub struct KeyMap {
    slots: Vec<Slot>,
    keys: usize,
    max_keys: usize,
}

/// The 128-bit digest of `key`.
fn digest(key: &[u8]) -> [u64; 2] {
    let mut out = [0u64; 2];
    for (tag, d) in out.iter_mut().enumerate() {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        h.write_u8(tag as u8);
        h.write(key);
        *d = h.finish();
    }
    out
}

/// Slots of a map of `budget_bytes` (at least two, so that one key always fits).
fn slot_count(budget_bytes: usize) -> usize {
    (budget_bytes / KEY_MAP_SLOT_BYTES).max(2)
}

impl KeyMap {
    /// A map using at most `budget_bytes` for its slots (at least two slots, so that one key
    /// always fits).
    pub fn with_budget(budget_bytes: usize) -> KeyMap {
        let n = slot_count(budget_bytes);
        let max_keys = ((n as f64 * LOAD_LIMIT) as usize).clamp(1, n - 1);
        KeyMap {
            slots: vec![Slot::default(); n],
            keys: 0,
            max_keys,
        }
    }

    /// Empties the map for a new pass with `budget_bytes`: in place when the budget gives the
    /// slot count the map has (the allocation is kept; the slots are cleared only when a key
    /// was held), else a new map as [`KeyMap::with_budget`] makes. Afterwards the map is as a
    /// new one of that budget.
    pub fn reset(&mut self, budget_bytes: usize) {
        if slot_count(budget_bytes) != self.slots.len() {
            *self = KeyMap::with_budget(budget_bytes);
            return;
        }
        if self.keys > 0 {
            self.slots.fill(Slot::default());
            self.keys = 0;
        }
    }

    /// Number of keys held.
    pub fn len(&self) -> usize {
        self.keys
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.keys == 0
    }

    /// The most keys the map accepts.
    pub fn capacity(&self) -> usize {
        self.max_keys
    }

    /// Heap bytes of the slots.
    pub fn heap_bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<Slot>()
    }

    /// The slot holding `d`, or the empty slot where it would go.
    fn find(&self, d: [u64; 2]) -> usize {
        let n = self.slots.len();
        let mut i = (d[0] % n as u64) as usize;
        loop {
            let s = &self.slots[i];
            if s.offset_plus_one == 0 || s.digest == d {
                return i;
            }
            i = (i + 1) % n;
        }
    }

    /// Records `offset` as the latest of `key` (a lower offset than the one held is ignored:
    /// the map keeps the greatest). A key not yet held is refused when the map is full.
    pub fn insert(&mut self, key: &[u8], offset: u64) -> Result<(), KeyMapFull> {
        let d = digest(key);
        let i = self.find(d);
        let s = &mut self.slots[i];
        if s.offset_plus_one != 0 {
            s.offset_plus_one = s.offset_plus_one.max(offset.saturating_add(1));
            return Ok(());
        }
        if self.keys >= self.max_keys {
            return Err(KeyMapFull { keys: self.keys });
        }
        *s = Slot {
            digest: d,
            offset_plus_one: offset.saturating_add(1),
        };
        self.keys += 1;
        Ok(())
    }

    /// The latest offset recorded for `key`.
    pub fn get(&self, key: &[u8]) -> Option<u64> {
        let s = &self.slots[self.find(digest(key))];
        (s.offset_plus_one != 0).then(|| s.offset_plus_one - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_latest_offset_per_key() {
        let mut m = KeyMap::with_budget(1024);
        m.insert(b"a", 5).unwrap();
        m.insert(b"b", 6).unwrap();
        m.insert(b"a", 9).unwrap();
        m.insert(b"a", 7).unwrap(); // older: ignored
        assert_eq!(m.get(b"a"), Some(9));
        assert_eq!(m.get(b"b"), Some(6));
        assert_eq!(m.get(b"c"), None);
        assert_eq!(m.get(b""), None);
        m.insert(b"", 0).unwrap(); // an empty key is a key (offset 0 too)
        assert_eq!(m.get(b""), Some(0));
        assert_eq!(m.len(), 3);
    }

    #[test]
    fn refuses_new_keys_at_the_load_limit_and_stays_within_budget() {
        let budget = 100 * KEY_MAP_SLOT_BYTES;
        let mut m = KeyMap::with_budget(budget);
        assert!(m.heap_bytes() <= budget);
        assert_eq!(m.capacity(), 90);
        for k in 0..90u64 {
            m.insert(&k.to_be_bytes(), k).unwrap();
        }
        assert_eq!(
            m.insert(&1000u64.to_be_bytes(), 1000),
            Err(KeyMapFull { keys: 90 })
        );
        // Keys already held are still updated when full.
        m.insert(&3u64.to_be_bytes(), 500).unwrap();
        assert_eq!(m.get(&3u64.to_be_bytes()), Some(500));
        for k in 0..90u64 {
            let want = if k == 3 { 500 } else { k };
            assert_eq!(m.get(&k.to_be_bytes()), Some(want));
        }
        assert_eq!(m.get(&1000u64.to_be_bytes()), None);
    }

    #[test]
    fn a_reset_map_is_a_new_one_and_keeps_its_allocation_for_the_same_budget() {
        let budget = 100 * KEY_MAP_SLOT_BYTES;
        let mut m = KeyMap::with_budget(budget);
        for k in 0..90u64 {
            m.insert(&k.to_be_bytes(), k).unwrap();
        }
        let slots = m.slots.as_ptr();
        m.reset(budget);
        assert_eq!(m.slots.as_ptr(), slots, "the same allocation");
        assert!(m.is_empty());
        assert_eq!(m.capacity(), 90);
        for k in 0..90u64 {
            assert_eq!(m.get(&k.to_be_bytes()), None);
        }
        // Full capacity again, nothing of the old pass left.
        for k in 100..190u64 {
            m.insert(&k.to_be_bytes(), k).unwrap();
        }
        assert!(m.insert(b"one more", 1).is_err());
        // Another budget: a map of that budget.
        m.reset(10 * KEY_MAP_SLOT_BYTES);
        assert!(m.is_empty());
        assert_eq!(m.capacity(), 9);
        assert!(m.heap_bytes() <= 10 * KEY_MAP_SLOT_BYTES);
        m.reset(0);
        m.insert(b"k", 1).unwrap();
        assert!(m.insert(b"other", 2).is_err());
    }

    #[test]
    fn a_tiny_budget_still_holds_one_key() {
        let mut m = KeyMap::with_budget(0);
        m.insert(b"k", 1).unwrap();
        assert!(m.insert(b"other", 2).is_err());
        assert_eq!(m.get(b"k"), Some(1));
        assert_eq!(m.get(b"other"), None);
    }

    #[test]
    fn many_keys_round_trip() {
        let mut m = KeyMap::with_budget(24 * 20_000);
        for k in 0..15_000u32 {
            m.insert(format!("key-{k}").as_bytes(), u64::from(k) * 2)
                .unwrap();
        }
        for k in 0..15_000u32 {
            assert_eq!(m.get(format!("key-{k}").as_bytes()), Some(u64::from(k) * 2));
        }
        assert_eq!(m.get(b"key-15000"), None);
    }
}
