//! Property tests: arbitrary bytes and mutated valid frames (bit flips, truncations, inserted and
//! deleted bytes, lengths set to huge values) fed to every request and response decoder at every
//! version must give `Ok` or `Err`, never a panic, and never a large allocation.

#[allow(dead_code, missing_docs, clippy::all)]
mod arbitrary {
    include!(concat!(env!("OUT_DIR"), "/arbitrary.rs"));
}

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use arbitrary::{random_request, random_response, Rng};
use bytes::Bytes;
use kafka_proto::{
    decode_request, decode_response, encode_request, encode_response, ApiKey, Decoder, Request,
    RequestHeader, Response,
};
use proptest::prelude::*;

/// Records the largest single allocation made by the current thread, so the tests can check
/// that decoding a small input never reserves much memory whatever its length prefixes claim.
struct TrackingAlloc;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = LARGEST.try_with(|l| {
        if size > l.get() {
            l.set(size);
        }
    });
}

// SAFETY: forwards to the system allocator; only records sizes in a thread-local `Cell`, which
// does not allocate.
unsafe impl GlobalAlloc for TrackingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: TrackingAlloc = TrackingAlloc;

/// Runs `f` and returns the largest single allocation it made.
fn largest_allocation(f: impl FnOnce()) -> usize {
    LARGEST.with(|l| l.set(0));
    f();
    LARGEST.with(|l| l.get())
}

/// Inputs here are at most a few KiB; no decode may make a single allocation larger than this.
const ALLOCATION_LIMIT: usize = 128 * 1024;

fn versions(api: ApiKey) -> std::ops::RangeInclusive<i16> {
    api.lowest_version()..=api.highest_version()
}

/// Feeds `data` to every decoder that could see it: as a request frame, as every body of `apis`
/// at every version, and as a response frame of each.
fn feed(data: &Bytes, apis: &[ApiKey]) {
    let largest = largest_allocation(|| {
        let _ = decode_request(data.clone());
        for &api in apis {
            for v in versions(api) {
                let _ = Request::decode(api, &mut Decoder::new(data.clone()), v);
                let _ = Response::decode(api, &mut Decoder::new(data.clone()), v);
                let _ = decode_response(api, v, data.clone());
            }
        }
    });
    assert!(
        largest <= ALLOCATION_LIMIT,
        "a {}-byte input caused a {largest}-byte allocation",
        data.len()
    );
}

#[derive(Debug, Clone)]
enum Mutation {
    FlipBit(usize, u8),
    Truncate(usize),
    Insert(usize, u8),
    Delete(usize),
    /// Overwrites 4 bytes with i32::MAX (a huge INT32 length or count).
    HugeI32(usize),
    /// Overwrites 2 bytes with i16::MAX (a huge INT16 string length).
    HugeI16(usize),
    /// Overwrites 5 bytes with the largest 5-byte varint (a huge compact length).
    HugeVarint(usize),
    /// Overwrites 4 bytes with -2 (an invalid negative length).
    MinusTwo(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(p, b)| Mutation::FlipBit(p, b)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), any::<u8>()).prop_map(|(p, b)| Mutation::Insert(p, b)),
        any::<usize>().prop_map(Mutation::Delete),
        any::<usize>().prop_map(Mutation::HugeI32),
        any::<usize>().prop_map(Mutation::HugeI16),
        any::<usize>().prop_map(Mutation::HugeVarint),
        any::<usize>().prop_map(Mutation::MinusTwo),
    ]
}

fn overwrite(buf: &mut [u8], pos: usize, with: &[u8]) {
    for (i, b) in with.iter().enumerate() {
        if let Some(slot) = buf.get_mut(pos + i) {
            *slot = *b;
        }
    }
}

fn apply(buf: &mut Vec<u8>, m: &Mutation) {
    let at = |p: usize, len: usize| if len == 0 { 0 } else { p % len };
    let len = buf.len();
    match *m {
        Mutation::FlipBit(p, b) => {
            if len > 0 {
                buf[at(p, len)] ^= 1 << b;
            }
        }
        Mutation::Truncate(p) => buf.truncate(at(p, len + 1)),
        Mutation::Insert(p, b) => buf.insert(at(p, len + 1), b),
        Mutation::Delete(p) => {
            if len > 0 {
                buf.remove(at(p, len));
            }
        }
        Mutation::HugeI32(p) => overwrite(buf, at(p, len), &i32::MAX.to_be_bytes()),
        Mutation::HugeI16(p) => overwrite(buf, at(p, len), &i16::MAX.to_be_bytes()),
        Mutation::HugeVarint(p) => overwrite(buf, at(p, len), &[0xff, 0xff, 0xff, 0xff, 0x0f]),
        Mutation::MinusTwo(p) => overwrite(buf, at(p, len), &(-2i32).to_be_bytes()),
    }
}

fn concat(segs: &[Bytes]) -> Vec<u8> {
    segs.iter().flat_map(|s| s.iter().copied()).collect()
}

/// A valid request frame and response frame (without size prefixes) of `api` at `version`.
fn valid_frames(api: ApiKey, version: i16, seed: u64) -> (Vec<u8>, Vec<u8>) {
    let mut r = Rng::new(seed);
    let header = RequestHeader {
        api_key: api.as_i16(),
        api_version: version,
        correlation_id: r.next() as i32,
        client_id: Some(r.string()),
        unknown_tagged_fields: vec![],
    };
    let req = random_request(api, version, &mut r);
    let resp = random_response(api, version, &mut r);
    let req = concat(&encode_request(&header, &req).expect("valid request encodes"));
    let resp = concat(&encode_response(1, version, &resp).expect("valid response encodes"));
    (req[4..].to_vec(), resp[4..].to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        feed(&Bytes::from(data), ApiKey::ALL);
    }

    #[test]
    fn arbitrary_bytes_after_a_valid_header_never_panic(
        api in proptest::sample::select(ApiKey::ALL),
        version in 0i16..20,
        tail in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut frame = Vec::new();
        frame.extend_from_slice(&api.as_i16().to_be_bytes());
        frame.extend_from_slice(&version.to_be_bytes());
        frame.extend_from_slice(&7i32.to_be_bytes());
        frame.extend_from_slice(&tail);
        feed(&Bytes::from(frame), &[api]);
    }

    #[test]
    fn mutated_valid_frames_never_panic(
        api in proptest::sample::select(ApiKey::ALL),
        pick in any::<u16>(),
        seed in any::<u64>(),
        mutations in proptest::collection::vec(mutation(), 1..5),
    ) {
        let span = (api.highest_version() - api.lowest_version() + 1) as u16;
        let version = api.lowest_version() + (pick % span) as i16;
        let (mut req, mut resp) = valid_frames(api, version, seed);
        for m in &mutations {
            apply(&mut req, m);
            apply(&mut resp, m);
        }
        feed(&Bytes::from(req), &[api]);
        feed(&Bytes::from(resp), &[api]);
    }
}

#[test]
fn huge_counts_are_rejected_without_allocating() {
    // The tracker sees allocations (so the checks below mean something).
    let seen = largest_allocation(|| drop(std::hint::black_box(Vec::<u8>::with_capacity(1 << 20))));
    assert!(seen >= 1 << 20, "{seen}");
    // Metadata v12 request claiming 2^31-2 topics in a compact array.
    let frame = Bytes::from_static(&[
        0, 3, 0, 12, 0, 0, 0, 1, 0xff, 0xff, 0, 0xff, 0xff, 0xff, 0xff, 0x07,
    ]);
    let largest = largest_allocation(|| {
        assert!(decode_request(frame.clone()).is_err());
    });
    assert!(largest < 4096, "{largest}");
    // Produce v3 with an INT32 topic count of i32::MAX.
    let frame = Bytes::from_static(&[
        0, 0, 0, 3, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0, 1, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff,
    ]);
    let largest = largest_allocation(|| {
        assert!(decode_request(frame.clone()).is_err());
    });
    assert!(largest < 4096, "{largest}");
}

#[test]
fn every_prefix_of_valid_frames_is_handled() {
    // Every truncation of one valid frame per (API, version): must be an error, never a panic.
    for &api in ApiKey::ALL {
        for v in versions(api) {
            let (req, resp) = valid_frames(api, v, 99);
            for cut in 0..req.len() {
                assert!(decode_request(Bytes::copy_from_slice(&req[..cut])).is_err());
            }
            for cut in 0..resp.len() {
                let _ = decode_response(api, v, Bytes::copy_from_slice(&resp[..cut]));
            }
            assert!(decode_request(Bytes::from(req)).is_ok());
            assert!(decode_response(api, v, Bytes::from(resp)).is_ok());
        }
    }
}
