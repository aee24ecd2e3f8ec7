#!/usr/bin/env python3
"""Sampler benchmark: cost per container per sample against the floor, on 1,000 containers.

Builds a synthetic pure-cgroup-v2 Kubernetes node (systemd cgroup driver, containerd:
``kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid>.slice/
cri-containerd-<id>.scope``) with every file in the kernel's exact format, on tmpfs,
plus a fake procfs (``stat``, ``pressure/*``, ``meminfo``). Then, in one run and side by
side:

* **sampler**: ``exporter.sampler.Sampler.run_once`` (discovery, reads, parsing, deltas,
  window folds), per pass and per tracked cgroup;
* **floor**: a loop that only ``os.open``/``os.read``/``os.close``\\ s the same files of
  the same cgroups (paths precomputed): what any reader must pay;
* their **ratio** (the aim: <= 2.5x);
* where the sampler's time goes (discovery walk, read+parse, the rest);
* the **scrape path**: what a scrape cost before (families built per scrape, rendered
  by prometheus_client) next to rendering once per pass, at the end of the pass or on
  the first scrape after it, at 15 s and 30 s scrapes: CPU per minute and the
  server-side scrape latency;
* **RSS** of this process (sampler state + a full 5-minute window), and of the real
  exporter process run on the same tree (``--path.sysfs``/``--path.procfs``).

The floor and the sampler are timed interleaved, pass by pass, so drift (CPU frequency,
a noisy neighbour) hits both alike. Medians are reported.

Usage: ``python bench/sampler_bench.py [--containers 1000] [--passes 65] [--json]``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The files the v2 reader opens for each tracked cgroup (cgroupfs/reader.py), which the
# floor reads too.
V2_FILES = (
    "cpu.stat",
    "cpu.pressure",
    "memory.pressure",
    "io.pressure",
    "cpu.max",
    "cpu.weight",
    "memory.current",
    "memory.max",
    "memory.high",
    "memory.stat",
    "memory.events",
)

# --- the synthetic node ------------------------------------------------------------------

_MEMORY_STAT_KEYS = (
    "anon file kernel kernel_stack pagetables sec_pagetables percpu sock vmalloc shmem "
    "zswap zswapped file_mapped file_dirty file_writeback swapcached anon_thp file_thp "
    "shmem_thp inactive_anon active_anon inactive_file active_file unevictable "
    "slab_reclaimable slab_unreclaimable slab workingset_refault_anon "
    "workingset_refault_file workingset_activate_anon workingset_activate_file "
    "workingset_restore_anon workingset_restore_file workingset_nodereclaim "
    "pgdemote_kswapd pgdemote_direct pgdemote_khugepaged pgscan pgsteal pgscan_kswapd "
    "pgscan_direct pgscan_khugepaged pgsteal_kswapd pgsteal_direct pgsteal_khugepaged "
    "pgfault pgmajfault pgrefill pgactivate pgdeactivate pglazyfree pglazyfreed "
    "swpin_zero swpout_zero zswpin zswpout zswpwb thp_fault_alloc thp_collapse_alloc "
    "thp_swpout thp_swpout_fallback numa_pages_migrated numa_pte_updates numa_hint_faults"
).split()

SYSTEM_SERVICES = (
    "containerd.service kubelet.service systemd-journald.service systemd-udevd.service "
    "systemd-logind.service systemd-networkd.service systemd-resolved.service "
    "systemd-timesyncd.service dbus.service cron.service ssh.service rsyslog.service "
    "chrony.service polkit.service irqbalance.service multipathd.service "
    "node-problem-detector.service unattended-upgrades.service getty@tty1.service "
    "serial-getty@ttyS0.service"
).split()


def _pressure(rng: random.Random, with_full: bool = True) -> str:
    a10 = rng.uniform(0, 40)
    total = rng.randrange(0, 10**10)
    some = f"some avg10={a10:.2f} avg60={a10 * 0.8:.2f} avg300={a10 * 0.6:.2f} total={total}\n"
    if not with_full:
        return some
    full = f"full avg10={a10 / 3:.2f} avg60={a10 / 4:.2f} avg300={a10 / 5:.2f} total={total // 3}\n"
    return some + full


def _cgroup_files(
    rng: random.Random, quota: int | None, weight: int, mem_max: int | None
) -> dict[str, str]:
    usage = rng.randrange(10**6, 10**12)
    periods = rng.randrange(0, 10**6) if quota is not None else 0
    throttled = rng.randrange(0, periods + 1) if periods else 0
    anon = rng.randrange(10**6, 10**9)
    file_ = rng.randrange(0, 10**9)
    mstat = {k: 0 for k in _MEMORY_STAT_KEYS}
    mstat.update(
        anon=anon,
        file=file_,
        inactive_file=file_ // 2,
        active_file=file_ - file_ // 2,
        inactive_anon=anon // 3,
        active_anon=anon - anon // 3,
        pgfault=rng.randrange(0, 10**8),
        pgmajfault=rng.randrange(0, 10**4),
        workingset_refault_file=rng.randrange(0, 10**5),
    )
    return {
        "cgroup.procs": f"{rng.randrange(1000, 4000000)}\n",
        "cgroup.controllers": "cpuset cpu io memory hugetlb pids rdma misc\n",
        "cgroup.subtree_control": "",
        "cgroup.events": "populated 1\nfrozen 0\n",
        "cpu.stat": (
            f"usage_usec {usage}\nuser_usec {usage * 7 // 10}\nsystem_usec {usage * 3 // 10}\n"
            f"nice_usec 0\ncore_sched.force_idle_usec 0\nnr_periods {periods}\n"
            f"nr_throttled {throttled}\nthrottled_usec {throttled * 37000}\n"
            "nr_bursts 0\nburst_usec 0\n"
        ),
        "cpu.max": f"{quota if quota is not None else 'max'} 100000\n",
        "cpu.weight": f"{weight}\n",
        "cpu.pressure": _pressure(rng),
        "memory.current": f"{anon + file_}\n",
        "memory.max": f"{mem_max if mem_max is not None else 'max'}\n",
        "memory.high": "max\n",
        "memory.min": "0\n",
        "memory.low": "0\n",
        "memory.swap.current": "0\n",
        "memory.swap.max": "max\n",
        "memory.stat": "".join(f"{k} {v}\n" for k, v in mstat.items()),
        "memory.events": (
            f"low 0\nhigh 0\nmax {rng.randrange(0, 50)}\noom 0\noom_kill 0\noom_group_kill 0\n"
        ),
        "memory.pressure": _pressure(rng),
        "io.pressure": _pressure(rng),
        "pids.current": f"{rng.randrange(1, 200)}\n",
        "pids.max": "max\n",
    }


def _write_dir(d: Path, files: dict[str, str]) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name).write_text(text)


def _uid(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{h[16:20]}-{h[20:32]}"


@dataclass
class Tree:
    root: Path
    sysfs: Path
    procfs: Path
    containers: list[str] = field(default_factory=list)  # cgroup paths ("/kubepods.slice/...")
    other_tracked: list[str] = field(default_factory=list)  # system units, user slices
    moving: list[str] = field(default_factory=list)  # containers whose counters move
    directories: int = 0
    files: int = 0


def build_tree(root: Path, containers: int = 1000, cpus: int = 32, seed: int = 42) -> Tree:
    """A pure-v2, systemd-driver Kubernetes node with ``containers`` container cgroups."""
    rng = random.Random(seed)
    tree = Tree(root=root, sysfs=root / "sys", procfs=root / "proc")
    cg = tree.sysfs / "fs" / "cgroup"

    def add(rel: str, quota: int | None, weight: int, mem_max: int | None) -> None:
        files = _cgroup_files(rng, quota, weight, mem_max)
        if rel == "":
            for k in ("cpu.max", "cpu.weight", "memory.max", "memory.high", "memory.events"):
                files.pop(k)  # the root cgroup has no limits
        _write_dir(cg / rel.lstrip("/") if rel else cg, files)
        tree.directories += 1
        tree.files += len(files)

    add("", None, 100, None)
    (tree.sysfs / "kernel" / "btf").mkdir(parents=True)
    (tree.sysfs / "kernel" / "btf" / "vmlinux").write_bytes(b"\0" * 16)
    add("/init.scope", None, 100, None)
    add("/system.slice", None, 100, None)
    for svc in SYSTEM_SERVICES:
        add(f"/system.slice/{svc}", None, 100, None)
        tree.other_tracked.append(f"/system.slice/{svc}")
    add("/user.slice", None, 100, None)
    add("/user.slice/user-1000.slice", None, 100, None)
    tree.other_tracked.append("/user.slice/user-1000.slice")
    add("/kubepods.slice", None, 100, None)
    add("/kubepods.slice/kubepods-burstable.slice", None, 100, None)
    add("/kubepods.slice/kubepods-besteffort.slice", None, 1, None)

    made = 0
    while made < containers:
        r = rng.random()
        qos = "guaranteed" if r < 0.2 else "besteffort" if r > 0.85 else "burstable"
        uid = _uid(rng)
        slice_uid = uid.replace("-", "_")
        if qos == "guaranteed":
            pod = f"/kubepods.slice/kubepods-pod{slice_uid}.slice"
        else:
            pod = f"/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{slice_uid}.slice"
        n = min(containers - made, 2 + rng.randrange(3))  # the sandbox + 1..3 apps
        limit_cores = rng.choice((0.25, 0.5, 1, 2))
        quota = int(limit_cores * 100000) if qos == "guaranteed" else None
        mem = rng.choice((256, 512, 1024, 4096)) << 20 if qos == "guaranteed" else None
        weight = 1 if qos == "besteffort" else rng.choice((4, 10, 20, 40, 79))
        add(pod, quota and quota * n, weight, mem and mem * n)
        for i in range(n):
            cid = f"{rng.getrandbits(256):064x}"
            c_quota = quota
            c_mem = mem
            if qos == "burstable" and rng.random() < 0.5:
                c_quota = int(rng.choice((0.2, 0.5, 1.0)) * 100000)
                c_mem = rng.choice((128, 256, 512)) << 20
            if i == 0:  # the pause sandbox
                c_quota, c_mem = None, None
            path = f"{pod}/cri-containerd-{cid}.scope"
            add(path, c_quota, 2 if i == 0 else weight, c_mem)
            tree.containers.append(path)
            made += 1

    # procfs
    p = tree.procfs
    (p / "pressure").mkdir(parents=True)
    for res in ("cpu", "memory", "io"):
        (p / "pressure" / res).write_text(_pressure(rng))
    lines = ["cpu  3255380 4822 1205970 37642624 16490 0 49654 9338 0 0"]
    for i in range(cpus):
        lines.append(f"cpu{i} 812345 1204 301377 9412006 4121 0 12409 2318 0 0")
    lines += [
        "intr 48031225 0 9 0 0 0 0 0 0 0 1 0 0 1203",
        "ctxt 93441207",
        "btime 1796013478",
        "processes 184022",
        "procs_running 3",
        "procs_blocked 0",
        "softirq 20731744 4 4521893 12 1210331 301244 0 45123 7712309 0 6940828",
    ]
    (p / "stat").write_text("\n".join(lines) + "\n")
    (p / "meminfo").write_text(
        "MemTotal:       131929216 kB\nMemFree:        98192540 kB\n"
        "MemAvailable:   120923390 kB\nBuffers:          211204 kB\nCached:          2727570 kB\n"
    )
    tree.files += 5
    tree.moving = _running(tree.containers)
    return tree


def _running(containers: list[str]) -> list[str]:
    """The apps, whose counters move: every container but each pod's first (the pause
    sandbox, which sleeps)."""
    seen: set[str] = set()
    out = []
    for path in containers:
        pod = path.rsplit("/", 1)[0]
        if pod in seen:
            out.append(path)
        seen.add(pod)
    return out


@contextlib.contextmanager
def tmpfs_dir(keep: bool = False) -> Iterator[Path]:
    """A fresh directory on tmpfs (/dev/shm), removed afterwards unless ``keep``."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    d = Path(tempfile.mkdtemp(prefix="contention-bench-", dir=base))
    try:
        yield d
    finally:
        if keep:
            print(f"kept the tree at {d}", file=sys.stderr)
        else:
            shutil.rmtree(d, ignore_errors=True)


def _bump(text: str, key: str, by: int) -> str:
    """``text`` with the number after the first ``key`` raised by ``by``."""
    i = text.index(key) + len(key)
    j = i
    while j < len(text) and text[j].isdigit():
        j += 1
    return text[:i] + str(int(text[i:j]) + by) + text[j:]


def move_counters(sysfs: Path, moving: list[str], step: int) -> None:
    """What a busy node's pass sees: each running container's CPU time, CPU stall,
    memory use and page faults moved since the last pass (files rewritten in the
    kernel's format; untimed). The sandboxes do not move, as on a real node.

    Plain string paths, not ``Path``s: this stands in for the kernel, and runs in the
    measured process (the RSS child's), so it allocates as little as it can (a
    ``Path`` interns each part of its path: ~1 MB of interned-string table for these
    ~2,700 files, which the exporter itself never makes)."""
    cg = f"{sysfs}/fs/cgroup"
    for n, rel in enumerate(moving):
        d = cg + rel
        by = 1000 + (n * 7919 + step * 104729) % 400_000  # up to 0.4 s of CPU per pass
        for name, key, k in (
            ("cpu.stat", "usage_usec ", by),
            ("cpu.pressure", "total=", by // 20),
            ("memory.current", "", 4096 * (1 + step % 3)),
            ("memory.stat", "pgfault ", 1 + n % 50),
        ):
            with open(f"{d}/{name}", "r+") as f:
                text = f.read()
                f.seek(0)
                f.write(_bump(text, key, k) if key else f"{int(text) + k}\n")
                f.truncate()


def tree_from(root: Path) -> Tree:
    """A tree built by an earlier run (``--use-tree``): its lists from ``tree.json``."""
    doc = json.loads((root / "tree.json").read_text())
    return Tree(
        root=root,
        sysfs=root / "sys",
        procfs=root / "proc",
        containers=doc["containers"],
        other_tracked=doc["other_tracked"],
        moving=doc["moving"],
        directories=doc["directories"],
        files=doc["files"],
    )


def save_tree(tree: Tree) -> None:
    doc = {k: getattr(tree, k) for k in ("containers", "other_tracked", "moving")}
    doc.update(directories=tree.directories, files=tree.files)
    (tree.root / "tree.json").write_text(json.dumps(doc))


# --- measurements --------------------------------------------------------------------------


def floor_loop(paths: list[str]) -> Callable[[], None]:
    """The floor: open, read and close each file; nothing else."""
    o_flags = os.O_RDONLY | os.O_CLOEXEC
    _open, _read, _close = os.open, os.read, os.close

    def run() -> None:
        for p in paths:
            fd = _open(p, o_flags)
            _read(fd, 65536)
            _close(fd)

    return run


def _status_kb(pid: int | str, key: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, this thread's CPU seconds: user + system) of one call."""
    w0, c0 = time.perf_counter(), time.thread_time()
    fn()
    return time.perf_counter() - w0, time.thread_time() - c0


def _ms(v: float) -> float:
    return round(v * 1e3, 3)


def _us(v: float) -> float:
    return round(v * 1e6, 2)


def tune_gc() -> None:
    """What the exporter process does after its first pass (``tune_gc``: the collector's
    thresholds; a revision without it: nothing), and, as late as that, what it does
    before its first (``tune_malloc``: glibc's mmap threshold). Process-wide, so it holds
    for every measurement after it."""
    from exporter.commands import run

    getattr(run, "tune_malloc", lambda: None)()
    getattr(run, "tune_gc", lambda: None)()


def measure_in_process(tree: Tree, passes: int, interval: float, busy: bool) -> dict[str, Any]:
    """Sampler vs floor, breakdown, render, RSS: all in this process. ``busy``: the
    running containers' counters move before every pass (``move_counters``)."""
    rss_before = _status_kb("self", "VmRSS")
    from exporter.cgroupfs import mode
    from exporter.cgroupfs.discovery import walk
    from exporter.cgroupfs.reader import CgroupReader
    from exporter.sampler import Sampler

    facts = mode.detect(str(tree.sysfs), str(tree.procfs))
    if facts.v2_root is None:
        raise SystemExit(f"the synthetic tree was not detected as cgroup v2: {facts.reason}")
    sampler = Sampler(facts, procfs=str(tree.procfs), interval=interval)
    now = 1_800_000_000.0
    first = sampler.run_once(now=now)  # baselines
    tune_gc()
    tracked = [c.identity.cgroup for c in first.containers]
    n_tracked = len(tracked)
    n_containers = sum(1 for c in first.containers if c.identity.kind.value == "container")
    v2 = facts.v2_root
    floor_paths = [f"{v2}{p}/{name}" for p in tracked for name in V2_FILES]
    floor = floor_loop(floor_paths)
    floor()  # warm the dentry cache like the sampler's first pass did

    # The read part has a reader of its own: the sampler's keeps what it read (the
    # parsed files of its last pass), which this part must not fill for it.
    reader = CgroupReader(facts)
    begin = getattr(reader, "begin_pass", lambda: None)  # none before issue 28

    def walk_all() -> None:
        for _ref in walk(v2):
            pass

    def read_all() -> None:
        begin()
        for p in tracked:
            reader.read(p)

    # Where the pass goes (the lead's internals, so best effort): walk and read+parse
    # timed on their own, interleaved with the full passes.
    parts: dict[str, Callable[[], None]] = {"floor": floor}
    try:
        walk_all()
        read_all()
        parts.update(walk=walk_all, read=read_all)
        breakdown_error = ""
    except Exception as e:  # the breakdown is optional
        breakdown_error = f"{type(e).__name__}: {e}"

    wall: dict[str, list[float]] = {k: [] for k in (*parts, "sampler")}
    cpu: dict[str, list[float]] = {k: [] for k in (*parts, "sampler")}
    for step in range(passes):
        if busy:
            move_counters(tree.sysfs, tree.moving, step)
        for name, fn in parts.items():
            w, c = _timed(fn)
            wall[name].append(w)
            cpu[name].append(c)
        now += interval
        w, c = _timed(lambda: sampler.run_once(now=now))  # noqa: B023 - called at once
        wall["sampler"].append(w)
        cpu["sampler"].append(c)
    med_w = {k: statistics.median(v) for k, v in wall.items() if v}
    med_c = {k: statistics.median(v) for k, v in cpu.items() if v}
    breakdown: dict[str, Any] = {"error": breakdown_error} if breakdown_error else {}
    if "read" in med_w:
        breakdown = {
            "discovery_walk_ms": _ms(med_w["walk"]),
            "discovery_walk_cpu_ms": _ms(med_c["walk"]),
            "read_parse_ms": _ms(med_w["read"]),
            "read_parse_cpu_ms": _ms(med_c["read"]),
        }

    gc.collect()

    return {
        "busy": busy,
        "moving_containers": len(tree.moving) if busy else 0,
        "tracked_cgroups": n_tracked,
        "containers": n_containers,
        "files_per_cgroup": len(V2_FILES),
        "passes": passes,
        "sampler_pass_ms": _ms(med_w["sampler"]),
        "sampler_pass_cpu_ms": _ms(med_c["sampler"]),
        "sampler_per_cgroup_us": _us(med_w["sampler"] / n_tracked),
        "sampler_per_cgroup_cpu_us": _us(med_c["sampler"] / n_tracked),
        "floor_pass_ms": _ms(med_w["floor"]),
        "floor_pass_cpu_ms": _ms(med_c["floor"]),
        "floor_per_cgroup_us": _us(med_w["floor"] / n_tracked),
        "floor_per_cgroup_cpu_us": _us(med_c["floor"] / n_tracked),
        "ratio": round(med_w["sampler"] / med_w["floor"], 2),
        "ratio_cpu": round(med_c["sampler"] / med_c["floor"], 2),
        "breakdown": breakdown,
        "rss_kb_before_import": rss_before,
        "rss_kb": _status_kb("self", "VmRSS"),
        "rss_peak_kb": _status_kb("self", "VmHWM"),
    }


# --- the scrape path: today's render per scrape vs once per pass ----------------------

# What Prometheus 2.x sends, and what curl sends.
PROMETHEUS_HEADERS = {
    "HTTP_ACCEPT": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
    "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "HTTP_ACCEPT_ENCODING": "gzip",
}
PLAIN_HEADERS = {"HTTP_ACCEPT": "*/*", "HTTP_ACCEPT_ENCODING": ""}


def _wsgi_get(app: Callable[..., Any], headers: dict[str, str]) -> tuple[bytes, float, float]:
    """One GET /metrics through a WSGI app, timed in-process (server side: from the
    request to the last byte handed to the server). (body, wall s, CPU s)"""
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "QUERY_STRING": "", **headers}
    w0, c0 = time.perf_counter(), time.thread_time()
    body = b"".join(app(environ, lambda *a, **k: None))
    return body, time.perf_counter() - w0, time.thread_time() - c0


class SimClock:
    """A monotonic clock the benchmark moves by hand."""

    now = 0.0

    def __call__(self) -> float:
        return self.now


def measure_scrape_path(
    tree: Tree,
    interval: float,
    scrape_intervals: tuple[int, ...],
    minutes: int,
    busy: bool,
    plans: tuple[str, ...] = ("today", "every-pass", "pass", "scrape"),
) -> dict[str, Any]:
    """Side by side on one warmed-up agent (a full window):

    * today: what a scrape cost before this change (the families built at scrape time,
      rendered by prometheus_client, gzip level 9: its make_wsgi_app), served
      through prometheus_client's WSGI app;
    * each way to render (``every-pass``: at the end of every pass; ``pass``, the
      default: at the end of the pass before each expected scrape; ``scrape``: on the
      first scrape after a pass) at ``interval`` s passes and each scrape interval:
      CPU per minute for passes + scrapes, and the server-side scrape latency.
    """
    from exporter.agent import Agent, AgentConfig
    from exporter.findings import load_thresholds
    from exporter.probe import ProbeConfig

    th = load_thresholds()
    now = 1_800_000_000.0
    cfg = AgentConfig(
        sysfs=str(tree.sysfs),
        procfs=str(tree.procfs),
        sample_interval=interval,
        probe=ProbeConfig(enabled=False),
    )
    warm = Agent(cfg, th)
    steps = [0]

    def move() -> None:  # before each pass, untimed
        if busy:
            steps[0] += 1
            move_counters(tree.sysfs, tree.moving, steps[0])

    warm.move = move  # type: ignore[attr-defined]  # the measurements below call it
    for _ in range(int(th.window_minutes * 60 / interval) + 2):  # a full window
        now += interval
        move()
        warm.run_pass(now=now)
    today, now = _measure_today(warm, interval, now)
    parts, now = _measure_parts(warm, interval, now)
    now += interval
    modes = _measure_render_modes(warm, interval, now, scrape_intervals, minutes, plans)
    warm.close()
    return {"interval_s": interval, "today": today, "parts": parts, "modes": modes}


def _measure_today(warm: Any, interval: float, now: float) -> tuple[dict[str, Any], float]:
    """One scrape and one pass as they were: the families and their render per scrape
    (Prometheus's headers, and curl's), the sampling and evaluation per pass."""
    today_app = _today_app([warm.published().result], warm.exposition.sources)
    today: dict[str, Any] = {}
    for label, headers in (("prometheus", PROMETHEUS_HEADERS), ("plain", PLAIN_HEADERS)):
        got = [_wsgi_get(today_app, headers) for _ in range(5)]
        today[label] = {
            "scrape_ms": _ms(statistics.median(w for _, w, _ in got)),
            "scrape_cpu_ms": _ms(statistics.median(c for _, _, c in got)),
            "bytes": len(got[-1][0]),
        }
    walls, cpus, sampling, evaluating = [], [], [], []
    for _ in range(5):
        now += interval
        warm.move()
        w0, c0 = time.perf_counter(), time.thread_time()
        snap = warm.sampler.run_once(now=now)
        c1 = time.thread_time()
        warm.evaluate(snap)
        walls.append(time.perf_counter() - w0)
        cpus.append(time.thread_time() - c0)
        sampling.append(c1 - c0)
        evaluating.append(time.thread_time() - c1)
    today["pass_ms"] = _ms(statistics.median(walls))
    today["pass_cpu_ms"] = _ms(statistics.median(cpus))
    # The two halves of a pass: the sampling (Sampler.run_once) and the findings
    # evaluation (Agent.evaluate), each the median of its own.
    today["sampling_cpu_ms"] = _ms(statistics.median(sampling))
    today["evaluation_cpu_ms"] = _ms(statistics.median(evaluating))
    return today, now


class GcTime:
    """This thread's CPU time in the garbage collector while counting (gc.callbacks)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = 0
        self._t0 = 0.0
        self.counting = False

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.thread_time()
        elif self.counting:
            self.seconds += time.thread_time() - self._t0
            self.collections += 1


def _measure_parts(warm: Any, interval: float, now: float) -> tuple[dict[str, float], float]:
    """The parts of a pass's exposition as the exporter serves them, each pass rendered
    after the last (what a render keeps from the last one counts): the families, then
    OpenMetrics gzipped (what Prometheus asks for), then text (curl). Medians of 5."""
    import gzip

    got: dict[str, list[float]] = {"families": [], "render_om_gzip": [], "render_text": []}
    om = gz = b""
    for _ in range(5):
        now += interval
        warm.move()
        pub = warm.run_pass(now=now)
        got["families"].append(_timed(pub.families)[1])
        c0 = time.thread_time()
        gz = pub.metrics(True, True).body
        got["render_om_gzip"].append(time.thread_time() - c0)
        got["render_text"].append(_timed(lambda: pub.metrics(False, False))[1])  # noqa: B023
        om = gzip.decompress(gz)
    parts = {f"{k}_cpu_ms": _ms(statistics.median(v)) for k, v in got.items()}
    parts["openmetrics_bytes"] = len(om)
    parts["gzip_bytes"] = len(gz)
    parts["series"] = sum(1 for line in om.splitlines() if line and not line.startswith(b"#"))
    return parts, now


def _today_app(latest: list[Any], sources: Any) -> Any:
    """prometheus_client's WSGI app over the families of ``latest[0]``, built per
    scrape: what a scrape did before (families, generate_latest, gzip level 9)."""
    from prometheus_client import CollectorRegistry, make_wsgi_app

    from exporter.exposition.registry import pass_families

    class TodayCollector:
        def collect(self) -> list[Any]:
            return pass_families(latest[0], sources)

    registry = CollectorRegistry()
    registry.register(TodayCollector())
    return make_wsgi_app(registry)


def _measure_render_modes(
    a: Any,
    interval: float,
    t: float,
    scrape_intervals: tuple[int, ...],
    minutes: int,
    wanted: tuple[str, ...],
) -> dict[str, Any]:
    """One agent (its window full) serving each way in turn, in simulated time: a pass
    every ``interval`` s, a Prometheus scrape mid-way between two passes. ``today``:
    each pass samples and evaluates, each scrape builds and renders everything."""
    from exporter.exposition.published import Exposition
    from exporter.server import App

    modes: dict[str, Any] = {}
    gc_time = GcTime()
    gc.callbacks.append(gc_time)
    sim = SimClock()
    latest: list[Any] = [a.published().result]
    sources = a.exposition.sources

    def today_pass(now: float) -> None:
        latest[0] = a.evaluate(a.sampler.run_once(now=now))

    # (label, --web.render, render ahead only for an expected scrape)
    plans = (
        ("today", "", False),
        ("every-pass", "pass", False),
        ("pass", "pass", True),
        ("scrape", "scrape", True),
    )
    for label, render_mode, predict in plans:
        if label not in wanted:
            continue
        if label == "today":
            app, run_pass = _today_app(latest, sources), today_pass
        else:
            a.exposition = Exposition(render_mode, sources, interval, predict=predict)
            a.exposition.clock = sim
            app = App(a.exposition, a.facts, interval, a.status)
            run_pass = a.run_pass
        sim.now = 0.0  # simulated monotonic time: passes and scrapes happen back to back
        for every in scrape_intervals:
            # A scrape lands mid-way between two passes, every `every` seconds; the
            # first ones teach the exporter the interval, then `minutes` are measured.
            next_scrape = sim.now + interval / 2
            warm_up = 2 * every // int(interval)
            n_passes = int(minutes * 60 / interval)
            pass_cpu = scrape_cpu = 0.0
            lat: list[float] = []
            gc_time.seconds, gc_time.collections = 0.0, 0
            for i in range(warm_up + n_passes):
                measured = i >= warm_up
                gc_time.counting = measured
                t += interval
                sim.now += interval
                a.move()
                c0 = time.thread_time()
                run_pass(t)
                if measured:
                    pass_cpu += time.thread_time() - c0
                if sim.now + interval > next_scrape:  # the scrape lands before the next pass
                    sim_pass, sim.now = sim.now, next_scrape
                    _, w, c = _wsgi_get(app, PROMETHEUS_HEADERS)
                    sim.now = sim_pass
                    next_scrape += every
                    if measured:
                        scrape_cpu += c
                        lat.append(w)
                if i == warm_up - 1:
                    gc.collect()
            per_min = 60.0 / (n_passes * interval)
            modes[f"{label}/{every}s"] = {
                "cpu_ms_per_min": _ms((pass_cpu + scrape_cpu) * per_min),
                "pass_cpu_ms_per_min": _ms(pass_cpu * per_min),
                "scrape_cpu_ms_per_min": _ms(scrape_cpu * per_min),
                "scrape_ms_median": _ms(statistics.median(lat)),
                "scrape_ms_max": _ms(max(lat)),
                "scrapes": len(lat),
                "gc_cpu_ms_per_min": _ms(gc_time.seconds * per_min),
                "gc_collections_per_min": round(gc_time.collections * per_min, 1),
            }
    gc.callbacks.remove(gc_time)
    return modes


def _http_get(url: str, headers: dict[str, str]) -> tuple[int, float, int]:
    """(status, wall seconds to the last byte, bytes on the wire)."""
    import urllib.request

    req = urllib.request.Request(url, headers=headers)
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=60) as resp:
        body = resp.read()
        status = resp.status
    return status, time.perf_counter() - t0, len(body)


def measure_exporter_process(
    tree: Tree, expect: int, interval: float = 5.0, timeout: float = 90.0
) -> dict[str, Any]:
    """The real exporter CLI on the same tree: its RSS, and GET /metrics over HTTP as
    Prometheus asks (OpenMetrics, gzip) and as curl does (text, no gzip)."""
    from labs.exporter_proc import ExporterError, ExporterProcess

    exp = ExporterProcess(
        sample_interval=interval,
        probe=False,
        extra_args=["--path.sysfs", str(tree.sysfs), "--path.procfs", str(tree.procfs)],
    )
    variants = {
        "prometheus": {
            "Accept": PROMETHEUS_HEADERS["HTTP_ACCEPT"],
            "Accept-Encoding": "gzip",
        },
        "plain": {"Accept": "*/*", "Accept-Encoding": "identity"},
    }
    try:
        exp.start(timeout=timeout)
        exp.wait_for(
            f"{expect} tracked cgroups",
            lambda s: (s.value("contention_tracked_cgroups") or 0) >= expect,
            timeout=timeout,
        )
        out: dict[str, Any] = {}
        url = exp.url + "/metrics"
        for h in variants.values():  # scrapes have asked for these formats before
            _http_get(url, h)
        time.sleep(interval + 1.0)  # the next pass renders them
        for name, h in variants.items():
            lat, size, status = [], 0, 0
            for _ in range(5):
                status, w, size = _http_get(url, h)
                lat.append(w)
                time.sleep(0.2)
            out[name] = {
                "status": status,
                "get_ms_median": _ms(statistics.median(lat)),
                "get_ms_max": _ms(max(lat)),
                "bytes": size,
            }
        return {
            "exporter_rss_kb": _status_kb(exp.pid, "VmRSS"),
            "exporter_rss_peak_kb": _status_kb(exp.pid, "VmHWM"),
            "exporter_http": out,
        }
    except ExporterError as e:
        lines = [x for x in str(e).splitlines() if x.strip()]
        why = lines[0][:120] + (f" ... {lines[-1][:160]}" if len(lines) > 1 else "")
        return {"exporter_error": why}
    finally:
        exp.close()


def _mb(kb: int | None) -> str:
    return "n/a" if kb is None else f"{kb / 1024:.1f} MB"


def print_table(r: dict[str, Any]) -> None:
    n = r["tracked_cgroups"]
    rows: list[tuple[str, ...]] = [("", "wall/pass", "wall/cgroup", "CPU/cgroup")]

    def timed(label: str, ms: float, cpu_ms: float) -> None:
        rows.append((label, f"{ms:.1f} ms", f"{ms * 1e3 / n:.1f} us", f"{cpu_ms * 1e3 / n:.1f} us"))

    timed("sampler: Sampler.run_once", r["sampler_pass_ms"], r["sampler_pass_cpu_ms"])
    timed(
        f"floor: os.open/os.read of {r['files_per_cgroup']} files",
        r["floor_pass_ms"],
        r["floor_pass_cpu_ms"],
    )
    rows.append(("ratio sampler / floor", "", f"{r['ratio']:.2f}x", f"{r['ratio_cpu']:.2f}x"))
    b = r.get("breakdown", {})
    if "read_parse_ms" in b:
        timed("  sampler part: discovery walk", b["discovery_walk_ms"], b["discovery_walk_cpu_ms"])
        timed("  sampler part: read + parse", b["read_parse_ms"], b["read_parse_cpu_ms"])
        timed(
            "  sampler part: the rest (deltas, folds...)",
            r["sampler_pass_ms"] - b["discovery_walk_ms"] - b["read_parse_ms"],
            r["sampler_pass_cpu_ms"] - b["discovery_walk_cpu_ms"] - b["read_parse_cpu_ms"],
        )
    peak = f"peak {_mb(r['rss_peak_kb'])}"
    rows.append(("RSS, this process (sampler + 5 min window)", _mb(r["rss_kb"]), peak, ""))
    rows.append(("  before importing prometheus/exporter", _mb(r["rss_kb_before_import"]), "", ""))
    if "exporter_rss_kb" in r:
        peak = f"peak {_mb(r['exporter_rss_peak_kb'])}"
        rows.append(("RSS, exporter process on the tree", _mb(r["exporter_rss_kb"]), peak, ""))
        for name, h in r["exporter_http"].items():
            size = f"{h['bytes'] / 1024:.0f} KiB"
            lat = f"{h['get_ms_median']:.1f} ms"
            rows.append((f"  HTTP GET /metrics ({name})", lat, size, f"max {h['get_ms_max']:.1f}"))
    elif "exporter_error" in r:
        rows.append(("exporter process: not measured", r["exporter_error"], "", ""))
    print(
        f"sampler benchmark: {r['containers']} containers, {n} tracked cgroups, "
        f"{r['passes']} passes (medians), tree on {r['tree_fs']}"
    )
    w = [
        max(len(row[k]) for row in rows if not row[0].startswith("exporter process:"))
        for k in range(4)
    ]
    for row in rows:
        if row[0].startswith("exporter process:"):
            print(f"{row[0]} {row[1]}")
            continue
        print(f"{row[0]:{w[0]}}  {row[1]:>{w[1]}}  {row[2]:>{w[2]}}  {row[3]:>{w[3]}}".rstrip())
    if "scrape_path" in r:
        print_scrape_path(r["scrape_path"])


def print_scrape_path(sp: dict[str, Any]) -> None:
    p = sp["parts"]
    iv = sp["interval_s"]
    print(f"\nthe scrape path (one pass every {iv:g} s; CPU is this process's thread time)")
    print(f"  families of a pass                      {p['families_cpu_ms']:7.1f} ms CPU")
    print(
        f"  render, OpenMetrics + gzip              {p['render_om_gzip_cpu_ms']:7.1f} ms CPU"
        f"  ({p['openmetrics_bytes'] / 1024:.0f} KiB -> {p['gzip_bytes'] / 1024:.0f} KiB)"
    )
    print(f"  render, text 0.0.4                      {p['render_text_cpu_ms']:7.1f} ms CPU")
    print(f"  {p['series']} series")
    t = sp.get("today")
    if t:
        tp = t["prometheus"]
        print(
            "\n  before the render-per-pass change (families + generate_latest + gzip 9 per"
            f" scrape): pass {t['pass_cpu_ms']:.1f} ms CPU, Prometheus scrape"
            f" {tp['scrape_cpu_ms']:.1f} ms CPU, curl {t['plain']['scrape_cpu_ms']:.1f} ms"
        )
        if "evaluation_cpu_ms" in t:
            print(
                f"  of that pass: sampling {t['sampling_cpu_ms']:.1f} ms CPU,"
                f" findings evaluation {t['evaluation_cpu_ms']:.1f} ms CPU"
            )
    print(
        "\n  per minute, passes + Prometheus scrapes    CPU ms/min   of which scrapes"
        "   of which gc   scrape median / max"
    )
    for key, m in sp["modes"].items():
        mode, every = key.split("/")
        label = {
            "today": "generate_latest per scrape",
            "every-pass": "render every pass",
            "pass": "render before a scrape",
            "scrape": "render on 1st scrape",
        }[mode]
        print(
            f"  {label + ', scrape every ' + every:42} {m['cpu_ms_per_min']:10.0f}"
            f"   {m['scrape_cpu_ms_per_min']:16.0f}"
            f"   {m.get('gc_cpu_ms_per_min', 0):11.0f}"
            f"   {m['scrape_ms_median']:9.2f} / {m['scrape_ms_max']:.2f} ms"
        )


def run_rss_child(tree: Tree, interval: float, busy: bool) -> dict[str, Any]:
    """In a fresh process: the modules the exporter loads, its agent over a full window
    (65 passes, simulated time) with a Prometheus scrape every 15 s through the
    exporter's own WSGI app (default render mode): RSS then, and its peak."""
    import importlib

    run = importlib.import_module("exporter.commands.run")  # what the exporter process loads
    getattr(run, "tune_malloc", lambda: None)()  # what it does before its first pass
    from exporter.agent import Agent, AgentConfig
    from exporter.findings import load_thresholds
    from exporter.probe import ProbeConfig
    from exporter.server import App

    cfg = AgentConfig(
        sysfs=str(tree.sysfs),
        procfs=str(tree.procfs),
        sample_interval=interval,
        probe=ProbeConfig(enabled=False),
    )
    a = Agent(cfg, load_thresholds())
    sim = SimClock()
    a.exposition.clock = sim
    app = App(a.exposition, a.facts, interval, a.status)
    now = 1_800_000_000.0
    for i in range(int(5 * 60 / interval) + 2):
        if busy:
            move_counters(tree.sysfs, tree.moving, i)
        now += interval
        sim.now += interval
        a.run_pass(now=now)
        if i == 0:
            tune_gc()
        if i % 3 == 1:
            sim.now += interval / 2
            _wsgi_get(app, PROMETHEUS_HEADERS)
            sim.now -= interval / 2
    gc.collect()
    out = {"rss_kb": _status_kb("self", "VmRSS"), "rss_peak_kb": _status_kb("self", "VmHWM")}
    a.close()
    return out


def _child(args: list[str], exporter_root: str | None = None) -> dict[str, Any]:
    """This script in a fresh process (``--exporter-root``: another revision's code)."""
    import subprocess

    extra = ["--exporter-root", exporter_root] if exporter_root else []
    proc = subprocess.run(
        [sys.executable, __file__, *args, *extra, "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"bench child {args} failed:\n{proc.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


@contextlib.contextmanager
def revision_sources(rev: str) -> Iterator[str]:
    """``rev``'s ``exporter/`` in a temporary directory (``git archive``: nothing checked
    out, the repository unchanged)."""
    import subprocess

    with tempfile.TemporaryDirectory(prefix="sampler-bench-") as src:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", rev, "exporter"],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
        yield src


def _fs_type(path: Path) -> str:
    best, fstype = "", "?"
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            mnt = parts[1]
            if str(path).startswith(mnt.rstrip("/") + "/") and len(mnt) > len(best):
                best, fstype = mnt, parts[2]
    return f"{fstype} ({best})"


# Issue 28's targets at 1,000 containers, a pass every 5 s, a scrape every 15 s.
TARGETS = {"pass_over_floor": 1.6, "render_ms": 30.0, "cpu_ms_per_min": 1200.0, "rss_mb": 60.0}


def summary(r: dict[str, Any]) -> dict[str, float | None]:
    """The figures the targets are about, from one measurement."""
    sp = r.get("scrape_path", {})
    per_min = sp.get("modes", {}).get("pass/15s", {}).get("cpu_ms_per_min")
    parts = sp.get("parts", {})
    rss = r.get("rss_child", {}).get("rss_kb")
    return {
        "pass_cpu_ms": r["sampler_pass_cpu_ms"],
        "floor_cpu_ms": r["floor_pass_cpu_ms"],
        "pass_over_floor": r["ratio_cpu"],
        "families_ms": parts.get("families_cpu_ms"),
        "render_ms": parts.get("render_om_gzip_cpu_ms"),
        "cpu_ms_per_min": per_min,
        "evaluation_ms": sp.get("today", {}).get("evaluation_cpu_ms"),
        "gc_ms_per_min": sp.get("modes", {}).get("pass/15s", {}).get("gc_cpu_ms_per_min"),
        "rss_mb": round(rss / 1024, 1) if rss else None,
        "rss_peak_mb": round(r["rss_child"]["rss_peak_kb"] / 1024, 1) if rss else None,
    }


def print_summary(after: dict[str, Any], before: dict[str, Any] | None, rev: str) -> None:
    a, b = summary(after), summary(before) if before else None
    rows = (
        ("pass_cpu_ms", "a pass (Sampler.run_once), CPU ms", None),
        ("floor_cpu_ms", "its read floor, CPU ms", None),
        ("pass_over_floor", "pass / floor", "pass_over_floor"),
        ("families_ms", "families of a pass, CPU ms", None),
        ("render_ms", "a render: OpenMetrics + gzip, CPU ms", "render_ms"),
        ("cpu_ms_per_min", "CPU per minute (5 s passes, 15 s scrapes), ms", "cpu_ms_per_min"),
        ("gc_ms_per_min", "  of which garbage collection, ms", None),
        ("evaluation_ms", "findings evaluation of a pass, CPU ms", None),
        ("rss_mb", "RSS after a full window, MB", "rss_mb"),
        ("rss_peak_mb", "  its peak, MB", None),
    )
    busy = (
        f"{after['moving_containers']} running containers' counters moving"
        if after["busy"]
        else "no counter moving"
    )
    print(f"\nissue 28 targets, side by side ({busy}; before = {rev}, after = this checkout)")
    print(f"  {'':48} {'before':>9} {'after':>9} {'after/before':>13} {'target':>8}  met")

    def fmt(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.2f}" if v < 10 else f"{v:.0f}"

    for key, label, target in rows:
        av, bv = a[key], b[key] if b else None
        ratio = f"{av / bv:.2f}x" if av is not None and bv else ""
        goal = TARGETS.get(target or "")
        met = "" if goal is None or av is None else ("yes" if av <= goal else "NO")
        print(
            f"  {label:48} {fmt(bv):>9} {fmt(av):>9} {ratio:>13} "
            f"{fmt(goal) if goal else '':>8}  {met}"
        )


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--containers", type=int, default=1000)
    ap.add_argument(
        "--passes",
        type=int,
        default=65,
        help="timed passes; 65 at --interval 5 fills the 5-minute window (default 65)",
    )
    ap.add_argument("--interval", type=float, default=5.0, help="simulated sample interval")
    ap.add_argument(
        "--minutes", type=int, default=3, help="simulated minutes per render mode (default 3)"
    )
    ap.add_argument(
        "--still",
        action="store_true",
        help="no counter moves between passes (default: every running container's do)",
    )
    ap.add_argument(
        "--compare-with",
        metavar="REV",
        help="also measure REV's exporter/ (git archive) on the same tree, side by side",
    )
    ap.add_argument("--plans", default="today,every-pass,pass,scrape", help=argparse.SUPPRESS)
    ap.add_argument("--use-tree", help=argparse.SUPPRESS)  # a tree an earlier run built
    ap.add_argument("--exporter-root", help=argparse.SUPPRESS)  # import exporter from here
    ap.add_argument("--rss-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--no-exporter", action="store_true", help="skip the exporter process")
    ap.add_argument(
        "--floor-only", action="store_true", help="only build the tree and time the floor"
    )
    ap.add_argument("--keep", action="store_true", help="keep the tree (path on stderr)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return ap.parse_args(argv)


def _floor_only(tree: Tree, passes: int) -> dict[str, Any]:
    cg = tree.sysfs / "fs" / "cgroup"
    tracked = tree.containers + tree.other_tracked
    run = floor_loop([f"{cg}{p}/{name}" for p in tracked for name in V2_FILES])
    run()
    ts = []
    for _ in range(passes):
        t = time.perf_counter()
        run()
        ts.append(time.perf_counter() - t)
    med = statistics.median(ts)
    out = {"tracked_cgroups": len(tracked), "floor_pass_ms": _ms(med)}
    out["floor_per_cgroup_us"] = _us(med / len(tracked))
    return out


def _measure(tree: Tree, a: argparse.Namespace) -> dict[str, Any]:
    """Everything measured in this process and its RSS child, for the code it imports."""
    import exporter

    busy = not a.still
    result = measure_in_process(tree, a.passes, a.interval, busy)
    plans = tuple(a.plans.split(","))
    result["scrape_path"] = measure_scrape_path(tree, a.interval, (15, 30), a.minutes, busy, plans)
    child = ["--rss-child", "--use-tree", str(tree.root), "--interval", str(a.interval)]
    result["rss_child"] = _child(child + (["--still"] if a.still else []), a.exporter_root)
    result["_exporter"] = str(Path(exporter.__file__).parent)
    return result


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    if a.exporter_root:  # another revision's code, before anything imports exporter
        sys.path.insert(0, a.exporter_root)
    where = contextlib.nullcontext(Path(a.use_tree)) if a.use_tree else tmpfs_dir(a.keep)
    with where as d:
        t0 = time.perf_counter()
        tree = tree_from(d) if a.use_tree else build_tree(d, a.containers)
        if not a.use_tree:
            save_tree(tree)
        build_s = time.perf_counter() - t0
        if a.rss_child:
            print(json.dumps(run_rss_child(tree, a.interval, not a.still)))
            return 0
        if a.floor_only:
            out = _floor_only(tree, a.passes)
            print(json.dumps(out) if a.json else out)
            return 0
        result = _measure(tree, a)
        if a.compare_with:
            with revision_sources(a.compare_with) as src:
                args = ["--use-tree", str(d), "--no-exporter", "--plans", "pass"]
                args += ["--passes", str(a.passes), "--minutes", str(a.minutes)]
                before = _child(args + (["--still"] if a.still else []), src)
            if not before["_exporter"].startswith(src):
                raise SystemExit(f"measuring {a.compare_with} imported {before['_exporter']}")
            result["before"] = before
        result["tree_build_s"] = round(build_s, 2)
        result["tree_dirs"] = tree.directories
        result["tree_files"] = tree.files
        result["tree_fs"] = _fs_type(d)
        if not a.no_exporter:
            result.update(measure_exporter_process(tree, result["tracked_cgroups"]))
    if a.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        print_table(result)
        print_summary(result, result.get("before"), a.compare_with or "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
