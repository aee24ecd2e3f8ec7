"""Every finding threshold in one place: packaged defaults plus a user's YAML overrides.

The defaults live in ``exporter/data/thresholds.yaml`` (commented, one knob per key);
a user file (``--config.file``) overrides any subset. The same :class:`Thresholds` object is
read by the evaluator, the rule generator and the dashboard generator, so the three
cannot drift apart.

Reading and validation go through :mod:`exporter.config_file` (the one path for every
configuration file): each key's type and bounds are in
``exporter/data/thresholds.schema.json``; what involves several keys (histogram
bounds, ``sustainMinutes`` within ``windowMinutes``, ...) is checked here. A new key
needs its default in ``thresholds.yaml``, its bounds in the schema and its field in
:class:`Thresholds` (a unit test checks the three agree).
"""

from __future__ import annotations

import copy
import functools
import math
import re
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

from ..config_file import ConfigError, WatchedFile, load_yaml, read_config, validate
from ..probe.histogram import RUNQ_BOUNDS_S as RUNQ_BOUNDS_S  # the single source of bounds
from .model import Kind

SCHEMA = "thresholds"


class ThresholdsError(ConfigError):
    """A thresholds file is unreadable, has unknown keys, or a value out of range."""


# How long a self-monitoring condition must hold before its alert fires (``for:``).
_DURATIONS = (
    "exporter_down_for",
    "probe_not_loaded_for",
    "sampler_stale_for",
    "collector_failing_for",
    "probe_map_failures_for",
    "unknown_blame_for",
    "target_labels_for",
)
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
    alert_severity: tuple[tuple[str, str], ...]  # (finding kind, severity), in Kind order
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
    target_labels_for: str

    @property
    def window_s(self) -> int:
        return self.window_minutes * 60

    @property
    def steady_throttled_ratio(self) -> float:
        """The throttled ratio from which a container's demand counts as steady: held back
        in all but ``throttledRatioMax`` of its periods. Only then does its average demand
        size a CPU limit; below it, demand came in bursts an average cannot size
        (docs/findings.md#cpu-throttled-in-bursts)."""
        return 1.0 - self.throttled_ratio_max

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

    def severity_of(self, kind: str) -> str:
        """The ``severity`` label of a finding kind's alert (``alertSeverity``)."""
        return dict(self.alert_severity)[kind]

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
            if f.name in ("alert_labels", "alert_severity"):
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


def _parse(data: bytes, source: str, check: bool = True) -> dict[str, Any]:
    """One thresholds file: YAML, each key against the schema (no defaults merged;
    ``check=False`` only for the packaged file, which a unit test validates)."""
    try:
        doc = load_yaml(data, source)
        if doc is None:
            return {}
        if check:
            validate(doc, SCHEMA, source)
    except ThresholdsError:
        raise
    except ConfigError as e:
        raise ThresholdsError(str(e)) from None
    out: dict[str, Any] = doc
    return out


def _value(field: str, value: Any) -> Any:
    """A schema-checked value as the dataclass holds it."""
    if field in ("node_labels", "disabled_alerts"):
        names = () if value is None else (value,) if isinstance(value, str) else tuple(value)
        return names if field == "node_labels" else tuple(sorted(set(names)))
    if field in ("runbook_url", "cluster_label"):
        return "" if value is None else str(value).rstrip("#")
    if field == "selector":  # checked in from_mapping
        return ", ".join(selector_matchers(value))
    if field == "alert_labels":
        return tuple(sorted((k, str(v)) for k, v in (value or {}).items()))
    if field == "alert_severity":
        return tuple((k.value, str(value[k.value])) for k in Kind)
    if field in _DURATIONS:
        return str(value)
    if field in _WHOLE:
        return int(value)
    return float(value)


_WHOLE = ("window_minutes", "sustain_minutes", "min_runq_events")


def load_thresholds(path: str | Path | None = None) -> Thresholds:
    """The packaged defaults, overridden by the YAML file at ``path`` (if any)."""
    if path is None:
        return _defaults()
    try:
        data = read_config(str(path))
    except ConfigError as e:
        raise ThresholdsError(f"cannot read thresholds file {e}") from None
    return parse_thresholds(data, str(path))


def parse_thresholds(data: bytes, source: str) -> Thresholds:
    """The packaged defaults overridden by the thresholds file ``source`` (its bytes)."""
    merged = _packaged()
    merged.update(_parse(data, source))
    return from_mapping(merged, source)


def watch_thresholds(path: str) -> WatchedFile[Thresholds]:
    """The thresholds file at ``path``, re-read when it changes (raises at start)."""
    try:
        return WatchedFile(path, "thresholds", parse_thresholds)
    except ThresholdsError:
        raise
    except ConfigError as e:
        raise ThresholdsError(str(e)) from None


def _packaged(check: bool = True) -> dict[str, Any]:
    """The packaged file's mapping, a fresh copy for the caller to merge into."""
    return copy.deepcopy(_packaged_once(check))


@functools.cache
def _packaged_once(check: bool) -> dict[str, Any]:
    # Parsed once per process: the file ships with the package, and parsing it costs
    # more than the file it is merged with (each reload of a thresholds file, ~20 ms).
    merged = _parse(defaults_text().encode(), "packaged thresholds.yaml", check)
    missing = sorted(set(_KEYS) - set(merged))
    if missing:  # pragma: no cover - a packaging bug
        raise ThresholdsError(f"packaged thresholds.yaml lacks {', '.join(missing)}")
    return merged


def _defaults() -> Thresholds:
    # The packaged file is not validated against the schema at run time (the unit tests
    # do): the default run then never imports jsonschema (≈ 4 MB of RSS).
    return from_mapping(_packaged(check=False), "packaged thresholds.yaml", check=False)


def from_mapping(
    data: dict[str, Any], source: str = "thresholds", check: bool = True
) -> Thresholds:
    """Build and validate from a complete camelCase mapping (``check=False``: the
    packaged defaults, schema-checked by the tests)."""
    if check:
        try:
            validate(data, SCHEMA, source)
        except ConfigError as e:
            raise ThresholdsError(str(e)) from None
    _check_beyond_schema(data, source)
    if "alertSeverity" in data:  # a kind a file leaves out keeps the packaged severity
        packaged = _packaged(check)["alertSeverity"]
        data = {**data, "alertSeverity": {**packaged, **(data["alertSeverity"] or {})}}
    values = {_KEYS[k]: _value(_KEYS[k], v) for k, v in data.items()}
    missing = sorted(k for k, f in _KEYS.items() if f not in values)
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


def _check_beyond_schema(data: dict[str, Any], source: str) -> None:
    """What one key's JSON Schema cannot say: the selector's grammar, the labels the
    rule pack keeps for itself."""
    if "selector" in data:
        try:
            selector_matchers(data["selector"])
        except ValueError as e:
            raise ThresholdsError(f"{source}: selector: {e}") from None
    for k in sorted(data.get("alertLabels") or {}):
        if k in RESERVED_ALERT_LABELS:
            raise ThresholdsError(
                f"{source}: alertLabels: {k!r} is set by the rule pack itself; "
                f"these cannot be replaced: {', '.join(sorted(RESERVED_ALERT_LABELS))}"
            )


DEFAULT_KEYS = tuple(sorted(_KEYS))
