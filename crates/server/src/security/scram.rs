//! SCRAM credentials (RFC 5802, with the SHA-256 and SHA-512 hashes Kafka offers): what a
//! server stores for a user, and how it is derived.
//!
//! A server never stores a password. It stores, per user and mechanism, a random salt, the
//! iteration count, `StoredKey = H(HMAC(SaltedPassword, "Client Key"))` and
//! `ServerKey = HMAC(SaltedPassword, "Server Key")` where
//! `SaltedPassword = PBKDF2-HMAC-H(password, salt, iterations)`. StoredKey lets it check a
//! client's proof; ServerKey lets it prove to the client that it knows the credential.
//! Kafka's `AlterUserScramCredentials` sends the salt and SaltedPassword, never the password.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};

/// The SCRAM mechanisms served, as Kafka names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScramMechanism {
    /// `SCRAM-SHA-256` (Kafka's mechanism type 1).
    Sha256,
    /// `SCRAM-SHA-512` (Kafka's mechanism type 2).
    Sha512,
}

/// Most SCRAM credentials (user and mechanism pairs) a cluster holds: AlterUserScramCredentials
/// beyond it answers POLICY_VIOLATION, and a command that would pass it adds nothing more.
pub const MAX_CREDENTIALS: usize = 100_000;

/// Fewest iterations accepted for a credential (Kafka's minimum, 4096).
pub const MIN_ITERATIONS: u32 = 4096;
/// Most iterations accepted for a credential (Kafka's maximum, 16384).
pub const MAX_ITERATIONS: u32 = 16384;

impl ScramMechanism {
    /// Every mechanism, in Kafka's type order.
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha256, ScramMechanism::Sha512];

    /// The SASL mechanism name (`SCRAM-SHA-256`, `SCRAM-SHA-512`).
    pub fn sasl_name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// The mechanism of a SASL mechanism name, exactly as Kafka spells it.
    pub fn from_sasl_name(name: &str) -> Option<ScramMechanism> {
        ScramMechanism::ALL
            .into_iter()
            .find(|m| m.sasl_name() == name)
    }

    /// Kafka's numeric mechanism type in the SCRAM credential APIs (1, 2).
    pub fn kafka_type(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    /// The mechanism of Kafka's numeric type; `None` for 0 (UNKNOWN) and anything else.
    pub fn from_kafka_type(t: i8) -> Option<ScramMechanism> {
        ScramMechanism::ALL
            .into_iter()
            .find(|m| m.kafka_type() == t)
    }

    /// Length in bytes of the hash (and of every key and proof).
    pub fn hash_len(self) -> usize {
        match self {
            ScramMechanism::Sha256 => 32,
            ScramMechanism::Sha512 => 64,
        }
    }

    /// `H(data)`.
    pub fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramMechanism::Sha256 => Sha256::digest(data).to_vec(),
            ScramMechanism::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// `HMAC-H(key, data)`.
    pub fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            ScramMechanism::Sha256 => {
                let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key)
                    .expect("HMAC accepts keys of any length");
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
            ScramMechanism::Sha512 => {
                let mut mac = <Hmac<Sha512> as Mac>::new_from_slice(key)
                    .expect("HMAC accepts keys of any length");
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
        }
    }

    /// `SaltedPassword = Hi(password, salt, iterations)` (PBKDF2 with HMAC-H).
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0u8; self.hash_len()];
        match self {
            ScramMechanism::Sha256 => {
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out)
            }
            ScramMechanism::Sha512 => {
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out)
            }
        }
        out
    }
}

/// What the server stores for one user and mechanism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramCredential {
    /// The mechanism this credential is for.
    pub mechanism: ScramMechanism,
    /// The random salt.
    pub salt: Vec<u8>,
    /// The PBKDF2 iteration count.
    pub iterations: u32,
    /// `H(ClientKey)`: checks a client's proof.
    pub stored_key: Vec<u8>,
    /// `HMAC(SaltedPassword, "Server Key")`: signs the server's final message.
    pub server_key: Vec<u8>,
}

impl ScramCredential {
    /// The credential for a SaltedPassword computed elsewhere (what `AlterUserScramCredentials`
    /// carries).
    pub fn from_salted_password(
        mechanism: ScramMechanism,
        salt: Vec<u8>,
        iterations: u32,
        salted_password: &[u8],
    ) -> ScramCredential {
        let client_key = mechanism.hmac(salted_password, b"Client Key");
        ScramCredential {
            mechanism,
            salt,
            iterations,
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(salted_password, b"Server Key"),
        }
    }

    /// The credential for `password` with the given salt and iteration count.
    pub fn from_password(
        mechanism: ScramMechanism,
        password: &str,
        salt: Vec<u8>,
        iterations: u32,
    ) -> ScramCredential {
        let salted = mechanism.salted_password(password.as_bytes(), &salt, iterations);
        ScramCredential::from_salted_password(mechanism, salt, iterations, &salted)
    }

    /// The credential for `password` with a fresh random 32-byte salt.
    pub fn generate(mechanism: ScramMechanism, password: &str, iterations: u32) -> ScramCredential {
        use rand::RngCore;
        let mut salt = vec![0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut salt);
        ScramCredential::from_password(mechanism, password, salt, iterations)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::STANDARD as B64;
    use base64::Engine;

    /// RFC 7677 section 3: the SCRAM-SHA-256 exchange for user "user", password "pencil".
    #[test]
    fn rfc7677_server_signature_and_client_proof() {
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let cred = ScramCredential::from_password(ScramMechanism::Sha256, "pencil", salt, 4096);
        let client_first_bare = "n=user,r=rOprNGfwEbeRWgbNEkqO";
        let server_first = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                            s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let client_final_bare = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let auth_message = format!("{client_first_bare},{server_first},{client_final_bare}");
        let m = ScramMechanism::Sha256;
        let server_signature = m.hmac(&cred.server_key, auth_message.as_bytes());
        assert_eq!(
            B64.encode(server_signature),
            "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        // The server checks a proof by recovering ClientKey and hashing it.
        let proof = B64
            .decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
            .unwrap();
        let signature = m.hmac(&cred.stored_key, auth_message.as_bytes());
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
        assert_eq!(m.hash(&client_key), cred.stored_key);
    }

    #[test]
    fn mechanism_names_and_types_round_trip() {
        for m in ScramMechanism::ALL {
            assert_eq!(ScramMechanism::from_sasl_name(m.sasl_name()), Some(m));
            assert_eq!(ScramMechanism::from_kafka_type(m.kafka_type()), Some(m));
            assert_eq!(m.hash(b"x").len(), m.hash_len());
        }
        assert_eq!(ScramMechanism::from_sasl_name("scram-sha-256"), None);
        assert_eq!(ScramMechanism::from_kafka_type(0), None);
    }
}
