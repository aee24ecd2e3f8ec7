"""The metric names a PromQL expression selects, for tests that check what the rules
and dashboards read (against what the exporter exports)."""

from __future__ import annotations

import re

_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "and",
    "or",
    "unless",
    "inf",
    "nan",
}
# A selector with matchers: ``name{...}`` (string literals inside may hold braces).
_SELECTOR = re.compile(r'(?<![\w:])([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[^}"]|"(?:[^"\\]|\\.)*")*)\}')


def metric_names(expr: str) -> set[str]:
    """Metric (and recording rule) names a PromQL expression selects."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    s = re.sub(r"\{[^}]*\}", " ", s)  # label matchers
    s = re.sub(r"\[[^\]]*\]", " ", s)  # range and subquery windows
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    s = re.sub(r"\boffset\s+-?\w+", " ", s)
    s = re.sub(r"(?<![\w:])\d+(\.\d+)?([eE][+-]?\d+)?", " ", s)  # numbers
    out: set[str] = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", s):
        if s[m.end() :].lstrip().startswith("("):
            continue  # a function or aggregation
        if m.group(0).lower() not in _KEYWORDS:
            out.add(m.group(0))
    return out


def selectors_with_matchers(expr: str) -> list[tuple[str, str]]:
    """Each ``name{matchers}`` of the expression: (name, the text between the braces)."""
    return [(m.group(1), m.group(2)) for m in _SELECTOR.finditer(expr)]
