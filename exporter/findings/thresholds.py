"""Every finding threshold in one place: packaged defaults plus a user's YAML overrides.

The defaults live in ``exporter/data/thresholds.yaml`` (commented, one knob per key);
a user file (``--config``) overrides any subset. The same :class:`Thresholds` object is
read by the evaluator, the rule generator and the dashboard generator, so the three
cannot drift apart.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ..probe.histogram import RUNQ_BOUNDS_S as RUNQ_BOUNDS_S  # the single source of bounds


class ThresholdsError(ValueError):
    """A thresholds file is unreadable, has unknown keys, or a value out of range."""


_RATIOS = (
    "throttled_ratio",
    "throttled_ratio_max",
    "stall_some",
    "blame_share",
    "critical_cpu_full",
    "mem_stall_some",
    "node_mem_stall_some",
    "mem_culprit_share",
    "critical_mem_full",
)
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The knobs of ``thresholds.yaml`` (YAML key = camelCase of the field name)."""

    window_minutes: int
    sustain_minutes: int
    throttled_ratio: float
    throttled_ratio_max: float
    stall_some: float
    runq_p99_ms: float
    min_runq_events: int
    blame_share: float
    critical_cpu_full: float
    critical_runq_p99_ms: float
    mem_stall_some: float
    refault_per_min: float
    node_mem_stall_some: float
    mem_culprit_share: float
    critical_mem_full: float
    node_labels: tuple[str, ...]
    runbook_url: str

    @property
    def window_s(self) -> int:
        return self.window_minutes * 60

    @property
    def runq_bound_s(self) -> float:
        """``runqP99Ms`` as a histogram bound in seconds."""
        return _bound_s(self.runq_p99_ms)

    @property
    def critical_runq_bound_s(self) -> float:
        return _bound_s(self.critical_runq_p99_ms)

    def to_yaml_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[_camel(f.name)] = list(v) if isinstance(v, tuple) else v
        return out


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    special = {"p99": "P99", "ms": "Ms", "url": "Url"}
    return head + "".join(special.get(p, p.capitalize()) for p in rest)


_KEYS = {_camel(f.name): f.name for f in fields(Thresholds)}


def _bound_s(ms: float) -> float:
    """A millisecond threshold as the exact bucket bound it names (or an error)."""
    for b in RUNQ_BOUNDS_S:
        if math.isclose(b * 1000.0, ms, rel_tol=0, abs_tol=1e-9):
            return b
    raise ThresholdsError(
        f"{ms} ms is not a run-queue histogram bound; choose one of "
        + ", ".join(f"{b * 1000:g}" for b in RUNQ_BOUNDS_S)
    )


def defaults_text() -> str:
    """The packaged, commented defaults file."""
    return (resources.files("exporter") / "data" / "thresholds.yaml").read_text("utf-8")


def _parse(text: str, source: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ThresholdsError(f"{source}: not valid YAML: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ThresholdsError(f"{source}: expected a mapping of knob: value")
    unknown = sorted(str(k) for k in data if k not in _KEYS)
    if unknown:
        raise ThresholdsError(
            f"{source}: unknown key(s) {', '.join(unknown)}; known keys: {', '.join(sorted(_KEYS))}"
        )
    return data


def _coerce(key: str, field: str, value: Any, source: str) -> Any:
    def bad(why: str) -> ThresholdsError:
        return ThresholdsError(f"{source}: {key}: {why} (got {value!r})")

    if field == "node_labels":
        return _label_names(value, bad)
    if field == "runbook_url":
        if not isinstance(value, str) or not value:
            raise bad("must be a non-empty string")
        return value.rstrip("#")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad("must be a number")
    if field in _WHOLE:
        if value != int(value):
            raise bad("must be a whole number")
        if int(value) < (0 if field == "min_runq_events" else 1):
            raise bad("too small")
        return int(value)
    value = float(value)
    if not math.isfinite(value):
        raise bad("must be finite")
    if field in _RATIOS and not 0.0 < value <= 1.0:
        raise bad("must be a fraction in (0, 1], e.g. 0.25 for 25%")
    if value <= 0:
        raise bad("must be > 0")
    return value


_WHOLE = ("window_minutes", "sustain_minutes", "min_runq_events")


def _label_names(value: Any, bad: Callable[[str], ThresholdsError]) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise bad("must be a non-empty list of label names")
    for v in value:
        if not isinstance(v, str) or not _LABEL.match(v):
            raise bad(f"{v!r} is not a valid Prometheus label name")
    return tuple(value)


def load_thresholds(path: str | Path | None = None) -> Thresholds:
    """The packaged defaults, overridden by the YAML file at ``path`` (if any)."""
    merged = _parse(defaults_text(), "packaged thresholds.yaml")
    missing = sorted(set(_KEYS) - set(merged))
    if missing:  # pragma: no cover - a packaging bug
        raise ThresholdsError(f"packaged thresholds.yaml lacks {', '.join(missing)}")
    if path is not None:
        try:
            text = Path(path).read_text("utf-8")
        except OSError as e:
            raise ThresholdsError(f"cannot read thresholds file {path}: {e.strerror}") from None
        merged.update(_parse(text, str(path)))
    return from_mapping(merged, str(path or "packaged thresholds.yaml"))


def from_mapping(data: dict[str, Any], source: str = "thresholds") -> Thresholds:
    """Build and validate from a complete camelCase mapping."""
    _parse(yaml.safe_dump(data), source)  # unknown-key check
    values = {_KEYS[k]: _coerce(k, _KEYS[k], v, source) for k, v in data.items()}
    missing = sorted(set(_KEYS.values()) - set(values))
    if missing:
        raise ThresholdsError(f"{source}: missing {', '.join(missing)}")
    th = Thresholds(**values)
    for key in ("runqP99Ms", "criticalRunqP99Ms"):
        try:
            _bound_s(getattr(th, _KEYS[key]))
        except ThresholdsError as e:
            raise ThresholdsError(f"{source}: {key}: {e}") from None
    if th.sustain_minutes > th.window_minutes:
        raise ThresholdsError(f"{source}: sustainMinutes must not exceed windowMinutes")
    if th.throttled_ratio_max > th.throttled_ratio:
        raise ThresholdsError(
            f"{source}: throttledRatioMax ({th.throttled_ratio_max}) above throttledRatio "
            f"({th.throttled_ratio}) would leave throttled containers with no finding"
        )
    if th.critical_runq_p99_ms < th.runq_p99_ms:
        raise ThresholdsError(f"{source}: criticalRunqP99Ms must be >= runqP99Ms")
    return th


DEFAULT_KEYS = tuple(sorted(_KEYS))
