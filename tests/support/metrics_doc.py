"""docs/metrics.md's tables, generated from the metric catalog (``exporter.catalog``).

Each table sits between ``<!-- generated: NAME ... -->`` and ``<!-- end generated -->``;
the prose around them is written by hand. ``python -m tests.support.metrics_doc``
rewrites the tables; ``--check`` writes nothing and fails when one is stale
(``scripts/check-generated.sh`` runs it, and ``tests/unit/test_catalog.py`` fails on a
table that drifted).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterable
from pathlib import Path

from exporter.catalog import COLLECTORS, DEFAULT_COLLECTORS, FAMILIES, Family, Scope, Type
from exporter.catalog.budget import breakdown, per_container
from exporter.commands.generated_files import sync
from exporter.probe.blame import DEFAULT_TOP_K
from exporter.probe.burst import HISTOGRAM_BOUNDS

ROOT = Path(__file__).resolve().parents[2]
DOC = Path("docs/metrics.md")
COMMAND = "python -m tests.support.metrics_doc"
BLOCK = re.compile(
    r"(<!-- generated: (?P<name>[a-z-]+) .*?-->\n)(?P<body>.*?)(<!-- end generated -->)", re.S
)
OPTIONAL = tuple(c.name for c in COLLECTORS if not c.default)
BUCKETS = HISTOGRAM_BOUNDS
TIMES = "\N{MULTIPLICATION SIGN}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _row(cells: Iterable[str]) -> str:
    return "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"


def _table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    head = list(header)
    lines = [_row(head), _row("---" for _ in head)]
    lines += [_row(_cell(c) for c in row) for row in rows]
    return "\n".join(lines) + "\n"


def _labels(f: Family) -> str:
    if f.labels_doc:
        return f.labels_doc
    parts = ["`le`"] if f.type is Type.HISTOGRAM else []
    for lab in f.labels:
        text = f"`{lab.name}`"
        if lab.values:
            text += "=" + "|".join(f"`{v}`" for v in lab.values)
        if lab.more:
            more = "|".join(f"`{v}`" for v in lab.more)
            text += f" (and {more} with `--collector.{lab.more_with}`)"
        parts.append(text)
    return ", ".join(parts)


def _type(f: Family) -> str:
    return f"{f.type} (1)" if f.constant else str(f.type)


def _families(scope: Scope, *, default_only: bool = True) -> list[Family]:
    return [
        f
        for f in FAMILIES
        if f.scope is scope and (not default_only or f.collector in DEFAULT_COLLECTORS)
    ]


def family_table(scope: Scope) -> str:
    """One row per family of ``scope`` (collectors on by default)."""
    fams = _families(scope)
    per_container = scope in (Scope.CONTAINER, Scope.VICTIM)
    header = ["name", "type", "unit", "extra labels" if per_container else "labels", "meaning"]
    rows = [[f"`{f.name}`", _type(f), f.unit, _labels(f), f.doc or f.help, f.source] for f in fams]
    if scope is Scope.EXPORTER:  # families a library names
        for c in COLLECTORS:
            if c.foreign:
                rows.append([", ".join(f"`{n}`" for n in c.foreign), "", "", "", c.doc, ""])
    if any(f.source for f in fams):
        return _table([*header, "source"], rows)
    return _table(header, [row[:-1] for row in rows])


def optional_table() -> str:
    rows = []
    for name in OPTIONAL:
        c = next(c for c in COLLECTORS if c.name == name)
        own = [
            f"`{f.name}` ({'; '.join(x for x in (f.doc, f.source) if x)})"
            for f in FAMILIES
            if f.collector == name
        ]
        for f in FAMILIES:  # label values it adds to a family of another collector
            for lab in f.labels:
                if lab.more_with == name:
                    values = "|".join(f'"{v}"' for v in lab.more)
                    own.append(f"`{f.name}{{{lab.name}={values}}}`")
        rows.append([f"`{name}`", ", ".join(own), c.elsewhere])
    return _table(["collector", "families", "elsewhere"], rows)


def _short(f: Family) -> str:
    return f"`{f.name.removeprefix('contention_')}`"


def _budget(collectors: Iterable[str], probe: bool, top_k: int = DEFAULT_TOP_K) -> int:
    return per_container(FAMILIES, set(collectors), probe=probe, buckets=BUCKETS, top_k=top_k)


def cardinality_table() -> str:
    """Series per container for each setting, computed from the catalog."""
    on = DEFAULT_COLLECTORS
    plain = breakdown(FAMILIES, on, probe=False, buckets=BUCKETS)
    no_probe = _budget(on, probe=False)
    listed = ", ".join(_short(f) + (f" {TIMES}{n}" if n > 1 else "") for f, n in plain)
    probe = breakdown(FAMILIES, on, probe=True, buckets=BUCKETS)
    victim = [(f, n) for f, n in probe if f.scope is Scope.VICTIM]
    shared = " and ".join(_short(f) for f in FAMILIES if f.top_k)
    hist = ", ".join(
        f"{_short(f)} {TIMES}{n} ({BUCKETS[f.name]} bounds, `+Inf`, `_count`, `_sum`)"
        for f, n in victim
    )
    with_probe = _budget(on, probe=True)
    base = _budget(on, probe=True, top_k=0)
    each = ", ".join(f"`{c}` +{_budget(on | {c}, probe=True) - with_probe}" for c in OPTIONAL)
    every = _budget(on | set(OPTIONAL), probe=True)
    rows = [
        ["default, no probe", f"{no_probe}: {listed}"],
        [
            "default, probe loaded",
            f"**{with_probe}**: the {no_probe}, {hist}, "
            f"and K = {DEFAULT_TOP_K} culprit shares: the victim's {DEFAULT_TOP_K} "
            f"largest culprits, {shared} together",
        ],
        ["`--probe.top-k K`", f"{base} + K"],
        ["each optional collector", f"{each}; all of them: {every}"],
    ]
    return _table(["setting", "series per container"], rows)


TABLES: dict[str, Callable[[], str]] = {
    "per-container": lambda: family_table(Scope.CONTAINER),
    "optional-collectors": optional_table,
    "victim": lambda: family_table(Scope.VICTIM),
    "antagonists": lambda: family_table(Scope.ANTAGONIST),
    "cardinality": cardinality_table,
    "findings": lambda: family_table(Scope.FINDING),
    "node": lambda: family_table(Scope.NODE),
    "exporter": lambda: family_table(Scope.EXPORTER),
}


def render(text: str) -> str:
    """``text`` (docs/metrics.md) with every generated table rewritten."""
    seen: list[str] = []

    def replace(m: re.Match[str]) -> str:
        name = m.group("name")
        if name not in TABLES:
            raise ValueError(f"{DOC}: no table is called {name!r} ({', '.join(TABLES)})")
        seen.append(name)
        return m.group(1) + TABLES[name]() + m.group(4)

    out = BLOCK.sub(replace, text)
    missing = set(TABLES) - set(seen)
    if missing:
        raise ValueError(f"{DOC}: no place for the tables {', '.join(sorted(missing))}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = p.parse_args(argv)
    text = render((ROOT / DOC).read_text(encoding="utf-8"))
    return sync(ROOT, {DOC: text}, verify=args.check, command=COMMAND)


if __name__ == "__main__":
    raise SystemExit(main())
