//! Decompression bombs: small inputs that expand far beyond the limit are rejected with
//! `DecompressedTooLarge`, and the peak memory allocated while rejecting them stays far below the
//! expanded size. A counting global allocator measures the peak, so this file holds one test
//! (tests in one binary run in parallel and would disturb the measurement).

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

use kafka_proto::error::DecodeError;
use kafka_proto::records::compression::decompress_for_magic;
use kafka_proto::records::*;

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator and only adds bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = CURRENT.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Expanded size of every bomb. (Peaks must stay under 16 MiB: an LZ4 frame may declare 4 MiB
/// blocks, for which the decoder holds two block buffers, and zstd keeps its window.)
const EXPANDED: usize = 64 << 20;
/// The decompression limit.
const LIMIT: usize = 256 << 10;

/// Streams `EXPANDED` zero bytes into a compressor, never holding them all.
fn bomb(codec: Compression) -> Vec<u8> {
    let zeros = vec![0u8; 1 << 20];
    match codec {
        Compression::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            for _ in 0..EXPANDED / zeros.len() {
                e.write_all(&zeros).unwrap();
            }
            e.finish().unwrap()
        }
        Compression::Lz4 => {
            let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
            for _ in 0..EXPANDED / zeros.len() {
                e.write_all(&zeros).unwrap();
            }
            e.finish().unwrap()
        }
        Compression::Zstd => {
            let mut e = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
            for _ in 0..EXPANDED / zeros.len() {
                e.write_all(&zeros).unwrap();
            }
            e.finish().unwrap()
        }
        Compression::Snappy => {
            // Xerial blocks of 32 KiB zeros: each is tiny.
            let block = snap::raw::Encoder::new()
                .compress_vec(&zeros[..32 << 10])
                .unwrap();
            let mut out = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01".to_vec();
            for _ in 0..EXPANDED / (32 << 10) {
                out.extend_from_slice(&(block.len() as u32).to_be_bytes());
                out.extend_from_slice(&block);
            }
            out
        }
        Compression::None => unreachable!(),
    }
}

/// Wraps compressed records in a batch header (count 1) with a valid CRC.
fn batch_around(codec: Compression, data: &[u8]) -> RecordBatch {
    let mut v = vec![0u8; 61];
    v[8..12].copy_from_slice(&((49 + data.len()) as i32).to_be_bytes());
    v[16] = 2;
    v[21..23].copy_from_slice(&i16::from(codec.id()).to_be_bytes());
    v[57..61].copy_from_slice(&1i32.to_be_bytes());
    v.extend_from_slice(data);
    let crc = crc32c::crc32c(&v[21..]);
    v[17..21].copy_from_slice(&crc.to_be_bytes());
    RecordBatch::new(bytes::Bytes::from(v)).unwrap()
}

/// Peak bytes allocated (above what was live before) while running `f`.
fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = CURRENT.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = f();
    (out, PEAK.load(Ordering::Relaxed).saturating_sub(base))
}

#[test]
fn bombs_are_rejected_without_allocating_their_expanded_size() {
    for codec in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let data = bomb(codec);
        let (r, peak) = peak_during(|| decompress_for_magic(codec, 2, &data, LIMIT));
        eprintln!(
            "{codec}: {} compressed bytes expand to {EXPANDED}; rejected at limit {LIMIT} with a peak of {peak} bytes",
            data.len()
        );
        assert_eq!(r, Err(DecodeError::DecompressedTooLarge(LIMIT)), "{codec}");
        assert!(peak < 16 << 20, "{codec}: peak {peak}");

        let batch = batch_around(codec, &data);
        batch.validate().unwrap();
        let (r, peak) = peak_during(|| batch.records(LIMIT).map(|_| ()));
        assert_eq!(r, Err(DecodeError::DecompressedTooLarge(LIMIT)), "{codec}");
        assert!(peak < 16 << 20, "{codec}: peak {peak}");

        // The magic-0 path (lz4 with Kafka's old header checksum) hits the same limit.
        if codec != Compression::Zstd {
            let (r, peak) = peak_during(|| decompress_for_magic(codec, 0, &data, LIMIT));
            assert_eq!(r, Err(DecodeError::DecompressedTooLarge(LIMIT)), "{codec}");
            assert!(peak < 16 << 20, "{codec}: peak {peak}");
        }
    }

    // A raw snappy block that declares 4 GiB is refused before any allocation for it.
    let declared = [0xff, 0xff, 0xff, 0xff, 0x0f, 0x00];
    let (r, peak) = peak_during(|| decompress(Compression::Snappy, &declared, LIMIT));
    assert_eq!(r, Err(DecodeError::DecompressedTooLarge(LIMIT)));
    assert!(peak < 4096, "peak {peak}");

    // Record counts and header counts cannot size allocations beyond the input.
    let mut v = vec![0u8; 61];
    v[8..12].copy_from_slice(&49i32.to_be_bytes());
    v[16] = 2;
    v[57..61].copy_from_slice(&i32::MAX.to_be_bytes());
    let crc = crc32c::crc32c(&v[21..]);
    v[17..21].copy_from_slice(&crc.to_be_bytes());
    let b = RecordBatch::new(bytes::Bytes::from(v)).unwrap();
    let (r, peak) = peak_during(|| b.records_vec(LIMIT).map(|v| v.len()));
    assert!(r.is_err());
    assert!(peak < 4096, "peak {peak}");
}
