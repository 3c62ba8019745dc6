//! [`Log`]: one vdl node running inside the application, and the ways to start one.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use vdl_server::config::{Member, NodeConfig, RaftTiming};
use vdl_server::Node;

use crate::error::{Error, Result};
use crate::stream::{Stream, StreamOptions};

/// How long opening a log waits for its metadata group to have a leader.
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(30);

/// Deadlines of a log's calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogOptions {
    /// How long an append waits for its commit (and, while no leader is known, for one) before
    /// it fails with [`Error::Timeout`].
    pub append_timeout: Duration,
    /// How long creating a stream or committing a consumer position may take.
    pub metadata_timeout: Duration,
}

impl Default for LogOptions {
    fn default() -> LogOptions {
        LogOptions {
            append_timeout: Duration::from_secs(10),
            metadata_timeout: Duration::from_secs(10),
        }
    }
}

/// What a log and its streams share: the node, the deadlines, the shutdown signal.
pub(crate) struct Inner {
    pub(crate) node: Arc<Node>,
    pub(crate) options: LogOptions,
    /// `true` once [`Log::shutdown`] ran; tails wait on it too.
    pub(crate) closed: watch::Sender<bool>,
    kafka: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Inner {
    pub(crate) fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }
}

/// A replicated, durable log linked into this program: one vdl node (its Raft groups, its
/// files, its peer connections) running in the current tokio runtime. Cheap to clone: clones
/// share the node. Streams are reached through [`Log::stream`]. Stop it with
/// [`Log::shutdown`]; dropping the last handle without it also stops the node, but blocks the
/// dropping thread while the node's threads are joined.
///
/// ```
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() -> vdl::Result<()> {
/// let dir = tempfile::tempdir().unwrap();
/// let log = vdl::Log::open_single(dir.path()).await?;
/// let orders = log.stream("orders").await?;
/// let at = orders.append(vdl::Record::keyed("order-1", "created")).await?;
/// assert_eq!(at.offset, 0);
/// log.shutdown().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Log {
    pub(crate) inner: Arc<Inner>,
}

impl Log {
    /// Opens (or creates) a single-node log in `dir`: one voter, so an append commits after
    /// this node's own fsync. No network is used: the Raft peer port listens on an ephemeral
    /// 127.0.0.1 port that admits nobody (there are no other members), and no Kafka port is
    /// open until [`Log::serve_kafka`]. Returns once the node is ready for appends.
    pub async fn open_single(dir: impl AsRef<Path>) -> Result<Log> {
        let mut config = NodeConfig::single_node_default();
        config.data_dir = dir.as_ref().to_owned();
        let loopback_any: SocketAddr = ([127, 0, 0, 1], 0).into();
        config.peer_listen = loopback_any;
        config.members[0].peer_addr = loopback_any;
        Log::join(config).await
    }

    /// Starts this process's member of a cluster as `config` describes it (its id, data
    /// directory, peer address and the other members: the same configuration the `vdl` binary
    /// reads from TOML, see `deploy/vdl.example.toml`). The other members may be `vdl`
    /// processes or other embedding processes; they find each other over the peer port. Returns
    /// once the cluster metadata has a leader (a majority of members is up), or fails after
    /// [`OPEN_TIMEOUT`] with [`Error::Timeout`]. Kafka clients are served only after
    /// [`Log::serve_kafka`].
    pub async fn join(config: NodeConfig) -> Result<Log> {
        Log::join_with(config, LogOptions::default()).await
    }

    /// [`Log::join`] with other deadlines.
    pub async fn join_with(config: NodeConfig, options: LogOptions) -> Result<Log> {
        let node = Node::start(config).await?;
        let log = Log {
            inner: Arc::new(Inner {
                node,
                options,
                closed: watch::channel(false).0,
                kafka: Mutex::new(None),
            }),
        };
        if let Err(e) = log.wait_for_metadata_leader(OPEN_TIMEOUT).await {
            log.shutdown().await;
            return Err(e);
        }
        Ok(log)
    }

    /// Starts an `n`-node cluster inside this process, one node per directory of `dirs`
    /// (three for a cluster that survives one failure), talking over 127.0.0.1 on free ports
    /// (20000-31999) with short Raft timings (10 ms ticks, 50 ms heartbeats, 500 ms election
    /// timeout). For tests and examples: a node is stopped with [`Log::shutdown`] and started
    /// again with [`Log::join`] and its [`Log::config`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> vdl::Result<()> {
    /// let root = tempfile::tempdir().unwrap();
    /// let dirs: Vec<_> = (1..=3).map(|i| root.path().join(format!("node{i}"))).collect();
    /// let nodes = vdl::Log::in_process_cluster(&dirs).await?;
    /// let s = nodes[0].stream("events").await?;
    /// let leader = s.status(0)?.leader.expect("a leader");
    /// // Only the leader appends; the others say who leads.
    /// let on_leader = nodes.iter().find(|n| n.node_id() == leader).unwrap();
    /// let at = on_leader.stream("events").await?.append(vdl::Record::new("e1")).await?;
    /// assert_eq!(at.offset, 0);
    /// for n in &nodes {
    ///     n.shutdown().await;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn in_process_cluster(dirs: &[PathBuf]) -> Result<Vec<Log>> {
        if dirs.is_empty() {
            return Err(Error::InvalidStream(
                "a cluster needs at least one node".into(),
            ));
        }
        let configs = cluster_configs(dirs)?;
        let starts = configs.into_iter().map(Log::join);
        futures::future::join_all(starts)
            .await
            .into_iter()
            .collect()
    }

    /// This node's id.
    pub fn node_id(&self) -> u64 {
        self.inner.node.config().id
    }

    /// This node's configuration (to start it again after [`Log::shutdown`]).
    pub fn config(&self) -> &NodeConfig {
        self.inner.node.config()
    }

    /// The node underneath, for what this API does not cover (the `vdl-server` library).
    pub fn node(&self) -> &Arc<Node> {
        &self.inner.node
    }

    /// Serves Kafka clients on the configured Kafka address (`kafka_listen`; for
    /// [`Log::open_single`] the default 127.0.0.1:9092) until shutdown, and returns it (at once
    /// when it serves already). Any
    /// Kafka client then reads (and writes) the same streams as topics. In a cluster, call it
    /// on every member: Kafka clients are sent to each partition's leader.
    pub async fn serve_kafka(&self) -> Result<SocketAddr> {
        if self.inner.is_closed() {
            return Err(Error::Closed);
        }
        let addr = self.inner.node.config().kafka_listen;
        let serving = self
            .inner
            .kafka
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|task| !task.is_finished());
        if serving {
            return Ok(addr);
        }
        let task = self.inner.node.serve_kafka().await?;
        if let Some(old) = self
            .inner
            .kafka
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(task)
        {
            // A call racing this one started a listener too: keep one.
            old.abort();
        }
        Ok(addr)
    }

    /// The stream `name`, created on first use with [`StreamOptions::default`] (one partition,
    /// replicated to min(3, members) nodes, the node's retention). Names follow Kafka's topic
    /// rules (at most 249 of `[a-zA-Z0-9._-]`); a stream is a Kafka topic of the same name.
    pub async fn stream(&self, name: &str) -> Result<Stream> {
        if self.inner.node.topic_incarnation(name).is_some() {
            return self.open_existing(name).await;
        }
        self.create_stream(name, StreamOptions::default()).await
    }

    /// Creates stream `name` with `options` (partitions, replication, retention, any Kafka
    /// topic config vdl acts on), or opens it when it exists already (its options are then
    /// left as they are). Returns once every partition hosted here has a leader (and those led
    /// here have committed an entry of the leader's term, so their high watermark is current).
    pub async fn create_stream(&self, name: &str, options: StreamOptions) -> Result<Stream> {
        if self.inner.is_closed() {
            return Err(Error::Closed);
        }
        let node = &self.inner.node;
        if node.topic_incarnation(name).is_none() {
            let members = node.config().members.len();
            let replication_factor = options
                .replication_factor
                .unwrap_or_else(|| node.config().default_replication_factor());
            let configs = options.topic_configs();
            vdl_server::topic_config::validate_all(&configs, replication_factor)
                .map_err(|e| Error::InvalidStream(e.to_string()))?;
            if !(1..=members).contains(&replication_factor) {
                return Err(Error::InvalidStream(format!(
                    "replication factor {replication_factor} with {members} members"
                )));
            }
            node.create_topic_configured(
                name,
                options.partitions,
                replication_factor,
                configs,
                self.inner.options.metadata_timeout,
            )
            .await
            .map_err(|e| match e {
                vdl_server::AppendError::Invalid(m) => Error::InvalidStream(m),
                other => Error::Metadata(other.to_string()),
            })?;
        }
        self.open_existing(name).await
    }

    /// A handle on an existing stream, once its partitions hosted here have leaders.
    async fn open_existing(&self, name: &str) -> Result<Stream> {
        let stream = Stream::new(self.inner.clone(), name);
        let deadline = tokio::time::Instant::now() + self.inner.options.metadata_timeout;
        loop {
            if self.inner.is_closed() {
                return Err(Error::Closed);
            }
            let hosted = self.inner.node.partitions(name);
            let me = self.node_id();
            // A leader here must have committed an entry of its term first: until then its
            // high watermark may be the older one it restarted with.
            let settled =
                |v: vdl_server::Visible| v.leader != 0 && (v.leader != me || v.leader_ready);
            if !hosted.is_empty() && hosted.iter().all(|p| settled(p.visible())) {
                return Ok(stream);
            }
            if hosted.is_empty() && self.inner.node.topic_incarnation(name).is_some() {
                // Hosted nowhere here (a cluster larger than the replication factor): reads
                // and appends go to other nodes; the handle still routes and reports.
                let layout = self.inner.node.topic_layout(name);
                let here = self.node_id();
                if layout.is_some_and(|l| l.replicas.iter().all(|r| !r.contains(&here))) {
                    return Ok(stream);
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::Timeout(self.inner.options.metadata_timeout));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Names of every stream of the cluster, sorted.
    pub fn stream_names(&self) -> Vec<String> {
        self.inner.node.topic_names()
    }

    /// Stops this node: open tails end with [`Error::Closed`], appends waiting for a commit
    /// fail with [`Error::Closed`] (they may still commit on the other members), the Kafka
    /// listener closes and the node's threads are joined. What was fsynced stays on disk; the
    /// log opens again from it. Calling it again does nothing.
    pub async fn shutdown(&self) {
        if self.inner.closed.send_replace(true) {
            return;
        }
        let kafka = self
            .inner
            .kafka
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(task) = kafka {
            task.abort();
            // Wait until the aborted task is dropped (its listeners and connection set with
            // it), so nothing it held outlives the shutdown: a `Log` joined again on the same
            // directory right after must find it unlocked.
            let _ = task.await;
        }
        let node = self.inner.node.clone();
        // Joining the node's worker threads blocks: not on a runtime thread.
        let _ = tokio::task::spawn_blocking(move || node.shutdown()).await;
    }

    /// Whether [`Log::shutdown`] ran.
    pub fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }

    async fn wait_for_metadata_leader(&self, timeout: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let leader = self
                .inner
                .node
                .metadata_group()
                .map_or(0, |g| g.visible().leader);
            if leader != 0 {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::Timeout(timeout));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Configs of an in-process cluster: one member per directory, ids 1.., peer and Kafka ports
/// on 127.0.0.1.
fn cluster_configs(dirs: &[PathBuf]) -> Result<Vec<NodeConfig>> {
    let n = dirs.len();
    let ports = free_ports(2 * n)?;
    let members: Vec<Member> = (0..n)
        .map(|i| Member {
            name: format!("vdl{}", i + 1),
            id: i as u64 + 1,
            peer_addr: ([127, 0, 0, 1], ports[i]).into(),
        })
        .collect();
    Ok(dirs
        .iter()
        .enumerate()
        .map(|(i, dir)| {
            let mut c = NodeConfig::single_node_default();
            c.id = members[i].id;
            c.name = members[i].name.clone();
            c.data_dir = dir.clone();
            c.peer_listen = members[i].peer_addr;
            c.kafka_listen = ([127, 0, 0, 1], ports[n + i]).into();
            c.kafka_advertised = c.kafka_listen.to_string();
            c.members = members.clone();
            c.raft = RaftTiming {
                tick: Duration::from_millis(10),
                heartbeat: Duration::from_millis(50),
                election_timeout: Duration::from_millis(500),
                ..RaftTiming::default()
            };
            c
        })
        .collect())
}

/// `n` distinct free ports on 127.0.0.1 between 20000 and 31999, below the kernel's ephemeral
/// range: a port from that range could be taken by an outgoing connection (the nodes dial each
/// other) between this check and the node's bind. Each is checked free by binding it.
fn free_ports(n: usize) -> Result<Vec<u16>> {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const COUNT: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id().wrapping_mul(2_654_435_761);
    let _ = NEXT.compare_exchange(u32::MAX, seed % COUNT, Ordering::SeqCst, Ordering::SeqCst);
    let mut held = BTreeMap::new();
    for _ in 0..COUNT {
        if held.len() == n {
            break;
        }
        let port = (FIRST + NEXT.fetch_add(1, Ordering::SeqCst) % COUNT) as u16;
        if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            held.insert(port, l);
        }
    }
    if held.len() < n {
        return Err(Error::Network(format!(
            "no {n} free ports on 127.0.0.1 in 20000-31999"
        )));
    }
    Ok(held.keys().copied().collect())
}
