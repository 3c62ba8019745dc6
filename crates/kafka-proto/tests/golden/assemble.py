#!/usr/bin/env python3
"""Turn the proxy's raw capture (JSON lines) into committed fixtures.

Usage: assemble.py RAW.jsonl OUT_DIR [--cap N] [--clients a,b,c]

Writes OUT_DIR/frames/<client>-<NNN>-<ApiName>-v<version>-{req,resp}.bin
(frame bodies, no 4-byte size prefix), OUT_DIR/manifest.tsv and prints a
summary table (markdown) of APIs/versions per client on stdout.

Deduplication: at most --cap pairs (default 3) per (client, api_key,
api_version, variant), in capture order. "variant" is empty except for frames
carrying record batches (Produce requests, Fetch responses), where it is the
set of compression codecs of the batches found (none/gzip/snappy/lz4/zstd,
"empty" when no batch): otherwise the cap would throw away the compressed
batches, which are the most valuable vectors for the codec.
"""
import argparse
import json
import os
import sys
from collections import OrderedDict, defaultdict

API_NAMES = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 4: "LeaderAndIsr",
    5: "StopReplica", 6: "UpdateMetadata", 7: "ControlledShutdown", 8: "OffsetCommit",
    9: "OffsetFetch", 10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat",
    13: "LeaveGroup", 14: "SyncGroup", 15: "DescribeGroups", 16: "ListGroups",
    17: "SaslHandshake", 18: "ApiVersions", 19: "CreateTopics", 20: "DeleteTopics",
    21: "DeleteRecords", 22: "InitProducerId", 23: "OffsetForLeaderEpoch",
    24: "AddPartitionsToTxn", 25: "AddOffsetsToTxn", 26: "EndTxn", 27: "WriteTxnMarkers",
    28: "TxnOffsetCommit", 29: "DescribeAcls", 30: "CreateAcls", 31: "DeleteAcls",
    32: "DescribeConfigs", 33: "AlterConfigs", 34: "AlterReplicaLogDirs",
    35: "DescribeLogDirs", 36: "SaslAuthenticate", 37: "CreatePartitions",
    38: "CreateDelegationToken", 39: "RenewDelegationToken", 40: "ExpireDelegationToken",
    41: "DescribeDelegationToken", 42: "DeleteGroups", 43: "ElectLeaders",
    44: "IncrementalAlterConfigs", 45: "AlterPartitionReassignments",
    46: "ListPartitionReassignments", 47: "OffsetDelete", 48: "DescribeClientQuotas",
    49: "AlterClientQuotas", 50: "DescribeUserScramCredentials",
    51: "AlterUserScramCredentials", 52: "Vote", 53: "BeginQuorumEpoch",
    54: "EndQuorumEpoch", 55: "DescribeQuorum", 56: "AlterPartition", 57: "UpdateFeatures",
    58: "Envelope", 59: "FetchSnapshot", 60: "DescribeCluster", 61: "DescribeProducers",
    62: "BrokerRegistration", 63: "BrokerHeartbeat", 64: "UnregisterBroker",
    65: "DescribeTransactions", 66: "ListTransactions", 67: "AllocateProducerIds",
    68: "ConsumerGroupHeartbeat", 69: "ConsumerGroupDescribe", 70: "ControllerRegistration",
    71: "GetTelemetrySubscriptions", 72: "PushTelemetry", 73: "AssignReplicasToDirs",
    74: "ListClientMetricsResources", 75: "DescribeTopicPartitions",
    76: "ShareGroupHeartbeat", 77: "ShareGroupDescribe", 78: "ShareFetch",
    79: "ShareAcknowledge", 80: "AddRaftVoter", 81: "RemoveRaftVoter",
    82: "UpdateRaftVoter", 83: "InitializeShareGroupState", 84: "ReadShareGroupState",
    85: "WriteShareGroupState", 86: "DeleteShareGroupState",
    87: "ReadShareGroupStateSummary",
}

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def _crc32c_table():
    poly = 0x82F63B78
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def record_batch_codecs(frame):
    """Find v2 record batches anywhere in a frame by validating their CRC-32C.

    Layout: baseOffset i64, batchLength i32, partitionLeaderEpoch i32, magic i8,
    crc u32, attributes i16 ... ; crc covers attributes..end of batch.
    Returns a sorted list of codec names (plus "txn"/"control" markers).
    """
    found = set()
    n = len(frame)
    i = 0
    while i + 23 <= n:
        if frame[i + 16] == 2:
            blen = int.from_bytes(frame[i + 8:i + 12], "big", signed=True)
            end = i + 12 + blen
            if 49 <= blen and end <= n:
                crc = int.from_bytes(frame[i + 17:i + 21], "big")
                if crc32c(frame[i + 21:end]) == crc:
                    attrs = int.from_bytes(frame[i + 21:i + 23], "big")
                    found.add(CODECS.get(attrs & 7, "codec%d" % (attrs & 7)))
                    if attrs & 0x10:
                        found.add("txn")
                    if attrs & 0x20:
                        found.add("control")
                    i = end
                    continue
        i += 1
    return sorted(found) if found else ["empty"]


def variant(rec):
    if rec["api_key"] == 0:
        return "+".join(record_batch_codecs(bytes.fromhex(rec["req"])))
    if rec["api_key"] == 1 and rec.get("resp"):
        return "+".join(record_batch_codecs(bytes.fromhex(rec["resp"])))
    return ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("raw")
    ap.add_argument("out_dir")
    ap.add_argument("--cap", type=int, default=3)
    ap.add_argument("--clients", default="", help="comma-separated order of clients")
    args = ap.parse_args()

    recs = []
    with open(args.raw) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            if "api_key" not in r:
                continue  # orphan responses: nothing to pair
            recs.append(r)
    recs.sort(key=lambda r: r["seq"])

    order = [c for c in args.clients.split(",") if c]
    frames_dir = os.path.join(args.out_dir, "frames")
    os.makedirs(frames_dir, exist_ok=True)
    for name in os.listdir(frames_dir):
        if name.endswith(".bin"):
            os.remove(os.path.join(frames_dir, name))

    kept = defaultdict(int)
    seqno = defaultdict(int)
    manifest = []
    summary = defaultdict(lambda: OrderedDict())  # client -> (key,ver) -> [count, variants]
    for r in recs:
        client = r["client"]
        if order and client not in order:
            continue
        if r.get("resp") is None:
            continue  # no response (acks=0) or cut off: not a pair
        v = variant(r)
        k = (client, r["api_key"], r["api_version"], v)
        if kept[k] >= args.cap:
            continue
        kept[k] += 1
        seqno[client] += 1
        name = API_NAMES.get(r["api_key"], "Api%d" % r["api_key"])
        base = "%s-%03d-%s-v%d" % (client, seqno[client], name, r["api_version"])
        req_file, resp_file = "frames/%s-req.bin" % base, "frames/%s-resp.bin" % base
        with open(os.path.join(args.out_dir, req_file), "wb") as f:
            f.write(bytes.fromhex(r["req"]))
        with open(os.path.join(args.out_dir, resp_file), "wb") as f:
            f.write(bytes.fromhex(r["resp"]))
        manifest.append((client, r["api_key"], name, r["api_version"], r["correlation_id"],
                         req_file, resp_file))
        s = summary[client].setdefault((r["api_key"], r["api_version"]), [0, set()])
        s[0] += 1
        if v:
            s[1].add(v)

    with open(os.path.join(args.out_dir, "manifest.tsv"), "w") as f:
        f.write("client\tapi_key\tapi_name\tapi_version\tcorrelation_id\treq_file\tresp_file\n")
        for row in manifest:
            f.write("\t".join(str(x) for x in row) + "\n")

    clients = order or sorted(summary)
    out = ["| client | api_key | API | versions (pairs) | record-batch variants |",
           "|---|---|---|---|---|"]
    for c in clients:
        by_key = defaultdict(list)
        variants = defaultdict(set)
        for (key, ver), (cnt, vs) in summary[c].items():
            by_key[key].append("v%d (%d)" % (ver, cnt))
            variants[key] |= vs
        for key in sorted(by_key):
            out.append("| %s | %d | %s | %s | %s |" % (
                c, key, API_NAMES.get(key, "?"), ", ".join(sorted(by_key[key])),
                ", ".join(sorted(variants[key]))))
    total = sum(os.path.getsize(os.path.join(frames_dir, n)) for n in os.listdir(frames_dir))
    print("\n".join(out))
    print("\n%d pairs, %d files, %d bytes of frames" % (len(manifest), 2 * len(manifest), total))
    missing = [c for c in order if c not in summary]
    if missing:
        print("WARNING: no frames captured for: %s" % ", ".join(missing), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
