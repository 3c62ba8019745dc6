#!/usr/bin/env python3
"""Consistency check of the golden fixtures (standard library only).

Usage: verify_fixtures.py [GOLDEN_DIR]

For every manifest line: both files exist, the request starts with the
manifest's api_key / api_version / correlation_id, the response starts with the
same correlation_id, and every .bin file in frames/ is listed. Exits 1 on the
first kind of problem found (all problems are printed).
"""
import os
import struct
import sys


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    problems = []
    listed = set()
    with open(os.path.join(root, "manifest.tsv")) as f:
        header = f.readline().rstrip("\n").split("\t")
        want = ["client", "api_key", "api_name", "api_version", "correlation_id",
                "req_file", "resp_file"]
        if header != want:
            problems.append("manifest header %r != %r" % (header, want))
        n = 0
        for line in f:
            n += 1
            client, key, name, ver, corr, req, resp = line.rstrip("\n").split("\t")
            listed.update((req, resp))
            try:
                rq = open(os.path.join(root, req), "rb").read()
                rs = open(os.path.join(root, resp), "rb").read()
            except OSError as e:
                problems.append(str(e))
                continue
            if struct.unpack(">hhi", rq[:8]) != (int(key), int(ver), int(corr)):
                problems.append("%s: header %r != manifest" % (req, struct.unpack(">hhi", rq[:8])))
            if struct.unpack(">i", rs[:4])[0] != int(corr):
                problems.append("%s: correlation id mismatch" % resp)
            if "-%s-v%s-" % (name, ver) not in req or not req.startswith("frames/%s-" % client):
                problems.append("%s: name does not match manifest" % req)
    on_disk = {"frames/" + x for x in os.listdir(os.path.join(root, "frames")) if x.endswith(".bin")}
    for extra in sorted(on_disk - listed):
        problems.append("not in manifest: %s" % extra)
    for p in problems:
        print("verify: " + p, file=sys.stderr)
    print("verify: %d pairs, %d problems" % (n, len(problems)))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
