"""The accuracy maths the real-kernel blame tests report with (tests/support/accuracy.py)."""

from __future__ import annotations

import pytest

from tests.support import placement
from tests.support.accuracy import (
    Distribution,
    per_cpu_truth,
    percentile,
    placed_truth,
    split_error_pp,
)


def test_split_error_is_the_largest_gap_in_points() -> None:
    # CPU 25/75; blame 30/70 among the culprits (idle and others ignored) -> 5 points.
    blamed = {"a": 0.3, "b": 0.7, "idle": 5.0}
    assert split_error_pp(blamed, {"a": 1.0, "b": 3.0}) == pytest.approx(5.0)
    # A culprit the victim never waited behind counts as 0 blame.
    assert split_error_pp({"a": 1.0}, {"a": 1.0, "b": 1.0}) == pytest.approx(50.0)
    with pytest.raises(ValueError):
        split_error_pp({"x": 1.0}, {"a": 1.0})


def test_percentiles_and_share_within() -> None:
    errs = [float(i) for i in range(1, 21)]  # 1..20
    assert percentile(errs, 50) == 10.0 and percentile(errs, 90) == 18.0
    assert percentile(errs, 100) == 20.0 and percentile([3.0], 1) == 3.0
    d = Distribution.of(errs, limit_pp=10.0)
    assert d.n == 20 and d.within == 0.5 and d.percentiles[95] == 19.0
    assert "50% within ±10" in str(d)


def test_per_cpu_truth_weighs_each_cpus_split_by_the_wait_there() -> None:
    # a: both threads on CPU 0; b: one thread per CPU; c: one thread on CPU 1 only.
    run = {"a": {0: 2.0}, "b": {0: 2.0, 1: 2.0}, "c": {1: 2.0}}
    # Waiting only on CPU 0: the split there (a 50, b 50), not the global one (33 each).
    assert per_cpu_truth({0: 1.0}, run) == {"a": 0.5, "b": 0.5, "c": 0.0}
    # Three quarters of the wait on CPU 1.
    t = per_cpu_truth({0: 1.0, 1: 3.0}, run)
    assert t == pytest.approx({"a": 0.5, "b": 2.0, "c": 1.5})
    assert split_error_pp({"a": 0.5, "b": 2.0, "c": 1.5}, t) == pytest.approx(0.0)
    # A CPU no culprit ran on carries no culprit share.
    assert per_cpu_truth({2: 1.0}, run) == {"a": 0.0, "b": 0.0, "c": 0.0}


def test_placed_truth_follows_placement_over_intervals() -> None:
    # a then b hold CPU 0; the victim waits 1 s in the first interval, 3 s in the second.
    first = ({0: 1.0}, {"a": {0: 1.0}, "b": {}})
    second = ({0: 3.0}, {"a": {}, "b": {0: 1.0}})
    assert placed_truth([first, second]) == {"a": 1.0, "b": 3.0}
    # The same window seen as one interval would split the wait evenly: the wrong truth.
    assert per_cpu_truth({0: 4.0}, {"a": {0: 1.0}, "b": {0: 1.0}}) == {"a": 2.0, "b": 2.0}
    assert placed_truth([]) == {}


def test_a_wait_ended_by_a_migration_stays_on_the_cpu_it_was_spent_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """run_delay grows when a wait ends; a task seen on a new CPU was dequeued from the
    old one to move, and that wait was spent there (tests/support/placement.py)."""
    # (cpu, run ns, wait ns) per sample: on CPU 0, moved to 1 (a 150 ms wait ended by
    # the move), then on 1 (a 10 ms wait ended there).
    samples = [(0, 0, 0), (0, 10**7, 0), (1, 2 * 10**7, 16 * 10**7), (1, 3 * 10**7, 17 * 10**7)]
    seen = iter(samples)
    monkeypatch.setattr(placement, "read_task", lambda _tid: next(seen, None))
    sampler = placement.PlacementSampler({"victim": [7]})
    for _ in samples:
        sampler._sample()
    got = sampler.take()  # one more sample: the task is gone, nothing is added
    assert [dict(p.wait_s["victim"]) for p in got] == [{0: 0.0}, {0: 0.16}, {1: 0.01}]
    assert [dict(p.run_s["victim"]) for p in got] == [{0: 0.01}, {1: 0.01}, {1: 0.01}]
    assert [p.migrations.get("victim", 0) for p in got] == [0, 1, 0]
