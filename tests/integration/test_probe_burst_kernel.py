"""Burst demand on the real kernel (root; once per loader): the probe's count of a
cgroup's threads running or runnable at once (exporter/probe/burst.py,
docs/probe.md "Burst demand") says N for N busy threads and 1 for a task alone in its
cgroup, and goes back down when threads go away (a count that leaked would say more
than there are).

The labs (``contention-test-*``) are removed, and their workers killed, by the
``make_lab`` fixture; every worker ends by itself after a few seconds. Run under the
kernel lock: other load on the machine does not change these counts (they are per
cgroup), but it makes the windows noisier.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from exporter.probe import ProbeDelta, SchedProbe
from exporter.probe.burst import BURST_BOUNDS, peak_threads, share_above, threads_quantile
from labs import LabCgroup, spawn_busy, spawn_periodic

pytestmark = [pytest.mark.kernel, pytest.mark.probe]

MakeLab = Callable[..., LabCgroup]
SETTLE_S = 0.7  # the workers' start-up (the interpreter, its fork) stays out of the window
WINDOW_S = 1.5


def burst_of(d: ProbeDelta, cgroup_id: int) -> list[int]:
    r = d.runq.get(cgroup_id)
    assert r is not None, "no data for the tracked lab"
    return r.burst


def exactly(counts: list[int], n: int) -> float:
    """Share of observations in the bucket that holds exactly ``n`` (a bound whose
    bound below is n - 1)."""
    i = BURST_BOUNDS.index(n)
    assert i == 0 or BURST_BOUNDS[i - 1] == n - 1
    return counts[i] / sum(counts)


def test_busy_threads_count_as_many_and_the_count_goes_back_down(
    make_lab: MakeLab, load_probe: Callable[..., SchedProbe]
) -> None:
    probe = load_probe()
    assert probe.knobs.burst
    four, one = make_lab("burst-four"), make_lab("burst-one")
    probe.set_tracked([four.cgroup_id, one.cgroup_id])
    probe.poll()

    # Four busy loops and one, at once, on the 2 CPUs: each is preempted over and over,
    # so nearly every observation sees every busy loop of its own cgroup runnable.
    busy4 = spawn_busy(four, threads=4, seconds=SETTLE_S + WINDOW_S + 3)
    # one task alone in its cgroup (a busy loop's worker parent would be a second one)
    spawn_periodic(one, work_ms=2.0, period_ms=10.0, seconds=SETTLE_S + WINDOW_S + 3)
    time.sleep(SETTLE_S)
    probe.poll()
    time.sleep(WINDOW_S)
    d = probe.poll()
    assert d.burst_measured
    b4, b1 = burst_of(d, four.cgroup_id), burst_of(d, one.cgroup_id)
    assert sum(b4) >= 50 and sum(b1) >= 20, (b4, b1)
    # The worker's parent is in the cgroup too, and wakes every 50 ms to reap: while it
    # waits for a CPU behind the loops it is a fifth runnable task (seen: 11 % of the
    # observations at 5). Never fewer than the 4 loops, never more than the 5 tasks.
    above3 = share_above(b4, 3)
    assert above3 is not None and above3 >= 0.97, b4
    assert exactly(b4, 4) >= 0.7, b4
    assert share_above(b4, 6) == 0.0, b4
    peak = peak_threads(b4)
    assert peak is not None and peak <= 6, b4
    q = threads_quantile(b4, 0.5)
    assert q is not None and 3 < q <= 4, (q, b4)
    # one task: always 1
    assert share_above(b1, 1) == 0.0, b1
    # the sum is the observed counts: 4 to 5 per observation
    r4 = d.runq[four.cgroup_id]
    assert 3.9 * sum(b4) <= r4.burst_sum <= 5.0 * sum(b4), (r4.burst_sum, b4)

    # Kill the four (exits are switch-outs too), then one task in the same cgroup: it
    # must see 1, not 1 plus what the four left behind.
    busy4.stop()
    spawn_periodic(four, work_ms=2.0, period_ms=10.0, seconds=SETTLE_S + WINDOW_S + 3)
    time.sleep(SETTLE_S)
    probe.poll()
    time.sleep(WINDOW_S)
    b = burst_of(probe.poll(), four.cgroup_id)
    assert sum(b) >= 20 and share_above(b, 1) == 0.0, b


def test_burst_off_counts_nothing(make_lab: MakeLab, load_probe: Callable[..., SchedProbe]) -> None:
    """The knob off (the benchmark's "without" side): waits recorded, no observation."""
    probe = load_probe(burst=False)
    lab = make_lab("burst-off")
    probe.set_tracked([lab.cgroup_id])
    probe.poll()
    spawn_busy(lab, threads=3, seconds=2.0)
    time.sleep(1.0)
    d = probe.poll()
    assert not d.burst_measured
    r = d.runq.get(lab.cgroup_id)
    assert r is not None and r.events > 0 and sum(r.burst) == 0 and r.burst_sum == 0
