"""A metric family's name is written once, in its catalog entry (``exporter/catalog/``).

Everything else in ``exporter/`` (the rules, the dashboards, help and descriptions)
takes it from there (``exporter.promql``'s names, or the entry itself), so a renamed
family cannot leave a query, a panel or a recording rule reading a family that no
longer exists. The check parses each module with ``ast`` and reads its string
constants (the literal parts of f-strings included); docstrings and comments may name
families. A recording rule named after a family builds its name from the family's
(``exporter/rules/records.py``), so only the literal parts around it are seen here.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.catalog import FAMILIES, Family, Type

# No bound but against hangs (no server, clock or subprocess bound): scripts/test.sh
# runs these at idle priority (docs/testing.md).
pytestmark = [pytest.mark.untimed, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
HISTOGRAM_SERIES = ("_bucket", "_count", "_sum")
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # ':' separates a record name's parts


def series_names(fam: Family) -> set[str]:
    """What a family's name is spelled as in PromQL: the family, a histogram's series,
    and a counter without ``_total`` (the stem its rate's records are named after)."""
    names = {fam.name, fam.name.removesuffix("_total")}
    if fam.type is Type.HISTOGRAM:
        names |= {fam.name + suffix for suffix in HISTOGRAM_SERIES}
    return names


NAMES = frozenset(n for fam in FAMILIES for n in series_names(fam))


def typed_names(text: str) -> list[str]:
    """The family names ``text`` spells out: a word that is one, or a ratio's record
    named after one (``<name>_per_<other>``)."""
    return [w for w in WORD.findall(text) if w in NAMES or w.split("_per_")[0] in NAMES]


def _docstrings(tree: ast.Module) -> set[int]:
    scopes = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, scopes)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def typed_in(root: Path) -> Iterator[str]:
    """``path:line: name`` for each family name a string constant of ``root``'s
    ``exporter/`` spells out, its catalog aside."""
    package = root / "exporter"
    for path in sorted(package.rglob("*.py")):
        if path.relative_to(package).parts[0] == "catalog":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
            ):
                for name in typed_names(node.value):
                    yield f"{path.relative_to(root)}:{node.lineno}: {name}"


def test_the_names_cover_every_family() -> None:
    assert {f.name for f in FAMILIES} <= NAMES
    assert "contention_runqueue_latency_seconds_bucket" in NAMES
    assert "contention_cpu_cfs_throttled_periods" in NAMES  # a counter's record stem


def test_typed_names_finds_a_family_however_it_is_written() -> None:
    assert typed_names("rate(contention_cpu_usage_seconds_total[1m])") == [
        "contention_cpu_usage_seconds_total"
    ]
    assert typed_names("cgroup:contention_runqueue_latency_seconds:p99_rate1m") == [
        "contention_runqueue_latency_seconds"
    ]
    assert typed_names("node:contention_node_cpu_steal_seconds_per_cpu_cores:ratio") == [
        "contention_node_cpu_steal_seconds_per_cpu_cores"
    ]
    # A record named after no family, and a name that only starts like one:
    assert typed_names("cgroup:contention_cpu_stalled:rate1m contention_finding_x") == []


def test_no_family_name_is_typed_outside_the_catalog() -> None:
    typed = list(typed_in(ROOT))
    assert not typed, "use the name from exporter.promql or the catalog entry:\n" + "\n".join(typed)
