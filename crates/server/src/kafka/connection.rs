//! What a request's handler knows about the connection it came on.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::flow::throttle::{ClientIdentity, Mute};
use crate::security::Principal;

/// The connection a request arrived on: fixed when the connection is accepted, except the
/// principal, which authentication (SASL) sets before any other request is served.
#[derive(Debug, Clone)]
pub struct ConnectionContext {
    /// The client's address.
    pub peer: SocketAddr,
    /// Who the client is: `User:ANONYMOUS` until (or without) authentication.
    pub principal: Principal,
    /// The name of the listener the client connected to (Kafka's listener name, `PLAINTEXT`
    /// for the single default listener); Metadata answers with that listener's addresses.
    pub listener_name: String,
    /// Until when the connection reads no further request (set by throttled requests).
    pub mute: Arc<Mute>,
}

impl ConnectionContext {
    /// A connection from `peer` on the listener `listener_name`, not authenticated.
    pub fn unauthenticated(peer: SocketAddr, listener_name: impl Into<String>) -> Self {
        ConnectionContext {
            peer,
            principal: Principal::anonymous(),
            listener_name: listener_name.into(),
            mute: Arc::new(Mute::default()),
        }
    }

    /// Who a request with client id `client_id` on this connection is charged to.
    pub fn client<'a>(&'a self, client_id: &'a str) -> ClientIdentity<'a> {
        ClientIdentity {
            user: &self.principal.name,
            client_id,
        }
    }
}
