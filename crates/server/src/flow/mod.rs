//! Flow control: node-wide rate limits (VDL's six knobs: requests and bytes per second for
//! produce, catch-up reads and tail reads; plus catch-up replication between nodes) and Kafka's
//! client quotas (`producer_byte_rate`, `consumer_byte_rate`, `request_percentage` per user
//! and/or client id), all kept in the replicated metadata and applied at runtime on every node.
//!
//! - [`settings`]: what is enforced, as stored; Kafka's quota precedence.
//! - [`token_bucket`]: the rate each limit or quota allows.
//! - [`throttle`]: charging requests, the resulting throttle, a connection's mute.
//! - [`replication`]: the limit on catch-up replication between nodes.
//! - [`wire`]: how they are stored in the metadata log and snapshots (protobuf).

pub mod replication;
pub mod settings;
pub mod throttle;
pub mod token_bucket;
pub mod wire;
