//! Parsing of the command line's value types: byte sizes (`32KiB`, `1MiB`, `4096`), thread
//! ranges (`1..15`, `1,2,4,8`, `4`), durations (`3s`, `500ms`, `2m`), offset starts
//! (`earliest`, `latest`, `1234`) and read/write ratios (`3:1`).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use thiserror::Error;

/// A value on the command line that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid {what} {input:?}: {why}")]
pub struct ParseError {
    /// What kind of value was expected.
    pub what: &'static str,
    /// The text given.
    pub input: String,
    /// What was wrong with it.
    pub why: &'static str,
}

fn err(what: &'static str, input: &str, why: &'static str) -> ParseError {
    ParseError {
        what,
        input: input.to_string(),
        why,
    }
}

/// A number of bytes, written as a plain integer or with a binary (`KiB`, `MiB`, `GiB`, also
/// `K`/`KB`/`k`, which mean KiB here, as Kafka's sizes do) suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// The size in bytes.
    pub fn bytes(self) -> u64 {
        self.0
    }
}

impl FromStr for ByteSize {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<ByteSize, ParseError> {
        let t = s.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        if num.is_empty() {
            return Err(err("size", s, "expected a number, e.g. 32KiB"));
        }
        let n: u64 = num
            .parse()
            .map_err(|_| err("size", s, "number out of range"))?;
        let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kb" | "kib" => 1 << 10,
            "m" | "mb" | "mib" => 1 << 20,
            "g" | "gb" | "gib" => 1 << 30,
            _ => return Err(err("size", s, "unknown unit (use B, KiB, MiB or GiB)")),
        };
        n.checked_mul(mult)
            .map(ByteSize)
            .ok_or_else(|| err("size", s, "too large"))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        if b >= 1 << 30 && b % (1 << 30) == 0 {
            write!(f, "{}GiB", b >> 30)
        } else if b >= 1 << 20 && b % (1 << 20) == 0 {
            write!(f, "{}MiB", b >> 20)
        } else if b >= 1 << 10 && b % (1 << 10) == 0 {
            write!(f, "{}KiB", b >> 10)
        } else {
            write!(f, "{b}B")
        }
    }
}

/// A list of thread counts: `1..15` (inclusive), `1..15/2` (step 2), `1,2,4,8` or `4`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadRange(pub Vec<usize>);

impl FromStr for ThreadRange {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<ThreadRange, ParseError> {
        const WHAT: &str = "thread range";
        let t = s.trim();
        let num = |x: &str| -> Result<usize, ParseError> {
            let n: usize = x
                .trim()
                .parse()
                .map_err(|_| err(WHAT, s, "expected numbers like 1..15 or 1,2,4"))?;
            if n == 0 || n > 4096 {
                return Err(err(WHAT, s, "thread counts must be 1..=4096"));
            }
            Ok(n)
        };
        let list = if let Some((lo, rest)) = t.split_once("..") {
            let rest = rest.strip_prefix('=').unwrap_or(rest);
            let (hi, step) = match rest.split_once('/') {
                Some((hi, step)) => (hi, num(step)?),
                None => (rest, 1),
            };
            let (lo, hi) = (num(lo)?, num(hi)?);
            if lo > hi {
                return Err(err(WHAT, s, "the range is empty"));
            }
            (lo..=hi).step_by(step).collect()
        } else {
            t.split(',').map(num).collect::<Result<Vec<_>, _>>()?
        };
        Ok(ThreadRange(list))
    }
}

/// A duration: `500ms`, `3s`, `2m`, `1h` or a plain number of seconds (`2.5`).
pub fn parse_duration(s: &str) -> Result<Duration, ParseError> {
    const WHAT: &str = "duration";
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| err(WHAT, s, "expected a number, e.g. 3s or 500ms"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1e3,
        "us" | "µs" => n / 1e6,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(err(WHAT, s, "unknown unit (use ms, s, m or h)")),
    };
    if !secs.is_finite() || !(0.0..=86_400.0 * 7.0).contains(&secs) {
        return Err(err(WHAT, s, "out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Where a consumer starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartOffset {
    /// The log start offset (ListOffsets timestamp -2).
    Earliest,
    /// The high watermark (ListOffsets timestamp -1): only records produced from now on.
    Latest,
    /// An explicit offset.
    Offset(i64),
}

impl FromStr for StartOffset {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<StartOffset, ParseError> {
        match s.trim() {
            "earliest" => Ok(StartOffset::Earliest),
            "latest" => Ok(StartOffset::Latest),
            n => n
                .parse::<i64>()
                .ok()
                .filter(|o| *o >= 0)
                .map(StartOffset::Offset)
                .ok_or_else(|| err("start offset", s, "use earliest, latest or an offset >= 0")),
        }
    }
}

/// A read:write ratio, `R:W` (Pegasus's order: `1:0` is read only, `0:1` write only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ratio {
    /// Read weight.
    pub reads: u32,
    /// Write weight.
    pub writes: u32,
}

impl Ratio {
    /// The share of operations that are reads, in 0..=1.
    pub fn read_share(self) -> f64 {
        f64::from(self.reads) / f64::from(self.reads + self.writes)
    }
}

impl FromStr for Ratio {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Ratio, ParseError> {
        let (r, w) = s
            .trim()
            .split_once(':')
            .ok_or_else(|| err("ratio", s, "expected READ:WRITE, e.g. 3:1"))?;
        let p = |x: &str| {
            x.trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n <= 1_000_000)
                .ok_or_else(|| err("ratio", s, "weights must be integers up to 1000000"))
        };
        let ratio = Ratio {
            reads: p(r)?,
            writes: p(w)?,
        };
        if ratio.reads == 0 && ratio.writes == 0 {
            return Err(err("ratio", s, "0:0 does nothing"));
        }
        Ok(ratio)
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.reads, self.writes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!("32KiB".parse(), Ok(ByteSize(32 * 1024)));
        assert_eq!("1MiB".parse(), Ok(ByteSize(1 << 20)));
        assert_eq!("4096".parse(), Ok(ByteSize(4096)));
        assert_eq!("64k".parse(), Ok(ByteSize(64 * 1024)));
        assert_eq!("256KB".parse(), Ok(ByteSize(256 * 1024)));
        assert_eq!("2 GiB".parse(), Ok(ByteSize(2 << 30)));
        assert!("KiB".parse::<ByteSize>().is_err());
        assert!("12XB".parse::<ByteSize>().is_err());
        assert!("99999999999999999999".parse::<ByteSize>().is_err());
        assert_eq!(ByteSize(32 * 1024).to_string(), "32KiB");
        assert_eq!(ByteSize(1 << 20).to_string(), "1MiB");
        assert_eq!(ByteSize(100).to_string(), "100B");
    }

    #[test]
    fn thread_ranges() {
        assert_eq!(
            "1..15".parse::<ThreadRange>().unwrap().0,
            (1..=15).collect::<Vec<_>>()
        );
        assert_eq!("1..=3".parse::<ThreadRange>().unwrap().0, vec![1, 2, 3]);
        assert_eq!("1..9/4".parse::<ThreadRange>().unwrap().0, vec![1, 5, 9]);
        assert_eq!(
            "1,2,4,8".parse::<ThreadRange>().unwrap().0,
            vec![1, 2, 4, 8]
        );
        assert_eq!("4".parse::<ThreadRange>().unwrap().0, vec![4]);
        assert!("5..1".parse::<ThreadRange>().is_err());
        assert!("0..3".parse::<ThreadRange>().is_err());
        assert!("a..b".parse::<ThreadRange>().is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("3s"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("2.5"), Ok(Duration::from_millis(2500)));
        assert!(parse_duration("3x").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn starts_and_ratios() {
        assert_eq!("earliest".parse(), Ok(StartOffset::Earliest));
        assert_eq!("latest".parse(), Ok(StartOffset::Latest));
        assert_eq!("42".parse(), Ok(StartOffset::Offset(42)));
        assert!("-3".parse::<StartOffset>().is_err());
        let r: Ratio = "30:1".parse().unwrap();
        assert_eq!((r.reads, r.writes), (30, 1));
        assert!((r.read_share() - 30.0 / 31.0).abs() < 1e-12);
        assert_eq!(r.to_string(), "30:1");
        assert!("0:0".parse::<Ratio>().is_err());
        assert!("1-1".parse::<Ratio>().is_err());
    }
}
