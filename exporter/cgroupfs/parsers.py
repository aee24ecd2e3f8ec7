"""Parsers for cgroup v2/v1 and /proc files, in the kernel's exact text formats.

Contract (as in prometheus/procfs): unknown keys are ignored, because kernels add
keys over time; a known key with a malformed value raises :class:`CgroupParseError`,
because a wrong number is worse than no number. Parsers never touch the filesystem.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from .errors import CgroupParseError
from .model import (
    CpuMax,
    CpuStat,
    CpuStatV1,
    MemoryEvents,
    MemoryStat,
    Pressure,
    PressureLine,
    ProcStat,
)

_SRC = "<text>"

_CPU_STAT_KEYS = frozenset(
    {
        "usage_usec",
        "user_usec",
        "system_usec",
        "nr_periods",
        "nr_throttled",
        "throttled_usec",
        "nr_bursts",
        "burst_usec",
    }
)
_CPU_STAT_V1_KEYS = frozenset({"nr_periods", "nr_throttled", "throttled_time"})
_MEMORY_STAT_KEYS = frozenset(
    {
        "anon",
        "file",
        "inactive_file",
        "active_file",
        "workingset_refault",
        "workingset_refault_anon",
        "workingset_refault_file",
        "pgmajfault",
    }
)
_MEMORY_EVENTS_KEYS = frozenset({"low", "high", "max", "oom", "oom_kill", "oom_group_kill"})
_MEMORY_STAT_V1_BASE = (
    "rss",
    "cache",
    "inactive_file",
    "active_file",
    "workingset_refault_anon",
    "workingset_refault_file",
    "pgmajfault",
)
_MEMORY_STAT_V1_KEYS = frozenset(_MEMORY_STAT_V1_BASE) | {
    "total_" + k for k in _MEMORY_STAT_V1_BASE
}


def _int(value: str, key: str, source: str) -> int:
    # int() also takes "1_000": the kernel never writes that, so it is garbage here.
    if "_" in value:
        raise CgroupParseError(source, f"{key}: not an integer: {value!r}")
    try:
        return int(value)
    except ValueError:
        raise CgroupParseError(source, f"{key}: not an integer: {value!r}") from None


def parse_flat_keyed(
    text: str, source: str = _SRC, keys: Collection[str] | None = None
) -> dict[str, int]:
    """``key value`` lines (cpu.stat, memory.stat, memory.events) into a dict.

    Every line must have exactly two fields: a truncated file (a line with one field)
    is malformed, not silently short. Values must be integers. With ``keys``, only
    those keys are converted and returned; the values of other keys are not looked at
    (unknown keys are ignored, and memory.stat has ~60 keys of which we use 7).
    """
    # Fast path (the sampler's hot loop): one split, pairs of tokens. It only accepts a
    # file whose every line has exactly two fields; anything else takes the slow path
    # below, which finds and names the bad line.
    tokens = text.split()
    if len(tokens) == 2 * (text.count("\n") + (not text.endswith("\n"))):
        it = iter(tokens)
        raw = dict(zip(it, it, strict=True))  # C speed; memory.stat has ~60 keys
        fast: dict[str, int] = {}
        for k in raw if keys is None else keys:
            v = raw.get(k)
            if v is None:
                continue
            if "_" in v or not (v.isdigit() or (v[0] == "-" and v[1:].isdigit())):
                break
            fast[k] = int(v)
        else:
            return fast
    out: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise CgroupParseError(source, f"line {lineno}: expected 'key value', got {line!r}")
        if keys is None or parts[0] in keys:
            out[parts[0]] = _int(parts[1], parts[0], source)
    return out


def _require(d: dict[str, int], keys: Iterable[str], source: str) -> None:
    missing = [k for k in keys if k not in d]
    if missing:
        raise CgroupParseError(source, f"missing key(s): {', '.join(missing)}")


def parse_cpu_stat(text: str, source: str = _SRC) -> CpuStat:
    """cgroup v2 ``cpu.stat``. ``usage_usec user_usec system_usec`` are always present;
    the throttle and burst keys only where the cpu controller is enabled."""
    d = parse_flat_keyed(text, source, _CPU_STAT_KEYS)
    _require(d, ("usage_usec", "user_usec", "system_usec"), source)
    return CpuStat(
        usage_usec=d["usage_usec"],
        user_usec=d["user_usec"],
        system_usec=d["system_usec"],
        nr_periods=d.get("nr_periods"),
        nr_throttled=d.get("nr_throttled"),
        throttled_usec=d.get("throttled_usec"),
        nr_bursts=d.get("nr_bursts"),
        burst_usec=d.get("burst_usec"),
    )


def parse_cpu_stat_v1(text: str, source: str = _SRC) -> CpuStatV1:
    """cgroup v1 ``cpu.stat`` (cpu controller): ``nr_periods nr_throttled throttled_time``."""
    d = parse_flat_keyed(text, source, _CPU_STAT_V1_KEYS)
    _require(d, ("nr_periods", "nr_throttled", "throttled_time"), source)
    return CpuStatV1(
        nr_periods=d["nr_periods"],
        nr_throttled=d["nr_throttled"],
        throttled_time_ns=d["throttled_time"],
    )


def parse_cpu_max(text: str, source: str = _SRC) -> CpuMax:
    """cgroup v2 ``cpu.max``: ``$MAX $PERIOD`` where ``$MAX`` may be ``max``."""
    parts = text.split()
    if len(parts) != 2:
        raise CgroupParseError(source, f"expected '<quota|max> <period>', got {text.strip()!r}")
    quota = None if parts[0] == "max" else _int(parts[0], "quota", source)
    period = _int(parts[1], "period", source)
    if period <= 0 or (quota is not None and quota <= 0):
        raise CgroupParseError(source, f"non-positive quota or period: {text.strip()!r}")
    return CpuMax(quota_usec=quota, period_usec=period)


def parse_cfs_v1(
    quota_text: str,
    period_text: str,
    source: str = _SRC,
    period_source: str | None = None,
) -> CpuMax:
    """cgroup v1 ``cpu.cfs_quota_us`` (-1 = unlimited) and ``cpu.cfs_period_us``.

    ``source`` names the quota file and ``period_source`` the period file (it defaults
    to ``source``), so an error points at the file that is actually wrong.
    """
    psource = source if period_source is None else period_source
    quota = parse_single_int(quota_text, source)
    period = parse_single_int(period_text, psource)
    if period <= 0:
        raise CgroupParseError(psource, f"non-positive period: {period}")
    return CpuMax(quota_usec=None if quota < 0 else quota, period_usec=period)


def parse_single_int(text: str, source: str = _SRC) -> int:
    """A file holding one integer (``memory.current``, ``cpu.weight``, ``cpu.shares``)."""
    value = text.strip()
    if not value:
        raise CgroupParseError(source, "empty file")
    return _int(value, "value", source)


def parse_max_or_int(text: str, source: str = _SRC) -> int | None:
    """``memory.max``/``memory.high``: an integer, or ``max`` for unlimited (None)."""
    value = text.strip()
    if value == "max":
        return None
    return parse_single_int(value, source)


def _psi_line(t: list[str], i: int) -> PressureLine | None:
    a, b, c, d = t[i], t[i + 1], t[i + 2], t[i + 3]
    if a[:6] != "avg10=" or b[:6] != "avg60=" or c[:7] != "avg300=" or d[:6] != "total=":
        return None
    total = d[6:]
    if "_" in total:
        return None
    return PressureLine(float(a[6:]), float(b[6:]), float(c[7:]), int(total))


def parse_pressure(text: str, source: str = _SRC) -> Pressure:
    """A PSI file (``cpu.pressure``, ``/proc/pressure/memory``, ...).

    ``some avg10=0.00 avg60=0.00 avg300=0.00 total=0`` and optionally a ``full``
    line. ``total`` is cumulative stall time in microseconds.
    """
    t = text.split()
    if (len(t) == 5 or len(t) == 10) and t[0] == "some" and (len(t) == 5 or t[5] == "full"):
        try:  # fast path: the kernel's exact layout
            some = _psi_line(t, 1)
            full = _psi_line(t, 6) if len(t) == 10 else None
            if some is not None and (len(t) == 5 or full is not None):
                return Pressure(some=some, full=full)
        except ValueError:
            pass  # the slow path names the problem
    lines: dict[str, PressureLine] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        kind, *fields = line.split()
        if kind not in ("some", "full"):
            continue
        values: dict[str, str] = {}
        for f in fields:
            key, sep, val = f.partition("=")
            if not sep:
                raise CgroupParseError(source, f"{kind}: field without '=': {f!r}")
            values[key] = val
        try:
            lines[kind] = PressureLine(
                avg10=float(values["avg10"]),
                avg60=float(values["avg60"]),
                avg300=float(values["avg300"]),
                total_usec=int(values["total"]),
            )
        except KeyError as e:
            raise CgroupParseError(source, f"{kind}: missing {e.args[0]}") from None
        except ValueError:
            raise CgroupParseError(source, f"{kind}: malformed value in {line!r}") from None
    if "some" not in lines:
        raise CgroupParseError(source, "no 'some' line")
    return Pressure(some=lines["some"], full=lines.get("full"))


def parse_memory_stat(text: str, source: str = _SRC) -> MemoryStat:
    """cgroup v2 ``memory.stat``; keys missing on older kernels read as 0 (they are
    counters or sizes the kernel did not split out, not errors).

    Before 5.9 the kernel had one ``workingset_refault`` counter, and it counted file
    pages only (anon pages joined the workingset in 5.9): it maps to the file refaults.
    """
    d = parse_flat_keyed(text, source, _MEMORY_STAT_KEYS)
    _require(d, ("anon", "file"), source)
    return MemoryStat(
        anon=d["anon"],
        file=d["file"],
        inactive_file=d.get("inactive_file", 0),
        active_file=d.get("active_file", 0),
        workingset_refault_anon=d.get("workingset_refault_anon", 0),
        workingset_refault_file=d.get("workingset_refault_file", d.get("workingset_refault", 0)),
        pgmajfault=d.get("pgmajfault", 0),
    )


def parse_memory_events(text: str, source: str = _SRC) -> MemoryEvents:
    """cgroup v2 ``memory.events`` (``low high max oom oom_kill oom_group_kill``);
    ``max`` and ``oom`` exist on every kernel with cgroup2, the others read as 0."""
    d = parse_flat_keyed(text, source, _MEMORY_EVENTS_KEYS)
    _require(d, ("max", "oom"), source)
    return MemoryEvents(
        low=d.get("low", 0),
        high=d.get("high", 0),
        max=d["max"],
        oom=d["oom"],
        oom_kill=d.get("oom_kill", 0),
        oom_group_kill=d.get("oom_group_kill", 0),
    )


def parse_proc_stat(text: str, source: str = "/proc/stat") -> ProcStat:
    """``/proc/stat``: context switches, the aggregate ``cpu`` line (steal is the 8th
    value), the number of ``cpuN`` lines, and runnable/blocked task counts.

    Kernels before 2.6.11 (and some container runtimes' fake procfs) print fewer than
    8 CPU times: steal is then unknown (``None``), never 0."""
    ctxt: int | None = None
    steal: int | None = None
    total = 0
    have_cpu = False
    cpus = 0
    running = blocked = None
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        key = parts[0]
        if key == "cpu":
            ticks = [_int(v, "cpu", source) for v in parts[1:]]
            if len(ticks) < 4:
                raise CgroupParseError(source, f"cpu line has {len(ticks)} fields, need 4")
            steal = ticks[7] if len(ticks) >= 8 else None
            # guest/guest_nice are already included in user/nice: count the first 8.
            total = sum(ticks[:8])
            have_cpu = True
        elif key.startswith("cpu"):
            cpus += 1
        elif key == "ctxt" and len(parts) == 2:
            ctxt = _int(parts[1], "ctxt", source)
        elif key == "procs_running" and len(parts) == 2:
            running = _int(parts[1], key, source)
        elif key == "procs_blocked" and len(parts) == 2:
            blocked = _int(parts[1], key, source)
    if ctxt is None or not have_cpu:
        raise CgroupParseError(source, "missing 'cpu' or 'ctxt' line")
    return ProcStat(
        ctxt=ctxt,
        steal_ticks=steal,
        total_ticks=total,
        cpus=cpus,
        procs_running=running,
        procs_blocked=blocked,
    )


def parse_meminfo_total(text: str, source: str = "/proc/meminfo") -> int:
    """``MemTotal`` from ``/proc/meminfo`` in bytes (the node's memory capacity)."""
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            if len(parts) < 2:
                break
            mult = 1024 if len(parts) > 2 and parts[2] == "kB" else 1
            return _int(parts[1], "MemTotal", source) * mult
    raise CgroupParseError(source, "no MemTotal line")


def parse_memory_stat_v1(text: str, source: str = _SRC) -> MemoryStat:
    """cgroup v1 ``memory.stat``: the hierarchical ``total_*`` keys (they include
    descendants, like v2's), falling back to the local keys."""
    d = parse_flat_keyed(text, source, _MEMORY_STAT_V1_KEYS)

    def get(key: str) -> int:
        return d.get("total_" + key, d.get(key, 0))

    if "rss" not in d and "total_rss" not in d:
        raise CgroupParseError(source, "missing key(s): rss")
    return MemoryStat(
        anon=get("rss"),
        file=get("cache"),
        inactive_file=get("inactive_file"),
        active_file=get("active_file"),
        workingset_refault_anon=get("workingset_refault_anon"),
        workingset_refault_file=get("workingset_refault_file"),
        pgmajfault=get("pgmajfault"),
    )


# cgroup v1 writes "no limit" as the largest page-aligned signed 64-bit value:
# 0x7FFFFFFFFFFFF000 with 4 KiB pages, but 0x7FFFFFFFFFFF0000 with 64 KiB pages
# (arm64, ppc64le). Anything at or above 2**62 bytes (4 EiB) is no real limit.
V1_UNLIMITED = 0x7FFFFFFFFFFFF000
_V1_UNLIMITED_FLOOR = 1 << 62


def parse_v1_limit_bytes(text: str, source: str = _SRC) -> int | None:
    """cgroup v1 ``memory.limit_in_bytes``: bytes, or None for "no limit"."""
    value = parse_single_int(text, source)
    return None if value >= _V1_UNLIMITED_FLOOR else value
