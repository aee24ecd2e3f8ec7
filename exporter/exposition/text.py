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
from array import array
from collections.abc import Iterable, Iterator
from math import copysign
from typing import Any

from prometheus_client.exposition import generate_latest as _text_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as _om
from prometheus_client.samples import Sample
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


class _Family:
    """What one family kept from the last renders: its series in the order they came
    (keys and values, parallel lists), their lines as one ``body`` (the same in both
    formats) with where each line ends in it, and per format its header, which names
    its samples may use, and the parts it was last joined from with the version of the
    body they hold (not the joined bytes: joining is cheap, keeping them would double
    what a render keeps).

    One body per family, not one ``bytes`` per series: ~17,000 lines at 1,000
    containers, each a small object rewritten when its value moves, left the
    allocator's pools fragmented between passes (bench/README.md, "Memory after a full
    window")."""

    __slots__ = ("body", "ends", "header", "keys", "names_ok", "parts", "values", "version")

    def __init__(self) -> None:
        self.keys: list[_SeriesKey] = []
        self.values: list[float] = []
        self.body = b""
        self.ends = array("I")  # line j is body[ends[j - 1] (0 for the first) : ends[j]]
        self.version = 0  # counts the changes to the body
        self.header: dict[bool, bytes] = {}
        self.names_ok: dict[bool, set[str]] = {False: set(), True: set()}
        self.parts: dict[bool, tuple[int, Parts]] = {}


class Renderer:
    """Renders one pass after another, keeping what did not change between them.

    Memory is bounded by the series of the last render: a series or family that is not
    in a render is forgotten after it. Thread-safe: renders are serialised.
    """

    def __init__(self) -> None:
        self._families: dict[_FamilyKey, _Family] = {}
        self._lock = threading.Lock()

    def series(self) -> int:
        """Series lines held (tests: bounded by the last render's)."""
        return sum(len(f.keys) for f in self._families.values())

    def render(self, families: Iterable[Metric], openmetrics: bool = False) -> bytes:
        """All ``families`` in one exposition (OpenMetrics ends with ``# EOF``)."""
        return b"".join(b"".join(p) for p in self.parts(families, openmetrics))

    def parts(self, families: Iterable[Metric], openmetrics: bool = False) -> list[Parts]:
        """The exposition as one :data:`Parts` per family, in order (and ``# EOF``
        last in OpenMetrics). A family whose bytes did not change since the last
        render of this format gives the very same object as then."""
        with self._lock:
            out: list[Parts] = []
            seen: dict[_FamilyKey, _Family] = {}
            for m in families:
                key = _family_key(m, seen)
                fam = self._families.get(key) or _Family()
                seen[key] = fam
                try:
                    out.append(_plain(m, fam, openmetrics))
                except _NotPlain:
                    fam.parts.pop(openmetrics, None)
                    out.append([_library(m, openmetrics)])
            self._families = seen  # what is not in this render is forgotten
            if openmetrics:
                out.append(_EOF_PARTS)
            return out


def _plain(m: Metric, fam: _Family, openmetrics: bool) -> Parts:
    header = fam.header.get(openmetrics)
    if header is None:
        header = fam.header[openmetrics] = _header(m, openmetrics)
    keys, values = fam.keys, fam.values
    held = len(keys)
    moved: list[tuple[int, float]] = []
    samples = m.samples
    # The series come in the order of the last render, as a rule: each is compared
    # with the one at its place; a line is written again only if its value moved.
    # Nothing changes before every sample has been checked (_NotPlain leaves it all).
    names_ok = fam.names_ok[openmetrics]
    for j, s in enumerate(samples):  # _key and _moved inlined: ~17,000 samples a render
        if s.timestamp is not None or s.exemplar is not None or s.native_histogram is not None:
            raise _NotPlain
        sname = s.name
        if sname not in names_ok:
            _check_sample_name(m.name, sname, openmetrics)
            names_ok.add(sname)
        labels = s.labels
        if j >= held or keys[j] != (sname, *labels, *labels.values()):
            _reorder(m, fam, openmetrics)  # series came, went or moved
            break
        v = s.value
        last = values[j]
        if v != last or (not v and copysign(1.0, v) != copysign(1.0, last)):
            moved.append((j, v))
    else:
        if moved or len(samples) < held:
            _rewrite(fam, moved, len(samples))
    kept = fam.parts.get(openmetrics)
    if kept is not None and kept[0] == fam.version:
        return kept[1]
    parts = [header, fam.body]
    fam.parts[openmetrics] = (fam.version, parts)
    return parts


def _key(m: Metric, s: Sample, fam: _Family, openmetrics: bool) -> _SeriesKey:
    if s.timestamp is not None or s.exemplar is not None or s.native_histogram is not None:
        raise _NotPlain
    sname = s.name
    names_ok = fam.names_ok[openmetrics]
    if sname not in names_ok:
        _check_sample_name(m.name, sname, openmetrics)
        names_ok.add(sname)
    labels = s.labels
    return (sname, *labels, *labels.values())


def _moved(v: float, last: float) -> bool:
    # (0.0 and -0.0 are equal, but not the same text)
    return v != last or (not v and copysign(1.0, v) != copysign(1.0, last))


def _rewrite(fam: _Family, moved: list[tuple[int, float]], n: int) -> None:
    """The body with the ``moved`` lines' values written again (in order), and only
    the first ``n`` series: runs of unchanged lines are copied whole."""
    body, ends, values = fam.body, fam.ends, fam.values
    view = memoryview(body)
    pieces: list[bytes | memoryview] = []
    new_ends = array("I")
    shift = 0  # how much longer the body is so far
    done = 0  # the lines before this one are in pieces
    for j, v in moved:
        start = ends[j - 1] if j else 0
        if j > done:
            pieces.append(view[ends[done - 1] if done else 0 : start])
            new_ends.extend([e + shift for e in ends[done:j]] if shift else ends[done:j])
        cut = body.rfind(b" ", start, ends[j]) + 1  # the value has no space
        text = _value(v)
        pieces.append(view[start:cut])
        pieces.append(text)
        shift += cut + len(text) - ends[j]
        new_ends.append(ends[j] + shift)
        values[j] = v
        done = j + 1
    if n > done:
        pieces.append(view[ends[done - 1] if done else 0 : ends[n - 1]])
        new_ends.extend([e + shift for e in ends[done:n]] if shift else ends[done:n])
    del fam.keys[n:], values[n:]
    fam.body, fam.ends = b"".join(pieces), new_ends
    fam.version += 1


def _reorder(m: Metric, fam: _Family, openmetrics: bool) -> None:
    """The family's series in this render's order, the lines of those that were in
    the last one copied from it (a dict of them made for this render only)."""
    where = {k: i for i, k in enumerate(fam.keys)}
    body, ends, old_values = fam.body, fam.ends, fam.values
    view = memoryview(body)
    keys: list[_SeriesKey] = []
    values: list[float] = []
    pieces: list[bytes | memoryview] = []
    new_ends = array("I")
    at = 0
    for s in m.samples:
        key = _key(m, s, fam, openmetrics)
        v = s.value
        i = where.get(key)
        if i is None:
            prefix = _prefix(s.name, s.labels.items()).encode("utf-8")
            text = _value(v)
            pieces += (prefix, text)
            at += len(prefix) + len(text)
        else:
            start, end = ends[i - 1] if i else 0, ends[i]
            if _moved(v, old_values[i]):
                cut = body.rfind(b" ", start, end) + 1
                text = _value(v)
                pieces += (view[start:cut], text)
                at += cut - start + len(text)
            else:
                pieces.append(view[start:end])
                at += end - start
                v = old_values[i]
        keys.append(key)
        values.append(v)
        new_ends.append(at)
    fam.keys, fam.values = keys, values
    fam.body, fam.ends = b"".join(pieces), new_ends
    fam.version += 1


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


def _value(value: float) -> bytes:
    """A line's end: the value as prometheus_client writes it, and the newline."""
    text: str = _go_float(value)
    return text.encode("ascii") + b"\n"


def _library(m: Metric, openmetrics: bool) -> bytes:
    """One family as prometheus_client renders it."""
    if openmetrics:
        return bytes(_om_latest(_One(m))).removesuffix(OPENMETRICS_EOF)
    return bytes(_text_latest(_One(m)))
