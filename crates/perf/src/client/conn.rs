//! One TCP connection to a broker: framed requests with correlation ids, responses read in
//! order. The two halves can be driven separately, so that one task keeps several requests in
//! flight (Kafka answers the requests of a connection in the order they were sent).

use std::io::IoSlice;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_proto::frame::{decode_response, encode_request, read_frame_size, Request, Response};
use kafka_proto::header::RequestHeader;
use kafka_proto::ApiKey;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::security::ClientSecurity;
use super::ClientError;

/// The largest response frame accepted (a Fetch of many partitions can be large; ours are at
/// most a few MiB).
pub const MAX_RESPONSE_BYTES: usize = 256 << 20;

/// The sending half of a connection's byte stream (TCP, or TLS over TCP).
type WriteHalf = Box<dyn AsyncWrite + Send + Unpin>;
/// The receiving half.
type ReadHalf = Box<dyn AsyncRead + Send + Unpin>;

/// The sending half: encodes requests with increasing correlation ids and writes them.
pub struct FrameWriter {
    half: WriteHalf,
    client_id: String,
    next_correlation_id: i32,
    bytes_written: u64,
}

impl FrameWriter {
    /// Encodes and writes one request at `api_version`; returns its correlation id.
    pub async fn send(&mut self, api_version: i16, request: &Request) -> Result<i32, ClientError> {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1) & i32::MAX;
        let header = RequestHeader {
            api_key: request.api_key().as_i16(),
            api_version,
            correlation_id,
            client_id: Some(self.client_id.clone()),
            ..RequestHeader::default()
        };
        let segments = encode_request(&header, request)?;
        self.bytes_written += write_segments(&mut self.half, &segments).await? as u64;
        // A TLS stream buffers what it encrypts: push it out (a no-op on TCP).
        self.half.flush().await?;
        Ok(correlation_id)
    }

    /// Bytes written to the socket so far.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }
}

/// Writes every segment with vectored writes, handling short writes; returns the bytes written.
pub async fn write_segments<W: AsyncWrite + Unpin>(
    w: &mut W,
    segments: &[Bytes],
) -> std::io::Result<usize> {
    let total: usize = segments.iter().map(Bytes::len).sum();
    let mut seg = 0;
    let mut off = 0;
    while seg < segments.len() {
        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(segments.len() - seg);
        if let Some(first) = segments.get(seg).and_then(|s| s.get(off..)) {
            slices.push(IoSlice::new(first));
        }
        slices.extend(segments.iter().skip(seg + 1).map(|s| IoSlice::new(s)));
        let mut n = w.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while n > 0 && seg < segments.len() {
            let left = segments.get(seg).map_or(0, Bytes::len) - off;
            if n >= left {
                n -= left;
                seg += 1;
                off = 0;
            } else {
                off += n;
                n = 0;
            }
        }
        while seg < segments.len() && segments.get(seg).is_some_and(|s| s.len() == off) {
            seg += 1;
            off = 0;
        }
    }
    Ok(total)
}

impl std::fmt::Debug for FrameWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameWriter")
            .field("next_correlation_id", &self.next_correlation_id)
            .field("bytes_written", &self.bytes_written)
            .finish()
    }
}

/// The receiving half: reads size-prefixed frames and decodes responses.
pub struct FrameReader {
    half: BufReader<ReadHalf>,
    bytes_read: u64,
}

impl std::fmt::Debug for FrameReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameReader")
            .field("bytes_read", &self.bytes_read)
            .finish()
    }
}

impl FrameReader {
    /// Reads the next frame (without its size prefix).
    pub async fn recv_frame(&mut self) -> Result<Bytes, ClientError> {
        let mut prefix = [0u8; 4];
        self.half.read_exact(&mut prefix).await?;
        let size = read_frame_size(prefix, MAX_RESPONSE_BYTES)?;
        let mut buf = BytesMut::with_capacity(size);
        // Read into the spare capacity: no zeroing pass over a frame about to be overwritten.
        while buf.len() < size {
            let want = (size - buf.len()) as u64;
            let n = (&mut self.half).take(want).read_buf(&mut buf).await?;
            if n == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
            }
        }
        self.bytes_read += 4 + size as u64;
        Ok(buf.freeze())
    }

    /// Reads the next response, which must answer the request with `correlation_id` (an `api`
    /// request at `api_version`).
    pub async fn recv(
        &mut self,
        correlation_id: i32,
        api: ApiKey,
        api_version: i16,
    ) -> Result<Response, ClientError> {
        let frame = self.recv_frame().await?;
        let (header, body) = decode_response(api, api_version, frame)?;
        if header.correlation_id != correlation_id {
            return Err(ClientError::CorrelationMismatch {
                expected: correlation_id,
                got: header.correlation_id,
            });
        }
        Ok(body)
    }

    /// Bytes read from the socket so far (frames with their size prefixes).
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }
}

/// A connection to one broker.
#[derive(Debug)]
pub struct Connection {
    /// The address connected to.
    pub addr: String,
    /// The sending half.
    pub writer: FrameWriter,
    /// The receiving half.
    pub reader: FrameReader,
    /// How long one request may take in [`Connection::request`].
    pub timeout: Duration,
}

impl Connection {
    /// Connects to `addr` (`host:port`) with TCP_NODELAY, within `timeout` (PLAINTEXT).
    pub async fn connect(
        addr: &str,
        client_id: &str,
        timeout: Duration,
    ) -> Result<Connection, ClientError> {
        Connection::connect_with(addr, client_id, timeout, &ClientSecurity::default()).await
    }

    /// Connects to `addr` as `security` says: TCP, TLS over it when configured (the server's
    /// certificate checked for the host of `addr`), then SASL when configured, all within
    /// `timeout` each.
    pub async fn connect_with(
        addr: &str,
        client_id: &str,
        timeout: Duration,
        security: &ClientSecurity,
    ) -> Result<Connection, ClientError> {
        let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| ClientError::Timeout("connect"))??;
        stream.set_nodelay(true)?;
        let (r, w): (ReadHalf, WriteHalf) = match &security.tls {
            None => {
                let (r, w) = stream.into_split();
                (Box::new(r), Box::new(w))
            }
            Some(config) => {
                let host = addr
                    .rsplit_once(':')
                    .map_or(addr, |(h, _)| h)
                    .trim_matches(['[', ']']);
                let name = rustls::pki_types::ServerName::try_from(host.to_string())
                    .map_err(|e| ClientError::Unexpected(format!("server name {host}: {e}")))?;
                let connector = tokio_rustls::TlsConnector::from(config.clone());
                let tls = tokio::time::timeout(timeout, connector.connect(name, stream))
                    .await
                    .map_err(|_| ClientError::Timeout("TLS handshake"))??;
                let (r, w) = tokio::io::split(tls);
                (Box::new(r), Box::new(w))
            }
        };
        let mut conn = Connection::from_halves(addr, client_id, timeout, r, w);
        if let Some(sasl) = &security.sasl {
            super::security::authenticate(&mut conn, sasl).await?;
        }
        Ok(conn)
    }

    fn from_halves(
        addr: &str,
        client_id: &str,
        timeout: Duration,
        r: ReadHalf,
        w: WriteHalf,
    ) -> Connection {
        Connection {
            addr: addr.to_string(),
            writer: FrameWriter {
                half: w,
                client_id: client_id.to_string(),
                next_correlation_id: 1,
                bytes_written: 0,
            },
            reader: FrameReader {
                half: BufReader::with_capacity(64 << 10, r),
                bytes_read: 0,
            },
            timeout,
        }
    }

    /// Sends one request and waits for its response (nothing else may be in flight).
    pub async fn request(
        &mut self,
        api_version: i16,
        request: &Request,
    ) -> Result<Response, ClientError> {
        let api = request.api_key();
        let fut = async {
            let corr = self.writer.send(api_version, request).await?;
            self.reader.recv(corr, api, api_version).await
        };
        tokio::time::timeout(self.timeout, fut)
            .await
            .map_err(|_| ClientError::Timeout(api.name()))?
    }
}

/// The median of `samples` ApiVersions round trips on `conn` (after two warm-up requests):
/// the request/response round-trip time of this client and server with no work in it, used as
/// the `rtt` of VDL's amortised per-message latency.
pub async fn measure_rtt(conn: &mut Connection, samples: usize) -> Result<Duration, ClientError> {
    let req = super::protocol::api_versions();
    let mut times = Vec::with_capacity(samples);
    for i in 0..samples + 2 {
        let t = std::time::Instant::now();
        conn.request(super::API_VERSIONS_VERSION, &req).await?;
        if i >= 2 {
            times.push(t.elapsed());
        }
    }
    times.sort();
    Ok(times.get(times.len() / 2).copied().unwrap_or_default())
}
