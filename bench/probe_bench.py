#!/usr/bin/env python3
"""Per-event cost of the scheduler probe, against a floor, in one run (root only).

    sudo .venv/bin/python bench/probe_bench.py [--seconds 10] [--json]

With ``kernel.bpf_stats_enabled=1`` (restored afterwards) the kernel accounts each BPF
program's run time and run count (``/proc/<pid>/fdinfo/<prog fd>``). Five program sets
are attached at the same time, so they see exactly the same events:

* ``empty``: a sched_switch program that returns at once (the floor);
* ``clock-read``: one that only calls ``bpf_ktime_get_ns()`` (what any latency probe
  pays per switch at least);
* ``histogram-only``: a runqlat-like program (pid -> enqueue time, one log2 histogram);
* ``occupancy`` and ``last-runner``: the full probe (``bpf/sched_probe.c``) in each
  attribution mode, tracking every non-root cgroup (host mode's default).

Load: a pipe ping-pong between two processes pinned to one CPU, in a lab cgroup
(``contention-test-bench-pingpong``, removed afterwards); both processes end by
themselves after ``--seconds``. ``--with-hog`` adds a busy loop on the same CPU (its
own lab cgroup), so waits get long enough to go through attribution. Also reported:
the probe's CPU seconds per second (kernel side at the measured switch rate, and one
``poll()`` every 5 s in userspace) and the RSS of a process holding a loaded probe.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from exporter.probe import SchedProbe  # noqa: E402
from exporter.probe.loader import program_stats  # noqa: E402
from exporter.probe.status import find_kernel_source  # noqa: E402
from labs import LabCgroup, spawn_busy  # noqa: E402

BPF_DIR = ROOT / "bpf"
STATS_SYSCTL = "/proc/sys/kernel/bpf_stats_enabled"
UNIFIED = "/sys/fs/cgroup/unified"
SWITCH = "sched_switch"
HOOKS = ("sched_switch", "sched_wakeup", "sched_wakeup_new", "sched_process_exit")


def vm_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def all_cgroup_ids() -> list[int]:
    root = os.stat(UNIFIED).st_ino
    out = []
    for dirpath, _dirs, _files in os.walk(UNIFIED):
        with contextlib.suppress(OSError):
            ino = os.stat(dirpath).st_ino
            if ino != root:
                out.append(ino)
    return out


def pingpong(lab: LabCgroup, cpu: int, seconds: float) -> int:
    """Fork the ping-pong pair (in ``lab``, pinned to ``cpu``); returns the leader pid."""
    procs = lab.procs_files()
    pid = os.fork()
    if pid != 0:
        return pid
    try:  # leader
        for f in procs:
            with open(f, "w") as fh:
                fh.write(str(os.getpid()))
        os.sched_setaffinity(0, {cpu})
        a_r, a_w = os.pipe()
        b_r, b_w = os.pipe()
        deadline = time.monotonic() + seconds
        child = os.fork()
        if child == 0:  # follower: echo until the leader stops
            os.close(a_w)
            os.close(b_r)
            while os.read(a_r, 1):
                os.write(b_w, b"x")
            os._exit(0)
        os.close(a_r)
        os.close(b_w)
        n = 0
        while True:
            os.write(a_w, b"x")
            os.read(b_r, 1)
            n += 1
            if n % 256 == 0 and time.monotonic() >= deadline:
                break
        os.close(a_w)  # follower sees EOF and exits
        os.waitpid(child, 0)
    finally:
        os._exit(0)


def snapshot(funcs: dict[str, int]) -> dict[str, tuple[int, int]]:
    out = {}
    for name, fd in funcs.items():
        st = program_stats(fd)
        out[name] = (st.run_time_ns, st.run_count) if st else (0, 0)
    return out


def bcc_funcs(bpf: Any) -> dict[str, int]:
    out = {}
    for hook in HOOKS:
        fn = bpf.funcs.get(f"tracepoint__sched__{hook}".encode())
        if fn is not None:
            out[hook] = fn.fd
    return out


def rss_child() -> None:
    """Subprocess mode: RSS before and after loading one probe."""
    before = vm_kb("VmRSS")
    p = SchedProbe()
    st = p.load()
    p.set_tracked(all_cgroup_ids())
    p.poll()
    after = vm_kb("VmRSS")
    print(
        json.dumps(
            {
                "loaded": st.loaded,
                "rss_before_kb": before,
                "rss_after_kb": after,
                "peak_kb": vm_kb("VmHWM"),
            }
        )
    )
    p.close()


def main() -> int:  # noqa: C901 - one measurement, step by step
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0, help="load duration (max 120)")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    ap.add_argument(
        "--with-hog",
        action="store_true",
        help="add a busy loop on the same CPU, so waits get long enough to be attributed",
    )
    ap.add_argument("--rss-child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.rss_child:
        rss_child()
        return 0
    if os.geteuid() != 0:
        print("probe_bench: needs root (BPF, bpf_stats_enabled, a lab cgroup)", file=sys.stderr)
        return 2
    seconds = max(1.0, min(a.seconds, 120.0))
    ksrc, why = find_kernel_source(None)
    if ksrc is None and why:
        print(f"probe_bench: {why}", file=sys.stderr)
        return 2
    if ksrc:
        os.environ["BCC_KERNEL_SOURCE"] = ksrc
    from bcc import BPF

    with open(STATS_SYSCTL) as f:
        stats_before = f.read().strip()
    lab: LabCgroup | None = None
    hog_lab: LabCgroup | None = None
    leader = 0
    probes: list[SchedProbe] = []
    result: dict[str, Any] = {}
    try:
        with open(STATS_SYSCTL, "w") as f:
            f.write("1")
        empty = BPF(src_file=str(BPF_DIR / "bench_empty.c").encode(), cflags=["-w"])
        ktime = BPF(src_file=str(BPF_DIR / "bench_ktime.c").encode(), cflags=["-w"])
        hist = BPF(src_file=str(BPF_DIR / "bench_runqlat.c").encode(), cflags=["-w"])
        for mode in ("occupancy", "last-runner"):
            p = SchedProbe(attribution=mode)
            st = p.load()
            if not st.loaded:
                print(f"probe_bench: probe not loaded: {st.reason}: {st.detail}", file=sys.stderr)
                return 1
            probes.append(p)
        lab = LabCgroup.create("bench-pingpong")
        if a.with_hog:
            hog_lab = LabCgroup.create("bench-hog")
        tracked = all_cgroup_ids()
        for p in probes:
            p.set_tracked(tracked)
        sets = {
            "empty": bcc_funcs(empty),
            "clock-read": bcc_funcs(ktime),
            "histogram-only": bcc_funcs(hist),
        }
        for p in probes:
            sets[p.attribution] = bcc_funcs(p._bpf)  # the probe's own program fds
        cpu = max(os.sched_getaffinity(0))
        before = {k: snapshot(v) for k, v in sets.items()}
        probes[0].poll()
        blame0 = probes[0].totals()
        t0 = time.monotonic()
        leader = pingpong(lab, cpu, seconds)
        if hog_lab is not None:
            hog = spawn_busy(hog_lab, threads=1, seconds=seconds)
            for pid in (hog.pid, *hog.children):
                os.sched_setaffinity(pid, {cpu})
        # Poll like the sampler does (every 5 s; here every second for more samples).
        poll_s: list[float] = []
        cpu0 = time.thread_time()
        while True:
            done, _ = os.waitpid(leader, os.WNOHANG)
            if done:
                leader = 0
                break
            if time.monotonic() - t0 > seconds + 10:
                os.kill(leader, signal.SIGKILL)  # our own child, by PID
                os.waitpid(leader, 0)
                leader = 0
                break
            s = time.perf_counter()
            probes[0].poll()
            poll_s.append(time.perf_counter() - s)
            time.sleep(1.0)
        poll_cpu = time.thread_time() - cpu0
        window = time.monotonic() - t0
        after = {k: snapshot(v) for k, v in sets.items()}
        probes[0].poll()
        blame1 = probes[0].totals()

        rows: dict[str, dict[str, float]] = {}
        for name in sets:
            r: dict[str, float] = {}
            total_ns = 0
            for hook in sets[name]:
                dt = after[name][hook][0] - before[name][hook][0]
                dn = after[name][hook][1] - before[name][hook][1]
                total_ns += dt
                r[f"{hook}_events"] = dn
                r[f"{hook}_ns_per_event"] = dt / dn if dn else 0.0
            r["all_hooks_ns"] = total_ns
            rows[name] = r
        switches = rows["empty"][f"{SWITCH}_events"]
        floor = rows["empty"][f"{SWITCH}_ns_per_event"]
        histo = rows["histogram-only"][f"{SWITCH}_ns_per_event"]
        for r in rows.values():
            ns = r[f"{SWITCH}_ns_per_event"]
            r["ratio_to_floor"] = ns / floor if floor else 0.0
            r["ratio_to_histogram"] = ns / histo if histo else 0.0
            r["all_hooks_ns_per_switch"] = r["all_hooks_ns"] / switches if switches else 0.0
            r["kernel_cpu_seconds_per_second"] = r["all_hooks_ns"] / 1e9 / window
        rss = subprocess.run(
            [sys.executable, __file__, "--rss-child"], capture_output=True, text=True, check=False
        )
        try:
            rss_info = json.loads(rss.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            rss_info = {"error": rss.stderr[-500:]}
        poll_mean = sum(poll_s) / len(poll_s) if poll_s else 0.0
        result = {
            "kernel": os.uname().release,
            "cpus": os.cpu_count(),
            "window_seconds": window,
            "load": "ping-pong + busy hog" if a.with_hog else "ping-pong",
            "switches_per_second": switches / window,
            "tracked_cgroups": len(tracked),
            "recorded_waits_per_switch": (blame1.runq_events - blame0.runq_events) / switches
            if switches
            else 0.0,
            "attributed_waits_per_switch": (blame1.blame_events - blame0.blame_events) / switches
            if switches
            else 0.0,
            "programs": rows,
            "poll": {
                "count": len(poll_s),
                "mean_seconds": poll_mean,
                "cpu_seconds_total": poll_cpu,
                "cpu_seconds_per_second_at_5s_interval": poll_mean / 5.0,
            },
            "rss": rss_info,
        }
    finally:
        if leader:
            with contextlib.suppress(ProcessLookupError, ChildProcessError):
                os.kill(leader, signal.SIGKILL)
                os.waitpid(leader, 0)
        for p in probes:
            p.close()
        for lb in (lab, hog_lab):
            if lb is not None:
                lb.remove()
        with open(STATS_SYSCTL, "w") as f:
            f.write(stats_before)

    if a.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"kernel {result['kernel']}, {result['cpus']} CPUs; {result['load']} pinned to one CPU "
        f"for {result['window_seconds']:.1f}s: {result['switches_per_second']:,.0f} "
        f"sched_switch/s; {result['tracked_cgroups']} cgroups tracked; per switch "
        f"{result['recorded_waits_per_switch']:.2f} waits recorded, "
        f"{result['attributed_waits_per_switch']:.3f} attributed (>= min wait)"
    )
    print()
    hdr = f"{'program':<16}{'switch ns/ev':>13}{'x floor':>9}{'x hist':>8}"
    hdr += f"{'wakeup ns/ev':>14}{'all hooks ns/switch':>21}{'kernel CPU s/s':>16}"
    print(hdr)
    for name, r in result["programs"].items():
        print(
            f"{name:<16}{r[f'{SWITCH}_ns_per_event']:>13.1f}{r['ratio_to_floor']:>9.2f}"
            f"{r['ratio_to_histogram']:>8.2f}{r.get('sched_wakeup_ns_per_event', 0.0):>14.1f}"
            f"{r['all_hooks_ns_per_switch']:>21.1f}{r['kernel_cpu_seconds_per_second']:>16.4f}"
        )
    pl = result["poll"]
    print()
    print(
        f"userspace poll(): {pl['mean_seconds'] * 1e3:.2f} ms each "
        f"({pl['count']} polls) -> {pl['cpu_seconds_per_second_at_5s_interval']:.5f} CPU s/s "
        "at the sampler's 5 s interval"
    )
    ri = result["rss"]
    if "rss_after_kb" in ri:
        print(
            f"RSS of a process with one loaded probe: {ri['rss_after_kb'] / 1024:.0f} MiB "
            f"(before loading {ri['rss_before_kb'] / 1024:.0f} MiB, peak while compiling "
            f"{ri['peak_kb'] / 1024:.0f} MiB)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
