"""No function in ``exporter/`` over 100 lines (CONTRIBUTING.md, issue 25's target).

Every module is parsed with ``ast``; a function's length is its lines from its first
decorator (or ``def``) to its last line, blank lines, comments and docstring included,
so a nested function counts in the one that holds it too. A function over the limit
wants splitting by what its parts do, not a longer limit.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

# No bound but against hangs (no server, clock or subprocess bound): scripts/test.sh
# runs these at idle priority (docs/testing.md).
pytestmark = [pytest.mark.untimed, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "exporter"
LIMIT = 100


def function_lengths(source: str, where: str) -> list[tuple[int, str]]:
    """(lines, "where:line name") of every function and method in ``source``."""
    out = []
    for node in ast.walk(ast.parse(source, filename=where)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            assert node.end_lineno is not None
            out.append((node.end_lineno - first + 1, f"{where}:{node.lineno} {node.name}"))
    return out


def package_lengths() -> list[tuple[int, str]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        out += function_lengths(path.read_text(encoding="utf-8"), rel)
    return out


def test_the_measure_counts_every_line_of_a_function() -> None:
    body = "\n".join(f"    x{i} = {i}  # line {i}" for i in range(LIMIT - 3))
    head = "@decorator\ndef long() -> None:\n    '''Doc.'''\n"
    source = f"{head}{body}\n\n\ndef short():\n    pass\n"
    got = {name.split(" ")[1]: n for n, name in function_lengths(source, "m.py")}
    assert got == {"long": LIMIT, "short": 2}
    nested = textwrap.dedent("""
        class C:
            def outer(self):
                def inner():
                    return 1
                return inner
        """)
    got = {name.split(" ")[1]: n for n, name in function_lengths(nested, "m.py")}
    assert got == {"outer": 4, "inner": 2}


def test_no_function_in_exporter_is_over_the_limit() -> None:
    lengths = package_lengths()
    assert len(lengths) > 500  # the whole package was read
    over = sorted((n, name) for n, name in lengths if n > LIMIT)
    assert not over, f"functions over {LIMIT} lines (split them): {over}"
