//! How a handler answers its request: the [`Reply`] the listener writes back, and the one place
//! that encodes a response (header and body, at the request's version) into its frame.
//!
//! A handler builds its response body and hands it to [`now`] (ready at once) or [`later`] (a
//! future that yields it); both encode it with [`frame`], so every API's answer is framed the
//! same way and an encoding failure is handled the same way (logged, connection closed).

use std::future::Future;

use bytes::Bytes;
use futures::future::BoxFuture;
use kafka_proto::frame::{encode_response, Response};

/// What to send back for a request.
pub enum Reply {
    /// The response frame, ready now.
    Now(Vec<Bytes>),
    /// A response frame that will be ready later (awaiting commit, long-poll fetch).
    Later(BoxFuture<'static, Option<Vec<Bytes>>>),
    /// A produce response that a worker may write to the socket itself
    /// ([`crate::kafka::direct_answer`]): what is left for the task to write, and when the
    /// worker wrote the whole response (None: it did not).
    Direct(BoxFuture<'static, (Option<Vec<Bytes>>, Option<std::time::Instant>)>),
    /// No response at all (produce with acks=0).
    None,
    /// The request cannot be served: answer what is owed for earlier requests, then close the
    /// connection (what Kafka does with a request it cannot handle).
    Close,
}

/// Encodes a response frame; an encoding failure is a bug in building the response (every
/// value comes from this server), logged, and the connection gets no answer for it.
pub fn frame(correlation_id: i32, version: i16, response: &Response) -> Option<Vec<Bytes>> {
    match encode_response(correlation_id, version, response) {
        Ok(segments) => Some(segments),
        Err(e) => {
            tracing::error!(
                "cannot encode a {:?} v{version} response: {e}",
                response.api_key()
            );
            None
        }
    }
}

/// The reply to request `correlation_id` sent at `version`, with `response` ready now: its
/// frame, or [`Reply::Close`] if it cannot be encoded.
pub fn now(correlation_id: i32, version: i16, response: Response) -> Reply {
    match frame(correlation_id, version, &response) {
        Some(segments) => Reply::Now(segments),
        None => Reply::Close,
    }
}

/// The reply to request `correlation_id` sent at `version`, with the response that `response`
/// yields: framed when it is ready (no answer if it cannot be encoded).
pub fn later(
    correlation_id: i32,
    version: i16,
    response: impl Future<Output = Response> + Send + 'static,
) -> Reply {
    Reply::Later(Box::pin(async move {
        frame(correlation_id, version, &response.await)
    }))
}
