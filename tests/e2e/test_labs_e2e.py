"""End to end on a real kernel: contention labs → exporter → Prometheus → rules →
Alertmanager → webhook, plus the replayed labs (memory, CPU steal) through the same chain.

For each real-kernel lab (run on the shared chain of conftest.py in slots of two labs at
once, each pinned to a CPU of its own: :data:`SLOTS`):

* the **exact** alerts arrive at the webhook — name, severity (the kind's, fixed),
  the finding's level (the ``level`` annotation, in Prometheus), the victim's labels
  (``namespace``, ``pod``, ``container`` from the labs' metadata file, ``instance``,
  ``job``) and the culprit's labels — and Prometheus fires nothing else for the lab's
  containers while the lab runs;
* ``/findings`` holds the same findings (kind, victim, culprit, severity);
* every dashboard panel query runs without error, and the panels the lab concerns show
  its victim;
* after the lab ends, its alerts resolve (checked in :func:`test_3_everything_resolves`,
  so the wait overlaps the next lab) and ``/findings`` empties.

The replayed labs (:mod:`labs.replay`: the memory kinds, and cpu-steal, a node-level
finding whose alert has no victim labels) run from the start of the session in the
background; :func:`test_2_replayed_lab` checks what was recorded.

Timing: thresholds are the packaged defaults with ``windowMinutes: 2`` and
``sustainMinutes: 1`` (see ``labs.scenarios.SHORT_WINDOW``); Prometheus
scrapes every second and evaluates the rules every 2 s. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from exporter import promql as pq
from exporter.cgroupfs.discovery import CgroupKind
from exporter.findings.thresholds import Thresholds
from exporter.identity import Identity
from exporter.probe.culprit import classify_culprit
from exporter.rules.finding_alerts import ALERT_NAMES
from labs.replay import HYPERVISOR, NODE, REPLAYS, ReplayLab
from labs.scenarios import (
    LAB_CONTAINER,
    LAB_NAMESPACE,
    LABS,
    Expect,
    Lab,
    LabRun,
    finding_key,
    get_lab,
    lab_cpu,
)
from tests.e2e.chain import (
    ChainError,
    alert_key,
    alert_states,
    container_of,
    levels_agree,
    wait_until,
)
from tests.e2e.conftest import (
    ALERT_LABELS,
    E2E,
    REPLAY_STALL_SECONDS,
    RUNBOOK_URL,
    run_dashboards,
)
from tests.e2e.diagnose import DiagnoseRun, check_diagnose
from tests.e2e.inhibit import check_inhibition

pytestmark = [pytest.mark.e2e]

# Labs run in slots: the labs of a slot run at once, each pinned to a CPU of its own
# (:func:`_slot_cpus`). Only ``throttled`` runs beside another lab: it uses 0.2 cores
# of the first CPU, which leaves that CPU to the chain's own processes (the exporter,
# Prometheus, pytest) as when a lab runs alone. Two labs that each fill a CPU leave the
# host's own work nowhere else to run: it lands on the labs' CPUs, and a lab's
# containers stall behind the root cgroup (seen: weights and noisy-neighbor paired,
# and throttled-with-neighbor beside them, each got a noisy-neighbor finding naming
# "kernel" while the machine ran half a core of other work).
SLOTS: tuple[tuple[str, ...], ...] = (
    ("throttled-with-neighbor", "throttled"),
    ("noisy-neighbor",),
    ("weights",),
    ("contended",),
)
LAB_ORDER = tuple(n for slot in SLOTS for n in slot)
MIN_LAB_SECONDS = 45.0  # every lab runs at least this long, so wrong alerts get their chance
LAB_TIMEOUT = 200.0  # expected alerts and /findings must agree within this
ALERT_OF = {str(k): v for k, v in ALERT_NAMES.items()}

# Panels (title prefixes: titles name the window) whose result must show the lab's
# victim (by its namespace/pod/container name) while the lab runs.
CONCERNS: dict[str, tuple[str, ...]] = {
    "throttled": (
        "Active findings for this selection",
        "Throttled periods",
        "Throttled time",
        "CPU pressure some (per minute)",
        "CPU pressure full (per minute)",
        "CPU used vs request vs limit",
    ),
    "throttled-with-neighbor": (
        "Active findings for this selection",
        "Throttled periods",
        "Top culprits' share of the wait",
    ),
    "noisy-neighbor": (
        "Active findings for this selection",
        "Top culprits' share of the wait",
        "Run-queue p99 (per minute)",
        "Wakeups per minute",
        "Time waiting for a CPU",
        "CPU pressure some (per minute)",
    ),
    "weights": (
        "Active findings for this selection",
        "CPU used vs request vs limit",
        "Top culprits' share of the wait",
    ),
    "contended": (
        "Active findings for this selection",
        "CPU pressure some (per minute)",
        "CPU pressure full (per minute)",
    ),
}


# --- expectations ----------------------------------------------------------------------


def _culprit_labels(lab: Lab, role: str, cgroup_id: int) -> dict[str, str]:
    """The culprit labels the exporter gives a lab container (its own classifier, fed
    the identity the metadata file declares)."""
    ident = Identity(
        cgroup=lab.cgroup_path(role),
        kind=CgroupKind.OTHER,
        namespace=LAB_NAMESPACE,
        pod=lab.pod(role),
        container=LAB_CONTAINER,
    )
    labels = classify_culprit(cgroup_id, {cgroup_id: ident}).labels()
    return {k: v for k, v in labels.items() if v}


def _alert_labels(
    e: Expect, lab: Lab | ReplayLab, instance: str, job: str, th: Thresholds
) -> dict[str, str]:
    """An expected alert's name, severity (its kind's, fixed: the finding's level is the
    ``level`` annotation), kind and victim labels."""
    return {
        "alertname": ALERT_OF[e.kind],
        "severity": th.severity_of(e.kind),
        "finding": e.kind,
        **ALERT_LABELS,
        "namespace": LAB_NAMESPACE,
        "pod": lab.pod(e.victim),
        "container": LAB_CONTAINER,
        "instance": instance,
        "job": job,
    }


def expected_alerts(e2e: E2E, lab: Lab, run: LabRun) -> list[dict[str, str]]:
    out = []
    for e in lab.expect:
        labels = _alert_labels(e, lab, e2e.node_instance, "node", e2e.thresholds)
        if e.culprit is not None:
            labels.update(_culprit_labels(lab, e.culprit, run.cgroups[e.culprit].cgroup_id))
        out.append(labels)
    return out


def _want_labels(e2e: E2E, lab: Lab) -> list[tuple[str, str, str, str | None]]:
    """The expected alerts' keys (alertname, severity, victim, culprit): containers by
    name, as their series and alerts carry them."""
    return [
        (
            ALERT_OF[e.kind],
            e2e.thresholds.severity_of(e.kind),
            lab.ref(e.victim),
            e.culprit and lab.ref(e.culprit),
        )
        for e in lab.expect
    ]


def _key_of(labels: Mapping[str, str]) -> tuple[str, str, str, str | None]:
    return alert_key(labels)


def _lab_paths(lab: Lab) -> set[str]:
    return {lab.cgroup_path(b.role) for b in lab.boxes}


def _lab_refs(lab: Lab | ReplayLab) -> set[str]:
    """The lab's containers as alerts name them (namespace/pod/container)."""
    return {lab.ref(b.role) for b in lab.boxes}


def _ours(labels: Mapping[str, str], refs: set[str]) -> bool:
    return container_of(labels) in refs


# --- observations ------------------------------------------------------------------------


def _prom_numbers(e2e: E2E, lab: Lab) -> dict[str, Any]:
    """What Prometheus holds for each lab container right now (for the report)."""
    w = f"{e2e.thresholds.window_minutes}m"
    out: dict[str, Any] = {}
    for b in lab.boxes:
        sel = f'namespace="{LAB_NAMESPACE}",pod="{lab.pod(b.role)}",job="node"'
        q = {
            "usage_cores_1m": f"rate(contention_cpu_usage_seconds_total{{{sel}}}[1m])",
            "psi_some_1m": f"rate({pq.CPU_SOME}{{{sel}}}[1m])",
            "psi_full_1m": f"rate({pq.CPU_FULL}{{{sel}}}[1m])",
            "throttled_ratio_window": (
                f"rate(contention_cpu_cfs_throttled_periods_total{{{sel}}}[{w}])"
                f" / rate(contention_cpu_cfs_periods_total{{{sel}}}[{w}])"
            ),
            "runq_p99_seconds_1m": (
                "histogram_quantile(0.99, "
                f"rate(contention_runqueue_latency_seconds_bucket{{{sel}}}[1m]))"
            ),
            "runq_events_per_min": (
                f"rate(contention_runqueue_latency_seconds_count{{{sel}}}[1m]) * 60"
            ),
        }
        vals: dict[str, Any] = {}
        for name, expr in q.items():
            v = e2e.chain.value(expr)
            vals[name] = None if v is None or v != v else round(v, 4)
        vals["blame_share"] = {
            # Keyed by the culprit's name (namespace/pod/container for a lab
            # container, a unit's path); idle has none: its `culprit` then.
            (container_of(r["metric"], "culprit_") or r["metric"].get("culprit", "?")): round(
                float(r["value"][1]), 3
            )
            for r in e2e.chain.query(f"max_over_time({pq.BLAME_SHARE}{{{sel}}}[30s])")
        }
        out[b.role] = vals
    return out


def _findings_doc(e2e: E2E) -> dict[str, Any]:
    status, body = e2e.node.get("/findings")
    if status != 200:
        raise ChainError(f"/findings answered {status}: {body[:300]}")
    doc: dict[str, Any] = json.loads(body)
    return doc


def _lab_findings(doc: Mapping[str, Any], paths: set[str]) -> list[dict[str, Any]]:
    return [f for f in doc.get("findings") or [] if (f.get("victim") or {}).get("cgroup") in paths]


# --- the real-kernel labs --------------------------------------------------------------------


@pytest.mark.kernel
def test_0_labs_run_on_the_core_probe(e2e: E2E) -> None:
    """With BTF (as here), the exporter's default loader is the CO-RE probe: no
    compiler, no headers. The labs below then exercise it end to end."""
    if not os.path.exists("/sys/kernel/btf/vmlinux"):
        pytest.skip("no kernel BTF here: the labs run on the BCC fallback")
    assert e2e.probe_loaded, e2e.probe_reason
    assert e2e.probe_loader == "core"


@dataclass
class LabCase:
    """One lab of a slot: its run and what it must produce."""

    name: str
    lab: Lab
    run: LabRun
    want: list[dict[str, str]]
    want_keys: set[tuple[str, str, str, str | None]]
    want_findings: set[tuple[str, str, str | None, str]]
    # each expected alert's finding level: its `level` annotation, not a label
    want_levels: dict[tuple[str, str, str, str | None], str]
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def paths(self) -> set[str]:  # /findings rows carry the path
        return _lab_paths(self.lab)

    @property
    def refs(self) -> set[str]:  # alerts and series carry the names
        return _lab_refs(self.lab)


def _start_case(e2e: E2E, name: str, cpu: int | None) -> LabCase:
    lab = get_lab(name)
    run = LabRun(lab, seconds=LAB_TIMEOUT + 60, metadata=e2e.metadata, layout=e2e.layout, cpu=cpu)
    e2e.runs[name] = run  # removed in test_3 or, whatever happens, at session end
    run.start()
    want = expected_alerts(e2e, lab, run)
    want_findings = {
        (
            e.kind,
            lab.cgroup_path(e.victim),
            None if e.culprit is None else lab.cgroup_path(e.culprit),
            e.severity,
        )
        for e in lab.expect
    }
    levels = {_key_of(w): e.severity for w, e in zip(want, lab.expect, strict=True)}
    return LabCase(name, lab, run, want, {_key_of(w) for w in want}, want_findings, levels)


def _case_agrees(e2e: E2E, c: LabCase, t0: float, doc: Mapping[str, Any], gauge: set[Any]) -> bool:
    """The webhook, Prometheus and /findings hold exactly this lab's expected alerts and
    findings (every label), and Prometheus has scraped its contention_finding."""
    notes = [n for n in e2e.chain.webhook.snapshot() if _ours(n.labels, c.refs)]
    states = alert_states([n for n in notes if n.received >= t0])
    firing = [dict(k) for k, st in states.items() if st == "firing"]
    prom_alerts = [a for a in e2e.chain.firing_alerts() if _ours(a["labels"], c.refs)]
    prom = [a["labels"] for a in prom_alerts]
    rows = _lab_findings(doc, c.paths)
    c.state.update(firing=firing, prom=prom, findings=rows)
    labels_ok = all(any(all(a.get(k) == v for k, v in w.items()) for a in firing) for w in c.want)
    return (
        {_key_of(a) for a in prom} == c.want_keys
        and {_key_of(a) for a in firing} == c.want_keys
        and {finding_key(f) for f in rows} == c.want_findings
        and {(e.kind, c.lab.ref(e.victim)) for e in c.lab.expect} <= gauge
        and labels_ok
        and levels_agree(prom_alerts, c.want_levels)
    )


def _await_slot(e2e: E2E, slot: str, cases: list[LabCase], t0: float) -> None:
    def agreed() -> bool:
        doc = _findings_doc(e2e)
        gauge = {
            (r["metric"].get("kind"), container_of(r["metric"]))
            for r in e2e.chain.query('contention_finding{job="node"}')
        }
        every = [_case_agrees(e2e, c, t0, doc, gauge) for c in cases]  # each one's state
        return time.time() - t0 >= MIN_LAB_SECONDS and all(every)

    def detail() -> str:
        return (
            "\n".join(
                f"--- lab {c.name} ---\n"
                f"expected alerts: {json.dumps(c.want, indent=1)}\n"
                f"firing at the webhook: {json.dumps(c.state.get('firing'), indent=1)}\n"
                f"firing in Prometheus: {json.dumps(c.state.get('prom'), indent=1)}\n"
                f"/findings: {json.dumps(c.state.get('findings'), indent=1)[:6000]}\n"
                f"kernel: {json.dumps({r: m.as_dict() for r, m in c.run.measure().items()})}\n"
                f"Prometheus: {json.dumps(_prom_numbers(e2e, c.lab))}"
                for c in cases
            )
            + f"\n{e2e.chain.logs()}"
        )

    try:
        wait_until(
            f"labs {slot}: the expected alerts at the webhook, in Prometheus and in /findings",
            agreed,
            LAB_TIMEOUT,
            interval=1.0,
            detail=detail,
        )
    except ChainError as err:
        pytest.fail(str(err), pytrace=False)


def _observed(e2e: E2E, c: LabCase, t0: float, matched: float) -> dict[str, Any]:
    observed: dict[str, Any] = {
        "seconds_to_agree": round(matched - t0, 1),
        "pinned_to_cpu": c.run.pinned_to,
        "prometheus": _prom_numbers(e2e, c.lab),
        "kernel": {r: m.as_dict() for r, m in c.run.measure().items()},
        "findings": [
            {
                "kind": f["kind"],
                "severity": f["severity"],
                "victim": f["victim"]["ref"],
                "culprit": f["culprit"] and f["culprit"]["ref"],
                "blame_share": f["culprit"] and f["culprit"]["blame_share"],
                "evidence": f["evidence"],
            }
            for f in c.state["findings"]
        ],
        "alerts": c.state["firing"],
    }
    if c.name == "throttled":
        # kube-prometheus-stack's duplicate, muted by the shipped inhibit rule
        # while the real ContentionCPUThrottled fires (docs/kube-prometheus-stack.md)
        victim_role = c.lab.expect[0].victim
        observed["inhibition"] = check_inhibition(
            e2e.chain,
            {"namespace": LAB_NAMESPACE, "pod": c.lab.pod(victim_role), "container": LAB_CONTAINER},
            {"namespace": "inhibit-e2e", "pod": "other-0", "container": LAB_CONTAINER},
        )
    return observed


def _check_case(
    e2e: E2E,
    c: LabCase,
    observed: dict[str, Any],
    t0: float,
    matched: float,
    texts: Mapping[tuple[str, str, str], str],
) -> None:
    """What a lab must show once it agreed: nothing else fired for its containers while
    it ran (no other kind, culprit or severity, not even in the first seconds: the rules
    judge no container watched for less than sustainMinutes), every notification's
    annotations, its panels, its kernel-side checks."""
    observed["kernel_whole_run"] = {r: m.as_dict() for r, m in c.run.measure().items()}
    notes = [
        n
        for n in e2e.chain.webhook.snapshot()
        if _ours(n.labels, c.refs) and t0 <= n.received <= matched and n.status == "firing"
    ]
    wrong = [
        {"after_s": round(n.received - t0, 1), **dict(n.labels)}
        for n in notes
        if _key_of(n.labels) not in c.want_keys
    ]
    firsts = [n.received for n in notes if _key_of(n.labels) in c.want_keys]
    observed["first_alert_after_s"] = round(min(firsts) - t0, 1) if firsts else None
    observed["remediation"] = sorted({n.annotations.get("remediation", "") for n in notes})
    e2e.observed[c.name] = observed
    print(f"\n[{c.name}] observed: {json.dumps(observed, default=str)[:4000]}")
    assert not wrong, f"lab {c.name}: unexpected alerts while it ran: {json.dumps(wrong, indent=1)}"
    for n in notes:
        assert n.annotations.get("summary") and n.annotations.get("description"), n
        anchor = n.labels["alertname"].lower()
        assert n.annotations.get("runbook_url") == f"{RUNBOOK_URL}#{anchor}", n
        assert n.annotations.get("remediation"), n  # the sentence, with or without a value
        assert n.annotations.get("level") in ("critical", "warning", "info"), n
    victim = c.lab.ref(c.lab.expect[0].victim)  # the panels' `victim` label
    for title in CONCERNS[c.name]:
        shown = any(victim in t for (_, tt, _), t in texts.items() if tt.startswith(title))
        assert shown, f"lab {c.name}: panel {title!r} shows no data for {victim}"
    for check in c.lab.checks:
        _kernel_check(c.name, check, observed)


def _slot_cpus(slot: tuple[str, ...]) -> list[int | None]:
    """Two labs at once: the first keeps the last CPU (as alone), the second gets the
    first; a lab alone runs as it is defined (pinned or not)."""
    if len(slot) == 1:
        return [None]
    cpus = sorted(os.sched_getaffinity(0))
    return [lab_cpu(), cpus[0]]


@pytest.mark.kernel
@pytest.mark.timeout(LAB_TIMEOUT + 150)
@pytest.mark.parametrize("slot", SLOTS, ids=["+".join(s) for s in SLOTS])
def test_1_labs(e2e: E2E, slot: tuple[str, ...], request: pytest.FixtureRequest) -> None:
    label = "+".join(slot)
    needs_probe = any(
        any(x.culprit is not None for x in get_lab(n).expect) or n == "noisy-neighbor" for n in slot
    )
    if needs_probe and not e2e.probe_loaded:
        pytest.fail(f"the scheduler probe did not load ({e2e.probe_reason}): no blame")
    # diagnose watches the noisy-neighbour lab beside the chain (tests/e2e/diagnose.py)
    diag = (
        DiagnoseRun.start(e2e.config, e2e.metadata.path, e2e.thresholds)
        if "noisy-neighbor" in slot
        else None
    )
    if diag is not None:
        request.addfinalizer(diag.kill)  # a no-op once it has finished
        diag.wait_for_lab_start()
    t0 = time.time()
    cases: list[LabCase] = []
    try:  # on any failure the workloads stop at once (the cgroups go at session end)
        for name, cpu in zip(slot, _slot_cpus(slot), strict=True):
            cases.append(_start_case(e2e, name, cpu))
        _await_slot(e2e, label, cases, t0)
        matched = time.time()
        observed = {c.name: _observed(e2e, c, t0, matched) for c in cases}
        if diag is not None:
            nn = next(c for c in cases if c.name == "noisy-neighbor")
            observed[nn.name]["diagnose"] = check_diagnose(nn.lab, *diag.finish())
        has, errors, texts = run_dashboards(e2e.chain, e2e.thresholds)
        e2e.record_coverage(has)
    finally:
        # The labs end: their workloads stop; their containers stay, idle, until test_3.
        for c in cases:
            c.run.stop_workloads()
            e2e.stopped[c.name] = c.run.workloads_stopped_at or time.time()
    assert not errors, f"dashboard queries failed during labs {label}:\n" + "\n".join(errors)
    for c in cases:
        _check_case(e2e, c, observed[c.name], t0, matched, texts)


TRANSIENT_LABELS = ("alertname", "severity", "pod", "culprit_pod", "culprit")

# Decay after a lab's workloads stop (see docs/labs.md, "After a lab ends"): the rules
# take the level and the stall from the latest minutes but the throttled ratio and the
# culprit's usage from the whole window, so while the window still remembers the lab
# the expected alert's level can step down (its `level` annotation: the same alert,
# docs/findings.md#level-and-severity). noisy-neighbor stays noisy-neighbor while the
# stall it caused is in the sustain minutes
# (docs/findings.md#no-kind-flip-while-a-finding-decays); cpu-contended can follow only
# if the victim stays stalled a whole sustain longer. The evaluator (/findings) says
# the same. Only an expected victim's alerts may do this; they are recorded as
# decay_transients. Set this to False to make them fail.
DECAY_TRANSIENTS_ALLOWED = True


def _decay_transient(labels: Mapping[str, str], lab: Lab) -> bool:
    """An expected victim's alert on its way down from the expected one: the same kind
    (at any level), or cpu-contended once the culprit no longer qualifies."""
    for e in lab.expect:
        if container_of(labels) != lab.ref(e.victim):
            continue
        same_kind = labels.get("alertname") == ALERT_OF[e.kind] and container_of(
            labels, "culprit_"
        ) == (None if e.culprit is None else lab.ref(e.culprit))
        contended_after = (
            e.kind in ("noisy-neighbor", "cpu-contended")
            and labels.get("alertname") == ALERT_OF["cpu-contended"]
        )
        if same_kind or contended_after:
            return True
    return False


def _is_role(culprit: str, role: str) -> bool:
    """Whether a blame-share key names the lab member ``role``: keys are
    ``namespace/pod/container`` (a lab member is pod ``<lab>-<role>``), or a cgroup path
    ending in the role for a culprit exported without names."""
    parts = culprit.split("/")
    return (len(parts) == 3 and parts[1].endswith(f"-{role}")) or culprit.endswith(f"/{role}")


def _kernel_check(name: str, check: str, observed: Mapping[str, Any]) -> None:
    """The labs' kernel-side expectations (their ``checks``), on the numbers measured."""
    k = observed["kernel"]
    if name == "throttled":
        assert k["limited"]["throttled_ratio"] >= 0.25, (check, k)
        assert 0.1 <= k["limited"]["usage_cores"] <= 0.3, (check, k)
    elif name == "weights":
        ratio = k["high"]["usage_cores"] / max(k["low"]["usage_cores"], 1e-6)
        assert 4.0 <= ratio <= 16.0, (check, ratio, k)
    elif name == "noisy-neighbor":
        share = observed["prometheus"]["victim"]["blame_share"]
        greedy = [v for c, v in share.items() if _is_role(c, "greedy")]
        assert greedy and greedy[0] >= 0.4, (check, share)
    elif name == "contended":
        for r in ("a", "b", "c"):
            assert k[r]["usage_cores"] < 1.0, (check, k)
    elif name == "throttled-with-neighbor":
        assert k["victim"]["throttled_ratio"] >= 0.25, (check, k)
        # The gate is what stops a noisy-neighbor here: the neighbour would pass the
        # blame test (it holds >= 40% of the victim's wait and has no request).
        share = observed["prometheus"]["victim"]["blame_share"]
        neighbour = [v for c, v in share.items() if _is_role(c, "neighbor")]
        assert neighbour and neighbour[0] >= 0.4, (check, share)


# --- the replayed labs ----------------------------------------------------------------------


@pytest.mark.timeout(REPLAY_STALL_SECONDS + 300)
@pytest.mark.parametrize("name", list(REPLAYS))
def test_2_replayed_lab(e2e: E2E, name: str) -> None:
    w = e2e.replays[name]
    lab = w.lab
    job = f"replay-{name}"
    instance = f"127.0.0.1:{w.exporter.port}"
    want: list[dict[str, str]] = []
    for e in lab.expect:
        if e.victim == NODE:  # cpu-steal: the target's labels, the hypervisor as culprit
            want.append(
                {
                    "alertname": ALERT_OF[e.kind],
                    "severity": e2e.thresholds.severity_of(e.kind),
                    "finding": e.kind,
                    **ALERT_LABELS,
                    "instance": instance,
                    "job": job,
                    "culprit_kind": HYPERVISOR,
                    "culprit": HYPERVISOR,
                }
            )
            continue
        labels = _alert_labels(e, lab, instance, job, e2e.thresholds)
        if e.culprit is not None:
            labels.update(
                culprit_namespace=LAB_NAMESPACE,
                culprit_pod=lab.pod(e.culprit),
                culprit_container=LAB_CONTAINER,
            )
        want.append(labels)
    want_keys = {_key_of(x) for x in want}
    webhook = e2e.chain.webhook

    def ours() -> list[Any]:
        return [n for n in webhook.snapshot() if n.labels.get("job") == job]

    # 1. The expected alerts fired (during the stall) with every label.
    wait_until(
        f"replay {name}: the expected alerts at the webhook",
        lambda: all(
            any(
                n.status == "firing" and all(n.labels.get(k) == v for k, v in x.items())
                for n in ours()
            )
            for x in want
        ),
        REPLAY_STALL_SECONDS + 60,
        interval=1.0,
        detail=lambda: json.dumps([dict(n.labels) for n in ours()], indent=1),
    )
    wait_until(
        f"replay {name}: /findings with the expected findings",
        lambda: w.matched_at is not None,
        REPLAY_STALL_SECONDS,
        detail=lambda: json.dumps([[t, sorted(k, key=str)] for t, k in w.findings[-3:]]),
    )
    # ... with their annotations; a node-level alert names no container.
    t0 = w.run.started_at or 0.0
    firing = [n for n in ours() if n.status == "firing" and _key_of(n.labels) in want_keys]
    for n in firing:
        assert n.annotations.get("summary") and n.annotations.get("description"), n
        anchor = n.labels["alertname"].lower()
        assert n.annotations.get("runbook_url") == f"{RUNBOOK_URL}#{anchor}", n
        assert n.annotations.get("remediation"), n
        assert n.annotations.get("level") in ("critical", "warning", "info"), n
        if n.labels.get("culprit_kind") == HYPERVISOR:
            assert not {"namespace", "pod", "container", "cgroup"} & set(n.labels), n
    alertnames = sorted({n.labels["alertname"] for n in firing})
    w.observed["first_alert_after_s"] = {
        a: round(min(n.received for n in firing if n.labels["alertname"] == a) - t0, 1)
        for a in alertnames
    }
    w.observed["remediation"] = {
        a: sorted({n.annotations["remediation"] for n in firing if n.labels["alertname"] == a})
        for a in alertnames
    }
    w.observed["alerts"] = list({_key_of(n.labels): dict(n.labels) for n in firing}.values())

    # 2. Nothing else, ever, for the replayed node or its containers (checked again
    # once everything resolved).
    def unexpected() -> list[dict[str, str]]:
        return [
            dict(n.labels)
            for n in ours()
            if n.status == "firing" and _key_of(n.labels) not in want_keys
        ]

    wrong = unexpected()
    assert not wrong, f"replay {name}: unexpected alerts: {json.dumps(wrong, indent=1)}"
    want_findings = lab.expected_keys()
    odd = [(t, k) for t, k in w.findings if not k <= want_findings]
    assert not odd, f"replay {name}: /findings held other findings: {odd[:3]}"
    # 3. The dashboards ran while it was stalled and showed the victim.
    wait_until(
        f"replay {name}: dashboard queries run while the alerts fired",
        lambda: w.dashboards is not None,
        REPLAY_STALL_SECONDS,
    )
    assert not w.dashboard_errors, "\n".join(w.dashboard_errors)
    missing = [t for t, shown in w.concerned.items() if not shown]
    assert not missing, f"replay {name}: panels without the victim: {missing}"
    # 4. The stall ends: alerts resolve and /findings empties.
    wait_until(
        f"replay {name}: the stall phase to end",
        lambda: not w.run.stalled,
        REPLAY_STALL_SECONDS + 30,
    )
    resolve = e2e.thresholds.window_minutes * 60 + 90

    def resolved() -> bool:
        states = alert_states(ours())
        return bool(states) and all(st == "resolved" for st in states.values())

    wait_until(
        f"replay {name}: every alert resolved after the stall ended",
        resolved,
        resolve,
        interval=1.0,
        detail=lambda: json.dumps([(n.status, dict(n.labels)) for n in ours()][-6:]),
    )
    wait_until(
        f"replay {name}: /findings empty after the stall ended",
        lambda: not w.findings[-1][1],
        resolve,
        detail=lambda: str(w.findings[-1]),
    )
    wrong = unexpected()
    assert not wrong, f"replay {name}: unexpected alerts: {json.dumps(wrong, indent=1)}"
    e2e.observed[f"replay:{name}"] = w.observed
    print(f"\n[replay {name}] observed: {json.dumps(w.observed, default=str)[:4000]}")


# --- after the labs -----------------------------------------------------------------------


@pytest.mark.kernel
@pytest.mark.timeout(300)
def test_3_everything_resolves(e2e: E2E) -> None:
    """Every alert of every lab resolved after its workloads stopped (the containers
    stay, idle) and /findings emptied; meanwhile only an expected victim's alerts and
    their decay (see DECAY_TRANSIENTS_ALLOWED) may fire. (Then test_3b deletes the idle
    containers.)"""
    if not e2e.stopped:
        pytest.skip("no real-kernel lab ran in this session")
    all_paths = {LABS[n].cgroup_path(b.role) for n in e2e.stopped for b in LABS[n].boxes}
    all_refs = {LABS[n].ref(b.role) for n in e2e.stopped for b in LABS[n].boxes}
    webhook = e2e.chain.webhook
    resolve_by = max(e2e.stopped.values()) + e2e.thresholds.window_minutes * 60 + 120

    def ours() -> list[Any]:
        return [n for n in webhook.snapshot() if _ours(n.labels, all_refs)]

    def done() -> bool:
        states = alert_states(ours())
        prom = [a for a in e2e.chain.firing_alerts() if _ours(a["labels"], all_refs)]
        rows = _lab_findings(_findings_doc(e2e), all_paths)
        return all(st == "resolved" for st in states.values()) and not prom and not rows

    wait_until(
        "every lab alert resolved and /findings empty (lab containers idle)",
        done,
        max(10.0, resolve_by - time.time()),
        interval=2.0,
        detail=lambda: json.dumps(
            [(n.status, dict(n.labels)) for n in ours() if n.status == "firing"][-10:], indent=1
        ),
    )
    for name, stopped in e2e.stopped.items():
        lab = LABS[name]
        refs = _lab_refs(lab)
        mine = [n for n in ours() if _ours(n.labels, refs)]
        after = [n for n in mine if n.status == "firing" and n.received > stopped]
        wrong, decay = [], []
        for n in after:
            if _decay_transient(n.labels, lab):  # the expected alert or its decay
                if _key_of(n.labels) not in set(_want_labels(e2e, lab)):
                    decay.append(
                        {
                            "after_stop_s": round(n.received - stopped, 1),
                            **{k: n.labels[k] for k in TRANSIENT_LABELS if k in n.labels},
                        }
                    )
            else:
                wrong.append(dict(n.labels))
        resolved = [n.received for n in mine if n.status == "resolved"]
        e2e.observed.setdefault(name, {})["decay_transients"] = decay
        e2e.observed[name]["last_resolved_after_stop_s"] = (
            round(max(resolved) - stopped, 1) if resolved else None
        )
        assert not wrong, f"lab {name}: alerts after its workloads stopped: {wrong}"
        if decay and not DECAY_TRANSIENTS_ALLOWED:
            pytest.fail(f"lab {name}: decay transients {decay}", pytrace=False)
    print(
        "\n[resolved] last resolved notification, seconds after each lab's workloads stopped: "
        + json.dumps({n: e2e.observed[n]["last_resolved_after_stop_s"] for n in e2e.stopped})
    )


@pytest.mark.kernel
@pytest.mark.timeout(120)
def test_3b_nothing_fires_once_the_containers_are_deleted(e2e: E2E) -> None:
    """The idle lab containers are deleted, as a node deletes finished pods: nothing may
    fire in a bounded observation window after it."""
    if not e2e.stopped:
        pytest.skip("no real-kernel lab ran in this session")
    all_paths = {LABS[n].cgroup_path(b.role) for n in e2e.stopped for b in LABS[n].boxes}
    all_refs = {LABS[n].ref(b.role) for n in e2e.stopped for b in LABS[n].boxes}
    removed_at = time.time()
    for run in e2e.runs.values():
        run.stop()
    hold = 20.0  # a bounded observation window: nothing may fire in it
    deadline = time.monotonic() + hold
    while time.monotonic() < deadline:
        late = [
            dict(n.labels)
            for n in e2e.chain.webhook.snapshot()
            if _ours(n.labels, all_refs) and n.received >= removed_at and n.status == "firing"
        ]
        assert not late, f"alerts after the lab containers were removed: {late}"
        time.sleep(1.0)
    assert not _lab_findings(_findings_doc(e2e), all_paths)
    e2e.save_observed()


def _no_lab_builds_it(expr: str) -> bool:
    """A query that draws only workload culprits: one needs two or more containers of
    one workload blamed by the same victim, which none of these labs builds. The family
    is checked on the real kernel (tests/integration/test_churn_kernel.py) and
    the victim naming these queries share in promtool (tests/unit/test_dashboards.py)."""
    return "contention_workload_blame_ratio" in expr and "contention_finding" not in expr


@pytest.mark.kernel
def test_4_every_panel_query_returned_data(e2e: E2E) -> None:
    if set(e2e.stopped) != set(LAB_ORDER) or any(
        w.dashboards is None for w in e2e.replays.values()
    ):
        pytest.skip("needs every lab and replay of the session to have run")
    empty = [
        f"{uid} / {title}: {expr[:160]}"
        for (uid, title, expr), has in e2e.coverage.items()
        if not has and not _no_lab_builds_it(expr)
    ]
    assert not empty, "panel queries that never returned data in any lab:\n" + "\n".join(empty)
