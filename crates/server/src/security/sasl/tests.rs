//! The SASL state machine end to end: SCRAM exchanges with both hashes, refusals, PLAIN,
//! handshakes and states, token bounds.

use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use kafka_proto::api::ApiKey;

use super::*;
use crate::security::config::SaslMechanism;

/// A SCRAM client, as RFC 5802 describes it, for the tests.
fn client_final(
    m: ScramMechanism,
    password: &str,
    client_first_bare: &str,
    server_first: &str,
) -> (String, Vec<u8>) {
    let mut salt = None;
    let mut iterations = 0;
    let mut nonce = "";
    for f in server_first.split(',') {
        if let Some(v) = f.strip_prefix("s=") {
            salt = Some(B64.decode(v).unwrap());
        } else if let Some(v) = f.strip_prefix("i=") {
            iterations = v.parse().unwrap();
        } else if let Some(v) = f.strip_prefix("r=") {
            nonce = v;
        }
    }
    let salted = m.salted_password(password.as_bytes(), &salt.unwrap(), iterations);
    let client_key = m.hmac(&salted, b"Client Key");
    let stored_key = m.hash(&client_key);
    let without_proof = format!("c=biws,r={nonce}");
    let auth = format!("{client_first_bare},{server_first},{without_proof}");
    let sig = m.hmac(&stored_key, auth.as_bytes());
    let proof: Vec<u8> = client_key.iter().zip(&sig).map(|(a, b)| a ^ b).collect();
    let server_key = m.hmac(&salted, b"Server Key");
    let expected_v = m.hmac(&server_key, auth.as_bytes());
    (
        format!("{without_proof},p={}", B64.encode(proof)),
        expected_v,
    )
}

fn users() -> impl Fn(&str, ScramMechanism) -> Option<ScramCredential> {
    let creds: Vec<(String, ScramCredential)> = ScramMechanism::ALL
        .into_iter()
        .map(|m| {
            (
                "alice".to_string(),
                ScramCredential::generate(m, "wonderland", 4096),
            )
        })
        .collect();
    move |user, m| {
        creds
            .iter()
            .find(|(u, c)| u == user && c.mechanism == m)
            .map(|(_, c)| c.clone())
    }
}

fn scram_session() -> SaslSession {
    SaslSession::new(
        vec![
            SaslMechanism::Scram(ScramMechanism::Sha256),
            SaslMechanism::Scram(ScramMechanism::Sha512),
            SaslMechanism::Plain,
        ],
        Some(Duration::from_secs(60)),
    )
}

fn scram_login(
    s: &mut SaslSession,
    lookup: &dyn CredentialLookup,
    m: ScramMechanism,
    password: &str,
    now: Instant,
) -> AuthStep {
    assert_eq!(s.handshake(m.sasl_name(), 1), HandshakeOutcome::Accepted);
    let first_bare = "n=alice,r=fyko+d2lbbFgONRv9qkxdawL";
    let AuthStep::Challenge(server_first) =
        s.authenticate(format!("n,,{first_bare}").as_bytes(), lookup, now)
    else {
        panic!("no challenge");
    };
    let server_first = String::from_utf8(server_first).unwrap();
    assert!(server_first.starts_with("r=fyko+d2lbbFgONRv9qkxdawL"));
    let (last, expected_v) = client_final(m, password, first_bare, &server_first);
    let step = s.authenticate(last.as_bytes(), lookup, now);
    if let AuthStep::Done { response, .. } = &step {
        assert_eq!(
            response,
            format!("v={}", B64.encode(expected_v)).as_bytes(),
            "server signature"
        );
    }
    step
}

#[test]
fn scram_exchange_authenticates_with_both_hashes() {
    let lookup = users();
    for m in ScramMechanism::ALL {
        let mut s = scram_session();
        let now = Instant::now();
        assert_eq!(s.gate(ApiKey::Metadata, now), Gate::Close);
        assert_eq!(s.gate(ApiKey::ApiVersions, now), Gate::Serve);
        match scram_login(&mut s, &lookup, m, "wonderland", now) {
            AuthStep::Done {
                principal,
                session_lifetime_ms,
                ..
            } => {
                assert_eq!(principal.to_string(), "User:alice");
                assert_eq!(session_lifetime_ms, 60_000);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(s.gate(ApiKey::Produce, now), Gate::Serve);
        // KIP-368: after the lifetime, the next request closes the connection unless it
        // re-authenticates; re-authentication renews the session.
        let later = now + Duration::from_secs(61);
        assert_eq!(s.gate(ApiKey::Produce, later), Gate::Close);
        assert_eq!(s.gate(ApiKey::SaslHandshake, later), Gate::Authenticate);
        assert!(matches!(
            scram_login(&mut s, &lookup, m, "wonderland", later),
            AuthStep::Done { .. }
        ));
        assert_eq!(s.gate(ApiKey::Produce, later), Gate::Serve);
    }
}

#[test]
fn scram_refuses_wrong_password_unknown_user_and_bad_messages() {
    let lookup = users();
    let now = Instant::now();
    let mut s = scram_session();
    match scram_login(&mut s, &lookup, ScramMechanism::Sha512, "wrong", now) {
        AuthStep::Failed(msg) => assert_eq!(
            msg,
            "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"
        ),
        other => panic!("{other:?}"),
    }
    // Nothing more is accepted after a failure.
    assert_eq!(
        s.authenticate(b"n,,n=alice,r=x", &lookup, now),
        AuthStep::IllegalState
    );
    assert_eq!(s.gate(ApiKey::Metadata, now), Gate::Close);
    for first in [
        &b"n,,n=bob,r=abc"[..],         // unknown user
        b"p=tls-unique,,n=alice,r=abc", // channel binding
        b"n,,n=al=ZZice,r=abc",         // bad saslname escape
        b"n,,r=abc",                    // no user
        b"n,,n=alice,r=a,tokenauth=true",
        b"\xff\xfe",
    ] {
        let mut s = scram_session();
        s.handshake("SCRAM-SHA-256", 1);
        assert!(
            matches!(s.authenticate(first, &lookup, now), AuthStep::Failed(_)),
            "{first:?}"
        );
    }
    let mut s = scram_session();
    s.handshake("SCRAM-SHA-256", 1);
    assert_eq!(
        s.authenticate(b"n,a=mallory,n=alice,r=abc", &lookup, now),
        AuthStep::Failed(
            "Authentication failed: Client requested an authorization id that is different from username".into()
        )
    );
    // A final message with another nonce is refused.
    let mut s = scram_session();
    s.handshake("SCRAM-SHA-256", 1);
    assert!(matches!(
        s.authenticate(b"n,,n=alice,r=abc", &lookup, now),
        AuthStep::Challenge(_)
    ));
    assert!(matches!(
        s.authenticate(b"c=biws,r=abcOTHER,p=AAAA", &lookup, now),
        AuthStep::Failed(_)
    ));
}

/// librdkafka puts its client nonce in front of the whole nonce in its final message;
/// Kafka only checks that the nonce ends with the server's, and so does this server.
#[test]
fn scram_accepts_librdkafkas_final_nonce() {
    let lookup = users();
    let m = ScramMechanism::Sha256;
    let mut s = scram_session();
    s.handshake(m.sasl_name(), 1);
    let first_bare = "n=alice,r=cnonce";
    let AuthStep::Challenge(server_first) = s.authenticate(
        format!("n,,{first_bare}").as_bytes(),
        &lookup,
        Instant::now(),
    ) else {
        panic!("no challenge");
    };
    let server_first = String::from_utf8(server_first).unwrap();
    let full_nonce = server_first
        .split(',')
        .next()
        .unwrap()
        .trim_start_matches("r=");
    let nonce = format!("cnonce{full_nonce}");
    let salted = m.salted_password(
        b"wonderland",
        &lookup("alice", m).unwrap().salt,
        lookup("alice", m).unwrap().iterations,
    );
    let client_key = m.hmac(&salted, b"Client Key");
    let without_proof = format!("c=biws,r={nonce}");
    let auth = format!("{first_bare},{server_first},{without_proof}");
    let sig = m.hmac(&m.hash(&client_key), auth.as_bytes());
    let proof: Vec<u8> = client_key.iter().zip(&sig).map(|(a, b)| a ^ b).collect();
    let last = format!("{without_proof},p={}", B64.encode(proof));
    assert!(matches!(
        s.authenticate(last.as_bytes(), &lookup, Instant::now()),
        AuthStep::Done { .. }
    ));
}

#[test]
fn plain_checks_the_password_against_the_scram_credential() {
    let lookup = users();
    let now = Instant::now();
    let mut s = scram_session();
    assert_eq!(s.handshake("PLAIN", 1), HandshakeOutcome::Accepted);
    assert!(matches!(
        s.authenticate(b"\0alice\0wonderland", &lookup, now),
        AuthStep::Done { .. }
    ));
    assert_eq!(s.principal().unwrap().to_string(), "User:alice");
    for (token, msg) in [
        (
            &b"\0alice\0nope"[..],
            "Authentication failed: Invalid username or password",
        ),
        (
            b"\0bob\0wonderland",
            "Authentication failed: Invalid username or password",
        ),
        (
            b"bob\0alice\0wonderland",
            "Authentication failed: Client requested an authorization id that is different from username",
        ),
        (
            b"alice-wonderland",
            "Authentication failed during authentication due to invalid credentials with SASL mechanism PLAIN",
        ),
    ] {
        let mut s = scram_session();
        s.handshake("PLAIN", 1);
        assert_eq!(
            s.authenticate(token, &lookup, now),
            AuthStep::Failed(msg.into())
        );
    }
}

#[test]
fn handshakes_and_states_follow_kafka() {
    let lookup = users();
    let now = Instant::now();
    let mut s = SaslSession::new(vec![SaslMechanism::Plain], None);
    assert_eq!(
        s.authenticate(b"\0alice\0wonderland", &lookup, now),
        AuthStep::IllegalState
    );
    let mut s = SaslSession::new(vec![SaslMechanism::Plain], None);
    assert_eq!(
        s.handshake("SCRAM-SHA-256", 1),
        HandshakeOutcome::Unsupported
    );
    let mut s = SaslSession::new(vec![SaslMechanism::Plain], None);
    assert_eq!(s.handshake("PLAIN", 0), HandshakeOutcome::Accepted);
    assert!(s.expects_raw_token());
    assert_eq!(s.handshake("PLAIN", 1), HandshakeOutcome::IllegalState);
    // Without connections_max_reauth the session never expires; the lifetime is 0.
    let mut s = SaslSession::new(vec![SaslMechanism::Plain], None);
    s.handshake("PLAIN", 1);
    match s.authenticate(b"\0alice\0wonderland", &lookup, now) {
        AuthStep::Done {
            session_lifetime_ms,
            ..
        } => assert_eq!(session_lifetime_ms, 0),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        s.gate(ApiKey::Fetch, now + Duration::from_secs(86_400)),
        Gate::Serve
    );
    // Re-authentication may not change the mechanism.
    let mut s = scram_session();
    s.handshake("PLAIN", 1);
    s.authenticate(b"\0alice\0wonderland", &lookup, now);
    assert_eq!(s.handshake("SCRAM-SHA-256", 1), HandshakeOutcome::Accepted);
    assert!(matches!(
        s.authenticate(b"n,,n=alice,r=abc", &lookup, now),
        AuthStep::Failed(_)
    ));
}

#[test]
fn oversized_tokens_are_refused_without_parsing() {
    let lookup = users();
    let big = vec![b'a'; MAX_TOKEN_BYTES + 1];
    for mech in ["PLAIN", "SCRAM-SHA-512"] {
        let mut s = scram_session();
        s.handshake(mech, 1);
        assert!(matches!(
            s.authenticate(&big, &lookup, Instant::now()),
            AuthStep::Failed(_)
        ));
    }
}
