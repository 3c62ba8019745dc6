//! In-process nodes that serve Kafka, stopped when dropped.
#![allow(dead_code)]

use std::sync::Arc;

use vdl_server::config::NodeConfig;
use vdl_server::Node;

/// Running nodes, each serving Kafka; dropped, they stop and free their ports.
pub struct Nodes(pub Vec<(Arc<Node>, tokio::task::JoinHandle<()>)>);

impl Drop for Nodes {
    fn drop(&mut self) {
        for (node, kafka) in &self.0 {
            kafka.abort();
            node.shutdown();
        }
    }
}

/// Starts a node per config, each with its Kafka listener.
pub async fn start(configs: &[NodeConfig]) -> Nodes {
    let mut nodes = Vec::new();
    for c in configs {
        let n = Node::start(c.clone()).await.unwrap();
        let kafka = n.serve_kafka().await.unwrap();
        nodes.push((n, kafka));
    }
    Nodes(nodes)
}
