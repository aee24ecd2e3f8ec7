"""Closed loop on the real kernel: apply what a CPU finding suggests, and it clears.

One scene, two labs side by side on the host's hybrid cgroups, the real exporter with
the scheduler probe, the labs' metadata file, and a one-minute window
(:data:`CLOSED_LOOP_WINDOW`: only the timing knobs, every threshold the default):

* ``throttled-steady`` on the first CPU: a steady 0.6-core demand under a 300m limit.
  ``cpu-throttled``'s suggested limit (``/findings``) is written as the v1 CFS quota;
* ``noisy-neighbor`` on the last CPU: the greedy neighbour's suggested request becomes
  its ``cpu.shares`` by the kubelet's formula, and its request in the pod spec. With the
  victim's 100m that is more than the one CPU the two share, so a scheduler would not
  keep them together: the lab moves the neighbour off the node
  (``labs.closed_loop``; docs/labs.md#closed-loop-labs says why that is the honest
  check on one node).

Each fix is applied as soon as its finding carries a number; then, once the
exporter's window holds only minutes after the fixes, ``/findings`` must have nothing
for either lab, and the kernel's own counters since the fix must show the throttled
ratio under ``throttledRatioMax`` and the victim's CPU stall under ``stallSome``. The
figures go to ``$CONTENTION_CLOSED_LOOP_OBSERVED`` (JSON) when set. Run under
``flock -x /tmp/contention-cpu.lock flock /tmp/contention-kernel.lock``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.findings import Thresholds, load_thresholds
from labs import LabLayout, kubelet_shares
from labs.closed_loop import Applied, NoValue, apply_finding, judged_clear_at
from labs.exporter_proc import ExporterProcess
from labs.scenarios import LabRun, MetadataFile, finding_key, get_lab, lab_cpu, lab_findings

pytestmark = [pytest.mark.kernel, pytest.mark.probe]

CLOSED_LOOP_WINDOW = {"windowMinutes": 1, "sustainMinutes": 1}
FIRE_TIMEOUT = 150.0  # a finding needs a complete minute the container was watched in
CLEAR_GRACE = 20.0  # after the window is past the fix: the pass that folds the minute
# Workloads outlive the test: the fix, the rest of its minute, the window, the grace.
RUN_SECONDS = FIRE_TIMEOUT + 60 * (CLOSED_LOOP_WINDOW["windowMinutes"] + 1) + CLEAR_GRACE + 30


@dataclass(frozen=True)
class Scene:
    exporter: ExporterProcess
    thresholds: Thresholds
    metadata: MetadataFile


@pytest.fixture
def scene(lab_layout: LabLayout, tmp_path: Path) -> Iterator[Scene]:
    cfg = tmp_path / "thresholds.yaml"
    cfg.write_text(yaml.safe_dump(CLOSED_LOOP_WINDOW))
    meta = MetadataFile(str(tmp_path / "metadata.yaml"))
    exp = ExporterProcess(
        sample_interval=1.0,
        probe=True,
        extra_args=["--metadata.file", meta.path, "--config.file", str(cfg)],
    )
    try:
        exp.start(timeout=60.0)
        loaded = exp.scrape().value("contention_probe_loaded")
        if loaded != 1:
            msg = f"the exporter's scheduler probe did not load:\n{exp.log_tail(15)}"
            if os.environ.get("CI"):
                pytest.fail(msg)
            pytest.skip(msg)
        yield Scene(exp, load_thresholds(str(cfg)), meta)
    finally:
        exp.close()
        meta.delete()


def _findings(exp: ExporterProcess) -> dict[str, Any]:
    status, body = exp.get("/findings")
    assert status == 200, f"/findings answered {status}: {body[:300]}"
    doc: dict[str, Any] = json.loads(body)
    return doc


def _expected_row(run: LabRun, doc: dict[str, Any]) -> dict[str, Any] | None:
    (e,) = run.lab.expect
    want = (e.kind, run.lab.cgroup_path(e.victim))
    want_culprit = None if e.culprit is None else run.lab.cgroup_path(e.culprit)
    for f in lab_findings(run.lab, doc):
        k = finding_key(f)
        if k[:2] == want and k[2] == want_culprit:
            return f
    return None


def _apply_when_fired(exp: ExporterProcess, runs: dict[str, LabRun]) -> dict[str, Applied]:
    """Each lab's fix, applied at the first pass whose finding carries a number."""
    applied: dict[str, Applied] = {}
    last: dict[str, Any] = {}
    deadline = time.monotonic() + FIRE_TIMEOUT
    while len(applied) < len(runs):
        doc = _findings(exp)
        for name, run in runs.items():
            row = None if name in applied else _expected_row(run, doc)
            if row is None:
                continue
            last[name] = row
            with suppress(NoValue):  # the same finding may carry a number a minute later
                applied[name] = apply_finding(run, row)
        if time.monotonic() > deadline:
            pytest.fail(
                f"not every lab's finding carried a number within {FIRE_TIMEOUT:.0f}s: "
                f"applied {sorted(applied)}; last rows {json.dumps(last, indent=1)[:4000]}; "
                f"/findings {json.dumps(lab_rows(runs, doc), indent=1)[:4000]}"
            )
        time.sleep(1.0)
    return applied


def lab_rows(runs: dict[str, LabRun], doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for run in runs.values() for f in lab_findings(run.lab, doc)]


def _after_the_window(
    exp: ExporterProcess, runs: dict[str, LabRun], clear_at: float
) -> dict[str, Any]:
    """``/findings`` once it is evaluated over a window that holds only minutes after
    every fix; the first such document with nothing for the labs, else the last."""
    time.sleep(max(0.0, clear_at - time.time()))
    deadline = clear_at + CLEAR_GRACE
    while True:
        doc = _findings(exp)
        if (doc.get("evaluated_at") or 0) >= clear_at and not lab_rows(runs, doc):
            return doc
        if time.time() > deadline:
            return doc
        time.sleep(1.0)


def _summary(a: Applied) -> dict[str, Any]:
    f = a.finding
    return {
        **a.as_dict(),
        "before": {
            "severity": f.get("severity"),
            "evidence": f.get("evidence"),
            "basis": (f.get("suggestion") or {}).get("basis"),
            "remediation": f.get("remediation"),
        },
    }


def test_suggested_cpu_values_clear_their_findings(scene: Scene) -> None:
    exp, th, meta = scene.exporter, scene.thresholds, scene.metadata
    cpus = sorted(os.sched_getaffinity(0))
    assert len(cpus) >= 2, "the closed loop runs its two labs on two CPUs"
    runs = {
        "throttled-steady": LabRun(
            get_lab("throttled-steady"), RUN_SECONDS, metadata=meta, cpu=cpus[0]
        ),
        "noisy-neighbor": LabRun(get_lab("noisy-neighbor"), RUN_SECONDS, metadata=meta),
    }
    assert runs["noisy-neighbor"].pinned_to == lab_cpu() != cpus[0]
    t0 = time.time()
    with ExitStack() as stack:
        for run in runs.values():
            stack.enter_context(run)
        applied = _apply_when_fired(exp, runs)
        marks = {n: run.mark() for n, run in runs.items()}
        fired_s = {n: round(a.at - t0, 1) for n, a in applied.items()}
        before = {n: {r: m.as_dict() for r, m in run.measure().items()} for n, run in runs.items()}
        clear_at = max(judged_clear_at(a.at, th.window_minutes) for a in applied.values())
        doc = _after_the_window(exp, runs, clear_at)
        after = {
            n: {r: m.as_dict() for r, m in run.measure(since=marks[n]).items()}
            for n, run in runs.items()
        }
    observed = {
        "window": CLOSED_LOOP_WINDOW,
        "seconds_to_finding": fired_s,
        "seconds_total": round(time.time() - t0, 1),
        "kernel_before_fix": before,
        "applied": {n: _summary(a) for n, a in applied.items()},
        "kernel_after_fix": after,
        "findings_after": lab_rows(runs, doc),
    }
    print(json.dumps(observed, indent=1, default=str))
    path = os.environ.get("CONTENTION_CLOSED_LOOP_OBSERVED")
    if path:
        Path(path).write_text(json.dumps(observed, indent=1, default=str))

    steady = applied["throttled-steady"]
    assert steady.setting == "cpu_limit" and steady.target == "service", steady
    assert steady.written == {"cpu.cfs_quota_us": str(steady.value * 100)}, steady
    nn = applied["noisy-neighbor"]
    assert (nn.setting, nn.victim, nn.target) == ("cpu_request", "victim", "greedy"), nn
    assert nn.written == {"cpu.shares": str(kubelet_shares(nn.value / 1000))}, nn
    assert not observed["findings_after"], observed
    ratio = after["throttled-steady"]["service"]["throttled_ratio"]
    assert ratio is not None and ratio < th.throttled_ratio_max, observed
    assert after["noisy-neighbor"]["victim"]["psi_some"] < th.stall_some, observed
