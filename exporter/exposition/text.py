"""Render metric families as Prometheus text (0.0.4) or OpenMetrics (1.0.0) bytes.

prometheus_client's ``generate_latest`` validates and escapes every label name and
value of every sample: at 1,000 containers (~26,000 samples sharing ~1,000 label sets)
that is ~350 ms a render, most of it on label sets it has already formatted. This
renderer writes the same bytes (tests compare it with ``generate_latest`` on every
golden fixture and on prometheus_client's own process and GC families) and formats
each distinct label set once per render. A family it does not handle plainly
(exemplars, timestamps, units, native histograms, OpenMetrics-only samples, names
that need escaping) is rendered by prometheus_client itself, so the output is always
the library's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.exposition import generate_latest as _text_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as _om
from prometheus_client.utils import floatToGoString as _float_to_go_string

# Untyped in prometheus_client: typed here once.
_om_latest: Any = _om.generate_latest
_go_float: Any = _float_to_go_string

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"

_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_PLAIN_TYPES = frozenset(("counter", "gauge", "histogram", "summary", "unknown"))
_TEXT_OM_ONLY = ("_created", "_gsum", "_gcount")


class _NotPlain(Exception):
    """This family needs prometheus_client's general renderer."""


def _escape_value(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class _One:
    """A one-family "registry" for prometheus_client's renderers."""

    def __init__(self, metric: Metric) -> None:
        self.metric = metric

    def collect(self) -> Iterator[Metric]:
        yield self.metric


def render(families: Iterable[Metric], openmetrics: bool = False) -> bytes:
    """All ``families`` in one exposition (OpenMetrics ends with ``# EOF``)."""
    out: list[str] = []
    labels_cache: dict[tuple[tuple[str, str], ...], str] = {}
    for m in families:
        mark = len(out)
        try:
            _render_plain(m, openmetrics, out, labels_cache)
        except _NotPlain:
            del out[mark:]
            if openmetrics:
                text = _om_latest(_One(m)).decode("utf-8")
                out.append(text.removesuffix("# EOF\n"))
            else:
                out.append(_text_latest(_One(m)).decode("utf-8"))
    if openmetrics:
        out.append("# EOF\n")
    return "".join(out).encode("utf-8")


def _labelstr(
    items: tuple[tuple[str, str], ...], cache: dict[tuple[tuple[str, str], ...], str]
) -> str:
    hit = cache.get(items)
    if hit is None:
        pairs = sorted(items)
        for k, _ in pairs:
            if not _LABEL_NAME.match(k):
                raise _NotPlain
        hit = cache[items] = (
            "{" + ",".join(f'{k}="{_escape_value(v)}"' for k, v in pairs) + "}" if pairs else ""
        )
    return hit


def _render_plain(
    m: Metric,
    openmetrics: bool,
    out: list[str],
    cache: dict[tuple[tuple[str, str], ...], str],
) -> None:
    mtype = m.type
    if mtype not in _PLAIN_TYPES or m.unit or not _METRIC_NAME.match(m.name):
        raise _NotPlain
    if openmetrics:
        name, help_ = m.name, _escape_value(m.documentation)
    else:
        name = m.name + "_total" if mtype == "counter" else m.name
        mtype = "untyped" if mtype == "unknown" else mtype
        help_ = m.documentation.replace("\\", r"\\").replace("\n", r"\n")
    out.append(f"# HELP {name} {help_}\n# TYPE {name} {mtype}\n")
    names_ok: set[str] = set()
    om_only = tuple(m.name + s for s in _TEXT_OM_ONLY)
    for s in m.samples:
        if s.timestamp is not None or s.exemplar is not None or s.native_histogram is not None:
            raise _NotPlain
        sname = s.name
        if sname not in names_ok:
            if not _METRIC_NAME.match(sname) or (openmetrics and ":" in sname):
                raise _NotPlain
            if not openmetrics and sname in om_only:
                raise _NotPlain  # the text format moves these to a gauge family of their own
            names_ok.add(sname)
        labels = _labelstr(tuple(s.labels.items()), cache)
        out.append(f"{sname}{labels} {_go_float(s.value)}\n")
