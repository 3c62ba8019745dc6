//! The admin API client: plain HTTP/1.1 to one node (`--admin HOST:PORT`), JSON answers.

use std::time::Duration;

use serde_json::Value;

/// Largest answer read (a cluster status of many partitions fits easily).
const MAX_ANSWER_BYTES: u64 = 64 << 20;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The node could not be reached or the answer not read.
    #[error("cannot reach the admin API at {address}: {message}")]
    Unreachable {
        /// The node's admin address.
        address: String,
        /// What went wrong.
        message: String,
    },
    /// The node answered with an error.
    #[error("{message} (HTTP {status})")]
    Refused {
        /// HTTP status.
        status: u16,
        /// The error the node gave, or the body.
        message: String,
        /// The JSON answer, when it was JSON.
        body: Option<Value>,
    },
    /// The answer was not JSON.
    #[error("the answer is not JSON: {0}")]
    NotJson(String),
    /// The command line asked for something that cannot be sent.
    #[error("{0}")]
    Usage(String),
}

/// A client of one node's admin API.
pub struct Client {
    address: String,
    agent: ureq::Agent,
}

impl Client {
    /// A client of the node at `address` (`HOST:PORT`); each call gives up after `timeout`.
    pub fn new(address: &str, timeout: Duration) -> Client {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .build()
            .into();
        Client {
            address: address.to_owned(),
            agent,
        }
    }

    /// `GET path`: the JSON answer of a 2xx status; 4xx/5xx is [`ClientError::Refused`].
    pub fn get(&self, path: &str) -> Result<Value, ClientError> {
        self.call("GET", path).and_then(ok_or_refused)
    }

    /// `POST path` (empty body): as [`Client::get`].
    pub fn post(&self, path: &str) -> Result<Value, ClientError> {
        self.call("POST", path).and_then(ok_or_refused)
    }

    /// `PUT path` with a JSON body: as [`Client::get`].
    pub fn put_json(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        self.call_with("PUT", path, Some(body))
            .and_then(ok_or_refused)
    }

    /// `GET path` with the status: `(status, JSON)` whatever the status.
    pub fn get_with_status(&self, path: &str) -> Result<(u16, Value), ClientError> {
        self.call("GET", path)
    }

    fn call(&self, method: &str, path: &str) -> Result<(u16, Value), ClientError> {
        self.call_with(method, path, None)
    }

    fn call_with(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Value), ClientError> {
        let url = format!("http://{}{path}", self.address);
        let unreachable = |e: ureq::Error| ClientError::Unreachable {
            address: self.address.clone(),
            message: e.to_string(),
        };
        let mut response = match (method, body) {
            ("PUT", Some(b)) => self.agent.put(&url).send_json(b),
            ("POST", _) => self.agent.post(&url).send_empty(),
            _ => self.agent.get(&url).call(),
        }
        .map_err(unreachable)?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER_BYTES)
            .read_to_string()
            .map_err(unreachable)?;
        match serde_json::from_str(&text) {
            Ok(v) => Ok((status, v)),
            Err(_) if !(200..300).contains(&status) => Err(ClientError::Refused {
                status,
                message: text.trim().to_owned(),
                body: None,
            }),
            Err(e) => Err(ClientError::NotJson(format!("{e}: {}", text.trim()))),
        }
    }
}

fn ok_or_refused((status, body): (u16, Value)) -> Result<Value, ClientError> {
    if (200..300).contains(&status) {
        return Ok(body);
    }
    let message = body
        .get("error")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| body.to_string());
    Err(ClientError::Refused {
        status,
        message,
        body: Some(body),
    })
}

/// Percent-encodes a path segment (topic names are `[a-zA-Z0-9._-]`, but be safe).
pub fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
