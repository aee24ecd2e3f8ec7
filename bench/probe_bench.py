#!/usr/bin/env python3
"""The scheduler probe's cost, CO-RE and BCC side by side in one run (root only).

    sudo .venv/bin/python bench/probe_bench.py [--seconds 10] [--last-runner] [--profile]
        [--no-runqlat] [--json]

Part 1, per-event kernel cost. With ``kernel.bpf_stats_enabled=1`` (restored
afterwards) the kernel accounts each BPF program's run time and run count
(``/proc/<pid>/fdinfo/<prog fd>``). All program sets are attached at the same time,
so they see exactly the same events:

* ``tp_btf empty`` / ``tp_btf clock-read``: BTF tracepoint programs (the CO-RE probe's
  hook type) that return at once / only call ``bpf_ktime_get_ns()``: the floor, and
  what one clock read costs (``bpf/bench_core.bpf.c``, compiled here with clang);
* ``tracepoint empty`` / ``tracepoint clock-read`` / ``histogram-only``: the same for
  BCC's perf-event tracepoints, and a runqlat-like program (``bpf/bench_*.c``);
* ``core`` and ``bcc``: the full probe through each loader (occupancy; with
  ``--last-runner`` also last-runner mode), tracking every non-root cgroup;
  ``core no burst``: the CO-RE probe with its burst count off (the ``burst`` knob), so
  the burst measurement's increment is measured, not guessed; with ``--profile`` also
  the CO-RE probe rebuilt without one part of its switch path at a time (``ABLATIONS``);
* ``runqlat (bpfcc-tools)``: BCC's own ``runqlat`` (Debian's ``runqlat-bpfcc``), a
  histogram-only probe with no blame, run as its own process over the same window: the
  outside reference (``--no-runqlat`` leaves it out).

Load: a pipe ping-pong between two processes pinned to one CPU, in a lab cgroup
(``contention-test-bench-pingpong``, removed afterwards); both end by themselves after
``--seconds``. ``--with-hog`` adds a busy loop on the same CPU (its own lab cgroup), so
waits get long enough to go through attribution.

Part 2, the exporter process (``--no-startup`` skips it): ``contention-exporter`` is
started three times on this host, with ``--probe.loader=core``, ``--probe.loader=bcc``
and ``--no-probe``: the time from process start until it answers ``/healthz`` (the
probe is attached before the server starts), the probe's own load time (from its log
line), and the process RSS after a few sampler passes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from exporter.probe import SchedProbe  # noqa: E402
from exporter.probe.libbpf import BpfObject, Libbpf  # noqa: E402
from exporter.probe.loader import program_stats  # noqa: E402
from exporter.probe.status import find_kernel_source  # noqa: E402
from labs import LabCgroup, spawn_busy  # noqa: E402
from labs.exporter_proc import ExporterProcess  # noqa: E402

BPF_DIR = ROOT / "bpf"
STATS_SYSCTL = "/proc/sys/kernel/bpf_stats_enabled"
UNIFIED = "/sys/fs/cgroup/unified"
SWITCH = "sched_switch"
BCC_HOOKS = ("sched_switch", "sched_wakeup", "sched_wakeup_new", "sched_process_exit")
TARGETS = {"core_switch_ns": 150.0, "core_all_hooks_ns": 250.0, "burst_switch_ns": 15.0}
RUNQLAT = "runqlat (bpfcc-tools)"


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


def snapshot(fds: dict[str, int]) -> dict[str, tuple[int, int]]:
    out = {}
    for name, fd in fds.items():
        st = program_stats(fd)
        out[name] = (st.run_time_ns, st.run_count) if st else (0, 0)
    return out


def _fdinfo(pid: int, fd: str) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/fdinfo/{fd}") as f:
            return {k.strip(): v.strip() for k, v in (ln.split(":", 1) for ln in f if ":" in ln)}
    except OSError:
        return {}


class Runqlat:
    """BCC's own ``runqlat`` (Debian's bpfcc-tools: ``runqlat-bpfcc``), the outside
    reference: a histogram-only probe, run as its own process for the whole window and
    measured through its programs' fdinfo (the same ``run_time_ns / run_cnt``); each
    program's hook is the ``tp_name`` of the raw-tracepoint link that attached it."""

    COMMAND = "runqlat-bpfcc"
    READY = b"Tracing run queue latency"

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.why = ""

    def start(self, timeout: float = 90.0) -> bool:
        exe = shutil.which(self.COMMAND) or shutil.which(self.COMMAND, path="/usr/sbin")
        if exe is None:
            self.why = f"{self.COMMAND} not found (apt-get install bpfcc-tools)"
            return False
        # interval and count: one summary after an hour, so it only traces meanwhile
        self.proc = subprocess.Popen(
            [exe, "3600", "1"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        line = b""
        while time.monotonic() < deadline and self.proc.poll() is None:
            line = self.proc.stdout.readline()
            if self.READY in line:
                return True
        self.why = f"{self.COMMAND} did not start tracing (rc={self.proc.poll()})"
        self.close()
        return False

    def fds(self) -> dict[str, str]:
        """Hook -> the fd (in its process) of the program attached there."""
        assert self.proc is not None
        pid = self.proc.pid
        progs: dict[str, str] = {}  # prog_id -> fd
        hooks: dict[str, str] = {}  # prog_id -> tp_name
        for fd in os.listdir(f"/proc/{pid}/fd"):
            info = _fdinfo(pid, fd)
            if "run_time_ns" in info and "prog_id" in info:
                progs[info["prog_id"]] = fd
            elif "tp_name" in info and "prog_id" in info:
                hooks[info["prog_id"]] = info["tp_name"]
        return {hooks.get(pid_, f"prog{pid_}"): fd for pid_, fd in progs.items()}

    def snapshot(self, fds: dict[str, str]) -> dict[str, tuple[int, int]]:
        assert self.proc is not None
        out = {}
        for hook, fd in fds.items():
            info = _fdinfo(self.proc.pid, fd)
            out[hook] = (int(info.get("run_time_ns", 0)), int(info.get("run_cnt", 0)))
        return out

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # our own child, by PID
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def bcc_fds(bpf: Any) -> dict[str, int]:
    out = {}
    for hook in BCC_HOOKS:
        fn = bpf.funcs.get(f"tracepoint__sched__{hook}".encode())
        if fn is not None:
            out[hook] = fn.fd
    return out


def core_references(workdir: Path) -> tuple[BpfObject | None, str]:
    """The tp_btf reference programs, compiled here (clang + libbpf-dev headers)."""
    clang = shutil.which("clang")
    if clang is None:
        return None, "clang not found (scripts/setup.sh --build-bpf)"
    obj, src = workdir / "bench_core.bpf.o", BPF_DIR / "bench_core.bpf.c"
    r = subprocess.run(
        [clang, "-target", "bpfel", "-g", "-O2", f"-I{BPF_DIR}", "-c", str(src), "-o", str(obj)],
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        return None, f"clang failed: {r.stderr[-300:]}"
    bo = BpfObject(Libbpf.open(), obj.read_bytes(), "bench_core")
    bo.load()
    for prog in ("bench_empty", "bench_ktime"):
        bo.attach(prog)
    return bo, ""


# --profile: the CO-RE probe built again with one part of its sched_switch path taken
# out (bpf/sched_probe.bpf.c, sched_probe_logic.h: BENCH_* macros, never set in the
# shipped object): each variant's cost below the full probe's is that part's.
ABLATIONS = {
    "core -atomics": "BENCH_PLAIN_ADDS",  # the histogram's two atomic adds, plain
    "core -prev cgroup": "BENCH_NO_PREV_CGROUP",  # prev's cgroup id not read
    "core -ring": "BENCH_NO_RING",  # no run slice pushed
}


def build_ablation(workdir: Path, macro: str) -> Path:
    """The CO-RE object compiled with ``-D<macro>`` (scripts/build-bpf.sh's flags)."""
    out = workdir / f"ablate-{macro.lower()}.o"
    r = subprocess.run(
        [
            "clang",
            "-target",
            "bpfel",
            "-g",
            "-O2",
            "-nostdinc",
            "-isystem",
            "/usr/include",
            f"-I{BPF_DIR}",
            f"-D{macro}",
            "-c",
            str(BPF_DIR / "sched_probe.bpf.c"),
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        raise SystemExit(f"probe_bench: cannot build the {macro} variant: {r.stderr[-300:]}")
    return out


@dataclass
class Programs:
    """Everything attached for the measurement; ``close()`` detaches it all."""

    sets: dict[str, dict[str, int]] = field(default_factory=dict)  # name -> hook -> fd
    probes: dict[str, SchedProbe] = field(default_factory=dict)
    bcc_refs: list[Any] = field(default_factory=list)
    core_ref: BpfObject | None = None

    def attach(self, workdir: Path, last_runner: bool, profile: bool = False) -> None:
        from bcc import BPF

        # References first (programs attached earlier pay more cold-cache misses).
        self.core_ref, why = core_references(workdir)
        if self.core_ref is not None:
            self.sets["tp_btf empty"] = {SWITCH: self.core_ref.program_fd("bench_empty")}
            self.sets["tp_btf clock-read"] = {SWITCH: self.core_ref.program_fd("bench_ktime")}
        else:
            print(f"probe_bench: no tp_btf reference programs: {why}", file=sys.stderr)
        for name, src in (
            ("tracepoint empty", "bench_empty.c"),
            ("tracepoint clock-read", "bench_ktime.c"),
            ("histogram-only", "bench_runqlat.c"),
        ):
            b = BPF(src_file=str(BPF_DIR / src).encode(), cflags=["-w"])
            self.bcc_refs.append(b)
            self.sets[name] = bcc_fds(b)
        modes = ("occupancy", "last-runner") if last_runner else ("occupancy",)
        # The full probe, and the CO-RE one without its burst count (the burst knob
        # off: the verifier removes that code), for the burst measurement's increment.
        # Attached last: a later program pays fewer cold misses, so the increment is
        # not understated.
        variants = [
            (loader if mode == "occupancy" else f"{loader} last-runner", loader, mode, True)
            for loader in ("core", "bcc")
            for mode in modes
        ]
        variants.append(("core no burst", "core", "occupancy", False))
        objects = (
            {name: build_ablation(workdir, m) for name, m in ABLATIONS.items()} if profile else {}
        )
        variants += [(name, "core", "occupancy", True) for name in objects]
        for key, loader, mode, burst in variants:
            obj = str(objects[key]) if key in objects else None
            p = SchedProbe(loader=loader, attribution=mode, burst=burst, object_path=obj)
            st = p.load()
            if not st.loaded:
                raise SystemExit(f"probe_bench: {key} not loaded: {st.reason}: {st.detail}")
            self.probes[key] = p
            assert p._maps is not None
            self.sets[key] = p._maps.program_fds()

    def close(self) -> None:
        for p in self.probes.values():
            p.close()
        for b in self.bcc_refs:
            b.cleanup()
        if self.core_ref is not None:
            self.core_ref.close()


def run_load(
    lab: LabCgroup, hog_lab: LabCgroup | None, seconds: float, poll: SchedProbe
) -> tuple[float, list[float]]:
    """The ping-pong (and the hog) on one CPU for ``seconds``, polling ``poll`` every
    second like the sampler would; returns (window seconds, poll durations)."""
    cpu = max(os.sched_getaffinity(0))
    t0 = time.monotonic()
    leader = pingpong(lab, cpu, seconds)
    poll_s: list[float] = []
    try:
        if hog_lab is not None:
            hog = spawn_busy(hog_lab, threads=1, seconds=seconds)
            for pid in (hog.pid, *hog.children):
                os.sched_setaffinity(pid, {cpu})
        while not os.waitpid(leader, os.WNOHANG)[0]:
            if time.monotonic() - t0 > seconds + 10:
                os.kill(leader, signal.SIGKILL)  # our own child, by PID
                os.waitpid(leader, 0)
                break
            s = time.perf_counter()
            poll.poll()
            poll_s.append(time.perf_counter() - s)
            time.sleep(1.0)
        leader = 0
    finally:
        if leader:
            with contextlib.suppress(ProcessLookupError, ChildProcessError):
                os.kill(leader, signal.SIGKILL)
                os.waitpid(leader, 0)
    return time.monotonic() - t0, poll_s


Snapshot = dict[str, dict[str, tuple[int, int]]]  # program set -> hook -> (ns, runs)


def cost_rows(before: Snapshot, after: Snapshot, window: float) -> dict[str, dict[str, float]]:
    """Per program set: runs and ns per run of each hook, all hooks per sched_switch,
    kernel CPU seconds per second."""
    rows: dict[str, dict[str, float]] = {}
    for name, hooks in after.items():
        r: dict[str, float] = {}
        total_ns = 0
        for hook, (ns, runs) in hooks.items():
            dt, dn = ns - before[name][hook][0], runs - before[name][hook][1]
            total_ns += dt
            r[f"{hook}_events"] = dn
            r[f"{hook}_ns_per_event"] = dt / dn if dn else 0.0
        r["all_hooks_ns"] = total_ns
        rows[name] = r
    switches = max(r.get(f"{SWITCH}_events", 0) for r in rows.values())
    for r in rows.values():
        r["all_hooks_ns_per_switch"] = r["all_hooks_ns"] / switches if switches else 0.0
        r["kernel_cpu_seconds_per_second"] = r["all_hooks_ns"] / 1e9 / window
    return rows


def verdict(rows: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The CO-RE probe against its targets and against BCC in the same run."""
    core, bcc = rows.get("core", {}), rows.get("bcc", {})
    core_sw = core.get(f"{SWITCH}_ns_per_event", 0.0)
    core_all = core.get("all_hooks_ns_per_switch", 1e9)
    plain = rows.get("core no burst", {})
    ref = rows.get(RUNQLAT, {})

    def ratio(a: float, b: float) -> float | None:
        return a / b if b else None

    return {
        "burst_switch_increment_ns": core_sw - plain.get(f"{SWITCH}_ns_per_event", 0.0)
        if plain
        else None,
        "burst_all_hooks_increment_ns": core.get("all_hooks_ns_per_switch", 0.0)
        - plain.get("all_hooks_ns_per_switch", 0.0)
        if plain
        else None,
        "core_no_burst_switch_ns": plain.get(f"{SWITCH}_ns_per_event"),
        "core_to_runqlat_switch": ratio(core_sw, ref.get(f"{SWITCH}_ns_per_event", 0.0)),
        "core_to_runqlat_all_hooks": ratio(
            core.get("all_hooks_ns_per_switch", 0.0), ref.get("all_hooks_ns_per_switch", 0.0)
        ),
        "core_switch_ns": core_sw,
        "core_switch_target_met": core_sw <= TARGETS["core_switch_ns"],
        "core_all_hooks_ns": core.get("all_hooks_ns_per_switch", 0.0),
        "core_all_hooks_target_met": core_all <= TARGETS["core_all_hooks_ns"],
        "core_not_slower_than_bcc": core_all <= bcc.get("all_hooks_ns_per_switch", 0.0)
        and core_sw <= bcc.get(f"{SWITCH}_ns_per_event", 0.0),
    }


def kernel_costs(a: argparse.Namespace) -> dict[str, Any]:
    seconds = max(1.0, min(a.seconds, 120.0))
    with open(STATS_SYSCTL) as f:
        stats_before = f.read().strip()
    labs: list[LabCgroup] = []
    progs = Programs()
    runqlat = Runqlat()
    workdir = Path(tempfile.mkdtemp(prefix="probe-bench-"))
    try:
        with open(STATS_SYSCTL, "w") as f:
            f.write("1")
        progs.attach(workdir, a.last_runner, a.profile)
        labs.append(LabCgroup.create("bench-pingpong"))
        if a.with_hog:
            labs.append(LabCgroup.create("bench-hog"))
        tracked = all_cgroup_ids()
        for p in progs.probes.values():
            p.set_tracked(tracked)
        rq_fds: dict[str, str] = {}
        if not a.no_runqlat and runqlat.start():
            rq_fds = runqlat.fds()
        elif runqlat.why:
            print(f"probe_bench: no runqlat reference: {runqlat.why}", file=sys.stderr)
        before = {k: snapshot(v) for k, v in progs.sets.items()}
        if rq_fds:
            before[RUNQLAT] = runqlat.snapshot(rq_fds)
        for p in progs.probes.values():
            p.poll()
        totals0 = {k: p.totals() for k, p in progs.probes.items()}
        hog_lab = labs[1] if a.with_hog else None
        first = next(iter(progs.probes.values()))
        window, poll_s = run_load(labs[0], hog_lab, seconds, first)
        after = {k: snapshot(v) for k, v in progs.sets.items()}
        if rq_fds:
            after[RUNQLAT] = runqlat.snapshot(rq_fds)
        for p in progs.probes.values():
            p.poll()
        totals1 = {k: p.totals() for k, p in progs.probes.items()}
    finally:
        runqlat.close()
        progs.close()
        for lb in labs:
            lb.remove()
        shutil.rmtree(workdir, ignore_errors=True)
        with open(STATS_SYSCTL, "w") as f:
            f.write(stats_before)

    rows = cost_rows(before, after, window)
    switches = max(r.get(f"{SWITCH}_events", 0) for r in rows.values())
    recorded = {
        k: (totals1[k].runq_events - totals0[k].runq_events) / switches if switches else 0.0
        for k in progs.probes
    }
    return {
        "window_seconds": window,
        "load": "ping-pong + busy hog" if a.with_hog else "ping-pong",
        "switches_per_second": switches / window,
        "tracked_cgroups": len(tracked),
        "recorded_waits_per_switch": recorded,
        "programs": rows,
        "targets": TARGETS,
        "verdict": verdict(rows),
        "poll_core_mean_seconds": sum(poll_s) / len(poll_s) if poll_s else 0.0,
    }


def vm_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


LOAD_LINE = re.compile(r"scheduler probe loaded.*?: (CO-RE|BCC) in ([0-9.]+)s")


def exporter_startup(settle_s: float) -> dict[str, Any]:
    """Start the real exporter per loader (and without the probe): start-up time,
    the probe's own load time, RSS after a few passes."""
    out: dict[str, Any] = {}
    env = dict(os.environ)
    ksrc, _ = find_kernel_source(None)
    if ksrc:
        env.setdefault("BCC_KERNEL_SOURCE", ksrc)
    for name, args in (
        ("core", ["--probe.loader", "core"]),
        ("bcc", ["--probe.loader", "bcc"]),
        ("no probe", []),
    ):
        exp = ExporterProcess(sample_interval=1.0, probe=bool(args), extra_args=args, env=env)
        t0 = time.monotonic()
        try:
            exp.start(timeout=60)
            ready = time.monotonic() - t0
            time.sleep(settle_s)  # a few sampler passes
            scrape = exp.scrape()
            loaded = scrape.select("contention_probe_loaded")
            m = LOAD_LINE.search(exp.log_tail())
            out[name] = {
                "ready_seconds": ready,
                "probe_load_seconds": float(m.group(2)) if m else None,
                "loaded_by": loaded[0].labels.get("loader", "") if loaded else "",
                "loaded": bool(loaded) and loaded[0].value == 1,
                "rss_mib": vm_kb(exp.pid, "VmRSS") / 1024,
                "peak_rss_mib": vm_kb(exp.pid, "VmHWM") / 1024,
            }
        finally:
            exp.close()
    return out


def print_table(result: dict[str, Any]) -> None:
    k = result.get("kernel_cost")
    if k:
        print(
            f"kernel {result['kernel']}, {result['cpus']} CPUs; {k['load']} pinned to one "
            f"CPU for {k['window_seconds']:.1f}s: {k['switches_per_second']:,.0f} "
            f"sched_switch/s; {k['tracked_cgroups']} cgroups tracked"
        )
        print()
        print(
            f"{'program':<24}{'switch ns/ev':>13}{'wakeup ns/ev':>14}"
            f"{'all hooks ns/switch':>21}{'kernel CPU s/s':>16}"
        )
        for name, r in k["programs"].items():
            print(
                f"{name:<24}{r.get(f'{SWITCH}_ns_per_event', 0.0):>13.1f}"
                f"{r.get('sched_wakeup_ns_per_event', 0.0):>14.1f}"
                f"{r['all_hooks_ns_per_switch']:>21.1f}{r['kernel_cpu_seconds_per_second']:>16.4f}"
            )
        v, t = k["verdict"], k["targets"]

        def met(ok: bool) -> str:
            return "met" if ok else "NOT met"

        print()
        print(
            f"CO-RE probe: {v['core_switch_ns']:.0f} ns per sched_switch (target "
            f"<= {t['core_switch_ns']:.0f}: {met(v['core_switch_target_met'])}), "
            f"{v['core_all_hooks_ns']:.0f} ns all hooks per switch (target <= "
            f"{t['core_all_hooks_ns']:.0f}: {met(v['core_all_hooks_target_met'])}); "
            f"no slower than BCC: {'yes' if v['core_not_slower_than_bcc'] else 'NO'}"
        )
        inc = v["burst_switch_increment_ns"]
        if inc is not None:
            print(
                f"burst demand: +{inc:.1f} ns per sched_switch (target <= "
                f"{t['burst_switch_ns']:.0f}: {met(inc <= t['burst_switch_ns'])}), "
                f"+{v['burst_all_hooks_increment_ns']:.1f} ns all hooks per switch; "
                f"without it {v['core_no_burst_switch_ns']:.0f} ns per sched_switch"
            )
        if v["core_to_runqlat_switch"] is not None:
            print(
                f"CO-RE probe / BCC's runqlat: {v['core_to_runqlat_switch']:.2f}x per "
                f"sched_switch, {v['core_to_runqlat_all_hooks']:.2f}x all hooks per switch"
            )
        rec = ", ".join(f"{n} {x:.2f}" for n, x in k["recorded_waits_per_switch"].items())
        print(f"waits recorded per switch: {rec}")
    s = result.get("startup")
    if s:
        print()
        print(f"{'exporter':<12}{'ready s':>9}{'probe load s':>14}{'RSS MiB':>9}{'peak MiB':>10}")
        for name, r in s.items():
            pl = r["probe_load_seconds"]
            load = f"{pl:.2f}" if pl is not None else "-"
            print(
                f"{name:<12}{r['ready_seconds']:>9.2f}{load:>14}"
                f"{r['rss_mib']:>9.1f}{r['peak_rss_mib']:>10.1f}"
                + (f"  loaded by {r['loaded_by']}" if r["loaded"] else "")
            )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0, help="load duration (max 120)")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    ap.add_argument(
        "--with-hog",
        action="store_true",
        help="add a busy loop on the same CPU, so waits get long enough to be attributed",
    )
    ap.add_argument(
        "--last-runner", action="store_true", help="also both probes in last-runner mode"
    )
    ap.add_argument("--no-startup", action="store_true", help="skip the exporter start-up/RSS part")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="also the CO-RE probe without one part of its switch path at a time",
    )
    ap.add_argument(
        "--no-runqlat", action="store_true", help="without BCC's runqlat-bpfcc as the reference"
    )
    ap.add_argument("--settle", type=float, default=5.0, help="seconds before reading RSS")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("probe_bench: needs root (BPF, bpf_stats_enabled, a lab cgroup)", file=sys.stderr)
        return 2
    ksrc, why = find_kernel_source(None)
    if ksrc is None and why:
        print(f"probe_bench: BCC needs kernel headers: {why}", file=sys.stderr)
        return 2
    if ksrc:
        os.environ["BCC_KERNEL_SOURCE"] = ksrc
    result: dict[str, Any] = {"kernel": os.uname().release, "cpus": os.cpu_count()}
    result["kernel_cost"] = kernel_costs(a)
    if not a.no_startup:
        result["startup"] = exporter_startup(a.settle)
    if a.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
