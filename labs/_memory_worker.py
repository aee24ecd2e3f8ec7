"""A memory lab workload: joins its cgroup first, then uses memory, bounded in time.

Run by path (``python -I _memory_worker.py ...``): standard library only. Same contract
as ``_worker.py`` (``--procs`` files joined before any work, one JSON line on stdout
when ready, ends by itself at ``--seconds``, optional ``--result`` summary), with
three modes:

* ``anon --mib N``: N MiB of anonymous memory, every page written once, then held
  (with no swap, as on a Kubernetes node, it cannot be reclaimed);
* ``scan --file F --mib N --rate-mib R [--pattern seq|random]``: creates F (N MiB, on
  a disk-backed file system) from inside the cgroup, drops it from the page cache,
  reads it once, then at R MiB/s: front to back again and again (``seq``), or one
  page at a time anywhere in it (``random``). When N is more than the cgroup (or the node) can
  cache, pages read again were evicted since their last read: refaults, counted in
  ``memory.stat`` ``workingset_refault_file``. A sequential scan's refaults are not
  a working set the kernel protects (it stalls little on them); random reads of a hot
  file are, and a task waiting for one is stalled on memory (PSI);
* ``fill --reserve-mib R``: grows anonymous memory until the node's ``MemAvailable``
  is down to R MiB and holds it there: gives memory back when ``MemAvailable`` falls
  under R/2, takes more when it rises above 2R (never beyond ``--max-mib``). This is
  the memory hog of the memory-pressure lab: the node runs short, but it is never
  pushed into the OOM killer by the lab itself.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import random
import signal
import sys
import time

MIB = 1 << 20
CHUNK = 4 * MIB  # the hog's unit of growth and release
READ = 256 * 1024
PAGE = 4096


def _join(procs_files: list[str]) -> None:
    pid = str(os.getpid()).encode()
    for path in procs_files:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, pid)
        finally:
            os.close(fd)


def _ready() -> None:
    sys.stdout.write(json.dumps({"pid": os.getpid(), "children": []}) + "\n")
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


def _touched(mib: int) -> mmap.mmap:
    """``mib`` MiB of private anonymous memory, every page written."""
    m = mmap.mmap(-1, mib * MIB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    block = b"\x5a" * MIB
    for _ in range(mib):
        m.write(block)
    return m


def _anon(mib: int, deadline: float) -> dict[str, object]:
    m = _touched(mib)
    _ready()
    while time.monotonic() < deadline:
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    m.close()
    return {"mode": "anon", "mib": mib}


def _make_file(path: str, mib: int) -> None:
    block = os.urandom(MIB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        for _ in range(mib):
            os.write(fd, block)
        os.fsync(fd)
        # Start cold: the pages written are dropped, so every page the scan keeps
        # cached was read by it (and charged to its cgroup).
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _scan(path: str, mib: int, rate_mib: float, pattern: str, deadline: float) -> dict[str, object]:
    """Read the whole file once, unpaced (so the cache is as full of it as it can be
    from the start), then at ``rate_mib``: ``seq`` front to back in 256 KiB reads,
    ``random`` one 4 KiB page at a time anywhere in it, ``mmap`` one page anywhere in
    a read-only mapping of it (a hot working set: what was evicted is wanted again)."""
    _make_file(path, mib)
    size = mib * MIB
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    mapped: mmap.mmap | None = None
    try:
        for off in range(0, size, READ):
            if time.monotonic() >= deadline:
                break
            os.pread(fd, READ, off)
        _ready()  # after the warm-up: the lab may now slow our disk down (io.max)
        if pattern == "mmap":
            # A memory-mapped data file, as databases keep them: a page not in memory
            # is a major fault, and a refault in a fault is the working set coming back.
            # (No MADV_RANDOM: the kernel then drops the access history that tells a
            # working set from a scan, and no refault would count as one.)
            mapped = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        elif pattern == "random":
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no readahead: a page a miss
        unit = READ if pattern == "seq" else PAGE
        rng = random.Random(os.getpid())
        done = 0  # bytes read since the warm-up
        off = 0
        start = time.monotonic()
        while time.monotonic() < deadline:
            if pattern != "seq":
                off = rng.randrange(size // PAGE) * PAGE
            if mapped is not None:
                mapped[off]
            else:
                os.pread(fd, unit, off)
            off = (off + unit) % size
            done += unit
            due = start + done / (rate_mib * MIB)  # pace: sleep until this read is due
            now = time.monotonic()
            if due > now:
                time.sleep(min(due - now, max(0.0, deadline - now)))
    finally:
        if mapped is not None:
            mapped.close()
        os.close(fd)
    elapsed = max(time.monotonic() - start, 1e-9) if "start" in locals() else 1e-9
    return {
        "mode": "scan",
        "pattern": pattern,
        "mib": mib,
        "mib_per_s": round(done / MIB / elapsed, 2) if "done" in locals() else 0.0,
    }


def _available_mib() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def _fill(reserve_mib: int, max_mib: int, deadline: float) -> dict[str, object]:
    chunks: list[mmap.mmap] = []
    _ready()
    low_seen = _available_mib()
    peak = 0
    released = 0
    while time.monotonic() < deadline:
        avail = _available_mib()
        low_seen = min(low_seen, avail)
        held = len(chunks) * CHUNK // MIB
        if avail > reserve_mib * 2 and held < max_mib:
            # Far above the target: grow quickly; near it, one chunk at a time.
            n = max(1, (avail - reserve_mib) // (CHUNK // MIB) // 2)
            for _ in range(min(n, (max_mib - held) // (CHUNK // MIB))):
                chunks.append(_touched(CHUNK // MIB))
        elif avail > reserve_mib and held < max_mib:
            chunks.append(_touched(CHUNK // MIB))
        elif avail < reserve_mib // 2 and chunks:
            chunks.pop().close()
            released += 1
        peak = max(peak, len(chunks) * CHUNK // MIB)
        time.sleep(0.25)
    held = len(chunks) * CHUNK // MIB
    for c in chunks:
        c.close()
    return {
        "mode": "fill",
        "reserve_mib": reserve_mib,
        "held_mib": held,
        "peak_mib": peak,
        "released_chunks": released,
        "lowest_available_mib": low_seen,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="contention-memory-worker")
    ap.add_argument("--procs", action="append", default=[], required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--result", default=None)
    sub = ap.add_subparsers(dest="mode", required=True)
    a = sub.add_parser("anon")
    a.add_argument("--mib", type=int, required=True)
    s = sub.add_parser("scan")
    s.add_argument("--file", required=True)
    s.add_argument("--mib", type=int, required=True)
    s.add_argument("--rate-mib", type=float, required=True)
    s.add_argument("--pattern", choices=("seq", "random", "mmap"), default="seq")
    f = sub.add_parser("fill")
    f.add_argument("--reserve-mib", type=int, required=True)
    f.add_argument("--max-mib", type=int, required=True)
    args = ap.parse_args(argv)

    deadline = time.monotonic() + args.seconds
    _join(args.procs)  # before any work: every page we touch is the lab cgroup's
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    if args.mode == "anon":
        result = _anon(args.mib, deadline)
    elif args.mode == "scan":
        result = _scan(args.file, args.mib, args.rate_mib, args.pattern, deadline)
    else:
        result = _fill(args.reserve_mib, args.max_mib, deadline)
    if args.result:
        tmp = args.result + ".tmp"
        try:
            with open(tmp, "w") as fh:
                json.dump(result, fh)
            os.replace(tmp, args.result)
        except OSError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
