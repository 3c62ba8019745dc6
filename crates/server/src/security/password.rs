//! Password checks against a user's SCRAM credentials: what SASL PLAIN on the Kafka port and
//! HTTP Basic on the admin API use (one secret per user; no password is stored anywhere).
//!
//! What it promises:
//! - **Off the runtime threads, bounded.** PBKDF2 (4096 to 16384 iterations, per mechanism)
//!   runs on tokio's blocking pool, at most [`MAX_CONCURRENT_CHECKS`] at a time in the whole
//!   process; at most [`MAX_PENDING_CHECKS`] checks may be running or waiting. A check beyond
//!   that fails at once with [`PasswordError::Busy`] (the caller refuses the login) instead of
//!   queueing without limit.
//! - **Equal cost for unknown users.** Every check runs exactly one SCRAM-SHA-256 and one
//!   SCRAM-SHA-512 derivation ([`plan`]): against the user's credential where it has one,
//!   otherwise against a dummy credential of that mechanism with the iteration count of the
//!   user's other credential, or [`DUMMY_ITERATIONS`] (Kafka's and `vdl scram-credential`'s
//!   default) for an unknown user. An unknown user therefore costs what a known user with
//!   default iterations costs. (A user whose credential has more iterations costs more; the
//!   iteration count is not secret: SCRAM's server-first message announces it.)
//! - **Rotation.** A password matches only when the user has at least one credential and it
//!   matches *every* credential the user has (SHA-256 and SHA-512). Changing one mechanism's
//!   credential (a password rotation done for one mechanism) stops the old password from
//!   working over PLAIN and Basic; until both are rotated to the same password, neither
//!   password works over PLAIN (SCRAM logins use the one credential of their mechanism).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crate::security::sasl::constant_time_eq;
use crate::security::scram::{ScramCredential, ScramMechanism};

/// Most password checks (each two PBKDF2 derivations) running at once in the process.
pub const MAX_CONCURRENT_CHECKS: usize = 2;
/// Most password checks running or waiting for a turn; one more fails with
/// [`PasswordError::Busy`].
pub const MAX_PENDING_CHECKS: usize = 64;
/// Iterations of the dummy credentials of an unknown user (Kafka's default, 4096).
pub const DUMMY_ITERATIONS: u32 = 4096;

/// Why a password could not be checked (the login is refused either way).
#[derive(Debug, thiserror::Error)]
pub enum PasswordError {
    /// [`MAX_PENDING_CHECKS`] checks are already running or waiting.
    #[error("too many password checks in progress (limit {0})")]
    Busy(usize),
    /// The blocking task running the check ended without an answer.
    #[error("the password check task failed: {0}")]
    Task(String),
}

/// One PBKDF2 derivation of a check: against `credential`, which is the user's own (`real`)
/// or a dummy standing in for a credential the user does not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Derivation {
    /// The credential derived against.
    pub credential: ScramCredential,
    /// Whether it is the user's (true) or a dummy (false).
    pub real: bool,
}

fn dummy(mechanism: ScramMechanism, iterations: u32) -> ScramCredential {
    // Fixed salt and keys: never compared for a result (real = false), only derived against.
    ScramCredential {
        mechanism,
        salt: b"vdl-dummy-credential-salt-000000".to_vec(),
        iterations,
        stored_key: vec![0; mechanism.hash_len()],
        server_key: vec![0; mechanism.hash_len()],
    }
}

/// The derivations a check of a user with credentials `sha256` and `sha512` runs: always one
/// per mechanism (SHA-256 first), dummies for what the user lacks (see the module
/// documentation).
pub fn plan(sha256: Option<ScramCredential>, sha512: Option<ScramCredential>) -> Vec<Derivation> {
    let fallback = sha256
        .as_ref()
        .or(sha512.as_ref())
        .map_or(DUMMY_ITERATIONS, |c| c.iterations);
    [
        (ScramMechanism::Sha256, sha256),
        (ScramMechanism::Sha512, sha512),
    ]
    .into_iter()
    .map(|(m, c)| match c {
        Some(credential) if credential.mechanism == m => Derivation {
            credential,
            real: true,
        },
        _ => Derivation {
            credential: dummy(m, fallback),
            real: false,
        },
    })
    .collect()
}

/// Runs every derivation of `plan` (none is skipped, whatever the earlier ones gave) and
/// answers whether `password` matches: at least one real credential, and every real one
/// matches. Blocking (PBKDF2): call it off the async runtime's threads.
pub fn check_blocking(plan: &[Derivation], password: &str) -> bool {
    let mut any_real = false;
    let mut all_match = true;
    for d in plan {
        let c = &d.credential;
        let derived =
            ScramCredential::from_password(c.mechanism, password, c.salt.clone(), c.iterations);
        let matched = constant_time_eq(&derived.stored_key, &c.stored_key);
        if d.real {
            any_real = true;
            all_match &= matched;
        }
    }
    any_real && all_match
}

/// The process-wide gate of password checks (the limits above).
#[derive(Debug)]
pub struct PasswordChecker {
    running: Arc<tokio::sync::Semaphore>,
    pending: Arc<AtomicUsize>,
    max_pending: usize,
}

struct PendingGuard(Arc<AtomicUsize>);

impl Drop for PendingGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl PasswordChecker {
    /// A gate running at most `max_concurrent` checks at once, with at most `max_pending`
    /// running or waiting.
    pub fn new(max_concurrent: usize, max_pending: usize) -> PasswordChecker {
        PasswordChecker {
            running: Arc::new(tokio::sync::Semaphore::new(max_concurrent.max(1))),
            pending: Arc::new(AtomicUsize::new(0)),
            max_pending: max_pending.max(1),
        }
    }

    /// The process-wide gate ([`MAX_CONCURRENT_CHECKS`], [`MAX_PENDING_CHECKS`]).
    pub fn global() -> &'static PasswordChecker {
        static GLOBAL: OnceLock<PasswordChecker> = OnceLock::new();
        GLOBAL.get_or_init(|| PasswordChecker::new(MAX_CONCURRENT_CHECKS, MAX_PENDING_CHECKS))
    }

    /// Checks `password` against the credentials `sha256` / `sha512` of a user (either may
    /// be absent, both for an unknown user) on the blocking pool: `Ok(true)` when it matches
    /// (the rules of [`check_blocking`]), `Err(Busy)` without any work when the gate is full.
    pub async fn verify(
        &self,
        sha256: Option<ScramCredential>,
        sha512: Option<ScramCredential>,
        password: String,
    ) -> Result<bool, PasswordError> {
        let before = self.pending.fetch_add(1, Ordering::AcqRel);
        let _guard = PendingGuard(self.pending.clone());
        if before >= self.max_pending {
            return Err(PasswordError::Busy(self.max_pending));
        }
        let permit = self
            .running
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| PasswordError::Task(e.to_string()))?;
        let plan = plan(sha256, sha512);
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            check_blocking(&plan, &password)
        })
        .await
        .map_err(|e| PasswordError::Task(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cred(m: ScramMechanism, password: &str, iterations: u32) -> ScramCredential {
        ScramCredential::generate(m, password, iterations)
    }

    fn shape(plan: &[Derivation]) -> Vec<(ScramMechanism, u32)> {
        plan.iter()
            .map(|d| (d.credential.mechanism, d.credential.iterations))
            .collect()
    }

    #[test]
    fn unknown_users_cost_the_derivations_a_known_user_costs() {
        let both = plan(
            Some(cred(ScramMechanism::Sha256, "pw", 4096)),
            Some(cred(ScramMechanism::Sha512, "pw", 4096)),
        );
        let only512 = plan(None, Some(cred(ScramMechanism::Sha512, "pw", 4096)));
        let unknown = plan(None, None);
        let expected = vec![
            (ScramMechanism::Sha256, 4096),
            (ScramMechanism::Sha512, 4096),
        ];
        assert_eq!(shape(&both), expected);
        assert_eq!(shape(&only512), expected);
        assert_eq!(shape(&unknown), expected);
        assert!(unknown.iter().all(|d| !d.real));
        assert_eq!(only512.iter().filter(|d| d.real).count(), 1);
        // A dummy takes the iterations of the user's other credential.
        let odd = plan(Some(cred(ScramMechanism::Sha256, "pw", 8192)), None);
        assert_eq!(
            shape(&odd),
            vec![
                (ScramMechanism::Sha256, 8192),
                (ScramMechanism::Sha512, 8192)
            ]
        );
    }

    #[test]
    fn a_password_must_match_every_credential_of_the_user() {
        let old256 = cred(ScramMechanism::Sha256, "old", 4096);
        let old512 = cred(ScramMechanism::Sha512, "old", 4096);
        let new512 = cred(ScramMechanism::Sha512, "new", 4096);
        assert!(check_blocking(
            &plan(Some(old256.clone()), Some(old512)),
            "old"
        ));
        // SHA-512 rotated, SHA-256 not: neither password passes PLAIN.
        let half = plan(Some(old256), Some(new512.clone()));
        assert!(!check_blocking(&half, "old"));
        assert!(!check_blocking(&half, "new"));
        // One mechanism only: its password.
        assert!(check_blocking(&plan(None, Some(new512.clone())), "new"));
        assert!(!check_blocking(&plan(None, Some(new512)), "old"));
        // Unknown users never match, whatever the password.
        assert!(!check_blocking(&plan(None, None), ""));
        assert!(!check_blocking(&plan(None, None), "pw"));
    }

    #[tokio::test]
    async fn a_full_gate_refuses_at_once() {
        let gate = Arc::new(PasswordChecker::new(1, 2));
        // Hold the only running slot so the next checks wait.
        let held = gate.running.clone().acquire_owned().await.unwrap();
        let c = cred(ScramMechanism::Sha512, "pw", 4096);
        let waiting: Vec<_> = (0..2)
            .map(|_| {
                let gate = gate.clone();
                let c = c.clone();
                tokio::spawn(async move { gate.verify(None, Some(c), "pw".into()).await })
            })
            .collect();
        // Let both register as pending (bounded wait).
        for _ in 0..200 {
            if gate.pending.load(Ordering::Acquire) == 2 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert_eq!(gate.pending.load(Ordering::Acquire), 2);
        assert!(matches!(
            gate.verify(None, Some(c.clone()), "pw".into()).await,
            Err(PasswordError::Busy(2))
        ));
        drop(held);
        for w in waiting {
            assert!(w.await.unwrap().unwrap());
        }
        assert_eq!(gate.pending.load(Ordering::Acquire), 0);
        assert!(gate.verify(None, Some(c), "pw".into()).await.unwrap());
    }
}
