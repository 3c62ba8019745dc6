//! Kafka field values converted the same way for every API: a request's `timeout_ms` as the
//! bounded wait of an admin request, and an advertised `HOST:PORT` as a response's host and
//! port fields.

use std::time::Duration;

/// Longest an admin request that waits for a metadata commit or an election (CreateTopics,
/// DeleteTopics, CreatePartitions, DeleteRecords, ElectLeaders) waits, whatever the client's
/// timeout says.
pub const MAX_ADMIN_TIMEOUT: Duration = Duration::from_secs(60);

/// Shortest wait [`admin_timeout`] gives, whatever the client's timeout says.
const MIN_ADMIN_TIMEOUT: Duration = Duration::from_millis(100);

/// The wait an admin request's `timeout_ms` field asks for, kept between 100 ms and
/// [`MAX_ADMIN_TIMEOUT`] (a negative value counts as 0, so as 100 ms).
pub fn admin_timeout(timeout_ms: i32) -> Duration {
    Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0))
        .clamp(MIN_ADMIN_TIMEOUT, MAX_ADMIN_TIMEOUT)
}

/// Splits an advertised `HOST:PORT` into a response's host and port fields: brackets of an
/// IPv6 host removed, port 9092 when missing or not a number.
pub fn split_host_port(addr: &str) -> (String, i32) {
    match addr.rsplit_once(':') {
        Some((h, p)) => (
            h.trim_matches(['[', ']']).to_owned(),
            p.parse().unwrap_or(9092),
        ),
        None => (addr.to_owned(), 9092),
    }
}
