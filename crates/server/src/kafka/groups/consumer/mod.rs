//! Consumer groups of the consumer group protocol (KIP-848, Kafka 4's `group.protocol=consumer`):
//! the coordinator computes assignments with a server-side assignor ([`assignors`]) and members
//! converge to them by heartbeating (ConsumerGroupHeartbeat).

// Until the coordinator of this protocol calls the assignors.
#[allow(dead_code)]
pub(crate) mod assignors;
