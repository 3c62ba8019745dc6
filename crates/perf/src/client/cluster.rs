//! Finding a partition's leader through Metadata, and (re)connecting to it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::Response;

use super::conn::Connection;
use super::protocol;
use super::{ClientError, METADATA_VERSION};

/// Where a partition's leader is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLeader {
    /// The leader's node id.
    pub node_id: i32,
    /// The leader's `host:port`.
    pub addr: String,
    /// The leader epoch (-1 if the server does not say).
    pub epoch: i32,
}

/// A topic as Metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicLayout {
    /// Leaders by partition index (`None`: no leader right now).
    pub leaders: Vec<Option<PartitionLeader>>,
}

/// The bootstrap servers and the settings every connection of a run shares.
#[derive(Debug)]
pub struct Cluster {
    bootstrap: Vec<String>,
    client_id: String,
    timeout: Duration,
    metadata_requests: AtomicU64,
    security: super::security::ClientSecurity,
}

impl Cluster {
    /// A cluster reached through `bootstrap` (a comma-separated `host:port` list).
    pub fn new(bootstrap: &str, client_id: &str, timeout: Duration) -> Cluster {
        Cluster {
            bootstrap: bootstrap
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            client_id: client_id.to_string(),
            timeout,
            metadata_requests: AtomicU64::new(0),
            security: super::security::ClientSecurity::default(),
        }
    }

    /// The same cluster reached with TLS and/or SASL as `security` says.
    pub fn with_security(mut self, security: super::security::ClientSecurity) -> Cluster {
        self.security = security;
        self
    }

    /// How many Metadata requests were sent so far (initial lookups and refreshes).
    pub fn metadata_requests(&self) -> u64 {
        self.metadata_requests.load(Ordering::Relaxed)
    }

    /// The per-request timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Opens a connection to `addr`.
    pub async fn connect(&self, addr: &str) -> Result<Connection, ClientError> {
        Connection::connect_with(addr, &self.client_id, self.timeout, &self.security).await
    }

    /// Connects to the first bootstrap server that answers.
    pub async fn connect_any(&self) -> Result<Connection, ClientError> {
        let mut last = None;
        for addr in &self.bootstrap {
            match self.connect(addr).await {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| ClientError::Unexpected("no bootstrap servers".into())))
    }

    /// Asks the bootstrap servers, in order, for the topic's metadata; the first answer wins.
    pub async fn topic(&self, topic: &str) -> Result<TopicLayout, ClientError> {
        let mut last = None;
        for addr in &self.bootstrap {
            self.metadata_requests.fetch_add(1, Ordering::Relaxed);
            let attempt = async {
                let mut conn = self.connect(addr).await?;
                conn.request(METADATA_VERSION, &protocol::metadata(topic))
                    .await
            };
            match attempt.await {
                Ok(resp) => return layout(resp, topic),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| ClientError::Unexpected("no bootstrap servers".into())))
    }

    /// Makes sure `topic` exists with `partitions` partitions, each with a leader: creates it
    /// (CreateTopics through the first bootstrap server that answers, the server's default
    /// replication factor) when it does not exist, then waits for every leader until
    /// `deadline`. A topic that exists with another partition count is an error (nothing is
    /// changed).
    pub async fn ensure_partitions(
        &self,
        topic: &str,
        partitions: i32,
        deadline: Instant,
    ) -> Result<(), ClientError> {
        self.ensure_topic(topic, partitions, &[], deadline).await
    }

    /// [`Cluster::ensure_partitions`], creating the topic with the topic configs `configs`
    /// (name, value; a topic that exists keeps its own).
    pub async fn ensure_topic(
        &self,
        topic: &str,
        partitions: i32,
        configs: &[(String, String)],
        deadline: Instant,
    ) -> Result<(), ClientError> {
        let mut answered = None;
        let mut last = None;
        for addr in &self.bootstrap {
            let timeout_ms = i32::try_from(self.timeout.as_millis()).unwrap_or(i32::MAX);
            let attempt = async {
                let mut conn = self.connect(addr).await?;
                let resp = conn
                    .request(
                        super::CREATE_TOPICS_VERSION,
                        &protocol::create_topic(topic, partitions, configs, timeout_ms),
                    )
                    .await?;
                protocol::created(resp, topic)
            };
            match attempt.await {
                Ok(created) => {
                    answered = Some(created);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        if answered.is_none() {
            return Err(
                last.unwrap_or_else(|| ClientError::Unexpected("no bootstrap servers".into()))
            );
        }
        let mut backoff = Duration::from_millis(20);
        loop {
            let layout = self.topic(topic).await;
            if let Ok(l) = &layout {
                let count = i32::try_from(l.leaders.len()).unwrap_or(i32::MAX);
                if count > partitions
                    || (answered == Some(false) && count != partitions && count > 0)
                {
                    return Err(ClientError::Unexpected(format!(
                        "{topic} exists with {count} partitions, not the {partitions} asked for"
                    )));
                }
                if count == partitions && l.leaders.iter().all(Option::is_some) {
                    return Ok(());
                }
            }
            if Instant::now() + backoff >= deadline {
                return Err(match layout {
                    Err(e) => e,
                    Ok(_) => ClientError::NoLeader {
                        topic: topic.to_string(),
                        partition: -1,
                        why: format!("not every one of {partitions} partitions has a leader yet"),
                    },
                });
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(500));
        }
    }

    /// The current leader of a partition.
    pub async fn leader(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<PartitionLeader, ClientError> {
        let layout = self.topic(topic).await?;
        let no_leader = |why: &str| ClientError::NoLeader {
            topic: topic.to_string(),
            partition,
            why: why.to_string(),
        };
        let slot = usize::try_from(partition)
            .ok()
            .and_then(|p| layout.leaders.get(p))
            .ok_or_else(|| no_leader("no such partition"))?;
        slot.clone().ok_or_else(|| no_leader("no leader elected"))
    }

    /// Looks up the leader and connects to it, retrying retriable failures (every failure is
    /// passed to `on_error` to be counted) until `deadline`.
    pub async fn connect_leader(
        &self,
        topic: &str,
        partition: i32,
        deadline: Instant,
        on_error: &mut (dyn FnMut(&ClientError) + Send),
    ) -> Result<Connection, ClientError> {
        let mut backoff = Duration::from_millis(10);
        loop {
            let attempt = async {
                let leader = self.leader(topic, partition).await?;
                self.connect(&leader.addr).await
            };
            match attempt.await {
                Ok(conn) => return Ok(conn),
                Err(e) if e.is_retriable() && Instant::now() + backoff < deadline => {
                    on_error(&e);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Reads the topic's partitions and their leaders' addresses from a Metadata response.
fn layout(resp: Response, topic: &str) -> Result<TopicLayout, ClientError> {
    let Response::Metadata(m) = resp else {
        return Err(ClientError::Unexpected("not a Metadata response".into()));
    };
    let t = m
        .topics
        .iter()
        .find(|t| t.name.as_deref() == Some(topic))
        .ok_or_else(|| ClientError::Unexpected(format!("Metadata did not list topic {topic}")))?;
    if t.error_code != 0 {
        return Err(ClientError::Broker {
            code: ErrorCode::from_code(t.error_code),
            what: "Metadata",
        });
    }
    let count = t
        .partitions
        .iter()
        .map(|p| p.partition_index.max(0) as usize + 1)
        .max()
        .unwrap_or(0);
    let mut leaders = vec![None; count];
    for p in &t.partitions {
        if p.leader_id < 0 {
            continue;
        }
        let Some(b) = m.brokers.iter().find(|b| b.node_id == p.leader_id) else {
            continue;
        };
        if let Some(slot) = leaders.get_mut(p.partition_index.max(0) as usize) {
            *slot = Some(PartitionLeader {
                node_id: b.node_id,
                addr: format!("{}:{}", b.host, b.port),
                epoch: p.leader_epoch,
            });
        }
    }
    Ok(TopicLayout { leaders })
}
