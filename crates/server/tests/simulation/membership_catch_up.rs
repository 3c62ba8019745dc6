//! A node down while its groups' membership changes, whose log retention then compacts past,
//! catches up from a snapshot whose configuration differs from the one it last applied (issue
//! 32 item 5). The peer guard refused such a snapshot before 2026-11-27 ("configuration
//! differs from the group's"), and the node never caught up.
//!
//! The simulated cluster of `world.rs` without random faults, with retention (2 KiB segments,
//! 6 KiB kept, leaders that hold nothing back): node 3 stops; every group is asked for voters
//! 1 and 2 (node 3 removed), then for all three again (node 3 added back as a learner, which
//! it cannot leave while down); clients append until every group's leader has compacted past
//! node 3's log. Node 3 then starts with its old configuration (three voters) and must be
//! promoted, hold the same committed entries and every acknowledged append within a bounded
//! number of steps.

use vdl_server::replication::raft_storage::read;

use crate::world::{SimOptions, World, GROUPS, NODES};
use crate::{check, sim_dir};

/// Steps in which each phase must finish.
const PHASE_STEPS_MAX: u64 = 20_000;
/// Steps after node 3 starts again in which every group must converge.
const CATCH_UP_STEPS_MAX: u64 = 1_000;

/// The leader of `group` among the running nodes (by its own view).
fn leader_of(w: &World, group: u64) -> Option<u64> {
    w.nodes.iter().filter(|n| n.up).find_map(|n| {
        let v = *n.groups[&group].visible.borrow();
        (v.leader == n.id).then_some(n.id)
    })
}

/// Whether `group`'s leader reports the asked voters reached, and they are `voters`.
fn settled_with(w: &World, group: u64, voters: &[u64]) -> bool {
    leader_of(w, group).is_some_and(|l| {
        let v = *w.nodes[(l - 1) as usize].groups[&group].visible.borrow();
        let ids: Vec<u64> = v.voters.iter().copied().filter(|id| *id != 0).collect();
        v.membership_settled && ids == voters
    })
}

/// Runs steps until `done`, at most [`PHASE_STEPS_MAX`]; panics naming `what` otherwise.
fn run_until(w: &mut World, clients: bool, what: &str, done: impl Fn(&World) -> bool) -> u64 {
    for step in 0..PHASE_STEPS_MAX {
        if done(w) {
            return step;
        }
        w.step_once(false, clients);
    }
    panic!(
        "{what}: not within {PHASE_STEPS_MAX} steps\n{}",
        w.describe()
    );
}

#[test]
fn a_node_away_during_a_membership_change_catches_up_from_a_snapshot() {
    let seed = 3001;
    let root = sim_dir(seed);
    let options = SimOptions {
        retention: true,
        ..SimOptions::default()
    };
    let mut w = World::new(seed, &root, options);
    let groups: Vec<u64> = (100..100 + GROUPS).collect();

    // A settled cluster with some data.
    for _ in 0..300 {
        w.step_once(false, true);
    }
    run_until(&mut w, false, "the first convergence", |w| {
        w.quiet() && w.converged()
    });

    // Node 3 stops; what its log holds is all it has when it comes back.
    let away_last: Vec<u64> = groups
        .iter()
        .map(|g| read(&w.nodes[2].groups[g].store).last_index())
        .collect();
    w.stop(3);

    // Node 3 removed, then asked back: it stays a learner while down.
    for g in &groups {
        w.set_voters(*g, vec![1, 2]);
    }
    run_until(&mut w, true, "node 3 removed from every group", |w| {
        (100..100 + GROUPS).all(|g| settled_with(w, g, &[1, 2]))
    });
    for g in &groups {
        w.set_voters(*g, NODES.to_vec());
    }
    // Appends until every leader's log starts after node 3's: only a snapshot, taken in a
    // configuration node 3 never applied, can bring it back.
    run_until(
        &mut w,
        true,
        "node 3 a learner, retention past its log",
        |w| {
            groups.iter().zip(&away_last).all(|(g, last)| {
                leader_of(w, *g).is_some_and(|l| {
                    let s = read(&w.nodes[(l - 1) as usize].groups[g].store);
                    let cs = s.conf_state();
                    s.first_index() > last + 1 && cs.voters.len() == 2 && cs.learners == [3]
                })
            })
        },
    );

    // Node 3 comes back with the configuration it last applied (three voters).
    w.start(3);
    let mut converged = false;
    let mut steps = 0;
    while steps < CATCH_UP_STEPS_MAX {
        w.step_once(false, false);
        steps += 1;
        if w.quiet() && w.converged() {
            converged = true;
            break;
        }
    }
    assert!(
        converged,
        "node 3, away while its groups' membership changed and compacted past by retention, \
         did not catch up within {CATCH_UP_STEPS_MAX} steps:\n{}",
        w.describe()
    );
    for (g, last) in groups.iter().zip(&away_last) {
        let s = read(&w.nodes[2].groups[g].store);
        assert!(
            s.first_index() > last + 1,
            "group {g}: node 3 caught up from a snapshot (its log starts at {})",
            s.first_index()
        );
    }
    // The same committed entries everywhere; every acknowledged append at its offset.
    check(seed, &w);
    eprintln!(
        "node 3 caught up in {steps} steps; {} acknowledged appends",
        w.acked.len()
    );
    drop(w);
    let _ = std::fs::remove_dir_all(&root);
}
