//! Parsing and checking single values, with errors that name the key.

use std::net::SocketAddr;
use std::time::Duration;

use super::ConfigError;

pub(super) fn invalid<T>(key: &'static str, message: &str) -> Result<T, ConfigError> {
    Err(ConfigError::Invalid {
        key,
        message: message.to_owned(),
    })
}

pub(super) fn parse_addr(key: &'static str, s: &str) -> Result<SocketAddr, ConfigError> {
    s.parse().map_err(|_| ConfigError::Invalid {
        key,
        message: format!("`{s}` is not an IP:PORT socket address"),
    })
}

pub(super) fn addr(
    key: &'static str,
    v: Option<String>,
    default: SocketAddr,
) -> Result<SocketAddr, ConfigError> {
    match v {
        None => Ok(default),
        Some(s) => parse_addr(key, &s),
    }
}

pub(super) fn positive_ms(key: &'static str, v: u64) -> Result<Duration, ConfigError> {
    if v == 0 {
        return invalid(key, "must be positive");
    }
    Ok(Duration::from_millis(v))
}
