"""The import graph points one way (CONTRIBUTING.md has the picture).

Every module of ``exporter`` (and of ``labs``, and the test support) is parsed with
``ast``; every import counts, including the lazy ones inside functions and the
``TYPE_CHECKING`` ones (a type is a dependency too). A module may import only from
its own layer or a lower one, and no two modules may import each other, directly or
round a longer cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Lowest first. A module belongs to the layer of its longest matching prefix.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("exporter",),  # the package itself: __version__ only
    ("exporter.catalog",),  # what is exported: data that imports nothing of ours
    # readers: the only per-pass file I/O; the configuration files, read and validated
    ("exporter.quantity", "exporter.cgroupfs", "exporter.config_file"),
    ("exporter.identity", "exporter.metadata_file", "exporter.kube"),  # identity sources
    ("exporter.window",),  # the window and its fold arithmetic
    ("exporter.probe",),  # scheduler probe: loader, maps, blame, probe folding
    ("exporter.sampler",),  # one pass, the loop, entitlements, snapshot types
    ("exporter.findings",),  # the evaluator and the finding model
    ("exporter.selftest",),  # the self-test's scene, judged on the window of each pass
    ("exporter.yamlout",),  # the one YAML writer of generated files
    ("exporter.promql", "exporter.rules", "exporter.dashboards"),  # generators
    ("exporter.chart",),  # the Helm chart's templated rules and dashboards
    ("exporter.exposition",),  # families and their rendered bytes
    ("exporter.server", "exporter.web"),  # HTTP: routes, and the transport below them
    ("exporter.agent",),  # wiring, once per pass
    ("exporter.commands", "exporter.__main__"),  # every command, arguments, settings
)
PACKAGES = ("exporter", "labs", "tests.support")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        base = ROOT / pkg.replace(".", "/")
        for path in sorted(base.rglob("*.py")):
            out[module_name(path)] = path
    return out


MODULES = modules()


def _resolve(current: str, is_package: bool, level: int, module: str | None) -> str:
    if level == 0:
        return module or ""
    base = current.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: -(level - 1)]
    return ".".join([*base, module] if module else base)


def imports(name: str, path: Path) -> Iterator[str]:
    """Every module ``name`` imports (ours only), wherever the import statement is."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(name, is_package, node.level, node.module)
            # "from pkg import mod" imports the submodule when there is one.
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names
            ]
        else:
            continue
        for t in targets:
            while t and t not in MODULES:  # "import exporter.x.y" of a name: its module
                t = t.rpartition(".")[0]
            if t:
                yield t


GRAPH = {name: sorted(set(imports(name, path)) - {name}) for name, path in MODULES.items()}


def layer(name: str) -> int | None:
    best, found = -1, None
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (name == p or name.startswith(p + ".")) and len(p) > best:
                best, found = len(p), i
    return found


def test_every_exporter_module_has_a_layer() -> None:
    missing = [m for m in MODULES if m.startswith("exporter") and layer(m) is None]
    assert not missing, f"add these to LAYERS: {missing}"


def test_no_module_imports_from_a_higher_layer() -> None:
    upward = [
        f"{m} (layer {layer(m)}) imports {t} (layer {layer(t)})"
        for m, targets in GRAPH.items()
        if m.startswith("exporter.")
        for t in targets
        if (layer(t) or 0) > (layer(m) or 0)
    ]
    assert not upward, "\n".join(upward)


def test_the_product_never_imports_labs_or_tests() -> None:
    bad = [
        f"{m} imports {t}"
        for m, targets in GRAPH.items()
        if m.startswith("exporter")
        for t in targets
        if not t.startswith("exporter")
    ]
    assert not bad, "\n".join(bad)


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in GRAPH:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles() -> None:
    """Between modules, and so between packages (a package's ``__init__`` is a module
    too: re-exporting from submodules is fine, a submodule importing back is not)."""
    assert _cycles() == []


def test_the_checker_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    """The parser itself: an import inside a function, relative levels, submodules."""
    src = tmp_path / "m.py"
    src.write_text(
        "from . import window\n"
        "def f():\n    from ..agent import Agent\n    import exporter.commands.run\n"
    )
    got = set(imports("exporter.sampler.loop", src))
    assert got == {"exporter.sampler", "exporter.agent", "exporter.commands.run"}
    assert layer("exporter.sampler.loop") == 6
    assert layer("exporter.commands.run") == len(LAYERS) - 1


def test_rules_and_dashboards_share_promql_not_each_other() -> None:
    """Every PromQL fact both need lives in exporter.promql: neither generator imports
    the other."""
    crossing = [
        f"{m} imports {t}"
        for m, targets in GRAPH.items()
        for t in targets
        if (m.startswith("exporter.dashboards") and t.startswith("exporter.rules"))
        or (m.startswith("exporter.rules") and t.startswith("exporter.dashboards"))
    ]
    assert not crossing, "\n".join(crossing)
