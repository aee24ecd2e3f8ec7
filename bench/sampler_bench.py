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
* their **ratio** (issue 2 aims for <= 2.5x);
* where the sampler's time goes (discovery walk, read+parse, the rest);
* ``/metrics`` **render** time for the snapshot (``generate_latest`` on a registry with
  the exporter's collector), and its size;
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
    return tree


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


def measure_in_process(tree: Tree, passes: int, interval: float, renders: int) -> dict[str, Any]:
    """Sampler vs floor, breakdown, render, RSS: all in this process."""
    rss_before = _status_kb("self", "VmRSS")
    from prometheus_client import CollectorRegistry, generate_latest

    from exporter.cgroupfs import mode
    from exporter.cgroupfs.discovery import walk
    from exporter.collector import ContentionCollector
    from exporter.sampler import Sampler

    facts = mode.detect(str(tree.sysfs), str(tree.procfs))
    if facts.v2_root is None:
        raise SystemExit(f"the synthetic tree was not detected as cgroup v2: {facts.reason}")
    sampler = Sampler(facts, procfs=str(tree.procfs), interval=interval)
    now = 1_800_000_000.0
    first = sampler.run_once(now=now)  # baselines
    tracked = [c.identity.cgroup for c in first.containers]
    n_tracked = len(tracked)
    n_containers = sum(1 for c in first.containers if c.identity.kind.value == "container")
    v2 = facts.v2_root
    floor_paths = [f"{v2}{p}/{name}" for p in tracked for name in V2_FILES]
    floor = floor_loop(floor_paths)
    floor()  # warm the dentry cache like the sampler's first pass did

    reader = sampler.reader

    def walk_all() -> None:
        for _ref in walk(v2):
            pass

    def read_all() -> None:
        assert reader is not None
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
    for _ in range(passes):
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

    registry = CollectorRegistry()
    registry.register(ContentionCollector(sampler))
    body = generate_latest(registry)
    render_t: list[float] = []
    render_c: list[float] = []
    for _ in range(renders):
        w0, c0 = time.perf_counter(), time.thread_time()
        body = generate_latest(registry)
        render_t.append(time.perf_counter() - w0)
        render_c.append(time.thread_time() - c0)
    series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    gc.collect()

    return {
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
        "render_ms": _ms(statistics.median(render_t)),
        "render_cpu_ms": _ms(statistics.median(render_c)),
        "render_bytes": len(body),
        "render_series": series,
        "rss_kb_before_import": rss_before,
        "rss_kb": _status_kb("self", "VmRSS"),
        "rss_peak_kb": _status_kb("self", "VmHWM"),
    }


def measure_exporter_process(tree: Tree, expect: int, timeout: float = 60.0) -> dict[str, Any]:
    """The real exporter CLI on the same tree: its RSS and one HTTP scrape."""
    from labs.exporter_proc import ExporterError, ExporterProcess

    exp = ExporterProcess(
        sample_interval=1.0,
        probe=False,
        extra_args=["--path.sysfs", str(tree.sysfs), "--path.procfs", str(tree.procfs)],
    )
    try:
        exp.start(timeout=timeout)
        exp.wait_for(
            f"{expect} tracked cgroups",
            lambda s: (s.value("contention_tracked_cgroups") or 0) >= expect,
            timeout=timeout,
        )
        time.sleep(3.0)  # a few more passes: deltas and window state exist
        t0 = time.perf_counter()
        status, body = exp.get("/metrics", timeout=30)
        scrape_s = time.perf_counter() - t0
        return {
            "exporter_rss_kb": _status_kb(exp.pid, "VmRSS"),
            "exporter_rss_peak_kb": _status_kb(exp.pid, "VmHWM"),
            "exporter_scrape_ms": _ms(scrape_s),
            "exporter_scrape_status": status,
            "exporter_scrape_bytes": len(body.encode()),
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
    timed("/metrics render (generate_latest)", r["render_ms"], r["render_cpu_ms"])
    size = f"{r['render_bytes'] / 1024:.0f} KiB"
    rows.append(("  size", size, f"{r['render_series']} series", ""))
    peak = f"peak {_mb(r['rss_peak_kb'])}"
    rows.append(("RSS, this process (sampler + 5 min window)", _mb(r["rss_kb"]), peak, ""))
    rows.append(("  before importing prometheus/exporter", _mb(r["rss_kb_before_import"]), "", ""))
    if "exporter_rss_kb" in r:
        peak = f"peak {_mb(r['exporter_rss_peak_kb'])}"
        rows.append(("RSS, exporter process on the tree", _mb(r["exporter_rss_kb"]), peak, ""))
        size = f"{r['exporter_scrape_bytes'] / 1024:.0f} KiB"
        rows.append(("  HTTP GET /metrics", f"{r['exporter_scrape_ms']:.1f} ms", size, ""))
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


def _fs_type(path: Path) -> str:
    best, fstype = "", "?"
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            mnt = parts[1]
            if str(path).startswith(mnt.rstrip("/") + "/") and len(mnt) > len(best):
                best, fstype = mnt, parts[2]
    return f"{fstype} ({best})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--containers", type=int, default=1000)
    ap.add_argument(
        "--passes",
        type=int,
        default=65,
        help="timed passes; 65 at --interval 5 fills the 5-minute window (default 65)",
    )
    ap.add_argument("--interval", type=float, default=5.0, help="simulated sample interval")
    ap.add_argument("--renders", type=int, default=10)
    ap.add_argument("--no-exporter", action="store_true", help="skip the exporter process")
    ap.add_argument(
        "--floor-only", action="store_true", help="only build the tree and time the floor"
    )
    ap.add_argument("--keep", action="store_true", help="keep the tree (path on stderr)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    a = ap.parse_args(argv)

    with tmpfs_dir(a.keep) as d:
        t0 = time.perf_counter()
        tree = build_tree(d, a.containers)
        build_s = time.perf_counter() - t0
        if a.floor_only:
            cg = tree.sysfs / "fs" / "cgroup"
            tracked = tree.containers + tree.other_tracked
            paths = [f"{cg}{p}/{name}" for p in tracked for name in V2_FILES]
            run = floor_loop(paths)
            run()
            ts = []
            for _ in range(a.passes):
                t = time.perf_counter()
                run()
                ts.append(time.perf_counter() - t)
            med = statistics.median(ts)
            out = {"tracked_cgroups": len(tracked), "floor_pass_ms": _ms(med)}
            out["floor_per_cgroup_us"] = _us(med / len(tracked))
            print(json.dumps(out) if a.json else out)
            return 0
        result = measure_in_process(tree, a.passes, a.interval, a.renders)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
