"""The scheduler probe on the guest's Debian 6.12 kernel: a second kernel version for it,
next to the test machines' 6.18.

Both loaders run. The CO-RE object (libbpf, the kernel's BTF) must load there: the
guest kernel has BTF and the host userland it shares has libbpf, so any failure of it
is a failure. BCC loads where it can: a reason of the machine (no BCC, no headers...)
skips it with that reason, anything else fails. BCC compiles against
``$BCC_KERNEL_SOURCE``: the lane points it at the guest kernel's own Debian headers.
Both are loaded at once and watch the same scene, each checked against the kernel's
own accounting of the victim's run-queue wait (``/proc/<pid>/task/*/schedstat``), as on
the test machines.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from exporter.probe import ProbeDelta, ProbeStatus, SchedProbe
from labs import LabCgroup, LabLayout, spawn_busy, spawn_periodic
from labs.scenarios import lab_cpu

pytestmark = pytest.mark.vm

# Reasons that say "this machine cannot run BCC" (the values of the probe's REASON_*
# constants): a skip, with the reason. Anything else (a verifier rejection, a compile or
# load error) is a failure. CO-RE has no such excuse in the guest.
BCC_MACHINE_REASONS = frozenset({"no-bcc", "no-headers"})


LOADERS = ("core", "bcc")


@dataclass
class LoaderRun:
    status: ProbeStatus
    load_s: float
    delta: ProbeDelta | None = None
    kernel_wait_s: tuple[float, float] = (0.0, 0.0)  # the victim's run_delay bounds


@dataclass
class Scene:
    victim: LabCgroup
    greedy: LabCgroup
    runs: dict[str, LoaderRun] = field(default_factory=dict)


def make_probe(loader: str) -> SchedProbe:
    return SchedProbe(kernel_source=os.environ.get("BCC_KERNEL_SOURCE"), loader=loader)


@dataclass
class Loaded:
    """The module's probes, each loaded on first ask: :func:`test_loader_loads` is each
    loader's phase (BCC's clang compile alone takes 75-105 s under TCG), the scene's
    tests the next."""

    probes: dict[str, SchedProbe] = field(default_factory=dict)
    runs: dict[str, LoaderRun] = field(default_factory=dict)

    def load(self, loader: str) -> LoaderRun:
        if loader not in self.runs:
            self.probes[loader] = make_probe(loader)
            t = time.monotonic()
            st = self.probes[loader].load()
            self.runs[loader] = LoaderRun(st, time.monotonic() - t)
        return self.runs[loader]


@pytest.fixture(scope="module")
def loaded() -> Iterator[Loaded]:
    out = Loaded()
    try:
        yield out
    finally:
        for p in out.probes.values():
            p.close()


@pytest.fixture(scope="module")
def scene(v2_layout: LabLayout, loaded: Loaded) -> Iterator[Scene]:
    """One scene for both loaders: a light victim (1 ms every 10 ms) and a busy
    neighbour share one CPU for 10 s, each probe polled between readings of the
    kernel's run_delay for the victim."""
    made: list[LabCgroup] = []
    try:
        runs = {loader: loaded.load(loader) for loader in LOADERS}
        probes = {k: loaded.probes[k] for k, run in runs.items() if run.status.loaded}
        victim = LabCgroup.create("probe-victim", layout=v2_layout, cpu_weight=4)
        made.append(victim)
        greedy = LabCgroup.create("probe-greedy", layout=v2_layout)
        made.append(greedy)
        for p in probes.values():
            p.set_tracked([victim.cgroup_id])
        cpu = lab_cpu()
        workers = [
            spawn_busy(greedy, threads=1, seconds=20),
            spawn_periodic(victim, work_ms=1.0, period_ms=10.0, seconds=20),
        ]
        for w in workers:
            for pid in (w.pid, *w.children):
                os.sched_setaffinity(pid, {cpu})
        time.sleep(2.0)
        # The kernel's run_delay read just before and just after each poll brackets
        # what the probe can have recorded in between (both count a wait at its end).
        start = {}
        for k, p in probes.items():
            before = workers[1].run_delay_ns()
            p.poll()
            start[k] = (before, workers[1].run_delay_ns())
        time.sleep(8.0)
        for k, p in probes.items():
            before = workers[1].run_delay_ns()
            runs[k].delta = p.poll()
            after = workers[1].run_delay_ns()
            runs[k].kernel_wait_s = ((before - start[k][1]) / 1e9, (after - start[k][0]) / 1e9)
        yield Scene(victim, greedy, runs)
    finally:
        for cg in reversed(made):
            cg.remove()


def _bcc_cannot(st: ProbeStatus) -> bool:
    """BCC did not load for a reason of the machine (a skip, not a failure)."""
    return st.loader == "bcc" and not st.loaded and st.reason in BCC_MACHINE_REASONS


@pytest.mark.timeout(600)  # BCC compiles with clang: minutes under TCG
@pytest.mark.parametrize("loader", LOADERS)
def test_loader_loads(loader: str, loaded: Loaded) -> None:
    """The scene's first phases: the CO-RE object loads on the guest's kernel, and BCC
    loads or says which part of the machine it lacks."""
    run = loaded.load(loader)
    st = run.status
    print(f"{loader} on {platform.release()}: loaded in {run.load_s:.1f}s ({st.detail})")
    if _bcc_cannot(st):
        pytest.skip(f"bcc cannot load on {platform.release()}: {st.reason}: {st.detail}")
    assert (
        st.loaded and st.loader == loader
    ), f"{loader} failed to load on {platform.release()}: {st.reason}: {st.detail}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("loader", LOADERS)
def test_probe_blames_the_busy_neighbour(loader: str, scene: Scene) -> None:
    """The victim's run-queue histogram fills, its waits agree with the kernel's
    run_delay, and the neighbour holds most of its wait."""
    run = scene.runs[loader]
    st = run.status
    if _bcc_cannot(st):
        pytest.skip(f"bcc cannot load on {platform.release()}: {st.reason}: {st.detail}")
    assert (
        st.loaded and st.loader == loader
    ), f"{loader} failed to load on {platform.release()}: {st.reason}: {st.detail}"
    d = run.delta
    assert d is not None
    lo, hi = run.kernel_wait_s
    victim, greedy = scene.victim, scene.greedy
    r = d.runq.get(victim.cgroup_id)
    assert r is not None and r.events > 50, f"no run-queue waits for the victim: {r}"
    row = d.blame.get(victim.cgroup_id, {})
    total = sum(c.wait_s for c in row.values())
    share = (row[greedy.cgroup_id].wait_s / total) if greedy.cgroup_id in row and total else 0.0
    print(
        f"{loader} on {platform.release()}: loaded in {run.load_s:.1f}s ({st.detail}); victim "
        f"{r.events} waits, {r.sum_s:.2f}s (kernel run_delay {lo:.2f}..{hi:.2f}s); greedy "
        f"holds {share:.0%} of the blamed wait"
    )
    assert 0.99 * lo <= r.sum_s <= 1.01 * hi, f"probe {r.sum_s}s vs kernel {lo}..{hi}s"
    assert share >= 0.4, f"the busy neighbour holds only {share:.0%} of the wait: {row}"
