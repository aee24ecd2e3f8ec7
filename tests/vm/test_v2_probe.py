"""The scheduler probe on the guest's Debian 6.12 kernel: a second kernel version for it,
next to the test machines' 6.18.

Both loaders run. The CO-RE object (libbpf, the kernel's BTF) must load there: the
guest kernel has BTF and the host userland it shares has libbpf, so any failure of it
is a failure. BCC loads where it can: a reason of the machine (no BCC, no headers...)
skips it with that reason, anything else fails. BCC compiles against
``$BCC_KERNEL_SOURCE``: the lane points it at the guest kernel's own Debian headers.
Each loaded probe is checked against the kernel's own accounting of the victim's
run-queue wait (``/proc/<pid>/task/*/schedstat``), as on the test machines.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable

import pytest

from exporter.probe import SchedProbe
from labs import LabCgroup, spawn_busy, spawn_periodic
from labs.scenarios import lab_cpu

pytestmark = pytest.mark.vm

MakeLab = Callable[..., LabCgroup]

# Reasons that say "this machine cannot run BCC" (the values of the probe's REASON_*
# constants): a skip, with the reason. Anything else (a verifier rejection, a compile or
# load error) is a failure. CO-RE has no such excuse in the guest.
BCC_MACHINE_REASONS = frozenset({"no-bcc", "no-headers"})


def make_probe(loader: str) -> SchedProbe:
    return SchedProbe(kernel_source=os.environ.get("BCC_KERNEL_SOURCE"), loader=loader)


@pytest.mark.timeout(600)  # BCC compiles with clang: minutes under TCG
@pytest.mark.parametrize("loader", ["core", "bcc"])
def test_probe_blames_the_busy_neighbour(loader: str, make_lab: MakeLab) -> None:
    """A light victim (1 ms every 10 ms) and a busy neighbour share one CPU: the
    victim's run-queue histogram fills and the neighbour holds most of its wait."""
    probe = make_probe(loader)
    try:
        t = time.monotonic()
        st = probe.load()
        load_s = time.monotonic() - t
        if loader == "bcc" and not st.loaded and st.reason in BCC_MACHINE_REASONS:
            pytest.skip(f"bcc cannot load on {platform.release()}: {st.reason}: {st.detail}")
        assert (
            st.loaded and st.loader == loader
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
        # The kernel's run_delay read just before and just after each poll brackets
        # what the probe can have recorded in between (both count a wait at its end).
        before = workers[1].run_delay_ns()
        probe.poll()
        start = (before, workers[1].run_delay_ns())
        time.sleep(8.0)
        before = workers[1].run_delay_ns()
        d = probe.poll()
        after = workers[1].run_delay_ns()
    finally:
        probe.close()
    lo, hi = (before - start[1]) / 1e9, (after - start[0]) / 1e9
    r = d.runq.get(victim.cgroup_id)
    assert r is not None and r.events > 50, f"no run-queue waits for the victim: {r}"
    row = d.blame.get(victim.cgroup_id, {})
    total = sum(c.wait_s for c in row.values())
    share = (row[greedy.cgroup_id].wait_s / total) if greedy.cgroup_id in row and total else 0.0
    print(
        f"{loader} on {platform.release()}: loaded in {load_s:.1f}s ({st.detail}); victim "
        f"{r.events} waits, {r.sum_s:.2f}s (kernel run_delay {lo:.2f}..{hi:.2f}s); greedy "
        f"holds {share:.0%} of the blamed wait"
    )
    assert 0.99 * lo <= r.sum_s <= 1.01 * hi, f"probe {r.sum_s}s vs kernel {lo}..{hi}s"
    assert share >= 0.4, f"the busy neighbour holds only {share:.0%} of the wait: {row}"
