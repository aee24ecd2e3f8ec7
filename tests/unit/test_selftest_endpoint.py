"""The self-test in a running exporter: ``POST /selftest`` / ``GET /selftest`` and the
``contention_selftest_*`` families of its last result."""

from __future__ import annotations

import dataclasses
import io
import json
from typing import Any

import pytest

from exporter.catalog import selftest as S
from exporter.cgroupfs.mode import CgroupMode
from exporter.exposition.selftest import selftest_families
from exporter.findings.thresholds import load_thresholds
from exporter.selftest import hosting
from exporter.selftest.report import Check, Report
from exporter.selftest.service import SelftestService
from exporter.server import App

from .test_selftest import V2


def _result(**kw: Any) -> dict[str, Any]:
    r = Report(
        checks=[
            Check("noisy-neighbor", "x", True),
            Check("blame share", "x", True),
            Check("cpu-throttled", "x", None, skipped="skipped: no quota"),
        ],
        blame_share=0.9,
        truth_share=0.95,
        time_to_first_finding_s=70.0,
        probe_ns_per_switch=250.0,
        duration_s=75.0,
    ).to_dict()
    return {**r, "ended_at": 1.7e9, **kw}


def test_the_metrics_of_a_finished_selftest() -> None:
    fams = {m.name: m for m in selftest_families(_result())}
    value = {n: m.samples[0].value for n, m in fams.items() if m.samples}
    assert value["contention_selftest_success"] == 1
    assert value["contention_selftest_exit_code"] == 0
    assert value["contention_selftest_probe_switch_cost_seconds"] == pytest.approx(250e-9)
    assert value["contention_selftest_kernel_blame_ratio"] == 0.95
    assert value["contention_selftest_blame_ratio"] == 0.9
    checks = {s.labels["check"]: s.value for s in fams["contention_selftest_check_success"].samples}
    assert checks == {"noisy-neighbor": 1.0, "blame share": 1.0}  # the skipped one: no series
    assert set(S.CHECK.values) >= set(checks)


def test_the_metrics_of_a_node_that_could_not_host_it() -> None:
    fams = selftest_families({"passed": False, "exit_code": 5, "error": "ro", "ended_at": 1.0})
    got = {m.name: m.samples[0].value for m in fams}
    assert got == {
        "contention_selftest_success": 0,
        "contention_selftest_exit_code": 5,
        "contention_selftest_timestamp_seconds": 1.0,
    }


def _call(app: App, method: str, path: str, query: str = "") -> tuple[str, Any]:
    out: dict[str, str] = {}

    def start_response(status: str, headers: Any) -> None:
        out["status"] = status

    env = {"PATH_INFO": path, "REQUEST_METHOD": method, "QUERY_STRING": query}
    env["wsgi.input"] = io.BytesIO(b"")  # type: ignore[assignment]
    body = b"".join(app(env, start_response))
    return out["status"], json.loads(body) if body else None


def _app(service: SelftestService | None) -> App:
    return App(None, V2, 5.0, selftest=service)  # type: ignore[arg-type]


def test_the_endpoint_is_off_unless_enabled() -> None:
    status, doc = _call(_app(None), "POST", "/selftest")
    assert status.startswith("404") and "--selftest.enabled" in doc["error"]


def test_the_endpoint_reports_a_node_that_cannot_host_it() -> None:
    v1 = dataclasses.replace(V2, mode=CgroupMode.V1, v2_root=None)
    service = SelftestService(v1, lambda: load_thresholds(None), [])
    app = _app(service)
    assert _call(app, "GET", "/selftest") == ("200 OK", {"state": "idle"})
    status, doc = _call(app, "POST", "/selftest", "timeout=60")
    assert status == "200 OK" and doc["result"]["exit_code"] == hosting.EXIT_CGROUP_V1
    last = service.last()
    assert last is not None and last["passed"] is False and "ended_at" in last
    status, doc = _call(app, "GET", "/selftest")
    assert doc["state"] == "done" and doc["result"]["exit_code"] == hosting.EXIT_CGROUP_V1
    assert _call(app, "POST", "/selftest", "timeout=9999")[0].startswith("400")
    assert _call(app, "POST", "/selftest", "timeout=soon")[0].startswith("400")
    assert _call(app, "PUT", "/selftest")[0].startswith("405")
