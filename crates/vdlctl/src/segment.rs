//! `vdlctl segment list|delete`: a partition's segment files on its leader, and deleting the
//! old ones (only where `storage.operator_delete_allowed` is on, never below what a voter
//! still needs).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Subcommand;
use vdl_admin_api::segments::{CleanerFigures, SegmentEntry, SegmentList, SegmentsDeleted};

use crate::client::{segment, Client, ClientError};
use crate::Outcome;

/// `vdlctl segment ...`.
#[derive(Subcommand)]
pub enum SegmentCommand {
    /// The leader's segment files of a partition: Raft indexes, offsets, bytes; for a
    /// compacted topic also the log cleaner's figures (cleanable and cleaned bytes, dirty
    /// ratio, first dirty offset, last clean).
    List {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: u32,
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete the sealed segments that lie wholly below OFFSET (the partition's log start
    /// offset rises to the end of the last one deleted, on every replica).
    Delete {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: u32,
        /// Delete segments whose records are all below this offset.
        #[arg(long)]
        before: u64,
    },
}

fn render(segments: &[SegmentEntry]) -> String {
    let mut out =
        String::from("BASE-INDEX  LAST-INDEX  FIRST-OFFSET  NEXT-OFFSET  BYTES       ACTIVE\n");
    for s in segments {
        out.push_str(&format!(
            "{:<11} {:<11} {:<13} {:<12} {:<11} {}\n",
            s.base_index, s.last_index, s.first_offset, s.next_offset, s.bytes, s.active
        ));
    }
    out
}

/// The cleaner's figures of a compacted partition as text; `now_ms` (ms since the Unix epoch)
/// gives the age of the last clean.
fn render_cleaner(c: &CleanerFigures, now_ms: i64) -> String {
    let last = match c.last_clean_ms {
        Some(ms) => format!(
            "{} ({} s ago)",
            utc_timestamp(ms),
            now_ms.saturating_sub(ms).max(0) / 1000
        ),
        None => "never".to_string(),
    };
    format!(
        "log cleaner (cleanup.policy compact):\n  \
         cleanable bytes     {}\n  \
         cleaned bytes       {}\n  \
         dirty ratio         {:.3}\n  \
         first dirty offset  {}\n  \
         last clean          {last}\n",
        c.cleanable_bytes, c.cleaned_bytes, c.dirty_ratio, c.first_dirty_offset
    )
}

/// `ms` since the Unix epoch as an RFC 3339 UTC time to the second, e.g.
/// `2023-11-14T22:13:20Z` (proleptic Gregorian calendar, days converted to a civil date).
fn utc_timestamp(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to year, month, day, counting in 400-year eras from 0000-03-01.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Runs a `segment` subcommand.
pub fn run(
    cmd: SegmentCommand,
    client: &Client,
    timeout: Duration,
) -> Result<Outcome, ClientError> {
    match cmd {
        SegmentCommand::List {
            topic,
            partition,
            json,
        } => {
            let path = format!("/partitions/{}/{partition}/segments", segment(&topic));
            let answer = client.get_answer(&path)?;
            let list: SegmentList = answer.document(&[])?;
            if json {
                println!("{}", answer.pretty());
            } else {
                println!("{topic}-{partition} on node {}:", list.node);
                print!("{}", render(&list.segments));
                if let Some(c) = &list.cleaner {
                    print!("{}", render_cleaner(c, now_ms()));
                }
            }
            Ok(Outcome::Ok)
        }
        SegmentCommand::Delete {
            topic,
            partition,
            before,
        } => {
            let answer: SegmentsDeleted = client.post(&format!(
                "/partitions/{}/{partition}/segments/delete?before={before}&timeout_ms={}",
                segment(&topic),
                timeout.as_millis()
            ))?;
            println!(
                "{topic}-{partition}: {} segment(s) deleted; log start offset now {}",
                answer.deleted.len(),
                answer.log_start_offset
            );
            Ok(Outcome::Ok)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compacted_partition_shows_the_cleaner_figures() {
        let list: SegmentList = serde_json::from_str(
            r#"{"cleaner":{"cleanable_bytes":300,"cleaned_bytes":900,"dirty_ratio":0.25,
                "first_dirty_offset":120,"last_clean_ms":1700000000000},
                "node":1,"partition":0,"segments":[],"topic":"c"}"#,
        )
        .unwrap();
        let text = render_cleaner(list.cleaner.as_ref().unwrap(), 1_700_000_042_500);
        assert_eq!(
            text,
            "log cleaner (cleanup.policy compact):\n  \
             cleanable bytes     300\n  \
             cleaned bytes       900\n  \
             dirty ratio         0.250\n  \
             first dirty offset  120\n  \
             last clean          2023-11-14T22:13:20Z (42 s ago)\n"
        );
        let never = CleanerFigures {
            last_clean_ms: None,
            ..list.cleaner.unwrap()
        };
        assert!(render_cleaner(&never, 0).ends_with("last clean          never\n"));
    }

    #[test]
    fn utc_timestamps_across_leap_years_and_the_epoch() {
        assert_eq!(utc_timestamp(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_timestamp(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(utc_timestamp(1_709_251_199_999), "2024-02-29T23:59:59Z");
        assert_eq!(utc_timestamp(-1_000), "1969-12-31T23:59:59Z");
    }
}
