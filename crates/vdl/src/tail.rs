//! [`Tail`]: the async stream of committed records a [`crate::Stream::tail`] returns.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use futures::FutureExt;

use crate::error::Result;
use crate::record::{CommittedRecord, Offset};
use crate::stream::Stream;

/// Committed records of one partition in offset order, each once, waiting at the end for new
/// ones. Implements [`futures::Stream`]; after an error it yields nothing more. Holds at most
/// one read step (about 1 MiB of records) in memory.
pub struct Tail {
    /// The next record to yield.
    position: Offset,
    state: Option<TailState>,
    step: Option<BoxFuture<'static, (TailState, Result<()>)>>,
}

struct TailState {
    stream: Stream,
    partition: u32,
    /// The offset of the next record to yield.
    next: u64,
    buffered: VecDeque<CommittedRecord>,
}

impl Tail {
    pub(crate) fn new(stream: Stream, from: Offset) -> Tail {
        Tail {
            position: from,
            state: Some(TailState {
                stream,
                partition: from.partition,
                next: from.offset,
                buffered: VecDeque::new(),
            }),
            step: None,
        }
    }

    /// The offset of the next record this tail yields.
    pub fn next_offset(&self) -> Offset {
        self.position
    }
}

impl futures::Stream for Tail {
    type Item = Result<CommittedRecord>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(step) = self.step.as_mut() {
                let (state, outcome) = match step.poll_unpin(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(done) => done,
                };
                self.step = None;
                match outcome {
                    Ok(()) => self.state = Some(state),
                    // The tail ends (state dropped): nothing more after an error.
                    Err(e) => return Poll::Ready(Some(Err(e))),
                }
            }
            let Some(mut state) = self.state.take() else {
                return Poll::Ready(None);
            };
            if let Some(r) = state.buffered.pop_front() {
                debug_assert!(r.offset.offset >= state.next);
                state.next = r.offset.offset + 1;
                self.position = Offset::new(state.partition, state.next);
                self.state = Some(state);
                return Poll::Ready(Some(Ok(r)));
            }
            self.step = Some(
                async move {
                    let mut s = state;
                    let outcome = s
                        .stream
                        .poll_records(s.partition, s.next, &mut s.buffered)
                        .await
                        .map(|skip_to| {
                            // Nothing to yield below `skip_to` (batches without records
                            // for a reader, such as control batches).
                            if s.buffered.is_empty() {
                                s.next = s.next.max(skip_to);
                            }
                        });
                    (s, outcome)
                }
                .boxed(),
            );
        }
    }
}

impl std::fmt::Debug for Tail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tail")
            .field("next", &self.next_offset())
            .finish()
    }
}
