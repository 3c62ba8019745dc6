#!/usr/bin/env python3
# Zero-fill probe (docs/benchmarks.md, "2026-11-27, second session"): three writers append
# SIZE bytes + fdatasync to their own file on the disk under /tmp (as a local 3-node cluster's
# replicas do), pausing GAP seconds between appends (the rest of the produce path), for SECS
# seconds, and print the appends' latency. MODE:
#   grow       every append grows the file (each sync also writes size and block metadata)
#   fdatasync  a filler thread per file keeps zeros ahead of the writer, as logstore's
#              reserve does (16 MiB fills, PIECE-byte pieces each written back with
#              sync_file_range, one fdatasync per fill), the writer fdatasyncs its file
#   sfr        as fdatasync, but the writer syncs only its own range (sync_file_range) and
#              flushes the device cache by fdatasync of the directory
# Usage: PIECE=131072 scripts/bench/zero-fill-probe.py SIZE MODE SECS GAP
import os, sys, time, threading, ctypes
libc=ctypes.CDLL(None, use_errno=True)
SFR=1|2|4
def sfr(fd,off,n):
    assert libc.sync_file_range(fd, ctypes.c_long(off), ctypes.c_long(n), 7)==0
size=int(sys.argv[1]); mode=sys.argv[2]; secs=float(sys.argv[3]); gap=float(sys.argv[4])
FILL=16<<20; PIECE=int(os.environ.get("PIECE", 1<<20))
n=3; d=os.environ.get("PROBE_DIR", "/tmp/zero-fill-probe"); os.makedirs(d, exist_ok=True)
dfd=os.open(d, os.O_RDONLY)
buf=os.urandom(size); zeros=bytes(PIECE)
st=[{"off":0,"zend":0,"filling":False,"grown":0} for _ in range(n)]
cv=[threading.Condition() for _ in range(n)]
fds=[os.open(f"{d}/w{i}", os.O_RDWR|os.O_CREAT|os.O_TRUNC) for i in range(n)]
os.fsync(dfd)
stop=False; lat=[[] for _ in range(n)]
def filler(i):
    fd=os.open(f"{d}/w{i}", os.O_RDWR)
    while not stop:
        with cv[i]:
            while not stop and (mode=="grow" or st[i]["zend"]-st[i]["off"] >= FILL//2): cv[i].wait(0.05)
            if stop: break
            z=st[i]["zend"]; st[i]["filling"]=True
        p=z
        while p<z+FILL:
            os.pwrite(fd, zeros, p); sfr(fd,p,PIECE); p+=PIECE
        os.fdatasync(fd)
        with cv[i]:
            st[i]["zend"]=z+FILL; st[i]["filling"]=False; cv[i].notify_all()
def writer(i):
    fd=fds[i]; end=time.time()+secs
    while time.time()<end:
        t=time.perf_counter()
        with cv[i]:
            off=st[i]["off"]
            while off+size>st[i]["zend"] and st[i]["filling"]: cv[i].wait()
            grow= off+size>st[i]["zend"]
            os.pwrite(fd, buf, off); st[i]["off"]=off+size
            if grow: st[i]["zend"]=off+size; st[i]["grown"]+=1
            cv[i].notify_all()
        if grow or mode in ("grow","fdatasync"): os.fdatasync(fd)
        else: sfr(fd,off,size); os.fdatasync(dfd)
        lat[i].append(time.perf_counter()-t)
        if gap: time.sleep(gap)
fs=[threading.Thread(target=filler,args=(i,)) for i in range(n)]
ws=[threading.Thread(target=writer,args=(i,)) for i in range(n)]
[t.start() for t in fs]; time.sleep(0.5); [t.start() for t in ws]; [t.join() for t in ws]; stop=True
for i in range(n):
    with cv[i]: cv[i].notify_all()
[t.join() for t in fs]
a=sorted(x for l in lat for x in l); N=len(a); p=lambda q:a[min(N-1,int(q*N))]*1000
print(f"size={size} mode={mode} gap={gap} ops={N} MB/s={N*size/secs/1e6:.0f} avg={sum(a)/N*1000:.3f} p50={p(.5):.3f} p90={p(.9):.3f} p99={p(.99):.3f} p999={p(.999):.3f} grown={sum(s['grown'] for s in st)}")
for i in range(n): os.close(fds[i]); os.unlink(f"{d}/w{i}")
