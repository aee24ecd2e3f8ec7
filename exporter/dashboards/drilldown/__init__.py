"""Dashboard 2: pod / container drill-down (uid ``contention-container-drilldown``), a
module per row below the findings: ``cpu``, ``runqueue``, ``blame``, ``memory``."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import table

from ...findings.thresholds import Thresholds
from .. import variables
from ..base import DRILLDOWN_UID, base_dashboard
from ..findings_table import findings_table
from ..layout import Context, Row, with_rows
from ..selectors import Selectors
from . import blame, cpu, memory, runqueue

TITLE = "Contention / Container drill-down"


def active_findings(context: Context) -> table.Panel:
    selectors = context.selectors
    return findings_table(
        context.ids,
        selectors,
        selectors.container,
        "Active findings for this selection",
        height=6,
    )


FINDINGS = Row("Findings", (active_findings,))


def build_drilldown(th: Thresholds) -> db.Dashboard:
    selectors = Selectors(th)
    dashboard = (
        base_dashboard(
            selectors,
            TITLE,
            DRILLDOWN_UID,
            "One container (or several): usage against request and limit, throttling, CPU "
            "and memory pressure, run-queue latency, who ran while it waited, memory "
            "reclaim. In host mode leave namespace/pod/container on 'All' and pick a "
            "cgroup.",
        )
        .with_variable(variables.node(selectors, allow_all=True))
        .with_variable(variables.namespace(selectors))
        .with_variable(variables.pod(selectors))
        .with_variable(variables.container(selectors))
        .with_variable(variables.cgroup(selectors))
    )
    rows = (FINDINGS, cpu.ROW, runqueue.ROW, blame.ROW, memory.ROW)
    return with_rows(dashboard, Context(selectors), rows)
