"""Dashboard 1: node contention overview (uid ``contention-node-overview``), a module
per row below the active findings: ``entitlement``, ``victims``, ``node``, ``health``."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import table

from ...findings.thresholds import Thresholds
from .. import variables
from ..base import OVERVIEW_UID, base_dashboard
from ..findings_table import findings_table
from ..layout import Context, Row, with_rows
from ..selectors import Selectors
from . import entitlement, health, node, victims

TITLE = "Contention / Node overview"


def active_findings(context: Context) -> table.Panel:
    selectors = context.selectors
    return findings_table(
        context.ids, selectors, selectors.overview, "Active findings on this node"
    )


FINDINGS = Row("Active findings", (active_findings,))


def build_overview(th: Thresholds) -> db.Dashboard:
    selectors = Selectors(th)
    dashboard = (
        base_dashboard(
            selectors,
            TITLE,
            OVERVIEW_UID,
            "Every container on a node against its CPU and memory entitlement, the worst "
            "victims, active findings, node pressure and probe health.",
        )
        .with_variable(variables.node(selectors, allow_all=False))
        .with_variable(variables.namespace(selectors))
    )
    rows = (FINDINGS, entitlement.ROW, victims.ROW, node.ROW, health.ROW)
    return with_rows(dashboard, Context(selectors), rows)
