"""The chart's generated files: the templated rule groups and dashboards, what its
templates need to put the values back, and values.schema.json's ``thresholds``.

* ``files/contention.rules.json``: the rule groups (``exporter.rules.pack``) with
  placeholders, and per alert the annotations it has instead when ``runbookUrl`` is
  empty;
* ``files/dashboards/<uid>.json``: each dashboard (``exporter.dashboards.render``)
  with placeholders;
* ``files/thresholds.json``: the packaged thresholds, each key's kind, the
  placeholders in use, the histogram bounds (``le`` label and seconds per bound in
  ms), the pack's alert names and the labels alerts may not be given;
* ``values.schema.json``: its ``thresholds`` property (``schema``), the rest as it is.

The chart's defaults render exactly the committed rules/ and dashboards/ files
(tests/unit/test_chart_thresholds.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .. import __version__
from ..findings.thresholds import RESERVED_ALERT_LABELS, RUNQ_BOUNDS_S, Thresholds
from ..probe.histogram import le_label
from ..rules.pack import ALERTS, rule_groups
from .kinds import DERIVED, ChartTemplateError, check_complete, present
from .schema import thresholds_schema
from .sentinels import template

CHART = Path("deploy/helm/contention-exporter")
RULES = CHART / "files/contention.rules.json"
DASHBOARDS = CHART / "files/dashboards"
META = CHART / "files/thresholds.json"
VALUES_SCHEMA = CHART / "values.schema.json"
_TOKEN = re.compile(r"@@ce:([^:@]+):([a-z0-9]+)@@")


def _json(doc: Any, **kw: Any) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False, **kw) + "\n"


def _runbook_unset(with_url: dict[str, Any], without: dict[str, Any]) -> dict[str, Any]:
    """Per alert, how its annotations change when ``runbookUrl`` is empty: the keys it
    loses and those it gets or changes. Nothing else may differ."""
    out: dict[str, Any] = {}
    pairs = zip(with_url["groups"], without["groups"], strict=True)
    for rule, other in (
        (r, o) for g, h in pairs for r, o in zip(g["rules"], h["rules"], strict=True)
    ):
        if rule == other:
            continue
        same = {k: v for k, v in rule.items() if k != "annotations"}
        if "alert" not in rule or same != {k: v for k, v in other.items() if k != "annotations"}:
            raise ChartTemplateError(f"runbookUrl changes more than annotations: {rule}")
        a, b = rule["annotations"], other["annotations"]
        out[rule["alert"]] = {
            "remove": [k for k in a if k not in b],
            "set": {k: v for k, v in b.items() if a.get(k) != v},
        }
    return out


def rules_template(base: Thresholds) -> dict[str, Any]:
    groups = template(rule_groups, base, "the rule groups")
    unset = template(rule_groups, base, "the rule groups (no runbookUrl)", runbookUrl="")
    return {"groups": groups["groups"], "runbookUnset": _runbook_unset(groups, unset)}


def dashboards_template(base: Thresholds) -> dict[str, dict[str, Any]]:
    from ..dashboards.render import dashboard_models  # the dashboards extra

    out: dict[str, dict[str, Any]] = template(dashboard_models, base, "the dashboards")
    return out


def meta(base: Thresholds, *templates: str) -> dict[str, Any]:
    used = sorted({m.groups() for text in templates for m in _TOKEN.finditer(text)})
    return {
        "version": __version__,
        "defaults": base.to_yaml_dict(),
        "kinds": present(),
        "derived": {k: kind for k, (kind, _) in DERIVED.items()},
        "tokens": [list(t) for t in used],
        "bounds": {f"{b * 1000:g}": {"le": le_label(b), "seconds": b} for b in RUNQ_BOUNDS_S},
        "boundOrder": [f"{b * 1000:g}" for b in RUNQ_BOUNDS_S],
        "alerts": list(ALERTS),
        "reservedAlertLabels": sorted(RESERVED_ALERT_LABELS),
    }


def values_schema(current: str) -> str:
    """values.schema.json with its ``thresholds`` property generated."""
    doc = json.loads(current)
    doc["properties"]["thresholds"] = thresholds_schema()
    return _json(doc)


def chart_files(base: Thresholds, root: Path) -> dict[Path, str]:
    """Every generated file of the chart, by path relative to the repository root
    (``root``: where values.schema.json is read from)."""
    check_complete()
    rules = _json(rules_template(base))
    out = {RULES: rules}
    for uid, model in dashboards_template(base).items():
        out[DASHBOARDS / f"{uid}.json"] = _json(model, sort_keys=True)
    out[META] = _json(meta(base, *out.values()))
    out[VALUES_SCHEMA] = values_schema((root / VALUES_SCHEMA).read_text("utf-8"))
    return out
