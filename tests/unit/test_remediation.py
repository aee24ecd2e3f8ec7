"""Remediation with numbers (docs/findings.md#remediation-with-numbers): what each
kind suggests on hand-built windows, and what it says when it cannot compute a value.
The agreement corpus (test_agreement.py) checks the same numbers against the rules."""

from __future__ import annotations

import json
from collections import deque

import pytest

from exporter.cgroupfs.discovery import CgroupKind
from exporter.findings import load_thresholds
from exporter.findings.aggregates import Clock
from exporter.findings.remediation import Suggestion, mebibytes, millicores
from exporter.findings.suggest import (
    cpu_limit,
    cpu_request,
    memory_limit,
    memory_request,
    node_cpu_short,
)
from exporter.findings.thresholds import Thresholds
from exporter.identity import Identity
from exporter.probe.burst import BURST_BOUNDS, BURST_SLOTS
from exporter.window import ContainerWindow, MinuteFold, Window

NOW = 600.0  # window: the minutes starting 300..540; 540 is the latest


@pytest.fixture(scope="module")
def th() -> Thresholds:
    return load_thresholds()


def cw(
    name: str, folds: list[MinuteFold], cpu: float | None = None, mem: int | None = None
) -> ContainerWindow:
    ident = Identity(
        cgroup=f"/t/{name}", kind=CgroupKind.CONTAINER, namespace="ns", pod=name, container="c"
    )
    return ContainerWindow(ident, sum(map(ord, name)) + 100, cpu, mem, deque(folds))


def minutes(**series: float | None) -> list[MinuteFold]:
    return [MinuteFold(minute=m, seconds=60.0, **series) for m in range(300, 600, 60)]  # type: ignore[arg-type]


def test_rounding_is_up_and_ignores_float_noise() -> None:
    assert millicores(0.8334) == 834
    assert millicores(0.6) == 600
    assert millicores(0.6 + 1e-12) == 600  # a hair above: not one more millicore
    assert mebibytes(1048576 * 2 + 4096) == 3


def test_throttled_limit_is_use_plus_throttled_time(th: Thresholds) -> None:
    w = cw(
        "etl",
        minutes(cpu_usage_s=12.0, periods=600, throttled_periods=300, throttled_s=36.0),
        cpu=0.2,
    )
    s = cpu_limit(w, list(w.folds), th)
    assert s.value == 800 and s.reason is None  # 0.2 used + 0.6 held back
    assert s.text.startswith("Set resources.limits.cpu to at least 800m")
    assert s.to_dict()["setting"] == "cpu_limit" and s.to_dict()["unit"] == "millicores"


@pytest.mark.parametrize(
    ("folds", "limit", "why"),
    [
        ([], 0.5, "no CPU usage history"),
        (minutes(cpu_usage_s=12.0, periods=600, throttled_periods=300), 0.5, "no throttled time"),
        (
            minutes(cpu_usage_s=12.0, periods=600, throttled_periods=300, throttled_s=3.0),
            0.5,
            "bursts",
        ),
    ],
)
def test_throttled_limit_says_what_it_could_not_compute(
    th: Thresholds, folds: list[MinuteFold], limit: float, why: str
) -> None:
    w = cw("etl", folds, cpu=limit)
    s = cpu_limit(w, folds, th)
    assert s.value is None and s.reason is not None and why in s.reason
    assert (
        s.text
        == "Raise or remove resources.limits.cpu; no limit could be computed from the window."
    )


def _bursty(burst: list[int] | None) -> list[MinuteFold]:
    """0.2 of 0.5 cores used, 0.05 held back: the average fits the limit."""
    return minutes(
        cpu_usage_s=12.0,
        periods=600,
        throttled_periods=300,
        throttled_s=3.0,
        burst_buckets=burst,  # type: ignore[arg-type]
    )


def _buckets(**by_bound: int) -> list[int]:
    """Per-minute burst bucket counts by bound (``b4=10``: ten observations of 4
    threads; ``more``: above the largest bound)."""
    out = [0] * BURST_SLOTS
    for key, n in by_bound.items():
        out[len(BURST_BOUNDS) if key == "more" else BURST_BOUNDS.index(int(key[1:]))] = n
    return out


def test_bursty_throttled_limit_from_the_threads_at_once(th: Thresholds) -> None:
    # 6 threads at once in 20% of the observations, never more: 6 cores
    w = cw("api", _bursty(_buckets(b1=40, b2=40, b6=20)), cpu=0.5)
    s = cpu_limit(w, list(w.folds), th)
    assert s.value == 6000 and s.reason is None
    assert s.basis["runnable_threads"] == 6 and s.basis["runnable_threads_peak"] == 6.0
    assert s.text.startswith("Set resources.limits.cpu to at least 6000m: up to 6 of its threads")
    assert "GOMAXPROCS, -XX:ActiveProcessorCount" in s.text and "remove the limit" in s.text


def test_bursty_limit_basis_is_json(th: Thresholds) -> None:
    # a few observations above the largest bound: the peak is not a number JSON has
    w = cw("api", _bursty(_buckets(b1=50, b4=45, more=5)), cpu=0.5)
    s = cpu_limit(w, list(w.folds), th)
    assert s.value == 4000 and s.basis["runnable_threads_peak"] is None
    json.dumps(s.to_dict(), allow_nan=False)


@pytest.mark.parametrize(
    ("burst", "limit", "why"),
    [
        (None, 0.5, "not measured"),  # no probe burst data
        (_buckets(), 0.5, "none of its threads was seen"),  # measured, no thread queued
        (_buckets(b1=50, more=50), 0.5, "more than 32 of its threads"),
        (_buckets(b1=95, b8=5), 1.0, "which its limit allows"),  # 1 core covers 95%
    ],
)
def test_bursty_throttled_limit_says_what_it_could_not_compute(
    th: Thresholds, burst: list[int] | None, limit: float, why: str
) -> None:
    w = cw("api", _bursty(burst), cpu=limit)
    s = cpu_limit(w, list(w.folds), th)
    assert s.value is None and s.reason is not None and why in s.reason, s.reason
    assert s.text.startswith("Raise or remove resources.limits.cpu; no limit could be computed")


def test_bursty_limit_is_never_at_or_below_the_limit_set(th: Thresholds) -> None:
    # one busy thread at a time under a 2-core limit that still throttles (a burst of
    # CPU within the period, not of threads): 1 core would be a lower limit: withheld
    w = cw("api", _bursty(_buckets(b1=100)), cpu=2.0)
    s = cpu_limit(w, list(w.folds), th)
    assert s.value is None and s.basis["runnable_threads"] == 1


def test_culprit_request_matches_its_use_while_it_runs(th: Thresholds) -> None:
    clock = Clock.at(NOW, th)
    batch = cw("batch", minutes(cpu_usage_s=110.0))
    s = cpu_request("jobs/batch/c", batch, 110 / 60, None, clock, th)
    assert s.value == 1834 and "jobs/batch/c a CPU request of at least 1834m" in s.text
    # Gone before the window ended: its last fold is minutes before the latest one.
    gone = cw("gone", minutes(cpu_usage_s=110.0)[:2])
    s = cpu_request("jobs/gone/c", gone, 110 / 60, None, clock, th)
    assert s.value is None and s.reason is not None and "gone before the window ended" in s.reason
    # Not sampled: a system unit, the kernel, an opted-out pod.
    s = cpu_request("kernel", None, None, None, clock, th)
    assert s.value is None and s.reason is not None and "not sampled" in s.reason
    assert s.text.startswith("Lower kernel's usage")


def test_node_short_leaves_throttled_containers_out(th: Thresholds) -> None:
    clock = Clock.at(NOW, th)
    win = Window(minutes=5)
    for c in (
        cw("a", minutes(runq_sum_s=12.0)),
        cw("b", minutes(runq_sum_s=3.0, periods=600, throttled_periods=0)),
        cw("q", minutes(runq_sum_s=30.0, periods=600, throttled_periods=300)),  # own quota
        cw("noprobe", minutes()),
    ):
        win.containers[c.cgroup_id] = c
    s = node_cpu_short(win, clock, th)
    assert s.value == 250 and s.basis["throttled_containers_left_out"] == 1
    nodata = Window(minutes=5, containers={1: cw("x", minutes())})
    s = node_cpu_short(nodata, clock, th)
    assert s.value is None and s.reason is not None and "scheduler probe" in s.reason


def test_memory_limit_above_the_refaulting_working_set(th: Thresholds) -> None:
    latest = MinuteFold(minute=540, seconds=60.0, working_set_bytes=256 * 1048576, refaults=3000)
    s = memory_limit(cw("cache", [latest], mem=256 * 1048576), latest, th)
    assert s.value == 268  # 256 MiB + 3000 pages of 4 KiB = 267.7 MiB
    assert s.text.startswith("Set resources.limits.memory to at least 268Mi")
    roomy = memory_limit(cw("cache", [latest], mem=1 << 30), latest, th)
    assert roomy.value is None and roomy.reason is not None and "memory.high" in roomy.reason
    blind = MinuteFold(minute=540, seconds=60.0)
    assert memory_limit(cw("cache", [blind]), blind, th).value is None


def test_memory_request_of_the_heuristic_culprit(th: Thresholds) -> None:
    clock = Clock.at(NOW, th)
    hog = cw("hog", minutes(working_set_bytes=3 * 1073741824))
    s = memory_request(hog.identity, hog, clock, th)
    assert s.value == 3072 and "ns/hog/c to at least 3072Mi" in s.text
    none = memory_request(None, None, clock, th)
    assert none.value is None and none.text.startswith("Set or raise memory requests")


def test_a_suggestion_without_value_never_prints_a_number() -> None:
    s = Suggestion("cpu-contended", None, {}, reason="x")
    assert "None" not in s.text and s.to_dict()["value"] is None


def test_node_short_under_steal_points_at_the_host_and_keeps_the_number(
    th: Thresholds,
) -> None:
    """docs/findings.md#cpu-steal: the CPU the node misses went to other guests, so the
    sentence says the steal first; the shortfall is still given when it is known."""
    clock = Clock.at(NOW, th)
    win = Window(minutes=5, containers={1: cw("a", minutes(runq_sum_s=12.0))})
    plain = node_cpu_short(win, clock, th)
    s = node_cpu_short(win, clock, th, steal=0.15)
    assert s.value == plain.value == 200
    assert s.text.startswith("The hypervisor is taking the node's CPU") and "200m" in s.text
    assert "node is short" not in s.text and "node_cpu_steal_ratio" not in plain.basis
    assert s.basis["node_cpu_steal_ratio"] == 0.15
    nodata = node_cpu_short(Window(minutes=5, containers={1: cw("x", minutes())}), clock, th, 0.15)
    assert nodata.value is None and nodata.text.startswith("The hypervisor is taking")
