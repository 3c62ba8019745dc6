#!/usr/bin/env python3
"""Recording TCP proxy for the Kafka wire protocol (standard library only).

Usage: proxy.py --map LISTEN_PORT:UPSTREAM_PORT [--map ...] --out FILE.jsonl
                [--label-file FILE] [--ready-file FILE]

Forwards bytes both ways unchanged. Each direction is split into Kafka frames
(4-byte big-endian size prefix). From every request frame it reads the request
header start (api_key int16, api_version int16, correlation_id int32); every
response frame (which starts with correlation_id int32) is paired with the
request of the same correlation id on the same connection. Each pair is
appended as one JSON line to --out, with the frame BODIES (no size prefix) in
hex, as soon as it is complete, so a killed proxy loses nothing already paired.

--label-file: the text in this file at the moment a connection is accepted
names the client for every frame on that connection (capture.sh rewrites it
between client runs), so one proxy serves all clients.
"""
import argparse
import asyncio
import itertools
import json
import os
import signal
import struct
import sys
import time

SEQ = itertools.count()  # global order of requests across all connections
CONN_IDS = itertools.count()
OPEN_CONNS = set()  # so that a stopped proxy still writes unpaired requests


class Recorder:
    def __init__(self, path):
        self.f = open(path, "a", buffering=1)

    def write(self, rec):
        self.f.write(json.dumps(rec, sort_keys=True) + "\n")
        self.f.flush()


def read_label(path):
    if not path:
        return "unknown"
    try:
        with open(path) as f:
            return f.read().strip() or "unknown"
    except OSError:
        return "unknown"


class Conn:
    def __init__(self, recorder, label, listen_port):
        self.id = next(CONN_IDS)
        self.recorder = recorder
        self.label = label
        self.listen_port = listen_port
        self.pending = {}  # correlation_id -> request record
        self.unparsed = 0

    def on_request(self, body):
        if len(body) < 8:
            self.unparsed += 1
            return
        api_key, api_version, corr = struct.unpack(">hhi", body[:8])
        rec = {
            "seq": next(SEQ),
            "t": time.time(),
            "client": self.label,
            "conn": self.id,
            "port": self.listen_port,
            "api_key": api_key,
            "api_version": api_version,
            "correlation_id": corr,
            "req": body.hex(),
        }
        if corr in self.pending:
            # Would only happen with a client bug; keep the old one visible.
            self.flush_unpaired(self.pending.pop(corr))
        self.pending[corr] = rec

    def on_response(self, body):
        if len(body) < 4:
            self.unparsed += 1
            return
        (corr,) = struct.unpack(">i", body[:4])
        rec = self.pending.pop(corr, None)
        if rec is None:
            self.recorder.write({"client": self.label, "conn": self.id,
                                 "orphan_response": body.hex(), "correlation_id": corr})
            return
        rec["resp"] = body.hex()
        self.recorder.write(rec)

    def flush_unpaired(self, rec):
        rec["resp"] = None  # e.g. Produce with acks=0 has no response
        self.recorder.write(rec)

    def close(self):
        for rec in sorted(self.pending.values(), key=lambda r: r["seq"]):
            self.flush_unpaired(rec)
        self.pending.clear()


async def pump(reader, writer, on_frame):
    """Copy bytes reader->writer unchanged; call on_frame(body) per frame."""
    buf = bytearray()
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            buf += data
            while len(buf) >= 4:
                (size,) = struct.unpack(">i", buf[:4])
                if size < 0 or len(buf) < 4 + size:
                    break
                on_frame(bytes(buf[4:4 + size]))
                del buf[:4 + size]
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError, OSError):
        pass
    finally:
        try:
            writer.write_eof()
        except (OSError, RuntimeError):
            pass


async def handle(client_reader, client_writer, upstream_port, listen_port, args, recorder):
    label = read_label(args.label_file)
    try:
        up_reader, up_writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", upstream_port), timeout=10)
    except (OSError, asyncio.TimeoutError):
        client_writer.close()
        return
    conn = Conn(recorder, label, listen_port)
    OPEN_CONNS.add(conn)
    t1 = asyncio.create_task(pump(client_reader, up_writer, conn.on_request))
    t2 = asyncio.create_task(pump(up_reader, client_writer, conn.on_response))
    # When either side finishes, give the other a moment to drain, then close.
    done, pending = await asyncio.wait({t1, t2}, return_when=asyncio.FIRST_COMPLETED)
    try:
        await asyncio.wait_for(asyncio.gather(*pending), timeout=5)
    except asyncio.TimeoutError:
        for t in pending:
            t.cancel()
    conn.close()
    OPEN_CONNS.discard(conn)
    for w in (client_writer, up_writer):
        try:
            w.close()
        except OSError:
            pass


async def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--map", action="append", required=True,
                    help="LISTEN_PORT:UPSTREAM_PORT on 127.0.0.1")
    ap.add_argument("--out", required=True)
    ap.add_argument("--label-file")
    ap.add_argument("--ready-file")
    args = ap.parse_args()
    recorder = Recorder(args.out)
    servers = []
    for m in args.map:
        lp, up = (int(x) for x in m.split(":"))
        srv = await asyncio.start_server(
            lambda r, w, up=up, lp=lp: handle(r, w, up, lp, args, recorder),
            host="127.0.0.1", port=lp)
        servers.append(srv)
    if args.ready_file:
        with open(args.ready_file, "w") as f:
            f.write(str(os.getpid()))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, stop.set)
    await stop.wait()
    for srv in servers:
        srv.close()
    for conn in list(OPEN_CONNS):
        conn.close()
    print("proxy: stopped", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
