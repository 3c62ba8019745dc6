//! `vdlctl rate list | update`: the node-wide flow limits (VDL's seven knobs) through a node's
//! admin API (`GET /rates`, `PUT /rates`; the server's `admin/rates.rs`). An update is
//! committed to the replicated metadata and applied by every node; the limits in force are
//! printed after it.

use clap::Subcommand;
use vdl_admin_api::rates::{Rates, RatesUpdate, FLOW_LIMIT_NAMES};

use crate::client::{Client, ClientError};
use crate::Outcome;

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

/// The body of `PUT /rates` for `NAME=VALUE` pairs.
pub fn update_body(pairs: &[String]) -> Result<RatesUpdate, String> {
    let mut body = RatesUpdate::default();
    for pair in pairs {
        let (name, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("`{pair}` is not NAME=VALUE"))?;
        if !FLOW_LIMIT_NAMES.contains(&name) {
            return Err(format!(
                "unknown limit `{name}` (known: {})",
                FLOW_LIMIT_NAMES.join(", ")
            ));
        }
        let v = match value {
            "unlimited" | "0" => None,
            v => Some(
                v.parse::<u64>()
                    .map_err(|_| format!("`{v}` is not a whole number or `unlimited`"))?,
            ),
        };
        body.0.insert(name.to_string(), v);
    }
    Ok(body)
}

fn print(rates: &Rates) {
    for name in FLOW_LIMIT_NAMES {
        let shown = match rates.limit(name).flatten() {
            Some(n) => format!("{n}/s"),
            None => "unlimited".to_string(),
        };
        println!("{name:<32} {shown}");
    }
    println!(
        "{:<32} {} (this node)",
        "throttled_requests", rates.throttled_requests
    );
    println!(
        "{:<32} {} (this node)",
        "throttle_time_ms_total", rates.throttle_time_ms_total
    );
}

/// Runs one `rate` subcommand.
pub fn run(command: RateCommand, client: &Client) -> Result<Outcome, ClientError> {
    match command {
        RateCommand::List { json } => {
            let answer = client.get_answer("/rates")?;
            let rates: Rates = answer.document(&[])?;
            if json {
                println!("{}", answer.pretty());
            } else {
                print(&rates);
            }
        }
        RateCommand::Update { limits } => {
            let body = update_body(&limits).map_err(ClientError::Usage)?;
            let now: Rates = client.put_json("/rates", &body)?;
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
        assert_eq!(body.0["produce_bytes_per_sec"], Some(1000));
        assert_eq!(body.0["tail_read_requests_per_sec"], None);
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"produce_bytes_per_sec":1000,"tail_read_requests_per_sec":null}"#
        );
        assert!(update_body(&["nope=1".into()]).is_err());
        assert!(update_body(&["produce_bytes_per_sec".into()]).is_err());
        assert!(update_body(&["produce_bytes_per_sec=-3".into()]).is_err());
    }
}
