//! Kafka wire protocol codec. No I/O.
