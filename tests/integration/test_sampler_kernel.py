"""The usage and stall layers on the real kernel: the exporter on lab cgroups.

Each test makes its own lab container (a cgroup2 child for PSI and identity plus a v1
``cpu`` child for quota and throttling on hybrid nodes), runs bounded busy loops in it,
and reads the real exporter over HTTP. Rates are taken between two sampler passes
(``contention_sampler_last_pass_timestamp_seconds``), never between two scrape times.

Expected numbers (docs/labs.md, "Observed numbers"): a 200m limit is throttled in
nearly every period at about 201m; an unlimited container with more busy threads than
CPUs shows CPU pressure and no throttling.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

import pytest

from labs import LabCgroup, LabError, LabLayout, spawn_busy, spawn_periodic
from labs.exporter_proc import ExporterProcess, Scrape

pytestmark = pytest.mark.kernel

USAGE = "contention_cpu_usage_seconds_total"
PERIODS = "contention_cpu_cfs_periods_total"
THROTTLED = "contention_cpu_cfs_throttled_periods_total"
THROTTLED_S = "contention_cpu_cfs_throttled_seconds_total"
WAITING = "contention_pressure_cpu_waiting_seconds_total"
# The CPU limit: the entitlement whose basis is the limit (the limit gauge itself is
# optional: --collector.cpu_spec).
ENTITLEMENT = "contention_cpu_entitlement_cores"
INFO = "contention_cgroup_info"
SKIPPED = "contention_sampler_skipped_cgroups_total"
PASS_TS = "contention_sampler_last_pass_timestamp_seconds"
NCPU = os.cpu_count() or 1
MakeLab = Callable[..., LabCgroup]


def _present(exp: ExporterProcess, path: str, timeout: float = 15.0) -> Scrape:
    return exp.wait_for(
        f"cgroup {path} in /metrics",
        lambda s: s.value(USAGE, cgroup=path) is not None,
        timeout=timeout,
    )


def _window(exp: ExporterProcess, path: str, seconds: float) -> tuple[Scrape, Scrape, float]:
    """Two scrapes from two sampler passes at least ``seconds`` apart, and the time
    between those passes (from the exporter's own pass timestamps)."""
    s0 = exp.next_snapshot(USAGE, cgroup=path)
    time.sleep(seconds)
    s1 = exp.next_snapshot(USAGE, cgroup=path)
    t0, t1 = s0.value(PASS_TS), s1.value(PASS_TS)
    assert t0 is not None and t1 is not None, f"{PASS_TS} missing from /metrics"
    elapsed = t1 - t0
    assert elapsed >= seconds - 0.1, f"passes only {elapsed:.2f}s apart"
    return s0, s1, elapsed


def _delta(s0: Scrape, s1: Scrape, name: str, path: str) -> float:
    v0, v1 = s0.value(name, cgroup=path), s1.value(name, cgroup=path)
    assert v0 is not None and v1 is not None, f"{name}{{cgroup={path!r}}} missing"
    return v1 - v0


def _assert_healthy(exp: ExporterProcess) -> None:
    exp.check_alive()
    status, body = exp.get("/healthz")
    assert status == 200, f"/healthz answered {status}: {body[:200]}"
    log = exp.log_text()
    assert "Traceback" not in log, f"exporter logged a traceback:\n{exp.log_tail(60)}"


def test_limited_container_is_throttled(exporter: ExporterProcess, make_lab: MakeLab) -> None:
    """200m limit (20000/100000), 4 busy threads: throttled in >= 90% of its periods,
    using 0.2 +- 0.05 cores (docs/labs.md: the throttled lab)."""
    lab = make_lab("throttled", cpu_quota_cores=0.2)
    spawn_busy(lab, threads=4, seconds=15)
    first = _present(exporter, lab.path)

    info = first.select(INFO, cgroup=lab.path)
    assert len(info) == 1, f"{INFO} for {lab.path}: {info}"
    assert info[0].labels.get("cgroup_id") == str(lab.cgroup_id), "cgroup_id is not the v2 inode"
    assert info[0].labels.get("id") == lab.path, "id is not the cgroup path (cAdvisor's id)"
    assert first.value(ENTITLEMENT, cgroup=lab.path, basis="limit") == pytest.approx(0.2)

    s0, s1, elapsed = _window(exporter, lab.path, 4.0)
    cores = _delta(s0, s1, USAGE, lab.path) / elapsed
    periods = _delta(s0, s1, PERIODS, lab.path)
    throttled = _delta(s0, s1, THROTTLED, lab.path)
    throttled_s = _delta(s0, s1, THROTTLED_S, lab.path)
    waiting = _delta(s0, s1, WAITING, lab.path) / elapsed
    summary = (
        f"over {elapsed:.2f}s: {cores * 1000:.0f}m, throttled in {throttled:.0f} of "
        f"{periods:.0f} periods, throttled {throttled_s:.2f}s, PSI some {waiting:.2f}s/s"
    )
    print(summary)
    assert periods >= 0.8 * elapsed * 10, f"too few CFS periods: {summary}"
    assert throttled / periods >= 0.9, f"not throttled in >= 90% of periods: {summary}"
    assert cores == pytest.approx(0.2, abs=0.05), f"usage not 0.2 +- 0.05 cores: {summary}"
    assert throttled_s > 0, summary
    # Throttled time shows in the unified cgroup's PSI (docs/findings.md#severity).
    assert waiting >= 0.5, f"throttling not visible in cpu.pressure: {summary}"


def test_unlimited_container_shows_pressure_not_throttling(
    exporter: ExporterProcess, make_lab: MakeLab
) -> None:
    """No limit, twice as many busy threads as CPUs: CPU pressure
    'some' rises, throttled periods stay zero."""
    lab = make_lab("unlimited")
    threads = 2 * NCPU
    spawn_busy(lab, threads=threads, seconds=15)
    _present(exporter, lab.path)

    s0, s1, elapsed = _window(exporter, lab.path, 4.0)
    cores = _delta(s0, s1, USAGE, lab.path) / elapsed
    waiting = _delta(s0, s1, WAITING, lab.path) / elapsed
    summary = f"{threads} busy threads on {NCPU} CPUs over {elapsed:.2f}s: "
    summary += f"{cores:.2f} cores, PSI some {waiting:.2f}s/s"
    print(summary)
    assert waiting >= 0.25, f"CPU pressure 'some' not rising: {summary}"
    # Loose on purpose: the lab cgroup competes with root-level tasks as one entity of
    # weight 1024, so anything else busy on the node takes a large share of the CPUs.
    assert cores >= 0.2, f"busy loops did not run: {summary}"
    assert (
        s1.value(ENTITLEMENT, cgroup=lab.path, basis="limit") is None
    ), "an unlimited cgroup's entitlement is its limit"
    for name in (THROTTLED, THROTTLED_S):
        v = s1.value(name, cgroup=lab.path)
        assert v in (None, 0.0), f"{name} = {v} for an unlimited cgroup: {summary}"


@pytest.mark.any_load
def test_removed_cgroup_disappears(exporter: ExporterProcess, make_lab: MakeLab) -> None:
    """A removed cgroup's series vanish from /metrics; no error is logged or counted."""
    lab = make_lab("removed")
    spawn_periodic(lab, work_ms=2, period_ms=20, seconds=15)
    before = _present(exporter, lab.path)
    errors_before = before.value(SKIPPED, reason="error") or 0.0
    malformed_before = before.value(SKIPPED, reason="malformed") or 0.0

    lab.remove()
    after = exporter.wait_for(
        f"every series of {lab.path} to leave /metrics",
        lambda s: not any(x.labels.get("cgroup") == lab.path for x in s.samples),
        timeout=10.0,
    )
    after = exporter.next_snapshot(PASS_TS)  # and it stays gone on the next pass
    assert not any(x.labels.get("cgroup") == lab.path for x in after.samples)
    assert (after.value(SKIPPED, reason="error") or 0.0) == errors_before
    assert (after.value(SKIPPED, reason="malformed") or 0.0) == malformed_before
    for s in after.select("contention_collector_success"):
        assert s.value == 1.0, f"collector failed after a removal: {s}"
    _assert_healthy(exporter)


# --- (d) library level: a cgroup deleted while being read ------------------------------


def _real_sampler() -> object:
    from exporter.cgroupfs import mode
    from exporter.sampler import Sampler

    facts = mode.detect()
    assert facts.v2_root is not None, facts.reason
    return Sampler(facts, interval=1.0)


@pytest.mark.any_load
def test_cgroup_deleted_between_discovery_and_read_is_skipped(
    make_lab: MakeLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Discovery sees a real cgroup; it is removed just before its read: the pass goes
    on, the cgroup is absent from the snapshot and counted as vanished."""
    from exporter.sampler import Sampler

    sampler = _real_sampler()
    assert isinstance(sampler, Sampler) and sampler.reader is not None
    doomed = make_lab("vanish", cpu_quota_cores=0.5)
    spawn_periodic(doomed, work_ms=1, period_ms=20, seconds=15)
    keep = make_lab("keep")
    real_read = sampler.reader.read
    removed_during_read: list[str] = []

    def read_after_removal(path: str) -> object:
        if path == doomed.path and not doomed.removed:
            doomed.remove()  # between discovery (walk) and read
            removed_during_read.append(path)
        return real_read(path)

    monkeypatch.setattr(sampler.reader, "read", read_after_removal)
    snap = sampler.run_once()
    assert removed_during_read == [doomed.path], "the sampler never read the doomed cgroup"
    paths = {c.identity.cgroup for c in snap.containers}
    assert doomed.path not in paths
    assert keep.path in paths, "a healthy sibling was lost with the vanished cgroup"
    assert snap.skipped_total.get("vanished", 0) >= 1, snap.skipped_total
    assert snap.skipped_total.get("error", 0) == 0, snap.skipped_total
    assert snap.skipped_total.get("malformed", 0) == 0, snap.skipped_total
    snap2 = sampler.run_once()
    assert doomed.path not in {c.identity.cgroup for c in snap2.containers}


@pytest.mark.any_load
def test_sampler_survives_cgroup_churn(lab_layout: LabLayout) -> None:
    """A thread creates and removes cgroups as fast as it can while the sampler runs
    passes back to back: no pass raises, skips are only ever "vanished", and a removed
    cgroup never outlives the pass after its removal."""
    from exporter.sampler import Sampler

    sampler = _real_sampler()
    assert isinstance(sampler, Sampler)
    stop = threading.Event()
    churned = 0
    churn_errors: list[str] = []
    live: list[LabCgroup] = []

    def churn() -> None:
        nonlocal churned
        deadline = time.monotonic() + 20.0  # bounded even if the test hangs
        i = 0
        while not stop.is_set() and time.monotonic() < deadline:
            lab = LabCgroup.create(f"churn-{i % 8}", layout=lab_layout)
            live.append(lab)
            try:
                time.sleep(0.001 * (i % 3))
            finally:
                try:
                    lab.remove()
                    live.remove(lab)
                except (LabError, OSError) as e:
                    churn_errors.append(str(e))
            churned += 1
            i += 1

    t = threading.Thread(target=churn, name="cgroup-churn", daemon=True)
    passes = 0
    try:
        t.start()
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            sampler.run_once()  # must not raise
            passes += 1
    finally:
        stop.set()
        t.join(10.0)
        for lab in list(live):
            lab.remove()
    assert not t.is_alive(), "churn thread did not stop"
    assert not churn_errors, churn_errors
    snap = sampler.run_once()
    skipped = snap.skipped_total
    print(f"{passes} passes, {churned} cgroups created and removed, skipped: {skipped}")
    assert churned > 10 and passes > 3
    assert skipped.get("error", 0) == 0, skipped
    assert skipped.get("malformed", 0) == 0, skipped
    left = [
        c.identity.cgroup for c in snap.containers if "contention-test-churn" in c.identity.cgroup
    ]
    assert not left, f"removed cgroups still in the snapshot: {left}"


# --- the lab harness itself ---------------------------------------------------------------


@pytest.mark.any_load
def test_lab_harness_leaves_nothing_behind(lab_layout: LabLayout) -> None:
    """remove() kills only its own workers, removes both directories and the owner
    record; cleanup_stale() never touches a cgroup whose owner is alive."""
    from labs import cleanup_stale, kubelet_shares, shares_to_weight
    from labs.cgroups import OWNER_DIR

    # The kubelet's formula: requests 100m and 800m become weights 4 and 32.
    assert [shares_to_weight(kubelet_shares(c)) for c in (0.1, 0.8)] == [4, 32]

    lab = LabCgroup.create("harness", cpu_quota_cores=0.5, layout=lab_layout)
    try:
        busy = spawn_busy(lab, threads=2, seconds=30)
        tick = spawn_periodic(lab, work_ms=1, period_ms=10, seconds=30)
        pids = {busy.pid, *busy.children, tick.pid}
        assert pids <= set(lab.pids()), "workers are not in the lab cgroup"
        assert lab.path == "/contention-test-harness"
        assert lab.cgroup_id == os.stat(lab.v2_dir).st_ino
        cleanup_stale(layout=lab_layout)
        assert os.path.isdir(lab.v2_dir), "cleanup_stale removed a live owner's cgroup"
    finally:
        lab.remove()
    for d in (lab.v2_dir, lab.v1_cpu_dir):
        assert d is None or not os.path.exists(d), f"{d} left behind"
    assert not os.path.exists(os.path.join(OWNER_DIR, lab.name))
    deadline = time.monotonic() + 5.0
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        alive = {p for p in alive if _running(p)}
        time.sleep(0.05)
    assert not alive, f"worker processes survived remove(): {alive}"


def _running(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
