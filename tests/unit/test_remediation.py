"""Remediation with numbers (docs/findings.md#remediation-with-numbers): what each
kind suggests on hand-built windows, and what it says when it cannot compute a value.
The agreement corpus (test_agreement.py) checks the same numbers against the rules."""

from __future__ import annotations

import json

import pytest

from exporter.cgroupfs.discovery import CgroupKind
from exporter.findings import load_thresholds
from exporter.findings.aggregates import Clock, member_uses, workload_use
from exporter.findings.model import CULPRIT_WORKLOAD, Culprit
from exporter.findings.remediation import Suggestion, mebibytes, millicores
from exporter.findings.suggest import (
    cpu_limit,
    cpu_request,
    memory_limit,
    memory_request,
    node_cpu_short,
    workload_request,
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
    return ContainerWindow(ident, sum(map(ord, name)) + 100, cpu, mem, tuple(folds))


def minutes(**series: float | None) -> list[MinuteFold]:
    return [MinuteFold(minute=m, seconds=60.0, **series) for m in range(300, 600, 60)]  # type: ignore[arg-type]


def test_rounding_is_up_and_ignores_float_noise() -> None:
    assert millicores(0.8334) == 834
    assert millicores(0.6) == 600
    assert millicores(0.6 + 1e-12) == 600  # a hair above: not one more millicore
    assert mebibytes(1048576 * 2 + 4096) == 3


def test_throttled_limit_is_use_plus_throttled_time(th: Thresholds) -> None:
    # steady demand: throttled in 90% of its periods (all but throttledRatioMax)
    w = cw(
        "etl",
        minutes(cpu_usage_s=12.0, periods=600, throttled_periods=540, throttled_s=36.0),
        cpu=0.2,
    )
    s = cpu_limit(w, list(w.folds), th)
    assert s.value == 800 and s.reason is None  # 0.2 used + 0.6 held back
    assert s.text.startswith("Set resources.limits.cpu to at least 800m")
    assert s.to_dict()["setting"] == "cpu_limit" and s.to_dict()["unit"] == "millicores"


def test_a_burst_over_the_limit_is_sized_by_its_threads_not_its_average(
    th: Thresholds,
) -> None:
    # One thread needing 100 ms at once each second under 250m: 0.1 cores used and 0.3
    # held back, throttled in 40% of its periods. At 400m (its average demand) each
    # burst would still drain the quota; one thread at a time needs one core.
    folds = minutes(
        cpu_usage_s=6.0,
        periods=600,
        throttled_periods=240,
        throttled_s=18.0,
        burst_buckets=_buckets(b1=100),  # type: ignore[arg-type]
    )
    w = cw("api", folds, cpu=0.25)
    s = cpu_limit(w, folds, th)
    assert s.value == 1000 and s.reason is None, s
    assert s.basis["cpu_demand_cores"] == pytest.approx(0.4)
    assert s.text.startswith("Set resources.limits.cpu to at least 1000m: up to 1 of its")
    # without burst data: no number, and the reason says why the average was not used
    plain = minutes(cpu_usage_s=6.0, periods=600, throttled_periods=240, throttled_s=18.0)
    s = cpu_limit(cw("api", plain, cpu=0.25), plain, th)
    assert s.value is None and s.reason is not None
    assert "throttled in 40% of its periods, not in nearly all (at least 90%)" in s.reason


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


def member(
    name: str,
    folds: list[MinuteFold],
    gone_at: float | None = None,
    workload: str = "Deployment/churn",
    namespace: str = "lab",
) -> ContainerWindow:
    """A workload member (a replica), running or (``gone_at``) departed."""
    ident = Identity(
        cgroup=f"/t/{name}",
        kind=CgroupKind.CONTAINER,
        namespace=namespace,
        pod=name,
        container="job",
        cpu_request_cores=0.5,
        workload=workload,
    )
    c = ContainerWindow(ident, sum(map(ord, name)) + 100, None, None, tuple(folds))
    c.gone_at = gone_at
    return c


def churn_window(*members: ContainerWindow) -> Window:
    win = Window(minutes=5)
    for c in members:
        (win.departed if c.gone_at is not None else win.containers)[c.cgroup_id] = c
    return win


def churn_request(win: Window, th: Thresholds) -> Suggestion:
    """The suggestion for lab/Deployment/churn named as a workload culprit, its usage side
    as the evaluator computes it (its running containers over the window)."""
    clock = Clock.at(NOW, th)
    use = workload_use(win, "lab", "Deployment/churn", clock, th)
    ident = Identity(cgroup="", kind=CgroupKind.OTHER, namespace="lab", workload="Deployment/churn")
    c = Culprit(
        CULPRIT_WORKLOAD, "lab/Deployment/churn", 0, ident, 0.6, use.usage_cores, use.request_cores
    )
    return workload_request(c, win, clock, th)


def one_minute(minute: int, cpu_usage_s: float, seconds: float = 60.0) -> list[MinuteFold]:
    return [MinuteFold(minute=minute, seconds=seconds, cpu_usage_s=cpu_usage_s)]


def test_workload_request_from_its_members_while_the_running_one_is_too_young(
    th: Thresholds,
) -> None:
    """issue 26: a Deployment crash-looping faster than two sampler passes has no running
    container with a measured use; its requests are sized from the use each member was
    measured at over the window, gone ones included (docs/findings.md#workload-culprits)."""
    young = member("churn-3", [])  # started at the last pass: no fold yet
    win = churn_window(
        young,
        member("churn-1", one_minute(360, 56.25), gone_at=430.0),  # 0.9375 cores
        # watched 30 s of its minute: 0.875 cores over the part it was watched
        member("churn-2", one_minute(480, 26.25, seconds=30.0), gone_at=515.0),
        member("churn-0", one_minute(240, 60.0), gone_at=300.0),  # before the window
        member("other", one_minute(480, 60.0), gone_at=530.0, workload="Deployment/x"),
        member("elsewhere", one_minute(480, 60.0), gone_at=530.0, namespace="other"),
    )
    s = churn_request(win, th)
    assert s.value == 907  # ceil(1 x (0.9375 + 0.875) / 2 x 1000) = ceil(906.25)
    assert s.basis == {
        "cpu_usage_cores": None,
        "cpu_request_cores": None,
        "member_cpu_usage_cores": 0.90625,
        "member_cpu_request_cores": 0.5,
        "measured_containers": 2,
        "running_containers": 1,
    }
    assert s.reason is None and not s.slowed
    assert s.text == (
        "Give the containers of lab/Deployment/churn CPU requests that add up to at least "
        "907m, 907m each for 1 running at once: the average use of each of its containers "
        "over the last 5m, gone ones included (none of those running now has a measured "
        "use yet); or lower their usage; or move one of the two to another node."
    )
    json.dumps(s.to_dict())  # the basis is JSON, as /findings serves it


def test_workload_request_from_members_is_for_as_many_as_run_now(th: Thresholds) -> None:
    """n x the average, rounded up once: not n x the rounded average; none running counts
    as one (the next replica)."""
    gone = [
        member("churn-1", one_minute(360, 56.25), gone_at=430.0),
        member("churn-2", one_minute(480, 52.5), gone_at=550.0),
    ]
    two = churn_request(churn_window(member("a", []), member("b", []), *gone), th)
    assert (two.value, two.basis["running_containers"]) == (1813, 2)  # ceil(1812.5)
    assert "at least 1813m, 907m each for 2 running at once" in two.text
    none = churn_request(churn_window(*gone), th)
    assert (none.value, none.basis["running_containers"]) == (907, 0)
    assert "at least 907m, 907m each for 1 running at once" in none.text
    uses = member_uses(churn_window(*gone), "lab", "Deployment/churn", Clock.at(NOW, th), th)
    assert uses.running == 0 and uses.uses == pytest.approx((0.9375, 0.875))


def test_workload_request_keeps_the_running_containers_use_when_one_is_measured(
    th: Thresholds,
) -> None:
    """Today's number while a running member has a measured use (the gone ones' use does
    not enter it), and none when that use is within their requests (slowed)."""
    gone = member("churn-1", one_minute(360, 120.0), gone_at=430.0)  # 2 cores
    win = churn_window(member("churn-2", one_minute(540, 56.25)), member("young", []), gone)
    s = churn_request(win, th)
    assert s.value == 938 and "member_cpu_usage_cores" not in s.basis
    assert "the summed average use of its running containers" in s.text
    slow = churn_request(churn_window(member("churn-2", one_minute(540, 15.0)), gone), th)
    assert slow.value is None and slow.slowed
    assert "have slowed down or stopped" in slow.text and "2000m" not in slow.text


def test_workload_request_without_any_measured_member_has_no_number(th: Thresholds) -> None:
    """No member, running or gone, measured over the window: the sentence without a
    number, as before; the reason says gone ones were looked at too."""
    win = churn_window(
        member("young", []),
        member("churn-0", one_minute(240, 60.0), gone_at=300.0),  # before the window
        member("blink", [MinuteFold(minute=480, seconds=0.0)], gone_at=481.0),  # one pass
    )
    s = churn_request(win, th)
    assert s.value is None and s.basis["measured_containers"] == 0
    assert (
        s.reason
        == "none of its containers, running or gone, has a measured use over the window yet"
    )
    assert "none of its running containers has a measured use over the window yet" in s.text
    assert "None" not in s.text


def test_workload_request_from_members_within_their_requests_has_no_number(
    th: Thresholds,
) -> None:
    """Requests at the members' average use would be no higher than the average of
    theirs: it would change nothing, so no number (scenario 081: a young replica of a
    workload inside its requests)."""
    gone = [
        member("churn-1", one_minute(360, 22.5), gone_at=430.0),  # 0.375 of 0.5
        member("churn-2", one_minute(480, 30.0), gone_at=550.0),  # 0.5 of 0.5: at it
    ]
    s = churn_request(churn_window(member("young", []), *gone), th)
    assert s.value is None and not s.slowed
    assert s.basis["member_cpu_usage_cores"] == 0.4375
    assert s.basis["member_cpu_request_cores"] == 0.5
    assert s.reason is not None and "no more than they request on average" in s.reason
    assert "none of its running containers has a measured use over the window yet" in s.text
    # one member without a request adds none: 0.25 on average, below their use
    bare = member("churn-3", one_minute(420, 30.0), gone_at=490.0)
    bare.identity = Identity(
        cgroup="/t/bare", kind=CgroupKind.CONTAINER, namespace="lab", workload="Deployment/churn"
    )
    s = churn_request(churn_window(member("young", []), gone[1], bare), th)
    assert (s.value, s.basis["member_cpu_request_cores"]) == (500, 0.25)
