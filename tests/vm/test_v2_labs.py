"""Labs on a real pure cgroup v2 kernel, end to end: lab → exporter → Prometheus →
generated rules → Alertmanager → webhook, all inside the VM lane's guest.

* ``throttled`` (``cpu.max`` throttling), ``throttled-steady`` (a steady 0.6 cores
  under 300m) and ``memory-limit-thrash`` run together: CPU under each container's own
  quota, and memory under the container's own limit with the node calm, so none
  disturbs another's verdict;
  then the closed loop (docs/labs.md#closed-loop-labs): memory-limit-thrash's suggested
  limit is written to ``app``'s ``memory.max`` (``memory.high`` by MemoryQoS) and
  throttled-steady's to its ``cpu.max``, and once the minutes each is judged over all
  began after the fix, ``/findings`` has nothing for either, ``app``'s limit events
  stopped and the refaults with them, and the service is no longer throttled. The wait
  for those minutes is spent on ``memory-limit-thrash-stalled`` (another thrasher under
  its own limit, in cgroups and a file of its own), so the fixed labs keep running from
  one test to the next (:class:`MemoryFix`); :func:`test_memory_limit_thrash_closed_loop`
  judges memory, :func:`test_throttled_steady_closed_loop` the CPU fix a minute later
  (its two-minute window against memory's one-minute sustain);
* ``memory-pressure`` runs alone: it makes the whole guest short of memory (beside the
  CPU closed loop's last minute, the fixed service queued behind its reclaim: CPU some
  29 %, judged ``cpu-contended``, also with its workloads on the other CPU).

For each: the **exact** expected findings in ``/findings`` (kind, victim, culprit,
severity), the same alerts at the webhook with every label (``severity`` the kind's;
the finding's severity is the ``level`` annotation, in Prometheus), and nothing else
for the lab's containers. The numbers observed (the kernel's, and the finding's evidence) are
written to ``$CONTENTION_VM_RESULTS/observed.json`` for docs/labs.md.

Prometheus and Alertmanager are Debian's binaries from the host's root, visible
through the guest's shared filesystem; they listen on the guest's 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import pytest

from exporter.findings.thresholds import Thresholds
from labs.cgroups import LabLayout
from labs.closed_loop import Applied, apply_finding, judged_clear_at
from labs.exporter_proc import ExporterProcess
from labs.memory import MemoryLab, MemoryLabRun, get_memory_lab
from labs.scenarios import (
    LAB_CONTAINER,
    LAB_NAMESPACE,
    Expect,
    Lab,
    LabRun,
    MetadataFile,
    finding_key,
    get_lab,
)
from tests.e2e.chain import (
    Chain,
    ChainError,
    alert_key,
    alert_states,
    expected_alert_labels,
    generate_rules,
    levels_agree,
    missing_binaries,
    received_log,
    wait_until,
)
from tests.support import host_load
from tests.vm.conftest import GUEST_EVAL_INTERVAL, GUEST_SCRAPE_INTERVAL

pytestmark = pytest.mark.vm

LAB_TIMEOUT = 300.0  # expected alerts and /findings must agree within this (TCG is slow)
CLEAR_GRACE = 45.0  # the closed loop: the guest's pass that folds the minute, under TCG
CLOSED_LOOP_S = 60.0 * 2 + CLEAR_GRACE  # the rest of the fix's minute, the sustain, the grace
MIN_LAB_SECONDS = 30.0


class AnyLab(Protocol):
    """A CPU lab (``labs.scenarios.Lab``) or a memory lab (``labs.memory.MemoryLab``)."""

    @property
    def name(self) -> str: ...
    @property
    def expect(self) -> tuple[Expect, ...]: ...
    @property
    def quiet(self) -> tuple[str, ...]: ...
    @property
    def never(self) -> tuple[str, ...]: ...

    def cgroup_path(self, role: str) -> str: ...
    def pod(self, role: str) -> str: ...


@dataclass
class Observed:
    path: str
    data: dict[str, Any] = field(default_factory=dict)

    def save(self) -> None:
        with open(self.path, "w") as f:
            json.dump(self.data, f, indent=1, sort_keys=True, default=str)


@pytest.fixture(scope="module")
def observed() -> Iterator[Observed]:
    results = os.environ.get("CONTENTION_VM_RESULTS") or "/tmp"
    obs = Observed(os.path.join(results, "observed.json"))
    try:
        yield obs
    finally:
        obs.save()


@pytest.fixture(scope="module")
def chain(
    exporter: ExporterProcess, short_window_config: str, guest_workdir: str
) -> Iterator[Chain]:
    """Prometheus (scrape and rules every 3 s: GUEST_SCRAPE_INTERVAL, GUEST_EVAL_INTERVAL)
    with the rules generated from the labs' short-window thresholds, and Alertmanager
    sending to a webhook in this process."""
    missing = missing_binaries()
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed on the host (setup.sh --test)")
    workdir = os.path.join(guest_workdir, "chain")
    os.makedirs(workdir, exist_ok=True)
    rule_file, inhibit_rules = generate_rules(workdir, short_window_config, GUEST_EVAL_INTERVAL)
    c = Chain(
        workdir=workdir,
        rule_file=rule_file,
        targets={JOB: [_instance(exporter)]},
        inhibit_rules=inhibit_rules,
        scrape_interval=GUEST_SCRAPE_INTERVAL,
        eval_interval=GUEST_EVAL_INTERVAL,
    )
    try:
        c.start(timeout=180)
        yield c
    except ChainError as e:
        pytest.fail(f"could not start Prometheus and Alertmanager in the guest: {e}")
    finally:
        c.stop()


# The job the shipped rules select by default (the rule pack's selector).
JOB = "contention-exporter"


def _instance(exporter: ExporterProcess) -> str:
    return f"127.0.0.1:{exporter.port}"


def _want(lab: AnyLab, instance: str, th: Thresholds) -> list[dict[str, str]]:
    out = []
    for e in lab.expect:
        labels = expected_alert_labels(e.kind, th.severity_of(e.kind), e.victim, lab, instance, JOB)
        if e.culprit is not None:
            labels.update(
                culprit_namespace=LAB_NAMESPACE,
                culprit_pod=lab.pod(e.culprit),
                culprit_container=LAB_CONTAINER,
            )
        out.append(labels)
    return out


def _want_findings(lab: AnyLab) -> set[tuple[str, str, str | None, str]]:
    return {
        (
            e.kind,
            lab.cgroup_path(e.victim),
            None if e.culprit is None else lab.cgroup_path(e.culprit),
            e.severity,
        )
        for e in lab.expect
    }


def _paths(lab: AnyLab, roles: Sequence[str]) -> set[str]:
    return {lab.cgroup_path(r) for r in roles}


def _findings(exporter: ExporterProcess) -> list[dict[str, Any]]:
    status, body = exporter.get("/findings")
    if status != 200:
        raise ChainError(f"/findings answered {status}: {body[:300]}")
    rows: list[dict[str, Any]] = json.loads(body).get("findings") or []
    return rows


class ForbiddenFinding(AssertionError):
    """A lab container got a finding kind its lab rules out (``never``)."""

    def __init__(self, message: str, findings: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.findings = findings


def await_labs(
    labs: Sequence[tuple[AnyLab, Sequence[str]]],
    exporter: ExporterProcess,
    chain: Chain,
    t0: float,
    kernel: Any,
    th: Thresholds,
    findings_only: bool = False,
) -> dict[str, Any]:
    """Wait until, for every lab, /findings and the webhook hold exactly its expected
    findings and alerts (and Prometheus agrees); raise :class:`ForbiddenFinding` at
    once on a forbidden finding kind for a lab container. Returns what was seen when
    they agreed. ``findings_only``: until /findings holds at least them (a scene's first
    phase; its second waits for all of it, exactly)."""
    paths: set[str] = set()
    pods: set[str] = set()  # alerts name a lab container by namespace/pod/container
    want_keys: set[tuple[str, str, str, str | None]] = set()
    want_findings: set[tuple[str, str, str | None, str]] = set()
    want_labels: list[dict[str, str]] = []
    want_levels: dict[tuple[str, str, str, str | None], str] = {}
    never: dict[str, set[str]] = {}
    for lab, roles in labs:
        lab_paths = _paths(lab, roles)
        paths |= lab_paths
        pods |= {lab.pod(r) for r in roles}
        w = _want(lab, _instance(exporter), th)
        want_labels += w
        want_keys |= {alert_key(x) for x in w}
        # the finding's level is the alert's `level` annotation, not a label
        want_levels.update({alert_key(x): e.severity for x, e in zip(w, lab.expect, strict=True)})
        want_findings |= _want_findings(lab)
        for p in lab_paths:
            never[p] = set(lab.never)
    state: dict[str, Any] = {}

    def agreed() -> bool:
        rows = [f for f in _findings(exporter) if (f.get("victim") or {}).get("cgroup") in paths]
        state["findings"] = rows
        forbidden = [f for f in rows if f.get("kind") in never[f["victim"]["cgroup"]]]
        if forbidden:
            state["forbidden"] = forbidden
            return True  # stop waiting: raised below
        if findings_only:
            # Present, not yet exactly: a side finding (db's cpu-contended while the guest is
            # short of memory, docs/labs.md) can take minutes to clear, and that wait is the
            # next phase's, which wants exactly the expected set.
            found = want_findings <= {finding_key(f) for f in rows}
            return found and time.time() - t0 >= MIN_LAB_SECONDS
        notes = [n for n in chain.webhook.snapshot() if n.labels.get("pod") in pods]
        firing = [
            dict(k)
            for k, st in alert_states([n for n in notes if n.received >= t0]).items()
            if st == "firing"
        ]
        prom_alerts = [a for a in chain.firing_alerts() if a["labels"].get("pod") in pods]
        prom = [a["labels"] for a in prom_alerts]
        state.update(firing=firing, prom=prom)
        labels_ok = all(
            any(all(a.get(k) == v for k, v in w.items()) for a in firing) for w in want_labels
        )
        return (
            time.time() - t0 >= MIN_LAB_SECONDS
            and {finding_key(f) for f in rows} == want_findings
            and {alert_key(a) for a in firing} == want_keys
            and {alert_key(a) for a in prom} == want_keys
            and labels_ok
            and levels_agree(prom_alerts, want_levels)
        )

    def detail() -> str:
        return (
            f"expected findings: {sorted(want_findings, key=str)}\n"
            f"/findings: {json.dumps(state.get('findings'), indent=1)[:5000]}\n"
            f"firing at the webhook: {json.dumps(state.get('firing'), indent=1)}\n"
            f"firing in Prometheus: {json.dumps(state.get('prom'), indent=1)}\n"
            f"kernel: {json.dumps(kernel())}\n{chain.logs()}\n"
            f"--- exporter log ---\n{exporter.log_tail(20)}"
        )

    try:
        what = "findings" if findings_only else "findings and alerts"
        wait_until(f"the labs' expected {what}", agreed, LAB_TIMEOUT, 2.0, detail)
    except ChainError as e:
        pytest.fail(str(e), pytrace=False)
    if "forbidden" in state:
        raise ForbiddenFinding(
            f"forbidden finding for a lab container: {json.dumps(state['forbidden'], indent=1)}"
            f"\n{detail()}",
            state["forbidden"],
        )
    state["seconds_to_find" if findings_only else "seconds_to_agree"] = round(time.time() - t0, 1)
    return state


def _summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "kind": f["kind"],
            "severity": f["severity"],
            "victim": f["victim"]["ref"],
            "culprit": f["culprit"] and f["culprit"]["ref"],
            "culprit_share": f["culprit"] and f["culprit"].get("blame_share"),
            "evidence": f["evidence"],
            "message": f.get("message"),
        }
        for f in rows
    ]


@dataclass
class CpuFix:
    """throttled-steady's run with its suggested CPU limit applied (``cpu.max``)."""

    run: LabRun
    row: dict[str, Any]
    applied: Applied
    mark: Any


@dataclass
class MemoryFix:
    """memory-limit-thrash's lab with its suggested limit applied, and throttled-steady's
    (:class:`CpuFix`), handed from the test that applies them to the one that judges
    them (the stalled lab runs in between): the thrasher's run stays open in
    ``memory_stack`` until :func:`test_memory_limit_thrash_closed_loop` closes it, the
    service's in ``stack`` until :func:`test_throttled_steady_closed_loop` closes both,
    or the module ends. The scene's first phase starts the three labs
    (:func:`test_throttled_and_memory_limit_thrash_start`); ``throttled``'s run stays
    open in ``throttled_stack`` until the third has seen the alerts."""

    stack: ExitStack = field(default_factory=ExitStack)  # every run, closed last
    memory_stack: ExitStack = field(default_factory=ExitStack)  # the thrasher's run
    throttled_stack: ExitStack = field(default_factory=ExitStack)  # throttled's run
    t0: float = 0.0  # when the scene's labs started
    throttled: LabRun | None = None
    steady: LabRun | None = None
    run: MemoryLabRun | None = None
    row: dict[str, Any] = field(default_factory=dict)
    applied: Applied | None = None
    mark: Any = None
    cpu: CpuFix | None = None

    def stop(self) -> None:
        """No scene for the next phase: the labs stop here."""
        self.stack.close()
        self.throttled = None


def test_the_chain_is_up_in_the_guest(exporter: ExporterProcess, chain: Chain) -> None:
    """Prometheus scrapes the guest's exporter, lists the Alertmanager and has the rule
    pack loaded, before any lab relies on them (starting the chain under TCG is most of
    this test's time, which the first lab's time no longer hides)."""
    up = chain.query(f'up{{job="{JOB}"}}')
    assert [float(r["value"][1]) for r in up] == [1.0], up
    loaded = chain.loaded_rules()
    assert loaded and all(loaded.values()), f"no rules loaded: {loaded}"
    listed = chain.api("/api/v1/alertmanagers").get("activeAlertmanagers", [])
    assert any(str(chain.am_port) in a.get("url", "") for a in listed), listed


@pytest.fixture(scope="module")
def memory_fix() -> Iterator[MemoryFix]:
    fix = MemoryFix()
    with fix.stack:
        fix.stack.enter_context(fix.memory_stack)
        fix.stack.enter_context(fix.throttled_stack)
        yield fix


# The fixed lab outlives its scene's two phases, the stalled lab's test (its bound) and
# the closed loop.
MEMORY_FIX_LAB_S = 2 * LAB_TIMEOUT + 60 + (LAB_TIMEOUT + 60) + CLOSED_LOOP_S
THROTTLED = get_lab("throttled")
STEADY = get_lab("throttled-steady")
THRASH = get_memory_lab("memory-limit-thrash")


def _whole(*labs: Lab | MemoryLab) -> list[tuple[AnyLab, list[str]]]:
    """Each lab with every one of its containers, for :func:`await_labs`."""
    return [(lab, [b.role for b in lab.boxes]) for lab in labs]


@contextmanager
def _or_the_scene_stops(scene: MemoryFix | PressureScene) -> Iterator[None]:
    """A phase's body: on any failure its scene stops, and the next phases, finding
    none, fail at once instead of waiting out their bounds."""
    try:
        yield
    except BaseException:
        scene.stop()
        raise


def _scene_kernel(fix: MemoryFix) -> dict[str, Any]:
    assert fix.throttled is not None and fix.steady is not None and fix.run is not None
    return {
        "throttled": {r: m.as_dict() for r, m in fix.throttled.measure().items()},
        "throttled-steady": {r: m.as_dict() for r, m in fix.steady.measure().items()},
        "memory-limit-thrash": fix.run.measure(),
    }


def _await_scene(
    fix: MemoryFix,
    exporter: ExporterProcess,
    chain: Chain,
    th: Thresholds,
    findings_only: bool = False,
) -> dict[str, Any]:
    """:func:`await_labs` for the throttled + memory-limit-thrash scene."""
    labs = _whole(THROTTLED, STEADY, THRASH)
    return await_labs(labs, exporter, chain, fix.t0, lambda: _scene_kernel(fix), th, findings_only)


PREMISE_SPAN_S = 10.0  # the kernel's counters over this span say the premise holds now
PREMISE_MINUTE_S = 10.0  # a minute is watched whole if its first pass is this far in


def _scene_premise(fix: MemoryFix, th: Thresholds) -> tuple[bool, dict[str, Any]]:
    """The scene's premise, from the kernel over the last PREMISE_SPAN_S: each
    ``cpu-throttled`` victim throttled in more than ``throttledRatioMax`` of its periods,
    and memory-limit-thrash's victim refaulting at ``refaultPerMin`` or more."""
    assert fix.throttled is not None and fix.steady is not None and fix.run is not None
    cpu_runs = ((THROTTLED, fix.throttled), (STEADY, fix.steady))
    marks = [run.mark() for _, run in cpu_runs]
    memory_mark = fix.run.mark()
    time.sleep(PREMISE_SPAN_S)
    held, numbers = True, {}
    for (lab, run), mark in zip(cpu_runs, marks, strict=True):
        m = run.measure(since=mark)
        numbers[lab.name] = {r: x.as_dict() for r, x in m.items()}
        for e in lab.expect:
            ratio = m[e.victim].throttled_ratio if e.victim in m else None
            if e.kind == "cpu-throttled" and (ratio or 0.0) <= th.throttled_ratio_max:
                held = False
    thrash = numbers[THRASH.name] = fix.run.measure(since=memory_mark)
    victim = thrash.get(THRASH.expect[0].victim) or {}
    return held and (victim.get("refaults_per_min") or 0.0) >= th.refault_per_min, numbers


@pytest.mark.timeout(LAB_TIMEOUT + 200)
def test_throttled_and_memory_limit_thrash_start(
    metadata: MetadataFile,
    v2_layout: LabLayout,
    lab_thresholds: Thresholds,
    memory_fix: MemoryFix,
) -> None:
    """The scene's first phase, on the kernel's side: the three labs start, and their
    victims are throttled and thrashing (:func:`_scene_premise`)."""
    scratch = os.environ.get("CONTENTION_VM_SCRATCH")
    assert scratch, "the guest has no scratch disk"
    fix = memory_fix
    fix.t0 = time.time()
    with _or_the_scene_stops(fix):
        # From here to the CPU closed loop's verdict the guest measures throttling, which
        # a busy host inflates: it asks to run ahead of the host's lanes until then.
        fix.stack.enter_context(host_load.boosted())
        fix.run = fix.memory_stack.enter_context(
            MemoryLabRun(THRASH, MEMORY_FIX_LAB_S, scratch, metadata=metadata, layout=v2_layout)
        )
        fix.steady = fix.stack.enter_context(
            LabRun(STEADY, MEMORY_FIX_LAB_S, metadata=metadata, layout=v2_layout)
        )
        fix.throttled = fix.throttled_stack.enter_context(
            LabRun(THROTTLED, seconds=2 * LAB_TIMEOUT + 60, metadata=metadata, layout=v2_layout)
        )
        held, numbers = _scene_premise(fix, lab_thresholds)
        while not held and time.time() < fix.t0 + LAB_TIMEOUT:
            held, numbers = _scene_premise(fix, lab_thresholds)
        assert held, f"the labs' premise did not hold in {LAB_TIMEOUT:.0f} s: {numbers}"
    # No wait for a minute to begin, unlike memory-pressure's premise: the labs' minutes
    # count from their containers' start, not from when the premise held.
    print(f"premise after {time.time() - fix.t0:.1f} s: {json.dumps(numbers)}")


@pytest.mark.timeout(LAB_TIMEOUT + 200)
def test_throttled_and_memory_limit_thrash_found(
    exporter: ExporterProcess,
    chain: Chain,
    lab_thresholds: Thresholds,
    memory_fix: MemoryFix,
) -> None:
    """The scene's second phase: /findings holds the labs' expected findings (the third
    waits for exactly them and for the alerts to agree)."""
    fix = memory_fix
    with _or_the_scene_stops(fix):
        if fix.throttled is None:
            pytest.fail("no labs: test_throttled_and_memory_limit_thrash_start did not start them")
        state = _await_scene(fix, exporter, chain, lab_thresholds, findings_only=True)
    print(f"found after {state['seconds_to_find']} s: {json.dumps(_summary(state['findings']))}")


@pytest.mark.timeout(LAB_TIMEOUT + 200)
def test_throttled_and_memory_limit_thrash(
    exporter: ExporterProcess,
    chain: Chain,
    observed: Observed,
    lab_thresholds: Thresholds,
    memory_fix: MemoryFix,
) -> None:
    """The scene's third phase: exactly the expected findings, and the alerts agree
    with them at the webhook and in Prometheus; ``throttled`` stops, and the closed
    loop's fixes are applied."""
    fix = memory_fix
    try:
        if fix.throttled is None or fix.steady is None or fix.run is None:
            pytest.fail("no scene: test_throttled_and_memory_limit_thrash_start did not start it")
        state = _await_scene(fix, exporter, chain, lab_thresholds)
        numbers = _scene_kernel(fix)
        fix.throttled_stack.close()
        # The closed loop's fixes, judged by test_memory_limit_thrash_closed_loop.
        mem, steady = fix.run, fix.steady
        (row,) = [f for f in state["findings"] if f["kind"] == "memory-limit-thrash"]
        fix.applied = apply_finding(mem, row)
        fix.mark = mem.mark()
        fix.row = row
        service = STEADY.cgroup_path("service")
        (srow,) = [f for f in state["findings"] if f["victim"]["cgroup"] == service]
        fix.cpu = CpuFix(steady, srow, apply_finding(steady, srow), steady.mark())
    except BaseException:
        fix.stack.close()  # no fix to judge: the labs stop before the next test
        raise
    rows = state["findings"]
    for lab in (THROTTLED, STEADY):
        roles = [b.role for b in lab.boxes]
        paths, pods = _paths(lab, roles), {lab.pod(r) for r in roles}
        observed.data[lab.name] = {
            "seconds_to_agree": state["seconds_to_agree"],
            "kernel": numbers[lab.name],
            "findings": _summary([f for f in rows if f["victim"]["cgroup"] in paths]),
            "alerts": [a for a in state["firing"] if a.get("pod") in pods],
        }
    observed.data["memory-limit-thrash"] = {
        "seconds_to_agree": state["seconds_to_agree"],
        "kernel": numbers["memory-limit-thrash"],
        "findings": _summary([f for f in rows if f["kind"] == "memory-limit-thrash"]),
        "alerts": [a for a in state["firing"] if a.get("finding") == "memory-limit-thrash"],
    }
    observed.save()
    shown = ("throttled", "throttled-steady", "memory-limit-thrash")
    print(json.dumps({k: observed.data[k] for k in shown}, indent=1))
    app = numbers["memory-limit-thrash"]["app"]
    assert app["oom_kills"] == 0, f"the thrashing app was OOM-killed: {app}"
    node_some = numbers["memory-limit-thrash"]["node"]["memory_some"]
    assert node_some < lab_thresholds.node_mem_stall_some, numbers


def memory_closed_loop(exporter: ExporterProcess, fix: MemoryFix, th: Thresholds) -> dict[str, Any]:
    """Once the sustain minutes memory-limit-thrash is judged over all began after the
    fix (``memory.max`` at the suggestion, ``memory.high`` by MemoryQoS): ``/findings``
    and the kernel's counters since the fix and over its last 20 s or more (the file,
    read back once into the larger limit, stays)."""
    run, applied = fix.run, fix.applied
    assert run is not None and applied is not None
    clear_at = judged_clear_at(applied.at, th.sustain_minutes)
    time.sleep(max(0.0, clear_at - 20 - time.time()))
    tail, tail_at = run.mark(), time.time()
    time.sleep(max(0.0, clear_at - time.time(), tail_at + 20 - time.time()))
    path = run.lab.cgroup_path("app")
    after: list[dict[str, Any]] = []
    deadline = max(clear_at, time.time()) + CLEAR_GRACE
    while True:
        status, body = exporter.get("/findings")
        doc = json.loads(body) if status == 200 else {}
        after = [f for f in doc.get("findings") or [] if f["victim"].get("cgroup") == path]
        if (doc.get("evaluated_at") or 0) >= clear_at and not after:
            break
        if time.time() > deadline:
            break
        time.sleep(2.0)
    row = fix.row
    return {
        "applied": applied.as_dict(),
        "before": {
            "severity": row["severity"],
            "evidence": row["evidence"],
            "basis": row["suggestion"]["basis"],
            "remediation": row["remediation"],
        },
        "seconds_after_fix": round(time.time() - applied.at, 1),
        "kernel_since_fix": run.measure(since=fix.mark),
        "kernel_last_20s": run.measure(since=tail),
        "findings_after": after,
    }


def cpu_closed_loop(exporter: ExporterProcess, fix: CpuFix, th: Thresholds) -> dict[str, Any]:
    """Once the window throttled-steady is judged over began after its fix (``cpu.max``
    at the suggestion): ``/findings`` and the kernel's counters since the fix."""
    clear_at = judged_clear_at(fix.applied.at, th.window_minutes)
    time.sleep(max(0.0, clear_at - time.time()))
    path = fix.run.lab.cgroup_path("service")
    after: list[dict[str, Any]] = []
    deadline = clear_at + CLEAR_GRACE
    while True:
        status, body = exporter.get("/findings")
        doc = json.loads(body) if status == 200 else {}
        after = [f for f in doc.get("findings") or [] if f["victim"].get("cgroup") == path]
        if ((doc.get("evaluated_at") or 0) >= clear_at and not after) or time.time() > deadline:
            break
        time.sleep(2.0)
    row = fix.row
    return {
        "applied": fix.applied.as_dict(),
        "before": {
            "severity": row["severity"],
            "evidence": row["evidence"],
            "basis": row["suggestion"]["basis"],
            "remediation": row["remediation"],
        },
        "seconds_after_fix": round(time.time() - fix.applied.at, 1),
        "kernel_since_fix": {r: m.as_dict() for r, m in fix.run.measure(since=fix.mark).items()},
        "findings_after": after,
    }


STALLED = get_memory_lab("memory-limit-thrash-stalled")


@pytest.mark.timeout(LAB_TIMEOUT + 200)
@pytest.mark.xfail(
    bool(STALLED.known_gap),
    reason=f"today's rules: {STALLED.known_gap} (docs/labs.md)",
    raises=ForbiddenFinding,
    strict=True,
)
def test_memory_limit_thrash_stalled(
    exporter: ExporterProcess,
    chain: Chain,
    metadata: MetadataFile,
    v2_layout: LabLayout,
    observed: Observed,
    lab_thresholds: Thresholds,
) -> None:
    """Thrashing under its own limit with its own stall above ``nodeMemStallSome``:
    the node's memory PSI includes that stall, and the findings must not read it as
    node pressure (they leave the victim's own stall out in minutes it hit its limit),
    so the verdict is memory-limit-thrash. The xfail stays wired to the lab's
    ``known_gap`` (empty now) so a future gap is recorded the same way: expected to fail
    with exactly the wrong verdict, any other failure being a real one."""
    scratch = os.environ.get("CONTENTION_VM_SCRATCH")
    assert scratch, "the guest has no scratch disk"
    lab = STALLED
    floor = lab_thresholds.node_mem_stall_some
    t0 = time.time()
    with MemoryLabRun(lab, LAB_TIMEOUT + 60, scratch, metadata=metadata, layout=v2_layout) as run:
        try:
            state = await_labs(
                _whole(lab),
                exporter,
                chain,
                t0,
                run.measure,
                lab_thresholds,
            )
        except ForbiddenFinding as e:
            numbers = run.measure()
            observed.data[lab.name] = {
                "seconds_to_verdict": round(time.time() - t0, 1),
                "kernel": numbers,
                "verdict_today": _summary(e.findings),
            }
            observed.save()
            print(json.dumps(observed.data[lab.name], indent=1))
            # The premise, or this is not the known gap: the app stalled above the
            # node threshold on its own, the node had memory to spare, and the wrong
            # verdict is exactly memory-pressure for app.
            got = {(f["kind"], f["victim"]["cgroup"]) for f in e.findings}
            assert got == {("memory-pressure", lab.cgroup_path("app"))}, got
            assert numbers["app"]["psi_some"] >= floor, numbers
            assert numbers["node"]["memory_some"] >= floor, numbers
            assert numbers["node"]["mem_available_mib"] >= 256, numbers
            raise
        numbers = run.measure()
    observed.data[lab.name] = {
        "seconds_to_agree": state["seconds_to_agree"],
        "kernel": numbers,
        "findings": _summary(state["findings"]),
        "alerts": state["firing"],
    }
    observed.save()
    assert numbers["app"]["psi_some"] >= floor, f"not the stalled case: {numbers}"
    assert numbers["app"]["oom_kills"] == 0, f"the thrashing app was OOM-killed: {numbers}"


@pytest.mark.timeout(CLOSED_LOOP_S + 120)
def test_memory_limit_thrash_closed_loop(
    exporter: ExporterProcess,
    observed: Observed,
    lab_thresholds: Thresholds,
    memory_fix: MemoryFix,
) -> None:
    """memory.max raised to memory-limit-thrash's suggestion (by
    test_throttled_and_memory_limit_thrash, the stalled lab run since): the finding
    clears and the refaults stop. The thrasher stops here."""
    th = lab_thresholds
    try:
        if memory_fix.run is None or memory_fix.cpu is None:
            pytest.fail("no fix to judge: test_throttled_and_memory_limit_thrash did not apply one")
        app = memory_fix.run.cgroups["app"]
        assert app.pids(), "the fixed lab's app ended before the closed loop could judge it"
        loop = memory_closed_loop(exporter, memory_fix, th)
    finally:
        memory_fix.memory_stack.close()
    observed.data["memory-limit-thrash-closed-loop"] = loop
    observed.save()
    print(json.dumps(loop, indent=1))
    assert not loop["findings_after"], loop
    since, tail = loop["kernel_since_fix"]["app"], loop["kernel_last_20s"]["app"]
    assert since["limit_hits_per_min"] == 0 and since["oom_kills"] == 0, loop
    assert tail["refaults_per_min"] < th.refault_per_min, loop
    assert tail["psi_some"] < th.mem_stall_some, loop


@pytest.mark.timeout(CLOSED_LOOP_S + 120)
def test_throttled_steady_closed_loop(
    exporter: ExporterProcess, observed: Observed, lab_thresholds: Thresholds, memory_fix: MemoryFix
) -> None:
    """cpu.max raised to throttled-steady's suggestion (with memory-limit-thrash's fix):
    once its window began after the fix, the finding is gone and the service is no
    longer throttled. The service stops here, before memory-pressure."""
    th = lab_thresholds
    try:
        if memory_fix.cpu is None:
            pytest.fail("no fix to judge: test_throttled_and_memory_limit_thrash did not apply one")
        cpu_loop = cpu_closed_loop(exporter, memory_fix.cpu, th)
    finally:
        memory_fix.stack.close()
    observed.data["throttled-steady-closed-loop"] = cpu_loop
    observed.save()
    print(json.dumps(cpu_loop, indent=1))
    fix = memory_fix.cpu.applied
    assert fix.setting == "cpu_limit" and fix.written == {"cpu.max": f"{fix.value * 100} 100000"}
    service = cpu_loop["kernel_since_fix"]["service"]
    ratio = service["throttled_ratio"]
    assert ratio is not None and ratio < th.throttled_ratio_max, cpu_loop
    after = cpu_loop["findings_after"]
    assert not [f for f in after if f["kind"] == "cpu-throttled"], cpu_loop
    # No longer throttled, the service can still wait for the guest's CPUs: on a loaded
    # host the emulated guest is short of CPU (docs/labs.md, "The closed loop in the
    # guest"). That is cpu-contended, a finding of its own, accepted only when the
    # kernel saw the service stalled too.
    for f in after:
        assert f["kind"] == "cpu-contended", cpu_loop
        assert service["psi_some"] >= th.stall_some / 2, (
            f"cpu-contended after the fix, but the kernel saw the service stalled only "
            f"{service['psi_some']:.0%} of the time: {cpu_loop}"
        )
        print(
            f"accepted: cpu-contended after the fix (the guest short of CPU: the service "
            f"used {service['usage_cores']:.2f} cores, stalled {service['psi_some']:.0%})"
        )


@dataclass
class PressureScene:
    """memory-pressure's lab, from the phase that starts it to the one that judges it."""

    stack: ExitStack = field(default_factory=ExitStack)
    t0: float = 0.0
    run: MemoryLabRun | None = None

    def stop(self) -> None:
        """No lab for the next phase."""
        self.stack.close()
        self.run = None


@pytest.fixture(scope="module")
def pressure() -> Iterator[PressureScene]:
    scene = PressureScene()
    with scene.stack:
        yield scene


PRESSURE = get_memory_lab("memory-pressure")


def _pressure_now(run: MemoryLabRun, th: Thresholds) -> tuple[bool, dict[str, Any]]:
    """memory-pressure's premise, from the kernel over the last PREMISE_SPAN_S: the
    victim stalled on memory or refaulting, and the node under memory pressure."""
    mark = run.mark()
    time.sleep(PREMISE_SPAN_S)
    m = run.measure(since=mark)
    v = m.get(PRESSURE.expect[0].victim) or {}
    node = m.get("node") or {}
    stalled = (v.get("psi_some") or 0.0) >= th.mem_stall_some
    refaulting = (v.get("refaults_per_min") or 0.0) >= th.refault_per_min
    return (stalled or refaulting) and (node.get("memory_some") or 0.0) >= th.node_mem_stall_some, m


@pytest.mark.timeout(LAB_TIMEOUT + 200)
def test_memory_pressure_builds(
    metadata: MetadataFile,
    v2_layout: LabLayout,
    lab_thresholds: Thresholds,
    pressure: PressureScene,
) -> None:
    """memory-pressure's first phase, on the kernel's side: the lab starts and the guest
    gets short of memory (the victim stalled or refaulting, the node's memory PSI above
    ``nodeMemStallSome``), then the first minute the exporter can judge whole begins."""
    scratch = os.environ.get("CONTENTION_VM_SCRATCH")
    assert scratch, "the guest has no scratch disk"
    pressure.t0 = time.time()
    deadline = pressure.t0 + LAB_TIMEOUT
    with _or_the_scene_stops(pressure):
        run = pressure.stack.enter_context(
            MemoryLabRun(
                PRESSURE, 3 * LAB_TIMEOUT + 60, scratch, metadata=metadata, layout=v2_layout
            )
        )
        pressure.run = run
        held, numbers = _pressure_now(run, lab_thresholds)
        while not held and time.time() < deadline:
            held, numbers = _pressure_now(run, lab_thresholds)
        assert held, f"the guest never got short of memory in {LAB_TIMEOUT:.0f} s: {numbers}"
    into = time.time() % 60
    print(f"short of memory after {time.time() - pressure.t0:.1f} s: {json.dumps(numbers)}")
    if into > PREMISE_MINUTE_S:
        time.sleep(60 - into)


@pytest.mark.timeout(LAB_TIMEOUT + 200)
def test_memory_pressure_found(
    exporter: ExporterProcess, chain: Chain, lab_thresholds: Thresholds, pressure: PressureScene
) -> None:
    """memory-pressure's second phase: /findings holds its expected findings (the third
    waits for exactly them and for the alerts to agree)."""
    lab, run = PRESSURE, pressure.run
    with _or_the_scene_stops(pressure):
        if run is None:
            pytest.fail("no lab: test_memory_pressure_builds did not start it")
        state = await_labs(
            _whole(lab),
            exporter,
            chain,
            pressure.t0,
            run.measure,
            lab_thresholds,
            findings_only=True,
        )
    print(f"found after {state['seconds_to_find']} s: {json.dumps(_summary(state['findings']))}")


@pytest.mark.timeout(LAB_TIMEOUT + 200)
def test_memory_pressure(
    exporter: ExporterProcess,
    chain: Chain,
    observed: Observed,
    lab_thresholds: Thresholds,
    pressure: PressureScene,
) -> None:
    """memory-pressure's third phase: the alerts agree with the findings, no
    container was OOM-killed, and the culprit is labelled a heuristic."""
    lab, run = PRESSURE, pressure.run
    try:
        if run is None:
            pytest.fail("no lab: test_memory_pressure_builds did not start it")
        state = await_labs(_whole(lab), exporter, chain, pressure.t0, run.measure, lab_thresholds)
        numbers = run.measure()
    finally:
        pressure.stack.close()
    rows = state["findings"]
    pods = {lab.pod(b.role) for b in lab.boxes}
    observed.data["memory-pressure"] = {
        "seconds_to_agree": state["seconds_to_agree"],
        "kernel": numbers,
        "findings": _summary(rows),
        "alerts": state["firing"],
        "notifications": received_log(
            [
                n
                for n in chain.webhook.snapshot()
                if n.received >= pressure.t0 and n.labels.get("pod") in pods
            ]
        ),
    }
    observed.save()
    print(json.dumps(observed.data["memory-pressure"], indent=1))
    for role in ("db", "cache", "batch"):
        assert numbers[role]["oom_kills"] == 0, f"{role} was OOM-killed: {numbers}"
    # The kernel does not record whose growth evicted whose pages: the culprit is
    # labelled a heuristic (docs/findings.md, memory-pressure).
    named = [f["culprit"] for f in rows if f["kind"] == "memory-pressure" and f.get("culprit")]
    assert named and all(c.get("heuristic") is True for c in named), _summary(rows)


def test_no_rule_failed_to_evaluate(chain: Chain) -> None:
    """Every rule evaluated without an error while the labs ran on the pure-v2 kernel's
    series (a failed evaluation records nothing: its alert would miss silently)."""
    bad = chain.rule_failures()
    assert not bad["failures"] and not bad["errors"], json.dumps(bad, indent=1)[:4000]
