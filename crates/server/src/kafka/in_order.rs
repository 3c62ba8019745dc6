//! The responses a connection owes, completed in any order and handed out in request order.
//!
//! Unlike `futures`' `FuturesOrdered`, every waiting future is polled whenever the queue is
//! polled, with the connection task's own waker. That costs a poll per owed response per
//! wake-up of the task (at most `kafka.max_in_flight_per_connection`, each a check of a
//! channel or a slot), and buys this: a future completed by another thread without a wake-up
//! (a produce answered directly by a worker, see `direct_answer`) is found the next time the
//! task runs for any reason, with no wake-up of its own. (`FuturesOrdered` polls only the
//! futures whose own wakers fired, so such a future would need one: a wake-up of the running
//! task, which tokio turns into a reschedule and often a futex call to unpark another
//! worker.)

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::future::BoxFuture;

enum Entry<T> {
    Waiting(BoxFuture<'static, T>),
    Done(T),
}

/// Futures whose outputs come out in the order the futures were pushed.
pub struct InOrder<T> {
    entries: VecDeque<Entry<T>>,
}

impl<T> Default for InOrder<T> {
    fn default() -> Self {
        InOrder {
            entries: VecDeque::new(),
        }
    }
}

impl<T> InOrder<T> {
    /// Queues a future behind the others.
    pub fn push_back(&mut self, future: BoxFuture<'static, T>) {
        self.entries.push_back(Entry::Waiting(future));
    }

    /// Futures queued and not handed out yet.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Polls every waiting future; the oldest one's output once it is done.
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        if self.entries.is_empty() {
            return Poll::Ready(None);
        }
        for entry in self.entries.iter_mut() {
            if let Entry::Waiting(f) = entry {
                if let Poll::Ready(out) = f.as_mut().poll(cx) {
                    *entry = Entry::Done(out);
                }
            }
        }
        if matches!(self.entries.front(), Some(Entry::Done(_))) {
            match self.entries.pop_front() {
                Some(Entry::Done(out)) => return Poll::Ready(Some(out)),
                _ => unreachable!("checked above"),
            }
        }
        Poll::Pending
    }

    /// The oldest future's output once it is done (None when nothing is queued).
    pub fn next_done(&mut self) -> Next<'_, T> {
        Next { queue: self }
    }
}

/// The future of [`InOrder::next_done`].
pub struct Next<'a, T> {
    queue: &'a mut InOrder<T>,
}

impl<T> Future for Next<'_, T> {
    type Output = Option<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.queue.poll_next(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// Outputs come in push order whatever order the futures finish in, and a future that
    /// finished without waking anyone is found at the next poll.
    #[tokio::test]
    async fn outputs_come_in_push_order_and_unwoken_completions_are_found() {
        let mut q: InOrder<u32> = InOrder::default();
        let (tx1, rx1) = tokio::sync::oneshot::channel::<u32>();
        let (tx2, rx2) = tokio::sync::oneshot::channel::<u32>();
        q.push_back(Box::pin(async move { rx1.await.unwrap() }));
        q.push_back(Box::pin(async move { rx2.await.unwrap() }));
        // Completes without a waker of its own ever being woken: a flag it checks when polled.
        let flag = Arc::new(AtomicBool::new(false));
        let f = flag.clone();
        q.push_back(Box::pin(std::future::poll_fn(move |_| {
            if f.load(Ordering::SeqCst) {
                Poll::Ready(3)
            } else {
                Poll::Pending
            }
        })));
        assert_eq!(q.len(), 3);
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(q.poll_next(&mut cx).is_pending());
        tx2.send(2).unwrap();
        flag.store(true, Ordering::SeqCst);
        assert!(q.poll_next(&mut cx).is_pending(), "the first is not done");
        tx1.send(1).unwrap();
        assert_eq!(q.next_done().await, Some(1));
        assert_eq!(q.next_done().await, Some(2));
        assert_eq!(q.next_done().await, Some(3));
        assert!(q.is_empty());
        assert_eq!(q.next_done().await, None);
    }
}
