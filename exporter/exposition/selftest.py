"""The ``selftest`` collector: the last self-test's verdict and figures
(``contention_selftest_*``; families: ``exporter.catalog.selftest``), from the report
the exporter kept when ``POST /selftest`` finished (docs/troubleshooting.md)."""

from __future__ import annotations

from typing import Any

from prometheus_client.core import Metric

from ..catalog import selftest as S
from .inputs import Context
from .series import new


def selftest(ctx: Context) -> list[Metric]:
    last = ctx.sources.selftest() if ctx.sources.selftest is not None else None
    return [] if last is None else selftest_families(last)


def selftest_families(last: dict[str, Any]) -> list[Metric]:
    """The families of one result: a report's ``to_dict()`` with ``ended_at``, or a
    node that could not host it (``error``, ``exit_code``, ``ended_at``)."""
    out: list[Metric] = []

    def gauge(family: Any, value: Any) -> None:
        if isinstance(value, int | float) and not isinstance(value, bool):
            m = new(family)
            m.add_metric([], float(value))
            out.append(m)

    gauge(S.SELFTEST_SUCCESS, 1 if last.get("passed") else 0)
    gauge(S.SELFTEST_EXIT_CODE, last.get("exit_code"))
    gauge(S.SELFTEST_TIMESTAMP_SECONDS, last.get("ended_at"))
    if "error" in last:
        return out
    gauge(S.SELFTEST_DURATION_SECONDS, last.get("duration_s"))
    checks = new(S.SELFTEST_CHECK_SUCCESS)
    for c in last.get("checks") or []:
        if c.get("ok") is not None:
            checks.add_metric([c["name"]], 1.0 if c["ok"] else 0.0)
    out.append(checks)
    gauge(S.SELFTEST_FIRST_FINDING_SECONDS, last.get("time_to_first_finding_s"))
    gauge(S.SELFTEST_BLAME, last.get("blame_share"))
    gauge(S.SELFTEST_KERNEL_BLAME, last.get("truth_share"))
    ns = last.get("probe_ns_per_switch")
    gauge(S.SELFTEST_PROBE_SWITCH_COST_SECONDS, None if ns is None else ns / 1e9)
    return out
