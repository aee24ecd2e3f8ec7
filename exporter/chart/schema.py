"""The ``thresholds`` part of the chart's values.schema.json, from the exporter's own
schema (exporter/data/thresholds.schema.json): the same keys, types and bounds, so
Helm refuses at install what the exporter would refuse at start, naming the key.

Helm validates with a JSON Schema draft-07 validator running Go's regexp (RE2): the
``$defs`` references are inlined (a reference is resolved from the root of
values.schema.json, not of this part), the two patterns written with look-aheads are
given in RE2 (``RE2_PATTERNS``, tested equal on samples in
tests/unit/test_chart_thresholds.py), and the ``x-hint`` notes become descriptions.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ..config_file import schema
from .kinds import ChartTemplateError

# The exporter schema's look-ahead patterns, and what they mean in RE2.
RE2_PATTERNS = {
    # a duration with at least one non-zero number
    "^(?=.*[1-9])([0-9]+(ms|s|m|h|d|w|y))+$": (
        "^([0-9]+(ms|s|m|h|d|w|y))*[0-9]*[1-9][0-9]*(ms|s|m|h|d|w|y)([0-9]+(ms|s|m|h|d|w|y))*$"
    ),
    # a label name not starting with two underscores
    "^(?!__)[a-zA-Z_][a-zA-Z0-9_]*$": "^([a-zA-Z][a-zA-Z0-9_]*|_([a-zA-Z0-9][a-zA-Z0-9_]*)?)$",
}
_NOT_RE2 = ("(?=", "(?!", "(?<")


def _re2(pattern: str) -> str:
    out = RE2_PATTERNS.get(pattern, pattern)
    if any(s in out for s in _NOT_RE2):
        raise ChartTemplateError(f"pattern {pattern!r} is not RE2: add it to RE2_PATTERNS")
    return out


def _inline(node: Any, defs: Mapping[str, Any]) -> Any:
    """A schema with its ``$defs`` references replaced by what they name, RE2 patterns
    and the ``x-`` notes as descriptions."""
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    if not isinstance(node, Mapping):
        return node
    if "$ref" in node:
        name = str(node["$ref"]).removeprefix("#/$defs/")
        return _inline({**defs[name], **{k: v for k, v in node.items() if k != "$ref"}}, defs)
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k == "properties":
            out[k] = {name: _inline(sub, defs) for name, sub in v.items()}
        elif k == "pattern":
            out[k] = _re2(v)
        elif k not in ("x-hint", "x-not"):
            out[k] = _inline(v, defs)
    note = node.get("x-hint", node.get("x-not"))
    if note and "description" not in out:
        out["description"] = note
    return out


def thresholds_schema() -> dict[str, Any]:
    """The values.schema.json part for ``thresholds``."""
    src = copy.deepcopy(dict(schema("thresholds")))
    defs = src.pop("$defs", {})
    body = {k: v for k, v in src.items() if k not in ("$schema", "$id", "title", "description")}
    out: dict[str, Any] = {
        "description": (
            "threshold overrides (docs/configuration.md): the keys and bounds of "
            "exporter/data/thresholds.schema.json; the alert rules and dashboards follow them"
        ),
        **_inline(body, defs),
    }
    return out
