//! `vdlctl rate list | update`: the node-wide flow limits (VDL's six knobs) through a node's
//! admin API (`GET /rates`, `PUT /rates`; the server's `flow/admin.rs`). An update is
//! committed to the replicated metadata and applied by every node; the limits in force are
//! printed after it.

use clap::Subcommand;
use serde_json::{Map, Value};

use crate::client::{Client, ClientError};
use crate::Outcome;

/// The six limits, in the order they are printed.
const LIMITS: [&str; 7] = [
    "produce_requests_per_sec",
    "produce_bytes_per_sec",
    "catchup_read_requests_per_sec",
    "catchup_read_bytes_per_sec",
    "tail_read_requests_per_sec",
    "tail_read_bytes_per_sec",
    "catchup_replication_bytes_per_sec",
];

/// The `rate` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum RateCommand {
    /// Print the limits in force (and this node's throttling counters).
    List {
        /// Print the server's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Change some limits: `NAME=VALUE` per limit, VALUE a whole number per second or
    /// `unlimited` (or 0). Limits not named keep their values.
    Update {
        /// `NAME=VALUE` pairs, e.g. `catchup_read_bytes_per_sec=50000000`.
        #[arg(required = true)]
        limits: Vec<String>,
    },
}

/// The JSON body of `PUT /rates` for `NAME=VALUE` pairs.
pub fn update_body(pairs: &[String]) -> Result<Value, String> {
    let mut body = Map::new();
    for pair in pairs {
        let (name, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("`{pair}` is not NAME=VALUE"))?;
        if !LIMITS.contains(&name) {
            return Err(format!(
                "unknown limit `{name}` (known: {})",
                LIMITS.join(", ")
            ));
        }
        let v = match value {
            "unlimited" | "0" => Value::Null,
            v => Value::from(
                v.parse::<u64>()
                    .map_err(|_| format!("`{v}` is not a whole number or `unlimited`"))?,
            ),
        };
        body.insert(name.to_string(), v);
    }
    Ok(Value::Object(body))
}

fn print(limits: &Value) {
    for name in LIMITS {
        let shown = match limits.get(name) {
            Some(Value::Number(n)) => format!("{n}/s"),
            _ => "unlimited".to_string(),
        };
        println!("{name:<32} {shown}");
    }
    for counter in ["throttled_requests", "throttle_time_ms_total"] {
        if let Some(v) = limits.get(counter) {
            println!("{counter:<32} {v} (this node)");
        }
    }
}

/// Runs one `rate` subcommand.
pub fn run(command: RateCommand, client: &Client) -> Result<Outcome, ClientError> {
    match command {
        RateCommand::List { json } => {
            let limits = client.get("/rates")?;
            if json {
                println!("{limits:#}");
            } else {
                print(&limits);
            }
        }
        RateCommand::Update { limits } => {
            let body = update_body(&limits).map_err(ClientError::Usage)?;
            let now = client.put_json("/rates", &body)?;
            print(&now);
        }
    }
    Ok(Outcome::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_pairs_become_the_put_body() {
        let body = update_body(&[
            "produce_bytes_per_sec=1000".into(),
            "tail_read_requests_per_sec=unlimited".into(),
        ])
        .unwrap();
        assert_eq!(body["produce_bytes_per_sec"], 1000);
        assert!(body["tail_read_requests_per_sec"].is_null());
        assert!(update_body(&["nope=1".into()]).is_err());
        assert!(update_body(&["produce_bytes_per_sec".into()]).is_err());
        assert!(update_body(&["produce_bytes_per_sec=-3".into()]).is_err());
    }
}
