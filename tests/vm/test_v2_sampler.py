"""The sampler on a real pure cgroup v2 kernel (the VM lane's guest).

The test machines are hybrid, so until this lane the v2 paths were tested only on
fixture trees: ``cpu.max`` throttling and v2 ``cpu.stat``, ``cpu.weight`` and every
per-cgroup memory file. Here the kernel writes them. Expected numbers are those of the
``throttled`` lab (200m limit, busy threads: throttled in nearly every period, ~0.2
cores) and the ``weights`` lab (requests 100m and 800m become weights 4 and 32, the CPU
splits near 1:8); docs/labs.md describes both. The CPU and memory checks share one
scene (:func:`scene`): their containers run at once, so the guest waits for one window,
not three.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from labs import LabCgroup, LabLayout, kubelet_shares, shares_to_weight, spawn_busy
from labs.cgroups import flat_keyed
from labs.exporter_proc import ExporterProcess, Scrape
from labs.scenarios import lab_cpu
from labs.workers import spawn_memory

pytestmark = pytest.mark.vm

MakeLab = Callable[..., LabCgroup]
MIB = 1 << 20
PASS_TS = "contention_sampler_last_pass_timestamp_seconds"
USAGE = "contention_cpu_usage_seconds_total"

# Every file the sampler reads on a pure cgroup v2 node (exporter/cgroupfs/reader.py and
# procfs.py: every per-pass read goes through their read_text); docs/testing.md lists them. The test
# below fails when the sampler reads a file missing here, or stops reading one.
V2_CGROUP_FILES = frozenset(
    {
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
    }
)
NODE_FILES = frozenset(
    {
        "/proc/stat",
        "/proc/pressure/cpu",
        "/proc/pressure/memory",
        "/proc/pressure/io",
        "/proc/meminfo",
    }
)


SCENE_S = 300.0


def _present(exp: ExporterProcess, path: str, timeout: float = 30.0) -> Scrape:
    return exp.wait_for(
        f"{path} in /metrics", lambda s: s.value(USAGE, cgroup=path) is not None, timeout
    )


def _window(exp: ExporterProcess, path: str, seconds: float) -> tuple[Scrape, Scrape, float]:
    """Two scrapes of two sampler passes >= ``seconds`` apart, and the time between
    the passes (the exporter's own pass timestamps)."""
    s0 = exp.next_snapshot(USAGE, timeout=60.0, cgroup=path)
    time.sleep(seconds)
    s1 = exp.next_snapshot(USAGE, timeout=60.0, cgroup=path)
    t0, t1 = s0.value(PASS_TS), s1.value(PASS_TS)
    assert t0 is not None and t1 is not None
    return s0, s1, t1 - t0


def _delta(s0: Scrape, s1: Scrape, name: str, **labels: str) -> float:
    v0, v1 = s0.value(name, **labels), s1.value(name, **labels)
    assert v0 is not None and v1 is not None, f"{name}{labels} missing from /metrics"
    return v1 - v0


def test_every_v2_file_is_read_from_the_kernel(
    make_lab: MakeLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One sampler pass over the guest, every file read recorded: for a container with
    a CPU limit, a weight and memory limits, the sampler reads exactly
    ``V2_CGROUP_FILES``, none missing, each parsed to the value the kernel holds; and
    the node files ``NODE_FILES``."""
    from exporter.cgroupfs import mode, procfs, reader
    from exporter.sampler import Sampler

    lab = make_lab("allfiles", cpu_quota_cores=0.2, cpu_weight=50)
    mem = make_lab("allfiles-mem", memory_max=48 * MIB, memory_high=40 * MIB)
    spawn_busy(lab, threads=1, seconds=20)
    spawn_memory(mem, ["anon", "--mib", "8"], seconds=20)

    facts = mode.detect()
    assert facts.mode is mode.CgroupMode.V2 and facts.supported, facts
    read: list[str] = []
    real = reader.read_text

    def recording(path: str) -> str | None:
        read.append(path)
        return real(path)

    monkeypatch.setattr(reader, "read_text", recording)
    monkeypatch.setattr(procfs, "read_text", recording)
    snap = Sampler(facts, interval=1.0).run_once()

    by_path = {c.identity.cgroup: c for c in snap.containers}
    for cg in (lab, mem):
        c = by_path[cg.path]
        files = {os.path.basename(p) for p in read if os.path.dirname(p) == cg.v2_dir}
        assert files == V2_CGROUP_FILES, f"{cg.path}: read {sorted(files)}"
        assert c.reading.missing == (), f"{cg.path}: missing {c.reading.missing}"
        assert c.reading.files_read == len(V2_CGROUP_FILES)
    assert set(read) >= NODE_FILES, sorted(set(read) - {p for p in read if "/sys/" in p})

    # Each value as the kernel holds it (read independently of the sampler).
    r = by_path[lab.path].reading
    assert r.cpu_max is not None and (r.cpu_max.quota_usec, r.cpu_max.period_usec) == (
        20000,
        100000,
    ), r.cpu_max
    assert r.cpu_weight == 50 == int(lab.read("cpu.weight"))
    stat = flat_keyed(lab.read("cpu.stat"))
    assert r.cpu_stat is not None and r.cpu_stat.nr_periods is not None
    assert r.cpu_stat.nr_periods <= stat["nr_periods"]  # the file moved on since the pass
    m = by_path[mem.path].reading
    assert m.memory_max == 48 * MIB and m.memory_high == 40 * MIB
    assert m.memory_current is not None and m.memory_current >= 8 * MIB
    assert m.memory_stat is not None and m.memory_stat.anon >= 8 * MIB
    assert m.memory_events is not None
    assert m.memory_pressure is not None and m.memory_pressure.full is not None
    assert r.io_pressure is not None and r.cpu_pressure is not None
    print(f"read {len(set(read))} distinct files; per container: {sorted(V2_CGROUP_FILES)}")


@dataclass
class Scene:
    """One window over three containers that run at once: the ``throttled`` lab's
    (200m, 4 busy threads), the ``weights`` lab's pair (4:32 on one CPU) and a reader of
    a 64 MiB file inside a 48 MiB memory.max. The weights pair has the last CPU to
    itself; the other two share the first."""

    throttled: LabCgroup
    low: LabCgroup
    high: LabCgroup
    memfiles: LabCgroup
    first: Scrape  # a scrape with every container present
    s0: Scrape
    s1: Scrape
    elapsed: float  # between the two scrapes' passes
    kernel_throttle: dict[str, float]  # the kernel's cpu.stat deltas around the window


@pytest.fixture(scope="module")
def scene(exporter: ExporterProcess, v2_layout: LabLayout) -> Iterator[Scene]:
    scratch = os.environ.get("CONTENTION_VM_SCRATCH")
    assert scratch, "the guest has no scratch disk"
    made: list[LabCgroup] = []

    def make(name: str, **kw: Any) -> LabCgroup:
        made.append(LabCgroup.create(name, layout=v2_layout, **kw))
        return made[-1]

    data = os.path.join(scratch, "memfiles.data")
    try:
        low_w, high_w = (shares_to_weight(kubelet_shares(c)) for c in (0.1, 0.8))
        throttled = make("throttled", cpu_quota_cores=0.2)
        low, high = make("weight-low", cpu_weight=low_w), make("weight-high", cpu_weight=high_w)
        memfiles = make("memfiles", memory_max=48 * MIB, memory_high=40 * MIB)
        first_cpu, last_cpu = min(os.sched_getaffinity(0)), lab_cpu()
        # The workers outlast the scene, which ends them: each starts under TCG in up to
        # tens of seconds, and with 45 s each the first had ended before a slow guest's
        # window (CI: the throttled lab at 34m over it, the kernel counting 2 periods a
        # second). SCENE_S bounds them if the scene never ends.
        workers = [(spawn_busy(throttled, threads=4, seconds=SCENE_S), first_cpu)]
        workers += [(spawn_busy(cg, threads=1, seconds=SCENE_S), last_cpu) for cg in (low, high)]
        scan = ["scan", "--file", data, "--mib", "64", "--rate-mib", "4"]
        workers.append((spawn_memory(memfiles, scan, seconds=SCENE_S), first_cpu))
        for w, cpu in workers:
            for pid in (w.pid, *w.children):
                os.sched_setaffinity(pid, {cpu})
        first = _present(exporter, throttled.path)
        for cg in (low, high, memfiles):
            first = _present(exporter, cg.path)
        k0, m0 = flat_keyed(throttled.read("cpu.stat")), time.monotonic()
        s0, s1, elapsed = _window(exporter, high.path, 10.0)
        k1, m1 = flat_keyed(throttled.read("cpu.stat")), time.monotonic()
        kd = {k: float(k1[k] - k0[k]) for k in ("nr_periods", "nr_throttled", "throttled_usec")}
        kd["seconds"] = m1 - m0
        ended = [w.cgroup for w, _ in workers if not w.alive()]
        assert not ended, f"workers ended before the scene's window did: {ended}"
        yield Scene(throttled, low, high, memfiles, first, s0, s1, elapsed, kd)
    finally:
        for cg in reversed(made):
            cg.remove()
        if os.path.exists(data):
            os.unlink(data)


def test_the_exporter_serves_the_pure_v2_guest(exporter: ExporterProcess) -> None:
    """The scene's first phase: the session's exporter starts (its imports alone take
    most of a minute under TCG) and says the node is pure cgroup v2."""
    s = exporter.scrape()
    info = s.select("contention_node_info")
    assert [x.labels.get("cgroup_mode") for x in info] == ["v2"], info


def test_cpu_max_throttling(scene: Scene) -> None:
    """200m limit (cpu.max 20000 100000), 4 busy threads: ~0.2 cores, throttled in
    >= 90 % of its periods, throttled time and PSI from the v2 files (the ``throttled`` lab)."""
    lab, s0, s1, elapsed, kd = (
        scene.throttled,
        scene.s0,
        scene.s1,
        scene.elapsed,
        scene.kernel_throttle,
    )
    assert lab.read("cpu.max").split() == ["20000", "100000"]
    assert scene.first.value("contention_cpu_limit_cores", cgroup=lab.path) == pytest.approx(0.2)
    cores = _delta(s0, s1, USAGE, cgroup=lab.path) / elapsed
    periods = _delta(s0, s1, "contention_cpu_cfs_periods_total", cgroup=lab.path)
    throttled = _delta(s0, s1, "contention_cpu_cfs_throttled_periods_total", cgroup=lab.path)
    throttled_s = _delta(s0, s1, "contention_cpu_cfs_throttled_seconds_total", cgroup=lab.path)
    some = _delta(s0, s1, "contention_pressure_cpu_waiting_seconds_total", cgroup=lab.path)
    full = _delta(s0, s1, "contention_pressure_cpu_stalled_seconds_total", cgroup=lab.path)
    summary = (
        f"over {elapsed:.1f}s: {cores * 1000:.0f}m, throttled in {throttled:.0f} of "
        f"{periods:.0f} periods ({throttled / max(periods, 1):.0%}), throttled "
        f"{throttled_s:.2f}s, PSI some {some / elapsed:.0%} full {full / elapsed:.0%}; "
        f"kernel cpu.stat over {kd['seconds']:.1f}s around it: nr_throttled "
        f"+{kd['nr_throttled']:.0f} of +{kd['nr_periods']:.0f}, throttled_usec "
        f"+{kd['throttled_usec']:.0f}"
    )
    print(summary)
    # The exporter's periods are the kernel's: over its window, no more than the kernel
    # counted around it, and at the kernel's rate. The kernel's own rate is 10 a second
    # less the periods its timer skipped: under TCG on a loaded host the guest counted
    # 77-79 % of them (docs/testing.md), so the bound on it is only that it counts.
    kernel_rate = kd["nr_periods"] / kd["seconds"]
    assert periods <= kd["nr_periods"], f"more periods than the kernel counted: {summary}"
    assert periods >= 0.8 * kernel_rate * elapsed, f"periods missed: {summary}"
    assert kernel_rate >= 5, f"the guest's kernel counted too few CFS periods: {summary}"
    assert throttled / periods >= 0.9, f"not throttled in >= 90% of periods: {summary}"
    assert cores == pytest.approx(0.2, abs=0.05), f"usage not 0.2 +- 0.05 cores: {summary}"
    assert throttled_s > 0 and some / elapsed >= 0.5, summary


def test_weights_from_requests(scene: Scene) -> None:
    """Requests 100m and 800m become cpu.weight 4 and 32 (the kubelet's shares, in the
    kernel's conversion); two busy loops on one CPU split it close to 1:8."""
    low_w, high_w = (shares_to_weight(kubelet_shares(c)) for c in (0.1, 0.8))
    assert (low_w, high_w) == (4, 32)
    low, high, s0, s1 = scene.low, scene.high, scene.s0, scene.s1
    assert s1.value("contention_cpu_weight", cgroup=low.path) == 4
    assert s1.value("contention_cpu_weight", cgroup=high.path) == 32
    lo = _delta(s0, s1, USAGE, cgroup=low.path) / scene.elapsed
    hi = _delta(s0, s1, USAGE, cgroup=high.path) / scene.elapsed
    print(f"one CPU, weights 4:32 -> {hi:.2f} : {lo:.2f} cores (ratio {hi / max(lo, 1e-9):.1f})")
    assert lo > 0.01, f"the low-weight loop did not run: {lo:.3f} cores"
    assert 4 <= hi / lo <= 16, f"usage ratio {hi / lo:.1f}, want close to 8"


def test_memory_files_under_a_limit(scene: Scene) -> None:
    """A container reading a 64 MiB file inside a 48 MiB memory.max (memory.high
    40 MiB): the exporter's memory series follow the kernel's files: usage at the
    limit, refaults and memory.events high/max rising, memory pressure present."""
    p, s0, s1, elapsed = scene.memfiles.path, scene.s0, scene.s1, scene.elapsed
    usage = s1.value("contention_memory_usage_bytes", cgroup=p)
    refaults = _delta(s0, s1, "contention_memory_workingset_refaults_total", cgroup=p, type="file")
    high = _delta(s0, s1, "contention_memory_events_total", cgroup=p, event="high")
    hits_max = _delta(s0, s1, "contention_memory_events_total", cgroup=p, event="max")
    summary = (
        f"over {elapsed:.1f}s: usage {(usage or 0) / MIB:.1f} MiB, "
        f"{refaults / elapsed * 60:.0f} refaults/min, "
        f"memory.events high +{high:.0f} max +{hits_max:.0f}"
    )
    print(summary)
    assert s1.value("contention_memory_limit_bytes", cgroup=p) == 48 * MIB
    assert s1.value("contention_memory_high_bytes", cgroup=p) == 40 * MIB
    assert usage is not None and 32 * MIB <= usage <= 48 * MIB, summary
    ws = s1.value("contention_memory_working_set_bytes", cgroup=p)
    assert ws is not None and ws <= usage
    assert refaults > 0, f"no refaults: {summary}"
    assert high + hits_max > 0, f"memory.events did not move: {summary}"
    assert s1.value("contention_pressure_memory_waiting_seconds_total", cgroup=p) is not None
