"""Render metric families as Prometheus text (0.0.4) or OpenMetrics (1.0.0) bytes.

prometheus_client's ``generate_latest`` validates and escapes every label name and
value of every sample, on every render. This renderer writes the same bytes (tests
compare it with ``generate_latest`` on every golden fixture, on prometheus_client's own
process and GC families, and across passes whose series change) and keeps, between
renders, what does not change from one pass to the next: a series' identity (its
sample name and label set) is stable across passes, so each series' line is formatted
once and written again only when its value changes, and a family none of whose lines
changed gives the same parts as last time (and, gzipped, the same compressed run:
``exporter.exposition.deflate``). A render of a pass where few values moved is mostly
joining bytes.

A family it does not handle plainly (exemplars, timestamps, units, native histograms,
OpenMetrics-only samples, names that need escaping) is rendered by prometheus_client
itself, every time, so the output is always the library's.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Iterator
from math import copysign
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
OPENMETRICS_EOF = b"# EOF\n"
_EOF_PARTS = [OPENMETRICS_EOF]

_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_PLAIN_TYPES = frozenset(("counter", "gauge", "histogram", "summary", "unknown"))
_TEXT_OM_ONLY = ("_created", "_gsum", "_gcount")

# A series, as a family's samples name it: (sample name, its label names, then their
# values, in the labels' order). One flat tuple, not one of (name, value) pairs: it is
# kept for every series between renders (~100 bytes each instead of ~300 at 3 labels);
# its length gives the number of labels, so no two label sets share a key.
_SeriesKey = tuple[str, ...]
# A family of one render: (name, type, HELP, unit, how many before it had the same).
_FamilyKey = tuple[str, str, str, str, int]
# One family's bytes, as the pieces they join from. The same object from one render to
# the next (``is``) means the same bytes (deflate.Gzipper keeps its compressed run).
Parts = list[bytes]


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


class _Line:
    """One series' line as last written: ``prefix`` (name and labels) + its value."""

    __slots__ = ("line", "prefix_len", "used", "value")

    def __init__(self, value: float, line: bytes, prefix_len: int, used: int) -> None:
        self.value = value
        self.line = line
        self.prefix_len = prefix_len
        self.used = used  # the render that last wrote it


class _Family:
    """What one family kept from the last renders: its lines (the same in both
    formats), and per format its header, which names its samples may use, and the
    parts it was last joined from (not the joined bytes: joining is cheap, keeping
    them would double what a render keeps)."""

    __slots__ = ("header", "lines", "names_ok", "parts")

    def __init__(self) -> None:
        self.lines: dict[_SeriesKey, _Line] = {}
        self.header: dict[bool, bytes] = {}
        self.names_ok: dict[bool, set[str]] = {False: set(), True: set()}
        self.parts: dict[bool, Parts] = {}


class Renderer:
    """Renders one pass after another, keeping what did not change between them.

    Memory is bounded by the series of the last render: a series or family that is not
    in a render is forgotten after it. Thread-safe: renders are serialised.
    """

    def __init__(self) -> None:
        self._families: dict[_FamilyKey, _Family] = {}
        self._renders = 0
        self._lock = threading.Lock()

    def series(self) -> int:
        """Series lines held (tests: bounded by the last render's)."""
        return sum(len(f.lines) for f in self._families.values())

    def render(self, families: Iterable[Metric], openmetrics: bool = False) -> bytes:
        """All ``families`` in one exposition (OpenMetrics ends with ``# EOF``)."""
        return b"".join(b"".join(p) for p in self.parts(families, openmetrics))

    def parts(self, families: Iterable[Metric], openmetrics: bool = False) -> list[Parts]:
        """The exposition as one :data:`Parts` per family, in order (and ``# EOF``
        last in OpenMetrics). A family whose bytes did not change since the last
        render of this format gives the very same object as then."""
        with self._lock:
            self._renders += 1
            out: list[Parts] = []
            seen: dict[_FamilyKey, _Family] = {}
            for m in families:
                key = _family_key(m, seen)
                fam = self._families.get(key) or _Family()
                seen[key] = fam
                try:
                    out.append(self._plain(m, fam, openmetrics))
                except _NotPlain:
                    fam.parts.pop(openmetrics, None)
                    out.append([_library(m, openmetrics)])
            self._families = seen  # what is not in this render is forgotten
            if openmetrics:
                out.append(_EOF_PARTS)
            return out

    def _plain(self, m: Metric, fam: _Family, openmetrics: bool) -> Parts:
        header = fam.header.get(openmetrics)
        if header is None:
            header = fam.header[openmetrics] = _header(m, openmetrics)
        names_ok = fam.names_ok[openmetrics]
        lines = fam.lines
        used = self._renders
        parts = [header]
        append = parts.append
        distinct = 0
        for s in m.samples:
            if s.timestamp is not None or s.exemplar is not None or s.native_histogram is not None:
                raise _NotPlain
            sname = s.name
            if sname not in names_ok:
                _check_sample_name(m.name, sname, openmetrics)
                names_ok.add(sname)
            labels = s.labels
            key = (sname, *labels, *labels.values())
            v = s.value
            e = lines.get(key)
            if e is None:
                prefix = _prefix(sname, labels.items()).encode("utf-8")
                e = lines[key] = _Line(v, _line(prefix, v), len(prefix), 0)
            elif v != e.value or (not v and copysign(1.0, v) != copysign(1.0, e.value)):
                e.value = v  # (0.0 and -0.0 are equal, but not the same text)
                e.line = _line(e.line[: e.prefix_len], v)
            if e.used != used:
                e.used = used
                distinct += 1
            append(e.line)
        if len(lines) > distinct:  # some series were not in this render: forget them
            fam.lines = {k: e for k, e in lines.items() if e.used == used}
        last = fam.parts.get(openmetrics)
        if last is not None and parts == last:  # pointer compares: the lines are kept
            return last
        fam.parts[openmetrics] = parts
        return parts


def render(families: Iterable[Metric], openmetrics: bool = False) -> bytes:
    """All ``families`` in one exposition, rendered afresh (no earlier render kept)."""
    return Renderer().render(families, openmetrics)


def _family_key(m: Metric, seen: dict[_FamilyKey, _Family]) -> _FamilyKey:
    n = 0
    while (key := (m.name, m.type, m.documentation, m.unit, n)) in seen:
        n += 1  # the same family twice in one render: each keeps its own state
    return key


def _header(m: Metric, openmetrics: bool) -> bytes:
    mtype = m.type
    if mtype not in _PLAIN_TYPES or m.unit or not _METRIC_NAME.match(m.name):
        raise _NotPlain
    if openmetrics:
        name, help_ = m.name, _escape_value(m.documentation)
    else:
        name = m.name + "_total" if mtype == "counter" else m.name
        mtype = "untyped" if mtype == "unknown" else mtype
        help_ = m.documentation.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {help_}\n# TYPE {name} {mtype}\n".encode()


def _check_sample_name(family: str, sname: str, openmetrics: bool) -> None:
    if not _METRIC_NAME.match(sname) or (openmetrics and ":" in sname):
        raise _NotPlain
    if not openmetrics and sname in tuple(family + s for s in _TEXT_OM_ONLY):
        raise _NotPlain  # the text format moves these to a gauge family of their own


def _prefix(sname: str, items: Iterable[tuple[str, str]]) -> str:
    """``name{labels} `` with the labels sorted and escaped, as prometheus_client
    writes them."""
    pairs = sorted(items)
    if not pairs:
        return sname + " "
    for k, _ in pairs:
        if not _LABEL_NAME.match(k):
            raise _NotPlain
    return sname + "{" + ",".join(f'{k}="{_escape_value(v)}"' for k, v in pairs) + "} "


def _line(prefix: bytes, value: float) -> bytes:
    text: str = _go_float(value)
    return prefix + text.encode("ascii") + b"\n"


def _library(m: Metric, openmetrics: bool) -> bytes:
    """One family as prometheus_client renders it."""
    if openmetrics:
        return bytes(_om_latest(_One(m))).removesuffix(OPENMETRICS_EOF)
    return bytes(_text_latest(_One(m)))
