//! A Raft group's inbox: a bounded queue whose memory follows what is queued.
//!
//! Why not `std::sync::mpsc::sync_channel`: it allocates and initialises its whole capacity up
//! front. With 16,384 slots of a group input (a raft-rs message is a few hundred bytes) that was
//! 4 MB per group, 3.2 MB of it resident, on every node for every partition, idle or not: 300
//! partitions cost a node about a gigabyte. This queue is std's unbounded channel (which
//! allocates blocks as inputs arrive and frees them as they are taken) with a counter that
//! enforces the bound.
//!
//! An inbox may have a waker, called after every item queued: the group runtime's way of
//! scheduling the group that owns the inbox (see [`crate::runtime`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::time::Duration;

/// Called after an item is queued.
pub type Waker = Arc<dyn Fn() + Send + Sync>;

/// The sending side; cheap to clone.
pub struct InboxSender<T> {
    tx: Sender<T>,
    queued: Arc<AtomicUsize>,
    capacity: usize,
    wake: Option<Waker>,
}

impl<T> std::fmt::Debug for InboxSender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboxSender")
            .field("queued", &self.queued.load(Ordering::Relaxed))
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl<T> Clone for InboxSender<T> {
    fn clone(&self) -> Self {
        InboxSender {
            tx: self.tx.clone(),
            queued: self.queued.clone(),
            capacity: self.capacity,
            wake: self.wake.clone(),
        }
    }
}

/// The receiving side (one per inbox).
#[derive(Debug)]
pub struct InboxReceiver<T> {
    rx: Receiver<T>,
    queued: Arc<AtomicUsize>,
}

/// A new inbox holding at most `capacity` items queued through [`InboxSender::try_send`].
pub fn inbox<T>(capacity: usize) -> (InboxSender<T>, InboxReceiver<T>) {
    build(capacity, None)
}

/// Like [`inbox`], calling `wake` after every item queued.
pub fn inbox_with_waker<T>(capacity: usize, wake: Waker) -> (InboxSender<T>, InboxReceiver<T>) {
    build(capacity, Some(wake))
}

fn build<T>(capacity: usize, wake: Option<Waker>) -> (InboxSender<T>, InboxReceiver<T>) {
    assert!(capacity > 0, "an inbox holds at least one item");
    let (tx, rx) = channel();
    let queued = Arc::new(AtomicUsize::new(0));
    (
        InboxSender {
            tx,
            queued: queued.clone(),
            capacity,
            wake,
        },
        InboxReceiver { rx, queued },
    )
}

impl<T> InboxSender<T> {
    /// Queues `item` unless the inbox holds `capacity` items already (`Full`) or its receiver
    /// is gone (`Disconnected`); either way the item comes back in the error.
    pub fn try_send(&self, item: T) -> Result<(), TrySendError<T>> {
        // Reserve a slot first, so concurrent senders never pass the bound together.
        let before = self.queued.fetch_add(1, Ordering::SeqCst);
        if before >= self.capacity {
            self.queued.fetch_sub(1, Ordering::SeqCst);
            return Err(TrySendError::Full(item));
        }
        self.tx.send(item).map_err(|e| {
            self.queued.fetch_sub(1, Ordering::SeqCst);
            TrySendError::Disconnected(e.0)
        })?;
        self.woken();
        Ok(())
    }

    fn woken(&self) {
        if let Some(wake) = &self.wake {
            wake();
        }
    }

    /// Queues `item` even when the inbox is full (for the few control inputs that must get
    /// through, such as a stop); fails only when the receiver is gone.
    pub fn send(&self, item: T) -> Result<(), T> {
        self.queued.fetch_add(1, Ordering::SeqCst);
        self.tx.send(item).map_err(|e| {
            self.queued.fetch_sub(1, Ordering::SeqCst);
            e.0
        })?;
        self.woken();
        Ok(())
    }
}

impl<T> InboxReceiver<T> {
    /// Takes the next item, waiting up to `timeout` for one.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        let item = self.rx.recv_timeout(timeout)?;
        self.queued.fetch_sub(1, Ordering::SeqCst);
        Ok(item)
    }

    /// Whether items are queued (or being queued: the count is raised before the item lands).
    pub fn has_items(&self) -> bool {
        self.queued.load(Ordering::SeqCst) > 0
    }

    /// Takes the next item if one is queued.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        let item = self.rx.try_recv()?;
        self.queued.fetch_sub(1, Ordering::SeqCst);
        Ok(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_holds_and_frees_as_items_are_taken() {
        let (tx, rx) = inbox::<u32>(2);
        tx.try_send(1).unwrap();
        tx.clone().try_send(2).unwrap();
        assert!(matches!(tx.try_send(3), Err(TrySendError::Full(3))));
        // A control item gets through a full inbox.
        tx.send(99).unwrap();
        assert_eq!(rx.try_recv().unwrap(), 1);
        assert_eq!(rx.recv_timeout(Duration::from_millis(1)).unwrap(), 2);
        assert_eq!(rx.try_recv().unwrap(), 99);
        tx.try_send(4).unwrap();
        tx.try_send(5).unwrap();
        assert!(tx.try_send(6).is_err());
        drop(rx);
        assert!(matches!(
            tx.try_send(7),
            Err(TrySendError::Full(7) | TrySendError::Disconnected(7))
        ));
        let (tx, rx) = inbox::<u32>(1);
        drop(rx);
        assert!(matches!(tx.try_send(8), Err(TrySendError::Disconnected(8))));
        assert_eq!(tx.send(9), Err(9));
    }
}
