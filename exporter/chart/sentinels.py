"""The generators' output as a template: every place a threshold prints, a placeholder.

The rules and dashboards are generated from thresholds whose values are *sentinels*:
each prints, in each of its forms (``kinds.FORMS``), as text found nowhere else in the
output (seven significant digits, a percentage of its own, a made-up duration). Each
occurrence of a form becomes the placeholder ``@@ce:<key>:<form>@@`` (for a number in
the dashboards' JSON, a string holding only the placeholder). The chart replaces the
placeholders with the installed values, formatted the same way.

Two sentinel sets give two templates, which must be equal: a constant of the rules
that happened to equal a sentinel's form, a form this module does not know, or a key
whose value shapes the output would each leave them different, and :func:`template`
says where.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from ..findings.model import Kind
from ..findings.thresholds import Thresholds
from ..probe.histogram import RUNQ_BOUNDS_S, le_label
from ..promql import num
from .kinds import (
    BOUND,
    DERIVED,
    DURATION,
    FORMS,
    NUMBER,
    RATIO,
    RUNBOOK,
    SELECTOR,
    SEVERITIES,
    ChartTemplateError,
    check_complete,
    field_names,
    keys_of,
)

Render = Callable[[Thresholds], Any]

# (runqP99Ms, criticalRunqP99Ms) per sentinel set: they must be histogram bounds.
_BOUND_SETS = ((5.0, 50.0), (50.0, 5.0))
JSON_FORMS = ("json", "jsonint", "seconds")  # forms that are a number, not text


def token(key: str, form: str) -> str:
    return f"@@ce:{key}:{form}@@"


# Percent parts of the ratio sentinels, unique and unlike the round display bands of
# the dashboards (80 %, 100 %): set 0, then set 1.
_PERCENTS = (
    (11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47),
    (53, 59, 61, 67, 71, 73, 79, 83, 89, 97, 14),
)


def _ratio(i: int, which: int) -> float:
    """Seven significant digits: its repr, ``:g`` and percentages all differ."""
    return float(f"0.{_PERCENTS[which][i]:02d}{i:02d}{3 + which}{7 - which}{1 + which}")


def sentinel_values(which: int) -> dict[str, Any]:
    """camelCase key -> its sentinel (set ``which``: 0 or 1), as Thresholds holds it."""
    out: dict[str, Any] = {}
    for i, key in enumerate(keys_of(RATIO)):
        out[key] = _ratio(i, which)
    numbers = {
        "refaultPerMin": (1234.567, 2345.678),
        "samplerStaleSeconds": (61.23457, 72.34568),
        "minRunqEvents": (2345678, 3456789),
    }
    for key in keys_of(NUMBER):
        out[key] = numbers[key][which]
    for key, ms in zip(keys_of(BOUND), _BOUND_SETS[which], strict=True):
        out[key] = ms
    for i, key in enumerate(keys_of(DURATION)):
        out[key] = f"{1 + which}h{2 + which}m{31 + i + 10 * which}s"
    for key in keys_of(SELECTOR):
        out[key] = f'zzsel_a="x{which}", zzsel_b=~"y{which}"'
    for key in keys_of(RUNBOOK):
        out[key] = f"https://runbook-{which}.example/docs/runbook.md"
    for key in keys_of(SEVERITIES):
        out[key] = tuple((k.value, f"zzsev{which}-{k.value}") for k in Kind)
    return out


def values_of(th: Thresholds, key: str, kind: str) -> list[tuple[str, Any]]:
    """(placeholder key, value) of a threshold key: itself, or one per entry of a
    mapping key (``alertSeverity.<finding kind>``)."""
    value = getattr(th, field_names(th)[key])
    if kind == SEVERITIES:
        return [(f"{key}.{k}", v) for k, v in value]
    return [(key, value)]


def sentinel_thresholds(base: Thresholds, which: int, **override: Any) -> Thresholds:
    """``base`` with every value key at its sentinel (``override``: camelCase keys)."""
    names = field_names(base)
    values = sentinel_values(which) | override
    return replace(base, **{names[k]: v for k, v in values.items()})


def _bound_s(ms: float) -> float:
    (b,) = [b for b in RUNQ_BOUNDS_S if abs(b * 1000 - ms) < 1e-9]
    return b


def form_text(kind: str, form: str, value: Any) -> Any:
    """How ``value`` prints in ``form`` (a number for the JSON forms)."""
    texts: dict[str, Callable[[Any], Any]] = {
        "num": num,
        "g": lambda v: f"{v:g}",
        "pct0": lambda v: f"{v:.0%}",
        "pct100g": lambda v: f"{v * 100:g}",
        "json": lambda v: v,
        "jsonint": lambda v: v,
        "le": lambda v: le_label(_bound_s(v)),
        "msg": lambda v: f"{v:g} ms",
        "seconds": _bound_s,
        "raw": str,
    }
    if form not in FORMS[kind]:
        raise ChartTemplateError(f"{kind} has no form {form}")  # pragma: no cover
    return texts[form](value)


class _Tokens:
    """The forms of one sentinel set, and their replacement in the output."""

    def __init__(self, th: Thresholds, which: int) -> None:
        text: dict[str, str] = {}
        numbers: dict[float, str] = {}
        every = [(k, c, v) for c in FORMS for key in keys_of(c) for k, v in values_of(th, key, c)]
        every += [(k, c, compute(th)) for k, (c, compute) in DERIVED.items()]
        for key, kind, value in every:
            for form in FORMS[kind]:
                shown = form_text(kind, form, value)
                tok = token(key, form)
                if shown == "":
                    continue  # an empty value prints as nothing: no place to find
                if form in ("json", "jsonint") and (form == "jsonint") != isinstance(value, int):
                    continue  # json.dumps writes an int field's value as an int
                if form in JSON_FORMS:
                    numbers[float(shown)] = tok
                elif text.setdefault(shown, tok) != tok:
                    raise ChartTemplateError(
                        f"sentinel set {which}: {tok} and {text[shown]} both print {shown!r}"
                    )
        self.text, self.numbers = text, numbers
        alternatives = "|".join(re.escape(t) for t in sorted(text, key=len, reverse=True))
        self._pattern = re.compile(rf"(?<![\w.])(?:{alternatives})(?!\w)")
        self.used: set[str] = set()

    def _sub(self, m: re.Match[str]) -> str:
        tok = self.text[m.group(0)]
        self.used.add(tok)
        return tok

    def apply(self, doc: Any) -> Any:
        if isinstance(doc, Mapping):
            return {k: self.apply(v) for k, v in doc.items()}
        if isinstance(doc, list):
            return [self.apply(v) for v in doc]
        if isinstance(doc, str):
            return self._pattern.sub(self._sub, doc)
        if isinstance(doc, int | float) and not isinstance(doc, bool):
            tok = self.numbers.get(float(doc))
            if tok is not None:
                self.used.add(tok)
                return tok
        return doc


def tokenized(render: Render, th: Thresholds, which: int) -> tuple[Any, set[str]]:
    """``render(th)`` with each sentinel form replaced by its placeholder; the
    placeholders used."""
    tokens = _Tokens(th, which)
    return tokens.apply(render(th)), tokens.used


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """Where two JSON-like documents first differ (None if they do not)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for k in dict.fromkeys([*a, *b]):
            if k not in a or k not in b:
                return f"{path}/{k}: only in one"
            found = first_difference(a[k], b[k], f"{path}/{k}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} vs {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{path}/{i}")
            if found:
                return found
        return None
    if a == b:
        return None
    return f"{path}: {_excerpt(a, b)}"


def _excerpt(a: Any, b: Any) -> str:
    if not (isinstance(a, str) and isinstance(b, str)):
        return f"{a!r} vs {b!r}"
    i = next((n for n, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return f"...{a[max(0, i - 60) : i + 60]!r} vs ...{b[max(0, i - 60) : i + 60]!r}"


def template(render: Render, base: Thresholds, what: str, **override: Any) -> Any:
    """``render``'s output as a template (placeholders for every value key), checked
    against a second sentinel set. ``override``: camelCase keys set in both runs."""
    check_complete()
    out = []
    for which in (0, 1):
        doc, _ = tokenized(render, sentinel_thresholds(base, which, **override), which)
        out.append(json.loads(json.dumps(doc)))
    diff = first_difference(out[0], out[1])
    if diff is not None:
        raise ChartTemplateError(
            f"{what}: two sentinel sets give different templates at {diff}: a threshold "
            "prints in a form exporter/chart does not know, a constant equals a "
            "sentinel, or the key shapes the output (exporter/chart/kinds.py)"
        )
    return out[0]


__all__ = ["DURATION", "RUNBOOK", "SELECTOR", "template", "token"]
