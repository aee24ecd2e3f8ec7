"""The scheduler probe on the guest's Debian 6.12 kernel: a second kernel version for it,
next to the test machines' 6.18.

Parametrised over every loader this build of the exporter has (BCC, and the CO-RE
object through libbpf where it exists). A loader that cannot load here for a reason of
the machine (no BCC, no headers, no BTF, no libbpf...) is skipped with that reason; a
loader that should load and does not fails. BCC compiles against
``$BCC_KERNEL_SOURCE``: the lane points it at the guest kernel's own Debian headers.
"""

from __future__ import annotations

import importlib
import inspect
import os
import platform
import time
from collections.abc import Callable
from typing import Any

import pytest

from exporter.probe import SchedProbe
from labs import LabCgroup, spawn_busy, spawn_periodic
from labs.scenarios import lab_cpu

pytestmark = pytest.mark.vm

MakeLab = Callable[..., LabCgroup]

# Reasons that say "this machine cannot run this loader" (the values of the probe's
# REASON_* constants): a skip, with the reason. Anything else (a verifier rejection, a
# compile or load error, a missing packaged object) is a failure.
MACHINE_REASONS = frozenset(
    {"not-root", "no-bcc", "no-headers", "no-tracefs", "no-btf", "libbpf-missing", "libbpf-too-old"}
)


def loaders() -> list[str]:
    """The loaders this build has: ``exporter.probe.select`` lists them where the CO-RE
    loader exists; without it, BCC is the only one. (Imported by name: the module is
    not in every build.)"""
    try:
        select = importlib.import_module("exporter.probe.select")
    except ImportError:
        return ["bcc"]
    return [str(c) for c in select.LOADER_CHOICES if c != "auto"]


def make_probe(loader: str) -> SchedProbe:
    kw: dict[str, Any] = {"kernel_source": os.environ.get("BCC_KERNEL_SOURCE")}
    if "loader" in inspect.signature(SchedProbe).parameters:
        kw["loader"] = loader
    elif loader != "bcc":
        raise AssertionError(f"SchedProbe has no loader argument; cannot ask for {loader}")
    return SchedProbe(**kw)


@pytest.mark.timeout(600)  # BCC compiles with clang: minutes under TCG
@pytest.mark.parametrize("loader", loaders())
def test_probe_blames_the_busy_neighbour(loader: str, make_lab: MakeLab) -> None:
    """A light victim (1 ms every 10 ms) and a busy neighbour share one CPU: the
    victim's run-queue histogram fills and the neighbour holds most of its wait."""
    probe = make_probe(loader)
    try:
        t = time.monotonic()
        st = probe.load()
        load_s = time.monotonic() - t
        if not st.loaded and st.reason in MACHINE_REASONS:
            pytest.skip(f"{loader} cannot load on {platform.release()}: {st.reason}: {st.detail}")
        assert (
            st.loaded
        ), f"{loader} failed to load on {platform.release()}: {st.reason}: {st.detail}"
        victim = make_lab("probe-victim", cpu_weight=4)
        greedy = make_lab("probe-greedy")
        probe.set_tracked([victim.cgroup_id])
        cpu = lab_cpu()
        workers = [
            spawn_busy(greedy, threads=1, seconds=20),
            spawn_periodic(victim, work_ms=1.0, period_ms=10.0, seconds=20),
        ]
        for w in workers:
            for pid in (w.pid, *w.children):
                os.sched_setaffinity(pid, {cpu})
        time.sleep(2.0)
        probe.poll()
        time.sleep(8.0)
        d = probe.poll()
    finally:
        probe.close()
    r = d.runq.get(victim.cgroup_id)
    assert r is not None and r.events > 50, f"no run-queue waits for the victim: {r}"
    row = d.blame.get(victim.cgroup_id, {})
    total = sum(c.wait_s for c in row.values())
    share = (row[greedy.cgroup_id].wait_s / total) if greedy.cgroup_id in row and total else 0.0
    print(
        f"{loader} on {platform.release()}: loaded in {load_s:.1f}s ({st.detail}); victim "
        f"{r.events} waits, {r.sum_s:.2f}s; greedy holds {share:.0%} of the blamed wait"
    )
    assert share >= 0.4, f"the busy neighbour holds only {share:.0%} of the wait: {row}"
