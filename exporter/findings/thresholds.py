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
    "cpu_steal_ratio",
    "mem_stall_some",
    "node_mem_stall_some",
    "mem_culprit_share",
    "critical_mem_full",
    "unknown_blame_ratio",
)
# How long a self-monitoring condition must hold before its alert fires (``for:``).
_DURATIONS = (
    "exporter_down_for",
    "probe_not_loaded_for",
    "sampler_stale_for",
    "collector_failing_for",
    "probe_map_failures_for",
    "unknown_blame_for",
)
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_ALERT_NAME = re.compile(r"^[A-Z][A-Za-z0-9]*$")
# One label matcher of a series selector: name, operator, double-quoted value.
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*')
_DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
_DURATION_PART = re.compile(r"([0-9]+)(ms|s|m|h|d|w|y)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_UNIT_MS.update(w=7 * _UNIT_MS["d"], y=365 * _UNIT_MS["d"])
# Labels the rule pack sets itself: alertLabels may not replace them.
RESERVED_ALERT_LABELS = frozenset(
    ("alertname", "severity", "finding", "cgroup", "namespace", "pod", "container")
)


def duration_ms(text: str) -> int:
    """A Prometheus duration (``90s``, ``1h30m``) in milliseconds; ValueError if not one."""
    if not isinstance(text, str) or not _DURATION.match(text):
        raise ValueError(f"{text!r} is not a Prometheus duration like 30s, 5m or 1h")
    ms = sum(int(n) * _UNIT_MS[u] for n, u in _DURATION_PART.findall(text))
    if ms <= 0:
        raise ValueError(f"{text!r} is not a Prometheus duration like 30s, 5m or 1h")
    return ms


def selector_matchers(text: str) -> tuple[str, ...]:
    """``job="x", env=~"a|b"`` (braces optional) as its matchers; ValueError if it is
    not a list of ``label op "value"`` matchers."""
    body = text.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    out: list[str] = []
    pos = 0
    while pos < len(body):
        m = _MATCHER.match(body, pos)
        if m is None:
            raise ValueError(f'expected matchers like job="contention-exporter", got {text!r}')
        out.append(f'{m.group(1)}{m.group(2)}"{m.group(3)}"')
        pos = m.end()
        if pos < len(body):
            if body[pos] != ",":
                raise ValueError(f"expected ',' between matchers in {text!r}")
            pos += 1
    if not out:
        raise ValueError('must hold at least one matcher, e.g. job="contention-exporter"')
    return tuple(out)


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
    cpu_steal_ratio: float
    mem_stall_some: float
    refault_per_min: float
    node_mem_stall_some: float
    mem_culprit_share: float
    critical_mem_full: float
    node_labels: tuple[str, ...]
    # The rule pack (mixin-style): which series, extra labels, multi-cluster joins.
    selector: str
    cluster_label: str
    alert_labels: tuple[tuple[str, str], ...]
    disabled_alerts: tuple[str, ...]
    runbook_url: str
    # Self-monitoring alerts: the exporter's own health.
    exporter_down_for: str
    probe_not_loaded_for: str
    sampler_stale_seconds: float
    sampler_stale_for: str
    collector_failing_for: str
    probe_map_failures_for: str
    unknown_blame_ratio: float
    unknown_blame_for: str

    @property
    def window_s(self) -> int:
        return self.window_minutes * 60

    @property
    def join_labels(self) -> tuple[str, ...]:
        """The labels every join and aggregation of one exporter's series keeps:
        ``clusterLabel`` (if set) and ``nodeLabels``."""
        head = (self.cluster_label,) if self.cluster_label else ()
        return (*head, *(lab for lab in self.node_labels if lab != self.cluster_label))

    @property
    def matchers(self) -> tuple[str, ...]:
        """``selector`` as PromQL matchers, for every raw series the rules read."""
        return selector_matchers(self.selector)

    def alert_enabled(self, name: str) -> bool:
        return name not in self.disabled_alerts

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
            if f.name == "alert_labels":
                v = dict(v)
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

    if field in _NOT_NUMBERS:
        return _NOT_NUMBERS[field](value, bad)
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


def _selector(value: Any, bad: Callable[[str], ThresholdsError]) -> str:
    if not isinstance(value, str):
        raise bad('must be a string of matchers, e.g. job="contention-exporter"')
    try:
        return ", ".join(selector_matchers(value))
    except ValueError as e:
        raise bad(str(e)) from None


def _cluster_label(value: Any, bad: Callable[[str], ThresholdsError]) -> str:
    if value is None or value == "":
        return ""
    if not isinstance(value, str) or not _LABEL.match(value):
        raise bad("must be a Prometheus label name (or empty: a single cluster)")
    return value


def _alert_labels(value: Any, bad: Callable[[str], ThresholdsError]) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise bad("must be a mapping of label: value")
    out = []
    for k, v in value.items():
        if not isinstance(k, str) or not _LABEL.match(k) or k.startswith("__"):
            raise bad(f"{k!r} is not a valid Prometheus label name")
        if k in RESERVED_ALERT_LABELS:
            raise bad(f"{k!r} is set by the rule pack itself")
        if not isinstance(v, str | int | float) or isinstance(v, bool) or str(v) == "":
            raise bad(f"the value of {k!r} must be a non-empty string")
        out.append((k, str(v)))
    return tuple(sorted(out))


def _alert_names(value: Any, bad: Callable[[str], ThresholdsError]) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise bad("must be a list of alert names")
    for v in value:
        if not isinstance(v, str) or not _ALERT_NAME.match(v):
            raise bad(f"{v!r} is not an alert name like ContentionCPUThrottled")
    return tuple(sorted(set(value)))


def _runbook_url(value: Any, bad: Callable[[str], ThresholdsError]) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise bad("must be a URL or empty")
    if value and not re.match(r"^https?://\S+$", value):
        raise bad("must be an http(s) URL, or empty for none")
    return value.rstrip("#")


def _duration(value: Any, bad: Callable[[str], ThresholdsError]) -> str:
    try:
        duration_ms(value)
    except ValueError as e:
        raise bad(str(e)) from None
    return str(value)


# The knobs that are not numbers, each with its own check.
_NOT_NUMBERS: dict[str, Callable[[Any, Callable[[str], ThresholdsError]], Any]] = {
    "node_labels": _label_names,
    "selector": _selector,
    "cluster_label": _cluster_label,
    "alert_labels": _alert_labels,
    "disabled_alerts": _alert_names,
    "runbook_url": _runbook_url,
    **dict.fromkeys(_DURATIONS, _duration),
}


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
