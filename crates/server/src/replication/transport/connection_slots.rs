//! How many connections the peer listener holds: a place for each connection still in its
//! hello ([`PendingSlot`], at most `PeerLimits::max_pending`), and each member's admitted
//! connections ([`MemberSlots`]), the oldest closed when a newer one goes over
//! `PeerLimits::per_member`.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// A place among the connections still in their hello; given back on drop.
pub(super) struct PendingSlot(Arc<AtomicUsize>);

impl PendingSlot {
    pub(super) fn take(pending: &Arc<AtomicUsize>, max: usize) -> Option<PendingSlot> {
        pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| PendingSlot(pending.clone()))
    }
}

impl Drop for PendingSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A member's admitted connections, oldest first: (connection id, dropping it closes the
/// connection).
type OpenConnections = VecDeque<(u64, oneshot::Sender<()>)>;

/// Admitted connections per member.
#[derive(Default)]
pub(super) struct MemberSlots {
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, OpenConnections>>,
}

/// An admitted connection's place in [`MemberSlots`]; given back on drop.
pub(super) struct MemberSlot {
    slots: Arc<MemberSlots>,
    member: u64,
    pub(super) id: u64,
}

impl MemberSlots {
    /// Registers a connection of `member`, closing its oldest ones beyond `max`; the receiver
    /// resolves when this connection is closed that way.
    pub(super) fn take(
        self: &Arc<Self>,
        member: u64,
        max: usize,
    ) -> (MemberSlot, oneshot::Receiver<()>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let list = open.entry(member).or_default();
        list.push_back((id, tx));
        while list.len() > max.max(1) {
            // Dropping the sender resolves the oldest connection's receiver.
            list.pop_front();
        }
        let slot = MemberSlot {
            slots: self.clone(),
            member,
            id,
        };
        (slot, rx)
    }
}

impl Drop for MemberSlot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(list) = open.get_mut(&self.member) {
            list.retain(|(id, _)| *id != self.id);
            if list.is_empty() {
                open.remove(&self.member);
            }
        }
    }
}
