//! Reading and writing Kafka frames on a connection: a frame's size checked against the
//! connection's limit before its body is read, responses written as vectored segments within a
//! deadline.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_proto::frame::read_frame_size;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::ConnectionEnd;

/// Reads one frame body of at most `max_bytes` (read when the frame's size arrives); `None`
/// at a clean end of stream between frames.
pub(super) async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    max_bytes: &AtomicUsize,
) -> Result<Option<Bytes>, ConnectionEnd> {
    let mut prefix = [0u8; 4];
    match reader.read_exact(&mut prefix).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let size = read_frame_size(prefix, max_bytes.load(Ordering::Relaxed))
        .map_err(ConnectionEnd::BadFrame)?;
    let mut buf = BytesMut::zeroed(size);
    reader.read_exact(&mut buf).await?;
    Ok(Some(buf.freeze()))
}

/// Writes one response, failing with `TimedOut` when it is not written within `timeout` (the
/// client stopped reading).
pub(super) async fn write_segments<W: AsyncWrite + Unpin>(
    writer: &mut W,
    segments: &[Bytes],
    timeout: Duration,
) -> std::io::Result<()> {
    tokio::time::timeout(timeout, write_all_segments(writer, segments))
        .await
        .map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client did not read its response in time",
            )
        })?
}

async fn write_all_segments<W: AsyncWrite + Unpin>(
    writer: &mut W,
    segments: &[Bytes],
) -> std::io::Result<()> {
    // Vectored writes: record chunks go out without being copied into one buffer.
    let mut slices: Vec<std::io::IoSlice<'_>> =
        segments.iter().map(|s| std::io::IoSlice::new(s)).collect();
    let mut bufs: &mut [std::io::IoSlice<'_>] = &mut slices;
    while !bufs.is_empty() {
        let n = writer.write_vectored(bufs).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        std::io::IoSlice::advance_slices(&mut bufs, n);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The frame limit is read when each frame's size arrives: a size above it (the
    /// pre-authentication limit) is refused before anything is allocated or read, and raising
    /// the limit (after authentication) admits the same size.
    #[tokio::test]
    async fn frame_limits_are_checked_before_reading_the_body() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let limit = AtomicUsize::new(1024);
        // A 1 MiB frame claimed by its size alone: refused, its body never sent.
        client.write_all(&(1u32 << 20).to_be_bytes()).await.unwrap();
        assert!(matches!(
            read_frame(&mut server, &limit).await,
            Err(ConnectionEnd::BadFrame(_))
        ));
        // Within the limit: read whole.
        let (mut client, mut server) = tokio::io::duplex(4096);
        client.write_all(&5u32.to_be_bytes()).await.unwrap();
        client.write_all(b"hello").await.unwrap();
        let frame = read_frame(&mut server, &limit).await.unwrap().unwrap();
        assert_eq!(&frame[..], b"hello");
        // 2000 bytes: too large before authentication, fine once the limit is raised.
        client.write_all(&2000u32.to_be_bytes()).await.unwrap();
        assert!(read_frame(&mut server, &limit).await.is_err());
        let (mut client, mut server) = tokio::io::duplex(4096);
        limit.store(1 << 20, Ordering::Relaxed);
        let writer = tokio::spawn(async move {
            client.write_all(&2000u32.to_be_bytes()).await.unwrap();
            client.write_all(&[7u8; 2000]).await.unwrap();
            client
        });
        let frame = read_frame(&mut server, &limit).await.unwrap().unwrap();
        assert_eq!(frame.len(), 2000);
        drop(writer.await.unwrap());
        // A clean end of stream between frames is no error.
        assert!(read_frame(&mut server, &limit).await.unwrap().is_none());
    }
}
