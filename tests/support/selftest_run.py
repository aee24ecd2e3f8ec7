"""``contention-exporter selftest`` run as a user runs it, and its verdict checked: used
by the end-to-end lane (``tests/e2e/test_labs_e2e.py``), where it runs while the labs'
alerts resolve, on a node whose own exporter, Prometheus and Alertmanager keep
working, as a DaemonSet's node does. The kill and cleanup tests are in
``tests/integration/test_selftest_kernel.py``.

The self-test's cgroups are ``contention-test-selftest-<pid>`` (the hidden
``--selftest.cgroup-prefix``), so the suite's own safety rules hold: it touches only
cgroups it creates."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from exporter.selftest.report import Report, summary

PREFIX = "contention-test-selftest-"
CLI = [sys.executable, "-m", "exporter", "selftest", "--selftest.cgroup-prefix", PREFIX]


def check_selftest_passes() -> dict[str, Any]:
    """Run the self-test (``--json``) and assert its verdict: the probe loaded,
    noisy-neighbor named the bully, the blame share within 10 points of the kernel's
    truth, cpu-throttled where the node allows a quota, nothing left behind, exit 0,
    within its 4-minute target. Returns the report."""
    r = subprocess.run([*CLI, "--json"], capture_output=True, timeout=300)
    assert r.stdout, r.stderr.decode()[-2000:]
    report: dict[str, Any] = json.loads(r.stdout)
    sys.stderr.write(summary(Report.from_dict(report)))  # what the command prints
    assert report["probe_loaded"], report["probe"]
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["noisy-neighbor"]["ok"], checks["noisy-neighbor"]
    assert checks["blame share"]["ok"], (report["blame_share"], report["truth_share"])
    assert abs(report["blame_share"] - report["truth_share"]) <= 0.10
    if checks["cpu-throttled"]["skipped"] is None:
        assert checks["cpu-throttled"]["ok"], checks["cpu-throttled"]
    assert report["left_behind"] == []
    assert report["passed"] and r.returncode == 0
    assert report["duration_s"] <= 240
    return report
