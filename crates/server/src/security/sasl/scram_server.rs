//! [`ScramServer`]: the server side of one SCRAM-SHA-256/512 exchange (RFC 5802/7677).

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;

use super::{constant_time_eq, CredentialLookup, MAX_TOKEN_BYTES};
use crate::security::scram::{ScramCredential, ScramMechanism};

/// Why a SCRAM exchange failed.
#[derive(Debug)]
pub enum ScramError {
    /// Malformed messages, unknown user, wrong proof: Kafka's generic failure (the detail is
    /// for logs only).
    Invalid(String),
    /// A refusal whose message Kafka sends as is.
    Refused(String),
}

/// The server side of one SCRAM exchange (RFC 5802 as Kafka's `ScramSaslServer` runs it),
/// after the client's first message.
#[derive(Debug)]
pub struct ScramServer {
    pub(super) mechanism: ScramMechanism,
    user: String,
    credential: ScramCredential,
    gs2_header: String,
    nonce: String,
    client_first_bare: String,
    server_first: String,
}

/// `saslname` of RFC 5802: `=2C` is `,`, `=3D` is `=`, any other `=` is invalid.
fn decode_saslname(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i + 1..i + 3) {
            Some("2C") => out.push(','),
            Some("3D") => out.push('='),
            _ => return None,
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}

fn valid_nonce(n: &str) -> bool {
    !n.is_empty() && n.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

impl ScramServer {
    /// Reads the client's first message (`gs2-header client-first-bare`) and answers the
    /// server's first message (`r=nonce,s=salt,i=iterations`).
    pub fn first(
        mechanism: ScramMechanism,
        token: &[u8],
        lookup: &dyn CredentialLookup,
    ) -> Result<(ScramServer, Vec<u8>), ScramError> {
        let invalid = |why: &str| ScramError::Invalid(why.to_string());
        if token.len() > MAX_TOKEN_BYTES {
            return Err(invalid("client first message too large"));
        }
        let text = std::str::from_utf8(token).map_err(|_| invalid("not UTF-8"))?;
        // gs2-header: ("n" | "y") "," [ "a=" authzid ] ","; channel binding ("p=") is not
        // offered, as in Kafka.
        let (cbind, rest) = text
            .split_once(',')
            .ok_or_else(|| invalid("no gs2 header"))?;
        if cbind != "n" && cbind != "y" {
            return Err(invalid("channel binding is not supported"));
        }
        let (authz, bare) = rest
            .split_once(',')
            .ok_or_else(|| invalid("no gs2 header"))?;
        let authzid = match authz {
            "" => None,
            a => Some(
                a.strip_prefix("a=")
                    .and_then(decode_saslname)
                    .ok_or_else(|| invalid("bad authzid"))?,
            ),
        };
        let gs2_header = format!("{cbind},{authz},");
        let mut fields = bare.split(',');
        let user = fields
            .next()
            .and_then(|f| f.strip_prefix("n="))
            .and_then(decode_saslname)
            .filter(|u| !u.is_empty())
            .ok_or_else(|| invalid("bad user name"))?;
        let client_nonce = fields
            .next()
            .and_then(|f| f.strip_prefix("r="))
            .filter(|n| valid_nonce(n))
            .ok_or_else(|| invalid("bad nonce"))?;
        for ext in fields {
            let (key, value) = ext
                .split_once('=')
                .ok_or_else(|| invalid("bad extension"))?;
            if key == "tokenauth" && value.eq_ignore_ascii_case("true") {
                return Err(invalid("delegation tokens are not supported"));
            }
        }
        if let Some(a) = authzid {
            if a != user {
                return Err(ScramError::Refused(
                    "Authentication failed: Client requested an authorization id that is different from username".into(),
                ));
            }
        }
        let credential = lookup
            .credential(&user, mechanism)
            .ok_or_else(|| invalid("unknown user"))?;
        // Alphanumeric, as Kafka's: some clients (librdkafka) mis-read a nonce with `=`.
        let mut server_nonce = [0u8; 24];
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut server_nonce);
        let server_nonce: String = server_nonce.iter().map(|b| format!("{b:02x}")).collect();
        let nonce = format!("{client_nonce}{server_nonce}");
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(&credential.salt),
            credential.iterations
        );
        let challenge = server_first.clone().into_bytes();
        Ok((
            ScramServer {
                mechanism,
                user,
                credential,
                gs2_header,
                nonce,
                client_first_bare: bare.to_string(),
                server_first,
            },
            challenge,
        ))
    }

    /// Reads the client's final message (`c=...,r=...,p=proof`), checks the proof and answers
    /// the server's final message (`v=signature`) with the user name.
    pub fn last(self, token: &[u8]) -> Result<(String, Vec<u8>), ScramError> {
        let invalid = |why: &str| ScramError::Invalid(why.to_string());
        if token.len() > MAX_TOKEN_BYTES {
            return Err(invalid("client final message too large"));
        }
        let text = std::str::from_utf8(token).map_err(|_| invalid("not UTF-8"))?;
        let (without_proof, proof) = text.rsplit_once(",p=").ok_or_else(|| invalid("no proof"))?;
        let mut fields = without_proof.split(',');
        let channel = fields
            .next()
            .and_then(|f| f.strip_prefix("c="))
            .ok_or_else(|| invalid("no channel binding"))?;
        if B64.decode(channel).ok().as_deref() != Some(self.gs2_header.as_bytes()) {
            return Err(invalid("channel binding does not match the gs2 header"));
        }
        let nonce = fields
            .next()
            .and_then(|f| f.strip_prefix("r="))
            .ok_or_else(|| invalid("no nonce"))?;
        // Kafka checks that the nonce *ends with* the server's (client nonce + server
        // nonce), not that it equals it: librdkafka sends the client nonce once more in
        // front, and Kafka accepts it, so must we.
        if !nonce.ends_with(&self.nonce) {
            return Err(invalid("Invalid client nonce in the final client message."));
        }
        let proof = B64
            .decode(proof)
            .map_err(|_| invalid("proof is not base64"))?;
        let m = self.mechanism;
        if proof.len() != m.hash_len() {
            return Err(invalid("proof of the wrong length"));
        }
        let auth_message = format!(
            "{},{},{without_proof}",
            self.client_first_bare, self.server_first
        );
        let signature = m.hmac(&self.credential.stored_key, auth_message.as_bytes());
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
        if !constant_time_eq(&m.hash(&client_key), &self.credential.stored_key) {
            return Err(invalid("Invalid client credentials"));
        }
        let server_signature = m.hmac(&self.credential.server_key, auth_message.as_bytes());
        Ok((
            self.user,
            format!("v={}", B64.encode(server_signature)).into_bytes(),
        ))
    }
}
