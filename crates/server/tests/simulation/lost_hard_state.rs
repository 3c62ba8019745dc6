//! A replica whose `hardstate` file was damaged must not vote twice in one term (issue 32
//! item 7). Replica 3 of one real group (`new_group` over a real log store, opened as the
//! simulation opens it) is driven message by message: the scripted peers are raft-rs
//! messages written here, except node 1's answer to the replica's term query, which a real
//! group of node 1 gives.
//!
//! The story: node 3 voted for node 1 in term 5 (node 1 won with it). Node 3 stops and its
//! `hardstate` is damaged. It comes back while node 1 is cut off from it, and first hears
//! node 2, a leader of term 4 deposed meanwhile, which then campaigns for term 5. A vote for
//! node 2 in term 5 would give term 5 a second leader. The rule before 2026-11-27 took the
//! first leader heard (node 2, term 4) as the rebuilt vote and then granted that request.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use raft::prelude::{Message, MessageType};
use tokio::sync::mpsc;
use vdl_server::replication::group::{try_deliver, GroupInput};
use vdl_server::replication::raft_storage::read;
use vdl_server::replication::replicas::Directories;
use vdl_server::replication::transport::detached_sender;

use crate::common::bit_flip::flip;
use crate::open::open_group;
use crate::world::{SimGroup, SimOptions, NODES};

const GROUP: u64 = 100;
/// The term node 3 voted in before the damage.
const TERM: u64 = 5;

/// One real replica and what it sends, per destination.
struct Replica {
    group: SimGroup,
    outbox: HashMap<u64, mpsc::Receiver<(u64, Message)>>,
}

impl Replica {
    fn open(dir: &Path, node: u64) -> Replica {
        let dirs = Arc::new(Directories::open(dir).expect("directories"));
        let (sender, outbox) = detached_sender(node, &NODES);
        let group = open_group(dir, node, GROUP, sender, SimOptions::default(), &dirs);
        Replica { group, outbox }
    }

    /// Runs turns (ticking the first when `tick`) until no input is left.
    fn turns(&mut self, tick: bool) {
        let mut tick = tick;
        for _ in 0..16 {
            self.group.task.turn(tick);
            tick = false;
            if !self.group.task.has_input() {
                return;
            }
        }
    }

    /// Delivers `m` and runs the turns it causes.
    fn deliver(&mut self, m: Message) {
        assert!(try_deliver(&self.group.inbox, GroupInput::Raft(m)));
        self.turns(false);
    }

    /// Everything sent since the last call.
    fn sent(&mut self) -> Vec<Message> {
        let mut out = Vec::new();
        for peer in NODES {
            if let Some(rx) = self.outbox.get_mut(&peer) {
                while let Ok((_, m)) = rx.try_recv() {
                    out.push(m);
                }
            }
        }
        out
    }

    fn stop(mut self) {
        self.group.task.finish();
    }
}

fn message(kind: MessageType, from: u64, to: u64, term: u64) -> Message {
    let mut m = Message::default();
    m.set_msg_type(kind);
    m.from = from;
    m.to = to;
    m.term = term;
    m
}

/// A vote request from `from` in `term`, its log empty (as up to date as node 3's).
fn vote_request(from: u64, term: u64) -> Message {
    message(MessageType::MsgRequestVote, from, 3, term)
}

/// The answers to vote requests among `sent`: (to, term, granted).
fn votes(sent: &[Message]) -> Vec<(u64, u64, bool)> {
    sent.iter()
        .filter(|m| m.get_msg_type() == MessageType::MsgRequestVoteResponse)
        .map(|m| (m.to, m.term, !m.reject))
        .collect()
}

#[test]
fn a_replica_that_lost_its_hard_state_never_votes_twice_in_a_term() {
    // The simulated disk is the process's log-store file system, installed before any store
    // opens; these directories are not registered with it, so their files pass through.
    crate::disk::sim_fs();
    let root = tempfile::tempdir().unwrap();
    let dir3 = root.path().join("node3");
    std::fs::create_dir_all(&dir3).unwrap();

    // Before the damage: node 3 votes for node 1 in term 5, durably.
    let mut n3 = Replica::open(&dir3, 3);
    n3.deliver(vote_request(1, TERM));
    assert_eq!(votes(&n3.sent()), vec![(1, TERM, true)]);
    let hs = read(&n3.group.store).hard_state();
    assert_eq!((hs.term, hs.vote), (TERM, 1), "the vote is saved");
    n3.stop();

    // The damage: one bit of the hard state, while node 3 is down.
    flip(&dir3.join(format!("g{GROUP}")).join("hardstate"), 12);
    let mut n3 = Replica::open(&dir3, 3);
    assert!(
        read(&n3.group.store).hard_state_damage().is_some(),
        "the store reports the damaged hard state"
    );

    // Node 1 is cut off from node 3. Node 2, leader of term 4 before node 1 won term 5 and
    // cut off meanwhile, reaches node 3 first with a heartbeat of term 4.
    let mut hb = message(MessageType::MsgHeartbeat, 2, 3, TERM - 1);
    hb.commit = 0;
    n3.deliver(hb);
    let mut to_node1: Vec<Message> = n3.sent().into_iter().filter(|m| m.to == 1).collect();
    // Node 2 stops leading (check_quorum) and sends nothing for an election timeout: node 3's
    // leader lease runs out, as it must before it considers a candidate.
    for _ in 0..40 {
        n3.turns(true);
        to_node1.extend(n3.sent().into_iter().filter(|m| m.to == 1));
    }

    // Node 2 campaigns for term 5: node 3 voted in term 5 already and must not grant it.
    n3.deliver(vote_request(2, TERM));
    let granted: Vec<_> = votes(&n3.sent())
        .into_iter()
        .filter(|&(to, term, granted)| to == 2 && term == TERM && granted)
        .collect();
    assert!(
        granted.is_empty(),
        "node 3 voted for node 1 in term {TERM} before its hard state was damaged, and after \
         rebuilding it granted node 2 a vote in the same term: two leaders possible in term \
         {TERM} (hard state now {:?})",
        read(&n3.group.store).hard_state()
    );

    // Node 1 is reachable again and answers what node 3 asked it (a real group of node 1,
    // in term 5 since it won that election, answers). Having heard every other voter, node 3
    // takes the highest term heard with a vote that grants nothing.
    let dir1 = root.path().join("node1");
    std::fs::create_dir_all(&dir1).unwrap();
    {
        let mut store = logstore::LogStore::open(
            &dir1.join(format!("g{GROUP}")),
            logstore::StoreConfig::default(),
        )
        .unwrap();
        store
            .save_hard_state(&logstore::HardState {
                term: TERM,
                vote: 1,
                commit: 0,
            })
            .unwrap();
    }
    let mut n1 = Replica::open(&dir1, 1);
    assert!(
        !to_node1.is_empty(),
        "node 3 asks node 1, the voter it has not heard, for its term"
    );
    for m in to_node1 {
        n1.deliver(m);
    }
    for m in n1.sent().into_iter().filter(|m| m.to == 3) {
        n3.deliver(m);
    }
    let hs = read(&n3.group.store).hard_state();
    assert_eq!(
        (hs.term, hs.vote),
        (TERM, 3),
        "rebuilt: the highest term of the voters, with a vote that grants nothing"
    );
    assert!(
        !read(&n3.group.store).vote_unknown(),
        "the votes are known again (the marker is gone)"
    );

    // Term 5 is refused outright now; the next term is granted.
    n3.deliver(vote_request(2, TERM));
    assert_eq!(votes(&n3.sent()), vec![(2, TERM, false)]);
    n3.deliver(vote_request(2, TERM + 1));
    assert_eq!(votes(&n3.sent()), vec![(2, TERM + 1, true)]);
    n3.stop();
    n1.stop();
}
