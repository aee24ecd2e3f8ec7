#!/usr/bin/env python3
"""The exporter's own cost on a busy node, probe on vs off, side by side (root only).

    sudo flock /tmp/contention-kernel.lock \\
        .venv/bin/python bench/exporter_overhead.py [--duration 60] [--warmup 30] [--json]

Two real exporters (``contention-exporter --web.listen-address 127.0.0.1:PORT
--sampler.interval 5``, one of them with ``--no-probe``) run at the same time, under the
same load, and are measured over the same window:

* load (every part ends by itself after warm-up + duration + a margin, and is stopped
  by PID and removed afterwards): a pipe ping-pong between two processes pinned to one
  CPU (lab cgroup ``contention-test-ovh-pingpong``), one busy loop
  (``contention-test-ovh-busy``), one busy loop under a 0.2-core CFS quota
  (``contention-test-ovh-throttled``) and a periodic 5 ms / 50 ms ticker
  (``contention-test-ovh-periodic``). The context-switch rate is measured from
  ``/proc/stat`` (``ctxt``) over the window.
* both exporters are scraped (``GET /metrics`` on 127.0.0.1) every 15 s from start to
  end, as Prometheus would;
* after ``--warmup`` seconds, over ``--duration`` seconds: each exporter's CPU seconds
  per second (``utime + stime`` of ``/proc/<pid>/stat``, all its threads), ``VmRSS``
  (sampled every second: mean, max, last) and ``VmHWM`` (peak since start; with the
  probe it includes BCC compiling the probe), plus the scrapes' time and size;
* the probe's kernel-side cost, which ``/proc/<pid>/stat`` cannot see (BPF programs run
  in the context of whichever task switches): ``contention_probe_program_run_seconds_total``
  and ``..._runs_total`` per program from the probe-on exporter's ``/metrics``, with
  ``kernel.bpf_stats_enabled=1`` for the run (the previous value is restored).

Needs root (BPF, cgroups, the sysctl). Other real-kernel work on the machine skews
the numbers, hence the lock in the command above (taken by the caller, not here).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from exporter.probe.status import find_kernel_source  # noqa: E402
from labs import LabCgroup, cleanup_stale, spawn_busy, spawn_periodic  # noqa: E402
from labs.exporter_proc import ExporterError, ExporterProcess, Scrape  # noqa: E402

STATS_SYSCTL = "/proc/sys/kernel/bpf_stats_enabled"
LAB_PREFIX = "contention-test-ovh-"
SAMPLE_INTERVAL = 5.0
CLK_TCK = os.sysconf("SC_CLK_TCK")
STATUS_FIELDS = ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem", "Threads")
MARGIN = 60.0  # seconds the load outlives the planned end, before it ends by itself

# The ping-pong pair, run by path-less ``python -I -c``: joins the lab's cgroup.procs
# files first, pins itself to one CPU, prints the follower's PID, and ping-pongs one
# byte over two pipes until its deadline. The follower exits on EOF (the leader ended
# or was killed) or EPIPE.
PINGPONG = r"""
import os, sys, time
procs = [p for p in sys.argv[1].split(",") if p]
seconds = float(sys.argv[2])
cpu = int(sys.argv[3])
for p in procs:
    fd = os.open(p, os.O_WRONLY | os.O_CLOEXEC)
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
os.sched_setaffinity(0, {cpu})
a_r, a_w = os.pipe()
b_r, b_w = os.pipe()
deadline = time.monotonic() + seconds
child = os.fork()
if child == 0:
    try:
        os.close(a_w)
        os.close(b_r)
        while os.read(a_r, 1):
            os.write(b_w, b"x")
    finally:
        os._exit(0)
os.close(a_r)
os.close(b_w)
sys.stdout.write(f"{child}\n")
sys.stdout.flush()
n = 0
while True:
    os.write(a_w, b"x")
    os.read(b_r, 1)
    n += 1
    if n % 256 == 0 and time.monotonic() >= deadline:
        break
os.close(a_w)
os.waitpid(child, 0)
"""


class Interrupted(Exception):
    """SIGTERM/SIGINT: unwind through the cleanup."""


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(f"signal {signum}")


# --- /proc readers ---------------------------------------------------------------------


def proc_cpu_seconds(pid: int) -> tuple[float, float]:
    """``(utime, stime)`` of a process (all threads), in seconds."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    rest = data[data.rfind(b")") + 2 :].split()
    return int(rest[11]) / CLK_TCK, int(rest[12]) / CLK_TCK


def proc_status_kb(pid: int, *fields: str) -> dict[str, int]:
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, val = line.partition(":")
            if key in fields:
                out[key] = int(val.split()[0])
    return out


def bpf_memlock_kb(pid: int) -> dict[str, int]:
    """Kernel memory of the BPF maps and programs a process holds (``memlock:`` of
    their fdinfo), in kB: not in its RSS, but charged to its memory cgroup on
    kernels >= 5.11."""
    out = {"map": 0, "prog": 0}
    fd_dir = f"/proc/{pid}/fd"
    with contextlib.suppress(OSError):
        for fd in os.listdir(fd_dir):
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            kind = {"anon_inode:bpf-map": "map", "anon_inode:bpf-prog": "prog"}.get(target)
            if kind is None:
                continue
            with contextlib.suppress(OSError, ValueError), open(f"{fd_dir}info/{fd}") as f:
                for line in f:
                    if line.startswith("memlock:"):
                        out[kind] += int(line.split()[1]) // 1024
    return out


def node_context_switches() -> int:
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("ctxt "):
                return int(line.split()[1])
    raise RuntimeError("no ctxt line in /proc/stat")


def read_sysctl(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def write_sysctl(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


# --- load ------------------------------------------------------------------------------


@dataclass
class PingPong:
    popen: subprocess.Popen[bytes]
    follower: int

    def stop(self) -> None:
        """SIGKILL the leader and the follower, by their PIDs, and reap the leader."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.popen.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(5)
        # The follower is the leader's child: once the leader is gone it is orphaned
        # and exits on EOF; kill it by PID in case it has not yet (it cannot have been
        # reused while its own parent was alive, and we checked it is ours below).
        if self.follower and _ppid_is(self.follower, {self.popen.pid, 1}):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.follower, signal.SIGKILL)


def _ppid_is(pid: int, parents: set[int]) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return False
    return int(data[data.rfind(b")") + 2 :].split()[1]) in parents


def start_pingpong(lab: LabCgroup, cpu: int, seconds: float) -> PingPong:
    popen = subprocess.Popen(
        [sys.executable, "-I", "-c", PINGPONG, ",".join(lab.procs_files()), f"{seconds}", str(cpu)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        start_new_session=True,
        close_fds=True,
    )
    pp = PingPong(popen, 0)
    assert popen.stdout is not None
    line = popen.stdout.readline()
    popen.stdout.close()
    try:
        pp.follower = int(line)
    except ValueError:
        pp.stop()
        raise RuntimeError(f"ping-pong did not start (rc={popen.poll()})") from None
    return pp


# --- one exporter under test -------------------------------------------------------------


@dataclass
class Scraped:
    seconds: float
    size: int


@dataclass
class Subject:
    """One exporter (probe on or off) and what was measured of it."""

    name: str
    proc: ExporterProcess
    start_seconds: float = 0.0
    scrapes: list[Scraped] = field(default_factory=list)
    window_scrapes: list[Scraped] = field(default_factory=list)
    first: Scrape | None = None  # the scrape at the window's start
    last: Scrape | None = None  # the scrape just after its end
    cpu0: tuple[float, float] = (0.0, 0.0)
    cpu1: tuple[float, float] = (0.0, 0.0)
    rss_kb: list[int] = field(default_factory=list)
    hwm_kb: int = 0
    status_kb: dict[str, int] = field(default_factory=dict)  # at the window's end
    bpf_kb: dict[str, int] = field(default_factory=dict)

    def scrape(self, in_window: bool) -> Scrape:
        t = time.perf_counter()
        s = self.proc.scrape(timeout=10.0)
        rec = Scraped(time.perf_counter() - t, len(s.text.encode()))
        self.scrapes.append(rec)
        if in_window:
            self.window_scrapes.append(rec)
        return s


def probe_programs(first: Scrape, last: Scrape) -> dict[str, dict[str, float]]:
    """Per BPF program: runs, kernel seconds and ns per run between two scrapes."""
    out: dict[str, dict[str, float]] = {}
    t0 = first.value("contention_sampler_last_pass_timestamp_seconds") or 0.0
    t1 = last.value("contention_sampler_last_pass_timestamp_seconds") or 0.0
    span = t1 - t0
    for s in last.select("contention_probe_program_runs_total"):
        prog = s.labels.get("program", "")
        runs = s.value - first.total("contention_probe_program_runs_total", program=prog)
        secs = last.total("contention_probe_program_run_seconds_total", program=prog)
        secs -= first.total("contention_probe_program_run_seconds_total", program=prog)
        out[prog] = {
            "runs": runs,
            "runs_per_second": runs / span if span > 0 else 0.0,
            "run_seconds": secs,
            "ns_per_run": secs * 1e9 / runs if runs else 0.0,
            "cpu_seconds_per_second": secs / span if span > 0 else 0.0,
        }
    return out


def summarize(sub: Subject, window: float) -> dict[str, Any]:
    du = sub.cpu1[0] - sub.cpu0[0]
    ds = sub.cpu1[1] - sub.cpu0[1]
    ws = sub.window_scrapes or sub.scrapes
    out: dict[str, Any] = {
        "argv": sub.proc.argv(),
        "pid": sub.proc.pid,
        "start_to_healthy_seconds": sub.start_seconds,
        "cpu_seconds_per_second": (du + ds) / window,
        "user_seconds_per_second": du / window,
        "system_seconds_per_second": ds / window,
        "rss_mean_mib": sum(sub.rss_kb) / len(sub.rss_kb) / 1024 if sub.rss_kb else 0.0,
        "rss_max_mib": max(sub.rss_kb) / 1024 if sub.rss_kb else 0.0,
        "rss_last_mib": sub.rss_kb[-1] / 1024 if sub.rss_kb else 0.0,
        "hwm_mib": sub.hwm_kb / 1024,
        "rss_anon_mib": sub.status_kb.get("RssAnon", 0) / 1024,
        "rss_file_mib": sub.status_kb.get("RssFile", 0) / 1024,
        "rss_shmem_mib": sub.status_kb.get("RssShmem", 0) / 1024,
        "threads": sub.status_kb.get("Threads", 0),
        "bpf_map_memlock_mib": sub.bpf_kb.get("map", 0) / 1024,
        "bpf_prog_memlock_mib": sub.bpf_kb.get("prog", 0) / 1024,
        "scrapes_in_window": len(sub.window_scrapes),
        "scrape_mean_seconds": sum(x.seconds for x in ws) / len(ws) if ws else 0.0,
        "scrape_size_bytes": ws[-1].size if ws else 0,
    }
    if sub.last is not None:
        out["tracked_cgroups"] = len(sub.last.cgroups())
        out["sampler_pass_seconds"] = sub.last.value("contention_sampler_pass_duration_seconds")
        loaded = sub.last.select("contention_probe_loaded")
        out["probe_loaded"] = {s.labels.get("reason", ""): s.value for s in loaded}
    if sub.first is not None and sub.last is not None and sub.proc.probe:
        progs = probe_programs(sub.first, sub.last)
        out["probe_programs"] = progs
        out["probe_kernel_cpu_seconds_per_second"] = sum(
            p["cpu_seconds_per_second"] for p in progs.values()
        )
        sw0 = sub.first.value("contention_probe_sched_switches_total") or 0.0
        sw1 = sub.last.value("contention_probe_sched_switches_total") or 0.0
        t0 = sub.first.value("contention_sampler_last_pass_timestamp_seconds") or 0.0
        t1 = sub.last.value("contention_sampler_last_pass_timestamp_seconds") or 0.0
        out["probe_switches_per_second"] = (sw1 - sw0) / (t1 - t0) if t1 > t0 else 0.0
    return out


# --- the run -----------------------------------------------------------------------------


def run(duration: float, warmup: float, scrape_every: float) -> dict[str, Any]:  # noqa: C901 - one measurement, step by step
    ksrc, why = find_kernel_source(None)
    env = dict(os.environ)
    if ksrc:
        env["BCC_KERNEL_SOURCE"] = ksrc
    elif why:
        raise RuntimeError(f"the probe cannot compile here: {why}")
    cleanup_stale(LAB_PREFIX)  # leftovers of a crashed earlier run (dead owners only)
    stats_before = read_sysctl(STATS_SYSCTL)
    labs: list[LabCgroup] = []
    subjects: list[Subject] = []
    pp: PingPong | None = None
    load_seconds = warmup + duration + MARGIN
    cpu = max(os.sched_getaffinity(0))
    try:
        write_sysctl(STATS_SYSCTL, "1")  # before the probe loads: counts from its start
        for probe in (True, False):
            sub = Subject(
                "probe on" if probe else "probe off",
                ExporterProcess(sample_interval=SAMPLE_INTERVAL, probe=probe, env=env),
            )
            subjects.append(sub)
            t = time.monotonic()
            sub.proc.start(timeout=120.0)
            sub.start_seconds = time.monotonic() - t
        pp_lab = LabCgroup.create(LAB_PREFIX + "pingpong")
        labs.append(pp_lab)
        busy_lab = LabCgroup.create(LAB_PREFIX + "busy")
        labs.append(busy_lab)
        thr_lab = LabCgroup.create(LAB_PREFIX + "throttled", cpu_quota_cores=0.2)
        labs.append(thr_lab)
        per_lab = LabCgroup.create(LAB_PREFIX + "periodic")
        labs.append(per_lab)
        pp = start_pingpong(pp_lab, cpu, load_seconds)
        spawn_busy(busy_lab, threads=1, seconds=load_seconds)
        spawn_busy(thr_lab, threads=1, seconds=load_seconds)
        spawn_periodic(per_lab, work_ms=5.0, period_ms=50.0, seconds=load_seconds)

        t_load = time.monotonic()
        next_scrape = t_load
        # Warm-up: scrapes on the same 15 s cadence; the window starts with one.
        while time.monotonic() - t_load < warmup:
            if time.monotonic() >= next_scrape:
                for sub in subjects:
                    sub.scrape(False)
                next_scrape += scrape_every
            time.sleep(0.05)
        ctxt0 = node_context_switches()
        t0 = time.monotonic()
        for sub in subjects:
            sub.proc.check_alive()
            sub.cpu0 = proc_cpu_seconds(sub.proc.pid)
        for sub in subjects:
            sub.first = sub.scrape(True)
        next_scrape = t0 + scrape_every
        next_rss = t0
        while True:
            now = time.monotonic()
            if now - t0 >= duration:
                break
            if now >= next_rss:
                for sub in subjects:
                    sub.rss_kb.append(proc_status_kb(sub.proc.pid, "VmRSS")["VmRSS"])
                next_rss += 1.0
            if now >= next_scrape:
                for sub in subjects:
                    sub.scrape(True)
                next_scrape += scrape_every
            time.sleep(0.02)
        for sub in subjects:
            sub.cpu1 = proc_cpu_seconds(sub.proc.pid)
        window = time.monotonic() - t0
        ctxt1 = node_context_switches()
        for sub in subjects:
            st = proc_status_kb(sub.proc.pid, *STATUS_FIELDS)
            sub.rss_kb.append(st["VmRSS"])
            sub.hwm_kb = st["VmHWM"]
            sub.status_kb = st
            sub.bpf_kb = bpf_memlock_kb(sub.proc.pid)
        # Scraped after the window, so the probe counters cover it (5 s passes).
        time.sleep(SAMPLE_INTERVAL + 0.5)
        for sub in subjects:
            sub.last = sub.scrape(False)
            sub.proc.check_alive()
        load_alive = pp.popen.poll() is None
    finally:
        if pp is not None:
            pp.stop()
        for lab in labs:
            with contextlib.suppress(Exception):
                lab.remove()
        for sub in subjects:
            sub.proc.close()
        write_sysctl(STATS_SYSCTL, stats_before)

    on, off = (summarize(s, window) for s in subjects)
    return {
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "kernel": os.uname().release,
        "cpus": os.cpu_count(),
        "cgroup_layout": labs[0].layout.mode,
        "bpf_stats_enabled_restored_to": stats_before,
        "sample_interval_seconds": SAMPLE_INTERVAL,
        "scrape_interval_seconds": scrape_every,
        "warmup_seconds": warmup,
        "window_seconds": window,
        "load": {
            "description": (
                f"pipe ping-pong (2 processes pinned to CPU {cpu}), 1 busy loop, "
                "1 busy loop at a 0.2-core quota, 5 ms every 50 ms; each in its own lab cgroup"
            ),
            "context_switches_per_second": (ctxt1 - ctxt0) / window,
            "still_running_at_end": load_alive,
        },
        "probe_on": on,
        "probe_off": off,
        "difference": {
            "cpu_seconds_per_second": on["cpu_seconds_per_second"] - off["cpu_seconds_per_second"],
            "rss_max_mib": on["rss_max_mib"] - off["rss_max_mib"],
            "hwm_mib": on["hwm_mib"] - off["hwm_mib"],
        },
    }


def print_table(r: dict[str, Any]) -> None:
    on, off = r["probe_on"], r["probe_off"]
    ld = r["load"]
    print(
        f"exporter overhead: {r['date']}, kernel {r['kernel']}, {r['cpus']} CPUs "
        f"({r['cgroup_layout']} cgroups); sample interval {r['sample_interval_seconds']:g} s, "
        f"GET /metrics every {r['scrape_interval_seconds']:g} s"
    )
    print(f"load: {ld['description']}")
    print(
        f"window {r['window_seconds']:.1f} s after {r['warmup_seconds']:g} s warm-up: "
        f"{ld['context_switches_per_second']:,.0f} context switches/s (/proc/stat ctxt); "
        f"{on.get('tracked_cgroups', 0)} cgroups tracked"
    )
    print()
    rows: list[tuple[str, str, float, float, bool]] = [
        ("CPU s/s (utime+stime)", "{:.4f}", on["cpu_seconds_per_second"],
         off["cpu_seconds_per_second"], True),
        ("  user", "{:.4f}", on["user_seconds_per_second"], off["user_seconds_per_second"], True),
        ("  system", "{:.4f}", on["system_seconds_per_second"],
         off["system_seconds_per_second"], True),
        ("VmRSS mean (MiB)", "{:.1f}", on["rss_mean_mib"], off["rss_mean_mib"], True),
        ("VmRSS max in window (MiB)", "{:.1f}", on["rss_max_mib"], off["rss_max_mib"], True),
        ("  of which RssAnon at end", "{:.1f}", on["rss_anon_mib"], off["rss_anon_mib"], True),
        ("  of which RssFile at end", "{:.1f}", on["rss_file_mib"], off["rss_file_mib"], True),
        ("VmHWM peak since start (MiB)", "{:.1f}", on["hwm_mib"], off["hwm_mib"], True),
        ("BPF maps + progs, memlock (MiB)", "{:.1f}",
         on["bpf_map_memlock_mib"] + on["bpf_prog_memlock_mib"],
         off["bpf_map_memlock_mib"] + off["bpf_prog_memlock_mib"], True),
        ("start to /healthz (s)", "{:.1f}", on["start_to_healthy_seconds"],
         off["start_to_healthy_seconds"], False),
        ("GET /metrics mean (ms)", "{:.1f}", on["scrape_mean_seconds"] * 1e3,
         off["scrape_mean_seconds"] * 1e3, False),
        ("/metrics size (KiB)", "{:.1f}", on["scrape_size_bytes"] / 1024,
         off["scrape_size_bytes"] / 1024, True),
    ]  # fmt: skip
    print(f"{'':<32}{'probe on':>12}{'probe off':>12}{'on - off':>12}")
    for label, fmt, a, b, diff in rows:
        d = fmt.format(a - b) if diff else ""
        print(f"{label:<32}{fmt.format(a):>12}{fmt.format(b):>12}{d:>12}")
    print()
    progs: dict[str, dict[str, float]] = on.get("probe_programs", {})
    print("probe, kernel side (kernel.bpf_stats_enabled=1; BPF time is not in /proc/<pid>/stat):")
    print(f"  {'program':<30}{'runs/s':>12}{'ns/run':>10}{'CPU s/s':>10}")
    for name, p in sorted(progs.items()):
        print(
            f"  {name:<30}{p['runs_per_second']:>12,.0f}{p['ns_per_run']:>10.1f}"
            f"{p['cpu_seconds_per_second']:>10.4f}"
        )
    kern = on.get("probe_kernel_cpu_seconds_per_second", 0.0)
    print(
        f"  {'all programs':<30}{'':>12}{'':>10}{kern:>10.4f}"
        f"   (probe saw {on.get('probe_switches_per_second', 0.0):,.0f} sched_switch/s)"
    )
    total = on["cpu_seconds_per_second"] + kern
    print()
    print(
        f"probe on, all in: {total:.4f} CPU s/s (exporter process + BPF programs) "
        f"vs {off['cpu_seconds_per_second']:.4f} with --no-probe"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--duration", type=float, default=60.0, help="measured window, seconds (10-1800)"
    )
    ap.add_argument("--warmup", type=float, default=30.0, help="seconds before the window")
    ap.add_argument(
        "--scrape-interval", type=float, default=15.0, help="seconds between GET /metrics"
    )
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print(
            "exporter_overhead: needs root (BPF, lab cgroups, bpf_stats_enabled)", file=sys.stderr
        )
        return 2
    duration = max(10.0, min(a.duration, 1800.0))
    warmup = max(0.0, min(a.warmup, 600.0))
    scrape_every = max(1.0, min(a.scrape_interval, 60.0))
    signal.signal(signal.SIGTERM, _on_signal)
    try:
        result = run(duration, warmup, scrape_every)
    except (ExporterError, RuntimeError, Interrupted) as e:
        print(f"exporter_overhead: {e}", file=sys.stderr)
        return 1
    loaded = result["probe_on"].get("probe_loaded", {}).get("", 0.0) == 1.0
    ok = loaded and result["load"]["still_running_at_end"]
    if a.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
    if not ok:
        print(
            "exporter_overhead: the probe was not loaded or the load ended early; "
            "see probe_on.probe_loaded / load.still_running_at_end",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
