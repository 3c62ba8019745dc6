//! The request and response types of vdl's admin HTTP API, one definition shared by the server
//! (which serializes them) and `vdlctl` (which deserializes them), and the API's version.
//!
//! One module per family of endpoints:
//! - [`cluster`]: `GET /cluster/status`;
//! - [`members`]: `GET /members`, `POST /members`, `DELETE /members/{id}`;
//! - [`rates`]: `GET /rates`, `PUT /rates` (the node-wide flow limits);
//! - [`leaders`]: `POST /partitions/{topic}/{partition}/leader`, `POST /leaders/balance`;
//! - [`segments`]: `GET /partitions/{topic}/{partition}/segments` and `.../segments/delete`.
//!
//! Every error answer (4xx/5xx) is an [`ErrorBody`].
//!
//! # Versioning
//!
//! Every admin answer carries the header [`VERSION_HEADER`] with the server's
//! [`ADMIN_API_VERSION`]. The version is a major version: it rises only when an answer
//! changes incompatibly (a field removed, renamed, retyped or given another meaning, an
//! endpoint removed). Adding a field or an endpoint does not raise it: readers tolerate
//! unknown fields (no response type denies them) and a field added later is
//! `#[serde(default)]` so that answers of older servers still parse. A client refuses an
//! answer whose version is newer than its own ([`check_version`]); an answer without the
//! header comes from a server older than the header, whose answers are version 1's.
//!
//! # Wire compatibility
//!
//! The JSON these types produce is byte for byte what the server answered before they
//! existed: fields are declared in the order they were written, which for answers the server
//! used to build as JSON maps is alphabetical (the `wire_bytes` tests pin it).

pub mod cluster;
pub mod leaders;
pub mod members;
pub mod rates;
pub mod segments;

use serde::{Deserialize, Serialize};

/// The admin API's major version (see the crate documentation, *Versioning*).
pub const ADMIN_API_VERSION: u32 = 1;

/// The response header carrying the server's [`ADMIN_API_VERSION`] on every admin answer.
pub const VERSION_HEADER: &str = "x-vdl-admin-api-version";

/// An error answer (any 4xx/5xx status): what went wrong, and for a request sent to a node
/// without the partition's replica (421) the leader when known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// A sentence saying what went wrong.
    pub error: String,
    /// The partition's leader, on a 421 from the stream endpoints (absent or null otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<u64>,
}

impl ErrorBody {
    /// An error answer saying `message`, without a leader.
    pub fn new(message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            error: message.into(),
            leader: None,
        }
    }
}

/// Why a client refuses an answer's API version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionError {
    /// The server speaks a newer major version than the client knows.
    Newer {
        /// The version the server reported.
        server: u32,
    },
    /// The header is not a whole number.
    Unreadable(String),
}

impl std::fmt::Display for VersionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VersionError::Newer { server } => write!(
                f,
                "the node speaks admin API version {server}, this client knows version \
                 {ADMIN_API_VERSION} at most: use a client of the node's release"
            ),
            VersionError::Unreadable(v) => {
                write!(
                    f,
                    "the node's {VERSION_HEADER} header `{v}` is not a version"
                )
            }
        }
    }
}

impl std::error::Error for VersionError {}

/// Checks the [`VERSION_HEADER`] of an answer (`None`: absent) against [`ADMIN_API_VERSION`]:
/// the server's version, or an error when it is newer than this client's or unreadable. An
/// absent header is version 1 (servers before the header).
pub fn check_version(header: Option<&str>) -> Result<u32, VersionError> {
    let Some(text) = header else {
        return Ok(1);
    };
    let server: u32 = text
        .trim()
        .parse()
        .map_err(|_| VersionError::Unreadable(text.to_owned()))?;
    if server > ADMIN_API_VERSION {
        return Err(VersionError::Newer { server });
    }
    Ok(server)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_up_to_ours_pass_and_newer_ones_are_refused() {
        assert_eq!(check_version(None), Ok(1));
        assert_eq!(check_version(Some("1")), Ok(1));
        assert_eq!(
            check_version(Some(&(ADMIN_API_VERSION + 1).to_string())),
            Err(VersionError::Newer {
                server: ADMIN_API_VERSION + 1
            })
        );
        let refused = check_version(Some("2")).unwrap_err().to_string();
        assert!(refused.contains("version 2"), "{refused}");
        assert!(matches!(
            check_version(Some("one")),
            Err(VersionError::Unreadable(_))
        ));
    }

    #[test]
    fn error_bodies_round_trip_and_read_a_null_leader() {
        let e = ErrorBody::new("no leader");
        let text = serde_json::to_string(&e).unwrap();
        assert_eq!(text, r#"{"error":"no leader"}"#);
        assert_eq!(serde_json::from_str::<ErrorBody>(&text).unwrap(), e);
        let with: ErrorBody =
            serde_json::from_str(r#"{"error":"not the leader","leader":2,"new":1}"#).unwrap();
        assert_eq!(with.leader, Some(2));
        let null: ErrorBody = serde_json::from_str(r#"{"error":"x","leader":null}"#).unwrap();
        assert_eq!(null.leader, None);
    }
}
