"""Parsers for cgroup v2/v1 and /proc files, in the kernel's exact text formats.

Contract (as in prometheus/procfs): unknown keys are ignored, because kernels add
keys over time; a known key with a malformed value raises :class:`CgroupParseError`,
because a wrong number is worse than no number. Parsers never touch the filesystem.

"Malformed" includes values the kernel cannot write: its counters are u64 (never
negative, never above 2**64 - 1), PSI averages are percentages and PSI totals are
microsecond counters, ``cpu.max`` periods lie in 1 ms..1 s. A value outside the
kernel's range is rejected like a value that is not a number, so nothing implausible
reaches the window or the exposition (docs/metrics.md, "What the exporter refuses").
Every parser raises :class:`CgroupParseError` and nothing else, whatever the text.
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

U64_MAX = 2**64 - 1
_U64_DIGITS = len(str(U64_MAX))  # 20: a longer run of digits is out of range unread
# cpu.max / cpu.cfs_period_us: the kernel accepts periods of 1 ms..1 s and quotas of
# at least 1 ms, up to its bandwidth limit (2**44 - 1 us, about 204 days per period).
PERIOD_MIN_US, PERIOD_MAX_US = 1_000, 1_000_000
QUOTA_MIN_US, QUOTA_MAX_US = 1_000, 2**44 - 1
# cgroup v2 cpu.weight and v1 cpu.shares: the ranges the kernel enforces on writes.
WEIGHT_MIN, WEIGHT_MAX = 1, 10_000
SHARES_MIN, SHARES_MAX = 2, 262_144

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


def _short(value: str) -> str:
    """A value for an error message: a 5,000-digit number is named, not printed."""
    return repr(value) if len(value) <= 40 else f"{value[:20]!r}... ({len(value)} characters)"


def _int(value: str, key: str, source: str, lo: int = 0, hi: int = U64_MAX) -> int:
    """A decimal integer in ``[lo, hi]`` (default: a u64 counter), as the kernel writes
    it: ASCII digits with an optional ``-``. ``int()`` alone would also take ``1_000``,
    ``+5``, ``\u0665`` or spaces, and spend seconds on a 100,000-digit number."""
    digits = value[1:] if value[:1] == "-" else value
    if not (digits.isascii() and digits.isdigit()):
        raise CgroupParseError(source, f"{key}: not an integer: {_short(value)}")
    if len(digits) > _U64_DIGITS:
        raise CgroupParseError(source, f"{key}: out of range: {_short(value)}")
    n = int(value)
    if not lo <= n <= hi:
        raise CgroupParseError(source, f"{key}: out of range [{lo}, {hi}]: {n}")
    return n


def parse_flat_keyed(
    text: str, source: str = _SRC, keys: Collection[str] | None = None
) -> dict[str, int]:
    """``key value`` lines (cpu.stat, memory.stat, memory.events) into a dict.

    Every line must have exactly two fields: a truncated file (a line with one field)
    is malformed, not silently short. Values must be u64 integers (every flat-keyed
    file the kernel writes holds counters or sizes). With ``keys``, only those keys
    are converted and returned; the values of other keys are not looked at (unknown
    keys are ignored, and memory.stat has ~60 keys of which we use 7).
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
            if len(v) > _U64_DIGITS or not (v.isascii() and v.isdigit()):
                break
            n = int(v)
            if n > U64_MAX:
                break
            fast[k] = n
        else:
            return fast
    out: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise CgroupParseError(
                source, f"line {lineno}: expected 'key value', got {_short(line)}"
            )
        if keys is None or parts[0] in keys:
            out[parts[0]] = _int(parts[1], parts[0], source)
    return out


def _require(d: dict[str, int], keys: Iterable[str], source: str) -> None:
    missing = [k for k in keys if k not in d]
    if missing:
        raise CgroupParseError(source, f"missing key(s): {', '.join(missing)}")


def _throttled_within_periods(throttled: int | None, periods: int | None, source: str) -> None:
    # The kernel counts a throttled period only among the periods it counts.
    if throttled is not None and (periods is None or throttled > periods):
        raise CgroupParseError(source, f"nr_throttled {throttled} above nr_periods {periods}")


def parse_cpu_stat(text: str, source: str = _SRC) -> CpuStat:
    """cgroup v2 ``cpu.stat``. ``usage_usec user_usec system_usec`` are always present;
    the throttle and burst keys only where the cpu controller is enabled."""
    d = parse_flat_keyed(text, source, _CPU_STAT_KEYS)
    _require(d, ("usage_usec", "user_usec", "system_usec"), source)
    _throttled_within_periods(d.get("nr_throttled"), d.get("nr_periods"), source)
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
    _throttled_within_periods(d["nr_throttled"], d["nr_periods"], source)
    return CpuStatV1(
        nr_periods=d["nr_periods"],
        nr_throttled=d["nr_throttled"],
        throttled_time_ns=d["throttled_time"],
    )


def parse_cpu_max(text: str, source: str = _SRC) -> CpuMax:
    """cgroup v2 ``cpu.max``: ``$MAX $PERIOD`` where ``$MAX`` may be ``max``."""
    parts = text.split()
    if len(parts) != 2:
        raise CgroupParseError(
            source, f"expected '<quota|max> <period>', got {_short(text.strip())}"
        )
    quota = None if parts[0] == "max" else _quota(parts[0], "quota", source)
    return CpuMax(quota_usec=quota, period_usec=_period(parts[1], source))


def _quota(value: str, key: str, source: str) -> int:
    return _int(value, key, source, QUOTA_MIN_US, QUOTA_MAX_US)


def _period(value: str, source: str) -> int:
    return _int(value, "period", source, PERIOD_MIN_US, PERIOD_MAX_US)


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
    quota_value = _single(quota_text, source)
    quota = None if quota_value == "-1" else _quota(quota_value, "value", source)
    return CpuMax(quota_usec=quota, period_usec=_period(_single(period_text, psource), psource))


def _single(text: str, source: str) -> str:
    value = text.strip()
    if not value:
        raise CgroupParseError(source, "empty file")
    return value


def parse_single_int(text: str, source: str = _SRC) -> int:
    """A file holding one u64 (``memory.current``, ``memory.failcnt``, ...)."""
    return _int(_single(text, source), "value", source)


def parse_cpu_weight(text: str, source: str = _SRC) -> int:
    """cgroup v2 ``cpu.weight`` (1..10000)."""
    return _int(_single(text, source), "value", source, WEIGHT_MIN, WEIGHT_MAX)


def parse_cpu_shares(text: str, source: str = _SRC) -> int:
    """cgroup v1 ``cpu.shares`` (2..262144)."""
    return _int(_single(text, source), "value", source, SHARES_MIN, SHARES_MAX)


def parse_max_or_int(text: str, source: str = _SRC) -> int | None:
    """``memory.max``/``memory.high``: an integer, or ``max`` for unlimited (None)."""
    value = text.strip()
    if value == "max":
        return None
    return parse_single_int(value, source)


def _psi_line(t: list[str], i: int) -> PressureLine | None:
    """The fast path's reading of one line; None sends the text to the slow path."""
    a, b, c, d = t[i], t[i + 1], t[i + 2], t[i + 3]
    if a[:6] != "avg10=" or b[:6] != "avg60=" or c[:7] != "avg300=" or d[:6] != "total=":
        return None
    total = d[6:]
    if len(total) > _U64_DIGITS or not (total.isascii() and total.isdigit()):
        return None
    avg10, avg60, avg300, total_usec = _avg(a[6:]), _avg(b[6:]), _avg(c[7:]), int(total)
    if avg10 is None or avg60 is None or avg300 is None or total_usec > U64_MAX:
        return None
    return PressureLine(avg10, avg60, avg300, total_usec)


def _avg(text: str) -> float | None:
    """A PSI average: a percentage the kernel writes as ``%lu.%02lu`` (0.00..100.00).
    float() alone would take ``nan``, ``inf``, ``1e400`` and ``1_0``."""
    whole, dot, frac = text.partition(".")
    if not (dot and whole.isascii() and whole.isdigit() and frac.isascii() and frac.isdigit()):
        return None
    if len(whole) > 3:
        return None
    v = float(text)
    return v if v <= 100.0 else None


def parse_pressure(text: str, source: str = _SRC) -> Pressure:
    """A PSI file (``cpu.pressure``, ``/proc/pressure/memory``, ...).

    ``some avg10=0.00 avg60=0.00 avg300=0.00 total=0`` and optionally a ``full``
    line. ``total`` is cumulative stall time in microseconds.
    """
    t = text.split()
    if (len(t) == 5 or len(t) == 10) and t[0] == "some" and (len(t) == 5 or t[5] == "full"):
        # Fast path: the kernel's exact layout. Anything else, or a bad value, takes
        # the slow path below, which names the problem.
        some = _psi_line(t, 1)
        full = _psi_line(t, 6) if len(t) == 10 else None
        if some is not None and (len(t) == 5 or full is not None):
            return Pressure(some=some, full=full)
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
                raise CgroupParseError(source, f"{kind}: field without '=': {_short(f)}")
            values[key] = val
        lines[kind] = _psi_slow(kind, values, line, source)
    if "some" not in lines:
        raise CgroupParseError(source, "no 'some' line")
    return Pressure(some=lines["some"], full=lines.get("full"))


def _psi_slow(kind: str, values: dict[str, str], line: str, source: str) -> PressureLine:
    """One PSI line, naming what is wrong with it."""
    for key in ("avg10", "avg60", "avg300", "total"):
        if key not in values:
            raise CgroupParseError(source, f"{kind}: missing {key}")
    a10, a60, a300 = (_avg(values[k]) for k in ("avg10", "avg60", "avg300"))
    total = values["total"]
    if a10 is None or a60 is None or a300 is None or not (total.isascii() and total.isdigit()):
        raise CgroupParseError(source, f"{kind}: malformed value in {_short(line)}")
    return PressureLine(a10, a60, a300, _int(total, f"{kind} total", source))


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
            # A node has memory: zero or a negative size would make every
            # entitlement based on it zero or negative.
            return _int(parts[1], "MemTotal", source, 1, U64_MAX // mult) * mult
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
