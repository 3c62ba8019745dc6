//! The vdl server: Raft groups, peer transport, Kafka listener.
