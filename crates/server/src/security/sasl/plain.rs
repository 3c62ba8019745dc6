//! PLAIN (RFC 4616): parsing `authzid NUL authcid NUL password` and checking the password.

use super::{CredentialLookup, MAX_TOKEN_BYTES};

pub(super) enum PlainError {
    /// Not a PLAIN message (Kafka's SaslException: the generic message).
    Malformed(String),
    /// Kafka's SaslAuthenticationException: this message is sent.
    Refused(String),
}

/// Checks a PLAIN message `authzid NUL authcid NUL password` and returns the user name.
pub(super) fn check_plain(
    token: &[u8],
    lookup: &dyn CredentialLookup,
) -> Result<String, PlainError> {
    let (user, password) = parse_plain(token)?;
    if lookup.password_matches(user, password) {
        Ok(user.to_string())
    } else {
        Err(PlainError::Refused(
            "Authentication failed: Invalid username or password".into(),
        ))
    }
}

/// The user name and password of a well-formed PLAIN message (the refusals Kafka sends for
/// the others).
pub(super) fn parse_plain(token: &[u8]) -> Result<(&str, &str), PlainError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(PlainError::Malformed("token too large".into()));
    }
    let text = std::str::from_utf8(token)
        .map_err(|_| PlainError::Malformed("the PLAIN message is not UTF-8".into()))?;
    let parts: Vec<&str> = text.split('\0').collect();
    let [authzid, user, password] = parts[..] else {
        return Err(PlainError::Malformed(format!(
            "Invalid SASL/PLAIN response: expected 3 tokens, got {}",
            parts.len()
        )));
    };
    if user.is_empty() {
        return Err(PlainError::Refused(
            "Authentication failed: username not specified".into(),
        ));
    }
    if password.is_empty() {
        return Err(PlainError::Refused(
            "Authentication failed: password not specified".into(),
        ));
    }
    if !authzid.is_empty() && authzid != user {
        return Err(PlainError::Refused(
            "Authentication failed: Client requested an authorization id that is different from username".into(),
        ));
    }
    Ok((user, password))
}
