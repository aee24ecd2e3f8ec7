"""Read every file of one cgroup, on whichever layout the node has.

With ``procfs`` (the node's own files), ``discovery`` (the walk) and ``mode`` (what
the node offers), this package is where a sampler pass reads files; nothing else in
it does (CONTRIBUTING.md lists the I/O done elsewhere: probe, identity sources,
thresholds file, HTTP). It stays free of Prometheus and of global paths: it is given
the node's facts (roots) and a cgroup path.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from . import parsers as p
from .errors import CgroupVanishedError
from .files import read_text as read_text  # re-exported (tests patch it here)
from .mode import CgroupMode, NodeLayout
from .model import CgroupReading, CpuMax, CpuStatV1, MemoryEvents, MemoryStat

_GONE = (errno.ENOENT, errno.ENODEV, errno.ESRCH)

_T = TypeVar("_T")


# What a cgroup's files said at their last read: directory -> file name -> (text, the
# parser's result for it).
_Parsed = dict[str, dict[str, tuple[str, object]]]


class _Files:
    """Reads the files of one cgroup read, counting what was there and what was not.

    A file whose text is the same as at its last read (this pass or the last) is not
    parsed again: a parser is a pure function of the text and the file's path, so its
    result is the same, and it is shared (parsed records are never changed after
    parsing). Most of a node's cgroup files (limits, weights, events, the PSI of idle
    cgroups, every file of a sandbox) do not change between passes."""

    def __init__(self, parsed: _Parsed, last: _Parsed) -> None:
        self.read_count = 0
        self.missing: list[str] = []
        self._parsed = parsed
        self._last = last

    def text(self, directory: str, name: str) -> str | None:
        return self._text(directory + "/" + name, name)

    def _text(self, fp: str, name: str) -> str | None:
        try:
            text = read_text(fp)
        except OSError as e:
            # ENODEV: the cgroup was removed between open() and read().
            if e.errno in _GONE:
                raise CgroupVanishedError(e.errno, f"cgroup vanished while reading {fp}") from e
            raise
        if text is None:
            self.missing.append(name)
        else:
            self.read_count += 1
        return text

    def parse(self, directory: str, name: str, parser: Callable[[str, str], _T]) -> _T | None:
        """Read and parse one file; None (no data) when it does not exist."""
        fp = directory + "/" + name
        text = self._text(fp, name)
        if text is None:
            return None
        kept = self._parsed.get(directory)
        if kept is None:  # the first file of this directory in this pass: take it over
            kept = self._parsed[directory] = self._last.pop(directory, {})
        hit = kept.get(name)
        if hit is not None and hit[0] == text:
            value: _T = hit[1]  # type: ignore[assignment]  # what `parser` made of it
        else:
            value = parser(text, fp)
        kept[name] = (text, value)
        return value


@dataclass(slots=True)
class _Controllers:
    """What the cpu and memory controllers report: from v2 files, or from v1 on hybrid."""

    cpu_stat_v1: CpuStatV1 | None = None
    cpu_max: CpuMax | None = None
    cpu_weight: int | None = None
    memory_current: int | None = None
    memory_max: int | None = None
    memory_high: int | None = None
    memory_stat: MemoryStat | None = None
    memory_events: MemoryEvents | None = None


def _join(root: str, path: str) -> str:
    """``root`` + a cgroup path relative to it (``/`` is the root itself)."""
    return root if path in ("", "/") else root + path


class CgroupReader:
    """Reads cgroups of one node, given its :class:`NodeLayout`."""

    def __init__(self, facts: NodeLayout) -> None:
        if facts.v2_root is None:
            raise ValueError(f"no cgroup2 hierarchy to read ({facts.reason})")
        self.facts = facts
        self.v2_root = facts.v2_root
        self.hybrid = facts.mode is CgroupMode.HYBRID
        # This pass's parsed files and the last pass's not read again yet (begin_pass):
        # what is kept is what the cgroups read in two passes hold, each once, however
        # many come and go.
        self._parsed: _Parsed = {}
        self._parsed_last: _Parsed = {}

    def begin_pass(self) -> None:
        """A new pass: files not read since the last one are forgotten after it."""
        self._parsed_last, self._parsed = self._parsed, {}

    def read(self, path: str) -> CgroupReading:
        """Read one cgroup (``path`` relative to the cgroup2 root, starting with ``/``).

        A file that does not exist is "no data" (``None`` in the reading, its name in
        ``missing``). Raises :class:`CgroupVanishedError` if the cgroup disappears, and
        :class:`~exporter.cgroupfs.errors.CgroupParseError` for a malformed file.
        """
        base = _join(self.v2_root, path)
        files = _Files(self._parsed, self._parsed_last)
        cpu_stat = files.parse(base, "cpu.stat", p.parse_cpu_stat)
        cpu_pressure = files.parse(base, "cpu.pressure", p.parse_pressure)
        memory_pressure = files.parse(base, "memory.pressure", p.parse_pressure)
        io_pressure = files.parse(base, "io.pressure", p.parse_pressure)
        ctl = self._read_v1(path, files) if self.hybrid else self._read_v2(base, files)

        # A cgroup removed (before or during the read) shows as files that do not
        # exist: tell that apart from files this kernel or layout never has. The
        # extra stat only happens when something was missing.
        if files.missing and not os.path.isdir(base):
            raise CgroupVanishedError(errno.ENOENT, f"cgroup vanished while reading: {base}")
        return CgroupReading(
            cpu_stat=cpu_stat,
            cpu_stat_v1=ctl.cpu_stat_v1,
            cpu_max=ctl.cpu_max,
            cpu_weight=ctl.cpu_weight,
            cpu_pressure=cpu_pressure,
            memory_current=ctl.memory_current,
            memory_max=ctl.memory_max,
            memory_high=ctl.memory_high,
            memory_stat=ctl.memory_stat,
            memory_events=ctl.memory_events,
            memory_pressure=memory_pressure,
            io_pressure=io_pressure,
            files_read=files.read_count,
            missing=tuple(files.missing),
        )

    @staticmethod
    def _read_v2(base: str, files: _Files) -> _Controllers:
        return _Controllers(
            cpu_max=files.parse(base, "cpu.max", p.parse_cpu_max),
            cpu_weight=files.parse(base, "cpu.weight", p.parse_cpu_weight),
            memory_current=files.parse(base, "memory.current", p.parse_single_int),
            memory_max=files.parse(base, "memory.max", p.parse_max_or_int),
            memory_high=files.parse(base, "memory.high", p.parse_max_or_int),
            memory_stat=files.parse(base, "memory.stat", p.parse_memory_stat),
            memory_events=files.parse(base, "memory.events", p.parse_memory_events),
        )

    def _read_v1(self, path: str, files: _Files) -> _Controllers:
        """Hybrid node: quota, throttling and limits live in the v1 controllers at the
        same relative path (systemd and the kubelet mirror the tree in every hierarchy).
        A v1 directory that does not exist means "no data", not an error."""
        out = _Controllers()
        cpu_root = self.facts.v1_cpu_root
        if cpu_root is not None:
            d = _join(cpu_root, path)
            if os.path.isdir(d):
                out.cpu_stat_v1 = files.parse(d, "cpu.stat", p.parse_cpu_stat_v1)
                q = files.text(d, "cpu.cfs_quota_us")
                per = files.text(d, "cpu.cfs_period_us")
                if q is not None and per is not None:
                    out.cpu_max = p.parse_cfs_v1(
                        q,
                        per,
                        os.path.join(d, "cpu.cfs_quota_us"),
                        period_source=os.path.join(d, "cpu.cfs_period_us"),
                    )
                shares = files.parse(d, "cpu.shares", p.parse_cpu_shares)
                if shares is not None:
                    out.cpu_weight = shares_to_weight(shares)
        mem_root = self.facts.v1_memory_root
        if mem_root is not None:
            d = _join(mem_root, path)
            if os.path.isdir(d):
                out.memory_current = files.parse(d, "memory.usage_in_bytes", p.parse_single_int)
                out.memory_max = files.parse(d, "memory.limit_in_bytes", p.parse_v1_limit_bytes)
                out.memory_stat = files.parse(d, "memory.stat", p.parse_memory_stat_v1)
                failcnt = files.parse(d, "memory.failcnt", p.parse_single_int)
                if failcnt is not None:
                    # v1 has no memory.events; failcnt counts hits of the limit ("max").
                    out.memory_events = MemoryEvents(max=failcnt)
        return out


def shares_to_weight(shares: int) -> int:
    """v1 ``cpu.shares`` → v2 ``cpu.weight`` (the conversion runc and systemd use)."""
    shares = max(2, min(shares, 262144))
    return 1 + ((shares - 2) * 9999) // 262142
