//! The simulated cluster: nodes hosting the real Raft groups on real log stores (on the
//! simulated disks of [`crate::disk`]), the network between them, the clients, and the faults.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use raft::prelude::Message;
use tokio::sync::{mpsc, oneshot, watch};
use vdl_server::replication::group::{
    try_deliver, AppendError, AppendReply, Appended, DurableCopies, GroupInput, Proposal,
    ProposalData, Visible,
};
use vdl_server::replication::raft_storage::SharedStore;
use vdl_server::replication::replicas::{Directories, HelloOutcome};
use vdl_server::replication::transport::detached_sender;
use vdl_server::runtime::inbox::InboxSender;
use vdl_server::runtime::{Next, Task};

use vdl_server::metadata::{MetaCommand, MetaEntry, RequestId, METADATA_GROUP_ID};

use crate::disk::{power_cut, sim_fs, CutReport, SimCrash};
use crate::open::{open_group, open_metadata_group, SimMeta};
use crate::rng::Rng;
use crate::topics::SimPartition;
use vdl_server::core::catalog::Catalog;
use vdl_server::core::data_dir::DataDir;
use vdl_server::replication::transport::PeerSender;

pub const NODES: [u64; 3] = [1, 2, 3];
/// Raft groups per node (group ids 100, 101, ...).
pub const GROUPS: u64 = 10;
/// Every group a node hosts: the metadata group, then the stream groups.
pub fn all_groups() -> Vec<u64> {
    std::iter::once(METADATA_GROUP_ID)
        .chain((0..GROUPS).map(|g| 100 + g))
        .collect()
}
/// A node's clock ticks every this many steps (when it does not skip).
const STEPS_PER_TICK: u64 = 2;
/// A power cut armed on a node strikes at one of its next this many fsyncs.
const POWER_CUT_WITHIN_SYNCS: u64 = 40;

/// What a run exercises beyond elections, message faults and crashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SimOptions {
    /// Small segments and a byte limit, retention at every turn, and leaders that wait for
    /// no replica: followers that fall behind (down, cut off) catch up from snapshots, and
    /// the checks hold across different log starts.
    pub retention: bool,
    /// Disks replaced: a node's directory wiped while it is down.
    pub disk_replacements: bool,
    /// Membership changes: a group asked for two voters, then all three again.
    pub membership: bool,
    /// Compacted groups with cleaner passes at random steps (see [`crate::cleaning`]).
    pub compaction: bool,
    /// Clients also delete topics (of the incarnation they see) and create topics again
    /// under deleted names (new incarnations).
    pub topic_deletes: bool,
    /// Topics placed on two of the three nodes, and a member removed through the metadata
    /// (`RemoveMember`) once the faults stop, while clients append: the partitions it held
    /// are reassigned through the core (see [`crate::membership_removal`]).
    pub member_removal: bool,
    /// Prints every message of this group delivered from this step on (`SIM_TRACE=group:step`),
    /// to stderr: how a failing seed is diagnosed.
    pub trace: Option<(u64, u64)>,
}

pub struct SimGroup {
    pub task: Box<dyn Task>,
    pub inbox: InboxSender<GroupInput>,
    pub store: SharedStore,
    pub visible: watch::Receiver<Visible>,
    /// What the group publishes of its log's durable copies when it leads.
    pub durable_copies: watch::Receiver<DurableCopies>,
    /// The metadata group's state machine state (None for a stream group).
    pub meta: Option<SimMeta>,
}

pub struct SimNode {
    pub id: u64,
    pub dir: PathBuf,
    pub(crate) options: SimOptions,
    pub up: bool,
    /// Steps until a node that is down starts again.
    down_for: u64,
    pub groups: BTreeMap<u64, SimGroup>,
    /// The data directory's identity and the node's rejoin mode (the real node's, shared by
    /// its groups); None while down.
    pub(crate) dirs: Option<Arc<Directories>>,
    /// Per destination, in node order (iteration order is part of the run).
    outbox: BTreeMap<u64, mpsc::Receiver<(u64, Message)>>,
    /// The node's sending side (None while down), for the partitions opened later.
    pub(crate) sender: Option<PeerSender>,
    /// The core's catalog of the topic partitions open here (their groups are in `groups`).
    pub catalog: Catalog<SimPartition>,
    /// The core's layout of the node's directory.
    pub data_dir: DataDir,
}

struct InFlight {
    due: u64,
    from: u64,
    to: u64,
    group: u64,
    msg: Message,
}

/// What a client waits for.
enum Waiting {
    /// An append of `value` to stream group `group`.
    Records { group: u64, value: Vec<u8> },
    /// An append of keyed `records` to compacted group `group`.
    Keyed {
        group: u64,
        records: Vec<crate::cleaning::Record>,
    },
    /// A metadata command, stored with request id `request`.
    Meta { entry: MetaEntry, retries_left: u8 },
}

struct Pending {
    what: Waiting,
    reply: oneshot::Receiver<Result<Appended, AppendError>>,
}

/// A metadata command acknowledged to its client.
#[derive(Debug, Clone)]
pub struct AckedMeta {
    /// The request id it was stored with.
    pub request: RequestId,
    /// What it was.
    pub command: MetaCommand,
}

/// Faults injected in a run.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FaultCounts {
    /// Nodes or links cut off.
    pub cuts: u64,
    /// Crashes between turns.
    pub crashes: u64,
    /// Crashes at an fsync, in the middle of a turn (power cuts).
    pub power_cuts: u64,
    /// Disks replaced (a node's directory wiped while it is down).
    pub disk_replacements: u64,
    /// Voter sets asked of a group (one voter removed, or all three again).
    pub membership_changes: u64,
    /// Metadata commands sent again with the same request id after an attempt failed.
    pub metadata_retries: u64,
    /// What the crashes did to the files (summed).
    pub disk: CutReport,
}

impl SimNode {
    /// Starts the node as the server does: its directory identity, then its groups, each told
    /// the voters it should have (the real node has them from the replicated metadata).
    /// This node's liveness reports `peer` down: every group here hears it.
    fn report_down(&self, peer: u64) {
        crate::open::node_liveness(self.id).mark_down(peer);
        for g in self.groups.values() {
            try_deliver(&g.inbox, GroupInput::PeerDown(peer));
        }
    }

    /// This node hears `peer` again (a connection came up): if it was reported down, every
    /// group here hears it is back, as the real node's router tells them.
    fn heard_again(&self, peer: u64) {
        if self.up && crate::open::node_liveness(self.id).heard(peer) {
            for g in self.groups.values() {
                try_deliver(&g.inbox, GroupInput::PeerUp(peer));
            }
        }
    }

    fn start(&mut self, targets: &BTreeMap<u64, Vec<u64>>) {
        // A started process hears from every peer anew.
        crate::open::reset_node_liveness(self.id);
        let dirs = Arc::new(Directories::open(&self.dir).expect("directories"));
        let (sender, outbox) = detached_sender(self.id, &NODES);
        self.outbox = outbox.into_iter().collect();
        let metadata = open_metadata_group(&self.dir, self.id, sender.clone(), self.options, &dirs);
        self.groups = (0..GROUPS)
            .map(|g| {
                let sg = open_group(
                    &self.dir,
                    self.id,
                    100 + g,
                    sender.clone(),
                    self.options,
                    &dirs,
                );
                if let Some(t) = targets.get(&(100 + g)) {
                    try_deliver(&sg.inbox, GroupInput::SetVoters(t.clone()));
                }
                (100 + g, sg)
            })
            .collect();
        self.groups.insert(METADATA_GROUP_ID, metadata);
        self.dirs = Some(dirs);
        self.sender = Some(sender);
        self.catalog = Catalog::new();
        self.up = true;
        // As the node after loading its metadata snapshot: through the core, what is left of
        // incarnations it deleted goes, and the topics it holds are opened (the replay of the
        // log after it opens the rest).
        let snapshot_index = self.groups[&METADATA_GROUP_ID]
            .visible
            .borrow()
            .applied_index;
        if let Some(mut host) = self.partitions_host() {
            host.bring_in_line(snapshot_index, false);
        }
    }

    /// Whether the node is rejoining after a replaced disk (grants no votes yet).
    pub fn rejoining(&self) -> bool {
        self.dirs.as_ref().is_some_and(|d| d.rejoin().is_active())
    }
}

pub struct World {
    pub(crate) rng: Rng,
    pub(crate) options: SimOptions,
    pub nodes: Vec<SimNode>,
    /// Nodes cut off from every other node (both directions).
    isolated: HashSet<u64>,
    /// Single links cut (both directions), lower id first: with one link cut, the third node
    /// still sees both ends (the "bridge" shape).
    cut_links: HashSet<(u64, u64)>,
    /// Per mille of messages lost.
    loss: u64,
    /// Largest delivery delay in steps (delays reorder messages).
    max_delay: u64,
    net: Vec<InFlight>,
    pub(crate) step: u64,
    pending: Vec<Pending>,
    pub acked: Vec<(u64, Appended, Vec<u8>)>,
    /// Metadata commands acknowledged.
    pub acked_meta: Vec<AckedMeta>,
    pub(crate) next_value: u64,
    /// Sequence numbers of metadata request ids.
    pub(crate) next_request: u64,
    pub faults: FaultCounts,
    /// Pairs of nodes connected (lower id first): a connection starts with both hellos,
    /// which carry the directory ids (see `vdl_server::replication::replicas`).
    connected: BTreeSet<(u64, u64)>,
    /// The voters each group is asked to have.
    targets: BTreeMap<u64, Vec<u64>>,
    /// A node whose disk was replaced and that has not ended rejoin mode yet (down or up).
    replacing: Option<u64>,
    /// The compacted groups' cleaner passes and committed records.
    pub cleaning: crate::cleaning::Cleaning,
    /// Topic names a `DeleteTopic` was sent for (their acknowledged creates may be gone), in
    /// the order first sent.
    pub deleted_names: Vec<String>,
    /// Creates sent under a name a delete was sent for before (new incarnations).
    pub recreates_sent: u64,
    /// The member a `RemoveMember` was sent for (new topics are then placed without it).
    pub removed: Option<u64>,
    /// The groups of the partitions the removed member had open when it was removed.
    pub moved_groups: Vec<u64>,
    /// `FinishReassignment` commands the nodes proposed.
    pub finish_sent: u64,
    /// Appends acknowledged when the removal was sent.
    pub acked_before_removal: usize,
    /// Cut-offs, crashes and power cuts in the first steps of the move.
    pub faults_during_move: (u64, u64, u64),
}

impl World {
    pub fn new(seed: u64, root: &Path, options: SimOptions) -> World {
        let fs = sim_fs();
        // The metadata group keeps its three voters (the node changes them only when members
        // are added or removed, which needs a fourth node).
        let targets: BTreeMap<u64, Vec<u64>> = all_groups()
            .into_iter()
            .map(|g| (g, NODES.to_vec()))
            .collect();
        let nodes = NODES
            .iter()
            .map(|&id| {
                let dir = root.join(format!("node{id}"));
                std::fs::create_dir_all(&dir).unwrap();
                fs.register(&dir);
                let mut n = SimNode {
                    id,
                    dir: dir.clone(),
                    options,
                    up: false,
                    down_for: 0,
                    groups: BTreeMap::new(),
                    dirs: None,
                    outbox: BTreeMap::new(),
                    sender: None,
                    catalog: Catalog::new(),
                    data_dir: DataDir::new(&dir),
                };
                n.start(&targets);
                n
            })
            .collect();
        World {
            rng: Rng(seed),
            options,
            nodes,
            isolated: HashSet::new(),
            cut_links: HashSet::new(),
            loss: 0,
            max_delay: 1,
            net: Vec::new(),
            step: 0,
            pending: Vec::new(),
            acked: Vec::new(),
            acked_meta: Vec::new(),
            next_value: 0,
            next_request: 0,
            faults: FaultCounts::default(),
            connected: BTreeSet::new(),
            targets,
            replacing: None,
            cleaning: Default::default(),
            deleted_names: Vec::new(),
            recreates_sent: 0,
            removed: None,
            moved_groups: Vec::new(),
            finish_sent: 0,
            acked_before_removal: 0,
            faults_during_move: (0, 0, 0),
        }
    }

    fn link_up(&self, a: u64, b: u64) -> bool {
        !self.isolated.contains(&a)
            && !self.isolated.contains(&b)
            && !self.cut_links.contains(&(a.min(b), a.max(b)))
    }

    /// Node liveness, as the real node's pings report it: every group on `to` hears that
    /// `peer` went silent (so a quiesced group fails over).
    fn report_down(&mut self, peer: u64) {
        for n in self.nodes.iter().filter(|n| n.up && n.id != peer) {
            n.report_down(peer);
        }
    }

    /// Stops node `i` as a crash does: its groups are dropped as they stand (no shutdown),
    /// and its disk loses what was not fsynced as a power cut does (see [`crate::disk`]).
    pub(crate) fn crash(&mut self, i: usize, down_for: u64) {
        self.cleaning.node_crashed(self.nodes[i].id);
        let node = &mut self.nodes[i];
        node.groups.clear();
        node.catalog.clear();
        node.dirs = None;
        node.sender = None;
        node.outbox.clear();
        node.up = false;
        node.down_for = down_for;
        let unsynced = sim_fs().take_crash(&node.dir);
        let cut = power_cut(&node.dir, unsynced, &mut self.rng).expect("a power cut");
        let d = &mut self.faults.disk;
        d.unsynced_sectors += cut.unsynced_sectors;
        d.lost_sectors += cut.lost_sectors;
        d.out_of_order_files += cut.out_of_order_files;
        d.index_files_hit += cut.index_files_hit;
        let id = node.id;
        self.connected.retain(|&(a, b)| a != id && b != id);
        self.report_down(id);
    }

    /// Crashes node `id` (as [`World::crash`]) and keeps it down until [`World::start`].
    pub fn stop(&mut self, id: u64) {
        self.crash((id - 1) as usize, u64::MAX);
    }

    /// Starts node `id`, down since [`World::stop`], over what its disk kept.
    pub fn start(&mut self, id: u64) {
        let node = &mut self.nodes[(id - 1) as usize];
        assert!(!node.up, "node {id} is running");
        node.start(&self.targets);
    }

    /// Connections come and go with nodes and links; each new one starts with both nodes'
    /// hellos, as the real transport's: a node that comes back with a new data directory is
    /// noticed (its peers' leaders send its log again) and learns it is rejoining.
    fn update_connections(&mut self) {
        for a in NODES {
            for b in NODES.iter().copied().filter(|b| *b > a) {
                let up = self.nodes[(a - 1) as usize].up && self.nodes[(b - 1) as usize].up;
                if !up || !self.link_up(a, b) {
                    self.connected.remove(&(a, b));
                } else if self.connected.insert((a, b)) {
                    // Each end hears the other's pings again.
                    self.nodes[(a - 1) as usize].heard_again(b);
                    self.nodes[(b - 1) as usize].heard_again(a);
                    self.hello(a, b);
                    self.hello(b, a);
                }
            }
        }
        // A rejoining node whose groups all caught up ends rejoin mode and reconnects, so
        // its peers hear that it is settled (the real node's `settle_rejoin`).
        for n in &self.nodes {
            // Every group the node hosts, its topic partitions' too (the node's registry).
            let groups: Vec<u64> = n.groups.keys().copied().collect();
            if n.up && n.dirs.as_ref().is_some_and(|d| d.maybe_settle(&groups)) {
                let id = n.id;
                self.connected.retain(|&(a, b)| a != id && b != id);
                if self.replacing == Some(id) {
                    self.replacing = None;
                }
            }
        }
    }

    /// Node `to` takes node `from`'s hello.
    fn hello(&mut self, from: u64, to: u64) {
        let (Some(sender), Some(receiver)) = (
            self.nodes[(from - 1) as usize].dirs.clone(),
            self.nodes[(to - 1) as usize].dirs.clone(),
        ) else {
            return;
        };
        let hello = sender.hello_for(to);
        // Recording the peer's directory is an fsynced write: a power cut may strike there.
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| receiver.on_hello(from, hello)));
        match outcome {
            Ok(HelloOutcome::PeerReplaced) => {
                for g in self.nodes[(to - 1) as usize].groups.values() {
                    try_deliver(&g.inbox, GroupInput::PeerReplaced(from));
                }
            }
            Ok(HelloOutcome::Nothing) => {}
            Err(p) if p.downcast_ref::<SimCrash>().is_some() => {
                let down_for = 20 + self.rng.below(200);
                self.crash((to - 1) as usize, down_for);
                self.faults.power_cuts += 1;
            }
            Err(p) => std::panic::resume_unwind(p),
        }
    }

    /// Asks every running replica of `group` for the voters `voters` (the leader acts).
    pub fn set_voters(&mut self, group: u64, voters: Vec<u64>) {
        for n in self.nodes.iter().filter(|n| n.up) {
            if let Some(g) = n.groups.get(&group) {
                try_deliver(&g.inbox, GroupInput::SetVoters(voters.clone()));
            }
        }
        self.targets.insert(group, voters);
    }

    fn inject_faults(&mut self) {
        if !self.rng.chance(10) {
            return;
        }
        let victim = NODES[self.rng.below(3) as usize];
        let all_up = self.nodes.iter().all(|n| n.up);
        let calm = all_up && !self.power_cut_armed() && self.replacing.is_none();
        match self.rng.below(11) {
            0 => {
                // Cut one node off (never two: a majority stays connected).
                self.isolated.clear();
                self.isolated.insert(victim);
                self.faults.cuts += 1;
                self.report_down(victim);
                // ...and the cut-off node's liveness reports every other node silent.
                if let Some(n) = self.nodes.iter().find(|n| n.id == victim && n.up) {
                    for peer in NODES.iter().filter(|p| **p != victim) {
                        n.report_down(*peer);
                    }
                }
            }
            1 => {
                self.isolated.clear();
                self.cut_links.clear();
            }
            5 => {
                // Cut the link between the victim and one other node: each end's liveness
                // reports the other silent; the third node still reaches both.
                let other = NODES[((victim - 1 + 1 + self.rng.below(2)) % 3) as usize];
                self.cut_links
                    .insert((victim.min(other), victim.max(other)));
                self.faults.cuts += 1;
                for (from, silent) in [(victim, other), (other, victim)] {
                    if let Some(n) = self.nodes.iter().find(|n| n.id == from && n.up) {
                        n.report_down(silent);
                    }
                }
            }
            2 => {
                // A crash between turns (one node down at a time).
                if all_up && !self.power_cut_armed() {
                    let down_for = 20 + self.rng.below(200);
                    self.crash((victim - 1) as usize, down_for);
                    self.faults.crashes += 1;
                }
            }
            6 | 9 => {
                // A power cut at one of the victim's next fsyncs, in the middle of a turn:
                // what it wrote since its last fsync is lost, torn or kept out of order.
                if all_up && !self.power_cut_armed() {
                    let syncs = 1 + self.rng.below(POWER_CUT_WITHIN_SYNCS);
                    sim_fs().arm(&self.nodes[(victim - 1) as usize].dir, syncs);
                }
            }
            7 | 10 => {
                // A replaced disk: the node stops, its directory is wiped, and it starts again
                // empty with a new directory id. Never while another node is rejoining (two
                // lost disks out of three lose data, whatever the software does), nor while a
                // group has two voters (one lost disk of two is the same).
                if self.options.disk_replacements && calm && self.replaceable(victim) {
                    let i = (victim - 1) as usize;
                    let down_for = 20 + self.rng.below(200);
                    self.crash(i, down_for);
                    let dir = self.nodes[i].dir.clone();
                    std::fs::remove_dir_all(&dir).expect("wipe a data directory");
                    std::fs::create_dir_all(&dir).expect("a new data directory");
                    sim_fs().register(&dir);
                    self.faults.disk_replacements += 1;
                    self.replacing = Some(victim);
                }
            }
            8 if self.options.membership => {
                // A membership change of one group: one voter removed, or all three again,
                // also while a replaced disk rejoins (a group of two voters, one of them
                // rejoining, elects the other: see `rejoin_allows` in group.rs).
                let g = 100 + self.rng.below(GROUPS);
                let voters = if self.targets[&g].len() == NODES.len() {
                    NODES.iter().copied().filter(|n| *n != victim).collect()
                } else {
                    NODES.to_vec()
                };
                self.set_voters(g, voters);
                self.faults.membership_changes += 1;
            }
            3 => self.loss = [0, 20, 100][self.rng.below(3) as usize],
            _ => self.max_delay = 1 + self.rng.below(8),
        }
    }

    /// Whether `node`'s disk may be replaced: every group has a leader whose configuration is
    /// the one asked, with three voters or without `node`.
    fn replaceable(&self, node: u64) -> bool {
        let every_voter = NODES.to_vec();
        self.groups_of_cluster().into_iter().all(|g| {
            let target = self.targets.get(&g).unwrap_or(&every_voter);
            (target.len() == NODES.len() || !target.contains(&node))
                && self.nodes.iter().any(|n| {
                    n.groups.get(&g).is_some_and(|sg| {
                        let v = *sg.visible.borrow();
                        let voters: Vec<u64> =
                            v.voters.iter().copied().filter(|id| *id != 0).collect();
                        v.leader == n.id && v.membership_settled && voters == *target
                    })
                })
        })
    }

    fn power_cut_armed(&self) -> bool {
        self.nodes.iter().any(|n| sim_fs().armed(&n.dir))
    }

    /// Disarms a power cut that has not struck (when the faults stop).
    pub fn disarm(&mut self) {
        for n in &self.nodes {
            sim_fs().disarm(&n.dir);
        }
    }

    /// A client's append to one group: usually one small value, sometimes a burst of several
    /// (one Ready, one write of many frames across sectors) and sometimes larger ones.
    fn propose(&mut self) {
        if self.rng.chance(120) {
            self.propose_metadata();
            return;
        }
        let topic_groups = self.open_topic_groups();
        let g = if !topic_groups.is_empty() && self.rng.chance(350) {
            topic_groups[self.rng.below(topic_groups.len() as u64) as usize]
        } else {
            100 + self.rng.below(GROUPS)
        };
        let burst = if self.rng.chance(150) {
            2 + self.rng.below(7)
        } else {
            1
        };
        for _ in 0..burst {
            self.propose_to(g);
        }
    }

    /// The node a client sends group `g`'s proposals to: whichever says it leads the group, or
    /// any (which refuses).
    fn pick_proposer(&mut self, g: u64) -> usize {
        let leader = self.nodes.iter().position(|n| {
            n.up && n
                .groups
                .get(&g)
                .is_some_and(|sg| sg.visible.borrow().leader == n.id)
        });
        leader.unwrap_or(self.rng.below(3) as usize)
    }

    /// A client's metadata command: a new topic (one name each) or a producer id allocation,
    /// stored with a request id unique in the run, as the node's proposal path does.
    fn propose_metadata(&mut self) {
        let at = self.pick_proposer(METADATA_GROUP_ID);
        self.next_request += 1;
        let command = if self.rng.chance(500) {
            MetaCommand::AllocateProducerId
        } else if let Some(delete) = self.topic_delete(at) {
            delete
        } else {
            let partitions = 1 + self.rng.below(3) as u32;
            MetaCommand::CreateTopic {
                name: self.topic_name(),
                partitions,
                replicas: self.replica_lists(partitions),
                configs: BTreeMap::new(),
            }
        };
        let entry = MetaEntry {
            request: RequestId {
                node: self.nodes[at].id,
                boot: 0,
                seq: self.next_request,
            },
            command,
        };
        // Now and then the same request twice at once: a client that gave up waiting sends
        // it again while the first attempt is still on its way, and both may commit.
        if self.rng.chance(150) {
            let again = self.pick_proposer(METADATA_GROUP_ID);
            self.faults.metadata_retries += 1;
            self.send_metadata(again, entry.clone(), 0);
        }
        self.send_metadata(at, entry, 3);
    }

    /// Sends `command` to the metadata group's leader (or any node), under a new request id,
    /// without retries.
    pub(crate) fn send_metadata_command(&mut self, command: MetaCommand) {
        let at = self.pick_proposer(METADATA_GROUP_ID);
        self.next_request += 1;
        let entry = MetaEntry {
            request: RequestId {
                node: self.nodes[at].id,
                boot: 0,
                seq: self.next_request,
            },
            command,
        };
        self.send_metadata(at, entry, 0);
    }

    /// Sends `entry` to node `at`'s metadata replica; a failed attempt may be sent again with
    /// the same request id `retries_left` times (the node's proposal path retries so).
    fn send_metadata(&mut self, at: usize, entry: MetaEntry, retries_left: u8) {
        let node = &self.nodes[at];
        let Some(sg) = node.groups.get(&METADATA_GROUP_ID) else {
            return;
        };
        let (reply, rx) = oneshot::channel();
        try_deliver(
            &sg.inbox,
            GroupInput::Propose(Proposal {
                data: ProposalData::Meta(bytes::Bytes::from(entry.encode())),
                reply: AppendReply::new(reply, None),
            }),
        );
        self.pending.push(Pending {
            what: Waiting::Meta {
                entry,
                retries_left,
            },
            reply: rx,
        });
    }

    fn propose_to(&mut self, g: u64) {
        let at = self.pick_proposer(g);
        if self.options.compaction && crate::cleaning::compacted_group(g) {
            if !self.nodes[at].groups.contains_key(&g) {
                return;
            }
            let (batches, records) = crate::cleaning::keyed_batch(self, g);
            let Some(sg) = self.nodes[at].groups.get(&g) else {
                return;
            };
            let (reply, rx) = oneshot::channel();
            try_deliver(
                &sg.inbox,
                GroupInput::Propose(Proposal {
                    data: ProposalData::Records {
                        batches,
                        offset_span: records.len() as u32,
                    },
                    reply: AppendReply::new(reply, None),
                }),
            );
            self.pending.push(Pending {
                what: Waiting::Keyed { group: g, records },
                reply: rx,
            });
            return;
        }
        let node = &self.nodes[at];
        let Some(sg) = node.groups.get(&g) else {
            return;
        };
        self.next_value += 1;
        let mut value = format!("g{g}-v{}", self.next_value).into_bytes();
        if self.rng.chance(250) {
            let pad = self.rng.below(1500) as usize;
            value.extend(std::iter::repeat_n(b'.', pad));
        }
        let (reply, rx) = oneshot::channel();
        // A fixed stamp: the same seed makes the same bytes (no retention by time here).
        let batches = crate::common::batch_at(1_700_000_000_000, 1, &value);
        try_deliver(
            &sg.inbox,
            GroupInput::Propose(Proposal {
                data: ProposalData::Records {
                    batches,
                    offset_span: 1,
                },
                reply: AppendReply::new(reply, None),
            }),
        );
        self.pending.push(Pending {
            what: Waiting::Records { group: g, value },
            reply: rx,
        });
    }

    fn deliver(&mut self) {
        let step = self.step;
        let mut due: Vec<InFlight> = Vec::new();
        let mut later = Vec::with_capacity(self.net.len());
        for m in self.net.drain(..) {
            if m.due <= step {
                due.push(m);
            } else {
                later.push(m);
            }
        }
        self.net = later;
        // Messages due together arrive in a random order.
        for i in (1..due.len()).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            due.swap(i, j);
        }
        for m in due {
            if !self.link_up(m.from, m.to) {
                continue;
            }
            if self
                .options
                .trace
                .is_some_and(|(g, from)| g == m.group && step >= from)
            {
                eprintln!(
                    "trace step {step} group {} {}->{} {:?} term {} index {} log term {} commit \
                     {} reject {} hint {} entries {} snapshot {}",
                    m.group,
                    m.from,
                    m.to,
                    m.msg.get_msg_type(),
                    m.msg.term,
                    m.msg.index,
                    m.msg.log_term,
                    m.msg.commit,
                    m.msg.reject,
                    m.msg.reject_hint,
                    m.msg.entries.len(),
                    m.msg.get_snapshot().get_metadata().index
                );
            }
            let node = &self.nodes[(m.to - 1) as usize];
            if let Some(g) = node.groups.get(&m.group).filter(|_| node.up) {
                try_deliver(&g.inbox, GroupInput::Raft(m.msg));
            }
        }
    }

    fn run_turns(&mut self) {
        for i in 0..self.nodes.len() {
            if !self.nodes[i].up {
                let n = &mut self.nodes[i];
                n.down_for = n.down_for.saturating_sub(1);
                if n.down_for == 0 {
                    n.start(&self.targets);
                }
                continue;
            }
            // Each node's clock ticks on its own phase and skips now and then.
            let tick = (self.step + i as u64) % STEPS_PER_TICK == 0 && !self.rng.chance(100);
            let node = &mut self.nodes[i];
            let mut crashed = false;
            'groups: for g in node.groups.values_mut() {
                let mut tick_now = tick;
                // A bounded number of turns: one group cannot starve the rest.
                for _ in 0..4 {
                    let turn = std::panic::catch_unwind(AssertUnwindSafe(|| g.task.turn(tick_now)));
                    match turn {
                        Ok(Next::Continue { .. }) => {}
                        Ok(Next::Done) => panic!("a simulated group stopped"),
                        Err(p) if p.downcast_ref::<SimCrash>().is_some() => {
                            crashed = true;
                            break 'groups;
                        }
                        Err(p) => std::panic::resume_unwind(p),
                    }
                    tick_now = false;
                    if !g.task.has_input() {
                        break;
                    }
                }
            }
            // What the metadata replica asked (partitions of created topics opened through
            // the core); opening a store fsyncs, where a power cut may strike.
            if !crashed {
                let carried =
                    std::panic::catch_unwind(AssertUnwindSafe(|| node.carry_out_metadata()));
                match carried {
                    Ok(()) => {}
                    Err(p) if p.downcast_ref::<SimCrash>().is_some() => crashed = true,
                    Err(p) => std::panic::resume_unwind(p),
                }
            }
            if crashed {
                let down_for = 20 + self.rng.below(200);
                self.crash(i, down_for);
                self.faults.power_cuts += 1;
            }
        }
    }

    fn collect_sent(&mut self) {
        for i in 0..self.nodes.len() {
            if !self.nodes[i].up {
                continue;
            }
            let from = self.nodes[i].id;
            let mut sent = Vec::new();
            for rx in self.nodes[i].outbox.values_mut() {
                while let Ok((group, msg)) = rx.try_recv() {
                    sent.push((group, msg));
                }
            }
            for (group, msg) in sent {
                if self.rng.chance(self.loss) {
                    continue;
                }
                let due = self.step + 1 + self.rng.below(self.max_delay);
                self.net.push(InFlight {
                    due,
                    from,
                    to: msg.to,
                    group,
                    msg,
                });
            }
        }
    }

    fn collect_replies(&mut self) {
        let mut still = Vec::with_capacity(self.pending.len());
        let mut retry = Vec::new();
        for mut p in std::mem::take(&mut self.pending) {
            match (p.reply.try_recv(), p.what) {
                (Ok(Ok(appended)), Waiting::Records { group, value }) => {
                    self.acked.push((group, appended, value))
                }
                (Ok(Ok(appended)), Waiting::Keyed { group, records }) => {
                    for (i, r) in records.into_iter().enumerate() {
                        let offset = appended.base_offset + i as u64;
                        self.cleaning.acked.push((group, offset, r));
                    }
                }
                (Ok(Ok(_)), Waiting::Meta { entry, .. }) => self.acked_meta.push(AckedMeta {
                    request: entry.request,
                    command: entry.command,
                }),
                // A metadata command that failed may have committed all the same: the node's
                // proposal path sends it again under the same request id, which must not
                // apply it twice.
                (
                    Ok(Err(_)) | Err(oneshot::error::TryRecvError::Closed),
                    Waiting::Meta {
                        entry,
                        retries_left,
                    },
                ) if retries_left > 0 && self.rng.chance(500) => retry.push((entry, retries_left)),
                (Ok(Err(_)) | Err(oneshot::error::TryRecvError::Closed), _) => {}
                (Err(oneshot::error::TryRecvError::Empty), what) => still.push(Pending {
                    what,
                    reply: p.reply,
                }),
            }
        }
        self.pending = still;
        for (entry, retries_left) in retry {
            let at = self.pick_proposer(METADATA_GROUP_ID);
            self.faults.metadata_retries += 1;
            self.send_metadata(at, entry, retries_left - 1);
        }
    }

    pub fn step_once(&mut self, faults: bool, clients: bool) {
        if faults {
            self.inject_faults();
        }
        if clients && self.rng.chance(400) {
            self.propose();
        }
        self.update_connections();
        self.deliver();
        self.run_turns();
        self.check_serving();
        self.finish_reassignments();
        self.record_committed();
        self.clean_some();
        self.collect_sent();
        self.collect_replies();
        self.step += 1;
    }

    /// Heals: every node up and connected, no loss, no power cut waiting to strike.
    pub fn heal(&mut self) {
        self.disarm();
        self.isolated.clear();
        self.cut_links.clear();
        self.loss = 0;
        for n in &mut self.nodes {
            if !n.up {
                n.start(&self.targets);
            }
        }
        for g in all_groups() {
            self.set_voters(g, NODES.to_vec());
        }
    }

    /// Nothing in flight: no client waiting, no message on the network.
    pub fn quiet(&self) -> bool {
        self.pending.is_empty() && self.net.is_empty()
    }

    /// Every group has the same applied index on every node hosting it, and a leader whose
    /// configuration is those nodes (all three, but for a topic placed on fewer); no node is
    /// still rejoining after a replaced disk.
    pub fn converged(&self) -> bool {
        if self.nodes.iter().any(|n| n.rejoining()) {
            return false;
        }
        // Every node holds the partitions its metadata state places on it.
        if self.nodes.iter().any(|n| {
            n.placed_partitions()
                .iter()
                .any(|(_, _, g)| !n.groups.contains_key(g))
        }) {
            return false;
        }
        self.groups_of_cluster().into_iter().all(|g| {
            // Every node hosts the bare groups and the metadata group; a topic partition is
            // on the nodes its metadata places it on (every node, but with `member_removal`).
            let hosts = self.hosts(g);
            let Some(views) = hosts
                .iter()
                .map(|n| n.groups.get(&g).map(|sg| (n.id, *sg.visible.borrow())))
                .collect::<Option<Vec<(u64, Visible)>>>()
            else {
                return false;
            };
            let Some(&(_, first)) = views.first() else {
                return false;
            };
            let leader = first.leader;
            // Only the leader knows whether its configuration is the one asked.
            let lv = views.iter().find(|(id, _)| *id == leader).map(|(_, v)| *v);
            leader != 0
                && lv.is_some_and(|lv| {
                    lv.membership_settled
                        && lv.voters.iter().filter(|v| **v != 0).count() == hosts.len()
                })
                && views
                    .iter()
                    .all(|(_, v)| v.leader == leader && v.applied_index == first.applied_index)
        })
    }

    /// The nodes that host group `g`: every node for the metadata group and the bare groups,
    /// the nodes whose metadata state places it on them for a topic partition.
    pub fn hosts(&self, g: u64) -> Vec<&SimNode> {
        if all_groups().contains(&g) {
            return self.nodes.iter().collect();
        }
        self.nodes
            .iter()
            .filter(|n| n.placed_partitions().iter().any(|(_, _, pg)| *pg == g))
            .collect()
    }
}

impl World {
    /// Every replica's view, for a failure message.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for n in &self.nodes {
            out.push_str(&format!(
                "node {} up {} rejoining {}\n",
                n.id,
                n.up,
                n.rejoining()
            ));
            for (g, sg) in &n.groups {
                let v = *sg.visible.borrow();
                let s = vdl_server::replication::raft_storage::read(&sg.store);
                out.push_str(&format!(
                    "  group {g}: leader {} term {} applied {} voters {:?} settled {} quiesced {} \
                     in sync {:?}; log {}..={}, hard state {:?}, configuration {:?}\n",
                    v.leader,
                    v.term,
                    v.applied_index,
                    v.voters,
                    v.membership_settled,
                    v.quiesced,
                    v.in_sync,
                    s.first_index(),
                    s.last_index(),
                    s.hard_state(),
                    s.conf_state()
                ));
            }
        }
        out
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            n.groups.clear();
            sim_fs().unregister(&n.dir);
        }
    }
}
