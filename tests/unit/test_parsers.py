"""Every parser on inline strings: good input, unknown keys, malformed, truncated, empty."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from exporter.cgroupfs import parsers as p
from exporter.cgroupfs.errors import CgroupParseError
from exporter.cgroupfs.model import (
    CpuMax,
    CpuStat,
    CpuStatV1,
    MemoryEvents,
    MemoryStat,
    Pressure,
    PressureLine,
)

SRC = "/sys/fs/cgroup/x.slice/y.service/some.file"

# cgroup v2 cpu.stat of a cgroup with the cpu controller on (kernel 6.x order).
CPU_STAT_V2 = """\
usage_usec 1049990012
user_usec 734993008
system_usec 314997004
nice_usec 0
core_sched.force_idle_usec 0
nr_periods 120007
nr_throttled 95210
throttled_usec 7612004557
nr_bursts 3
burst_usec 4100
"""

# cpu.stat of a child of the hybrid "unified" hierarchy (no cpu controller there).
CPU_STAT_UNIFIED = """\
usage_usec 99684020
user_usec 60585821
system_usec 39098199
nice_usec 0
"""

CPU_STAT_V1 = """\
nr_periods 3051
nr_throttled 2440
throttled_time 243918004117
nr_bursts 0
burst_time 0
"""

MEMORY_STAT_V2 = """\
anon 236978176
file 18874368
kernel 6189056
kernel_stack 475136
pagetables 1191936
sec_pagetables 0
percpu 1920
sock 0
vmalloc 0
shmem 0
zswap 0
zswapped 0
file_mapped 6291456
file_dirty 8192
file_writeback 0
swapcached 0
anon_thp 0
file_thp 0
shmem_thp 0
inactive_anon 78999552
active_anon 157978624
inactive_file 6291456
active_file 12582912
unevictable 0
slab_reclaimable 503808
slab_unreclaimable 4018176
slab 4521984
workingset_refault_anon 1203
workingset_refault_file 48211
workingset_activate_anon 601
workingset_activate_file 16070
workingset_restore_anon 300
workingset_restore_file 9642
workingset_nodereclaim 0
pgscan 197656
pgsteal 148242
pgscan_kswapd 98828
pgscan_direct 98828
pgscan_khugepaged 0
pgsteal_kswapd 74121
pgsteal_direct 74121
pgsteal_khugepaged 0
pgfault 174785
pgmajfault 9301
pgrefill 65885
pgactivate 17478
pgdeactivate 39531
pglazyfree 0
pglazyfreed 0
zswpin 0
zswpout 0
zswpwb 0
thp_fault_alloc 0
thp_collapse_alloc 0
thp_swpout 0
thp_swpout_fallback 0
"""

MEMORY_STAT_V1 = """\
cache 0
rss 0
rss_huge 0
shmem 0
mapped_file 0
dirty 0
writeback 0
workingset_refault_anon 0
workingset_refault_file 0
swap 0
pgpgin 1791
pgpgout 1497
pgfault 1305
pgmajfault 0
inactive_anon 0
active_anon 0
inactive_file 0
active_file 0
unevictable 0
hierarchical_memory_limit 268435456
hierarchical_memsw_limit 9223372036854771712
total_cache 60817408
total_rss 205520896
total_rss_huge 0
total_shmem 6078464
total_mapped_file 20271104
total_dirty 16384
total_writeback 0
total_workingset_refault_anon 7
total_workingset_refault_file 23004
total_swap 0
total_pgpgin 152319
total_pgpgout 101849
total_pgfault 202009
total_pgmajfault 1201
total_inactive_anon 57458688
total_active_anon 154140672
total_inactive_file 18874368
total_active_file 35864576
total_unevictable 0
"""

MEMORY_EVENTS = "low 0\nhigh 12\nmax 37\noom 2\noom_kill 1\noom_group_kill 0\n"

PSI_CPU = (
    "some avg10=81.50 avg60=80.12 avg300=79.33 total=7702118334\n"
    "full avg10=80.92 avg60=79.88 avg300=79.01 total=7640331200\n"
)

PROC_STAT = """\
cpu  6060 0 3812 62699 399 0 104 133 0 0
cpu0 1953 0 1205 33323 30 0 28 60 0 0
cpu1 4107 0 2607 29375 368 0 76 73 0 0
intr 154287 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 1 11 0 0 0 0 73
ctxt 262458
btime 1796013478
processes 3780
procs_running 1
procs_blocked 0
softirq 107531 0 10359 4 3268 30589 0 3 29704 0 33604
"""

MEMINFO = """\
MemTotal:       24683656 kB
MemFree:        24501756 kB
MemAvailable:   24429304 kB
Buffers:            1728 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
"""


def raises_parse(*words: str) -> pytest.RaisesExc[CgroupParseError]:
    """Expect a CgroupParseError whose message starts with the file, then names the
    given words in order (``match`` is a regex search)."""
    pattern = "^" + re.escape(SRC) + ": .*" + ".*".join(re.escape(w) for w in words)
    return pytest.raises(CgroupParseError, match=pattern)


# --- errors ----------------------------------------------------------------------------


def test_parse_error_carries_source_and_reason() -> None:
    err = CgroupParseError("/x/cpu.stat", "usage_usec: not an integer: 'abc'")
    assert err.source == "/x/cpu.stat"
    assert err.reason == "usage_usec: not an integer: 'abc'"
    assert str(err) == "/x/cpu.stat: usage_usec: not an integer: 'abc'"
    assert isinstance(err, ValueError)


def test_default_source_is_text() -> None:
    with pytest.raises(CgroupParseError) as ei:
        p.parse_cpu_stat("")
    assert ei.value.source == "<text>"


# --- flat keyed ------------------------------------------------------------------------


def test_flat_keyed_good_and_blank_lines() -> None:
    assert p.parse_flat_keyed("a 1\n\nb 2\n  \nc 0") == {"a": 1, "b": 2, "c": 0}
    top = str(p.U64_MAX)
    assert p.parse_flat_keyed(f"a {top}\n") == {"a": 2**64 - 1}


def test_flat_keyed_empty() -> None:
    assert p.parse_flat_keyed("") == {}


def test_flat_keyed_keys_filter_skips_other_values() -> None:
    # An unknown key's value is not looked at when the caller names its keys.
    assert p.parse_flat_keyed("a 1\nfuture 1.5\n", SRC, keys={"a"}) == {"a": 1}


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("a 1\nb\n", ("line 2", "'b'")),  # truncated
        ("a 1 2\n", ("line 1", "'a 1 2'")),  # too many fields
        ("a x\n", ("a", "not an integer", "'x'")),
        ("a 1.5\n", ("a", "not an integer")),
        ("a 1_000\n", ("a", "not an integer", "'1_000'")),
        # Out of the kernel's u64 range: negative, above 2**64 - 1, thousands of digits.
        ("a -2\n", ("a", "out of range", "-2")),
        (f"a {2**64}\n", ("a", "out of range")),
        ("a " + "9" * 5000 + "\n", ("a", "out of range", "(5000 characters)")),
        # int() takes these; the kernel never writes them.
        ("a +5\n", ("a", "not an integer")),
        ("a \u0665\n", ("a", "not an integer")),
    ],
)
def test_flat_keyed_malformed(text: str, words: tuple[str, ...]) -> None:
    with raises_parse(*words):
        p.parse_flat_keyed(text, SRC)


# --- cpu.stat --------------------------------------------------------------------------


def test_cpu_stat_v2_full() -> None:
    assert p.parse_cpu_stat(CPU_STAT_V2, SRC) == CpuStat(
        usage_usec=1049990012,
        user_usec=734993008,
        system_usec=314997004,
        nr_periods=120007,
        nr_throttled=95210,
        throttled_usec=7612004557,
        nr_bursts=3,
        burst_usec=4100,
    )


def test_cpu_stat_without_cpu_controller_has_no_throttle_keys() -> None:
    st = p.parse_cpu_stat(CPU_STAT_UNIFIED, SRC)
    assert (st.usage_usec, st.user_usec, st.system_usec) == (99684020, 60585821, 39098199)
    assert st.nr_periods is None
    assert st.nr_throttled is None
    assert st.throttled_usec is None
    assert st.nr_bursts is None
    assert st.burst_usec is None


def test_cpu_stat_unknown_keys_ignored() -> None:
    text = CPU_STAT_UNIFIED + "core_sched.force_idle_usec 7\nsome_future_key 1.5\n"
    assert p.parse_cpu_stat(text, SRC) == p.parse_cpu_stat(CPU_STAT_UNIFIED, SRC)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("usage_usec 12a\nuser_usec 1\nsystem_usec 1\n", ("usage_usec", "not an integer")),
        (CPU_STAT_V2.replace("nr_throttled 95210", "nr_throttled -"), ("nr_throttled",)),
        (CPU_STAT_V2.replace("usage_usec 1049990012", "usage_usec -100000000"), ("range",)),
        (CPU_STAT_V2.replace("nr_throttled 95210", "nr_throttled 200000"), ("above nr_periods",)),
        ("user_usec 1\nsystem_usec 1\n", ("missing key(s): usage_usec",)),
        ("usage_usec 50114337\nuser_usec 35080035\nsystem_u", ("line 3", "'system_u'")),
        ("usage_usec 50114337\n", ("missing key(s): user_usec, system_usec",)),
        ("", ("missing key(s): usage_usec, user_usec, system_usec",)),
    ],
    ids=[
        "malformed",
        "malformed-throttle",
        "negative",
        "throttled-above-periods",
        "missing",
        "truncated-line",
        "truncated",
        "empty",
    ],
)
def test_cpu_stat_bad(text: str, words: tuple[str, ...]) -> None:
    with raises_parse(*words):
        p.parse_cpu_stat(text, SRC)


def test_cpu_stat_v1() -> None:
    assert p.parse_cpu_stat_v1(CPU_STAT_V1, SRC) == CpuStatV1(
        nr_periods=3051, nr_throttled=2440, throttled_time_ns=243918004117
    )
    # 4.x kernels have no burst keys
    old = "nr_periods 1\nnr_throttled 0\nthrottled_time 0\n"
    assert p.parse_cpu_stat_v1(old, SRC) == CpuStatV1(1, 0, 0)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("nr_periods 1\nnr_throttled 0\n", ("missing key(s): throttled_time",)),
        ("nr_periods 1\nnr_throttled x\nthrottled_time 0\n", ("nr_throttled", "not an integer")),
        ("nr_periods 1\nnr_thr", ("line 2",)),
        ("", ("missing key(s): nr_periods, nr_throttled, throttled_time",)),
    ],
)
def test_cpu_stat_v1_bad(text: str, words: tuple[str, ...]) -> None:
    with raises_parse(*words):
        p.parse_cpu_stat_v1(text, SRC)


# --- cpu.max, cfs, single values -------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "quota", "period", "cores"),
    [
        ("max 100000\n", None, 100000, None),
        ("20000 100000\n", 20000, 100000, 0.2),
        ("150000 100000\n", 150000, 100000, 1.5),
        ("max 50000", None, 50000, None),
    ],
)
def test_cpu_max(text: str, quota: int | None, period: int, cores: float | None) -> None:
    cm = p.parse_cpu_max(text, SRC)
    assert cm == CpuMax(quota_usec=quota, period_usec=period)
    assert cm.limit_cores == cores


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", ("expected '<quota|max> <period>'",)),
        ("max\n", ("expected '<quota|max> <period>'", "'max'")),
        ("1 2 3\n", ("expected",)),
        ("abc 100000\n", ("quota", "not an integer", "'abc'")),
        ("max 1e5\n", ("period", "not an integer")),
        ("0 100000\n", ("quota", "out of range")),
        ("-1 100000\n", ("quota", "out of range")),
        ("999 100000\n", ("quota", "out of range [1000,")),
        ("max 0\n", ("period", "out of range")),
        ("max 1000001\n", ("period", "out of range")),
        (f"{2**44} 100000\n", ("quota", "out of range")),
    ],
)
def test_cpu_max_bad(text: str, words: tuple[str, ...]) -> None:
    with raises_parse(*words):
        p.parse_cpu_max(text, SRC)


def test_cfs_v1() -> None:
    assert p.parse_cfs_v1("-1\n", "100000\n", SRC) == CpuMax(None, 100000)
    cm = p.parse_cfs_v1("20000\n", "100000\n", SRC)
    assert cm == CpuMax(20000, 100000)
    assert cm.limit_cores == 0.2


def test_cfs_v1_errors_name_the_right_file() -> None:
    with pytest.raises(CgroupParseError) as ei:
        p.parse_cfs_v1("-1\n", "", "/cg/cpu.cfs_quota_us", period_source="/cg/cpu.cfs_period_us")
    assert ei.value.source == "/cg/cpu.cfs_period_us"
    assert ei.value.reason == "empty file"
    with pytest.raises(CgroupParseError) as ei:
        p.parse_cfs_v1("x\n", "100000\n", "/cg/cpu.cfs_quota_us", "/cg/cpu.cfs_period_us")
    assert ei.value.source == "/cg/cpu.cfs_quota_us"
    with pytest.raises(CgroupParseError, match="period: out of range"):
        p.parse_cfs_v1("-1\n", "0\n", SRC)
    # -1 is the kernel's "no quota"; no other negative value exists.
    with pytest.raises(CgroupParseError, match="out of range"):
        p.parse_cfs_v1("-2\n", "100000\n", SRC)


def test_single_int() -> None:
    assert p.parse_single_int("100\n", SRC) == 100
    assert p.parse_single_int("272697216", SRC) == 272697216


@pytest.mark.parametrize(
    ("text", "words"),
    [("", ("empty file",)), ("\n", ("empty file",)), ("1 2\n", ("not an integer",)), ("x", ())],
)
def test_single_int_bad(text: str, words: tuple[str, ...]) -> None:
    with raises_parse(*words):
        p.parse_single_int(text, SRC)


@pytest.mark.parametrize(
    ("parser", "good", "bad"),
    [
        (p.parse_cpu_weight, ("1", "100", "10000"), ("0", "10001", "-1")),
        (p.parse_cpu_shares, ("2", "1024", "262144"), ("0", "1", "262145")),
    ],
)
def test_weight_and_shares_ranges(
    parser: Callable[[str, str], int], good: tuple[str, ...], bad: tuple[str, ...]
) -> None:
    for text in good:
        assert parser(text + "\n", SRC) == int(text)
    for text in bad:
        with raises_parse("out of range"):
            parser(text + "\n", SRC)


def test_max_or_int() -> None:
    assert p.parse_max_or_int("max\n", SRC) is None
    assert p.parse_max_or_int("268435456\n", SRC) == 268435456
    with raises_parse("empty file"):
        p.parse_max_or_int("", SRC)
    with raises_parse("not an integer", "'unlimited'"):
        p.parse_max_or_int("unlimited\n", SRC)


# --- pressure --------------------------------------------------------------------------


def test_pressure_some_and_full() -> None:
    assert p.parse_pressure(PSI_CPU, SRC) == Pressure(
        some=PressureLine(81.50, 80.12, 79.33, 7702118334),
        full=PressureLine(80.92, 79.88, 79.01, 7640331200),
    )


def test_pressure_some_only() -> None:
    # cpu.pressure before 5.13 had no "full" line.
    pr = p.parse_pressure("some avg10=0.39 avg60=0.23 avg300=0.50 total=4481198\n", SRC)
    assert pr.some.total_usec == 4481198
    assert pr.full is None


def test_pressure_unknown_lines_and_fields_ignored() -> None:
    text = "some avg10=1.00 avg60=2.00 avg300=3.00 total=4 avg900=5.00\nnew kind=1\n"
    assert p.parse_pressure(text, SRC) == Pressure(some=PressureLine(1.0, 2.0, 3.0, 4))


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", ("no 'some' line",)),
        # /proc/pressure/irq has only a "full" line: it is not a some/full PSI file
        ("full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", ("no 'some' line",)),
        ("some avg10=0.00 avg60=0.00 avg300=0.00\n", ("some", "missing total")),
        ("some avg10=0.00 avg60=0.0", ("some", "missing avg300")),
        ("some avg10=x avg60=0.00 avg300=0.00 total=0\n", ("some", "malformed value")),
        ("some avg10=0.00 avg60=0.00 avg300=0.00 total=1.5\n", ("some", "malformed value")),
        (PSI_CPU.replace("full avg10=80.92", "full avg10"), ("full", "without '='")),
        # Averages are percentages written as %lu.%02lu; totals are u64 counters.
        ("some avg10=nan avg60=0.00 avg300=0.00 total=0\n", ("some", "malformed value")),
        ("some avg10=inf avg60=0.00 avg300=0.00 total=0\n", ("some", "malformed value")),
        ("some avg10=1e400 avg60=0.00 avg300=0.00 total=0\n", ("some", "malformed value")),
        ("some avg10=100.01 avg60=0.00 avg300=0.00 total=0\n", ("some", "malformed value")),
        ("some avg10=-1.00 avg60=0.00 avg300=0.00 total=0\n", ("some", "malformed value")),
        ("some avg10=0.00 avg60=0.00 avg300=0.00 total=-5\n", ("some", "malformed value")),
        (f"some avg10=0.00 avg60=0.00 avg300=0.00 total={2**64}\n", ("some total", "range")),
    ],
)
def test_pressure_bad(text: str, words: tuple[str, ...]) -> None:
    with raises_parse(*words):
        p.parse_pressure(text, SRC)


# --- memory.stat / memory.events -------------------------------------------------------


def test_memory_stat_v2() -> None:
    ms = p.parse_memory_stat(MEMORY_STAT_V2, SRC)
    assert ms == MemoryStat(
        anon=236978176,
        file=18874368,
        inactive_file=6291456,
        active_file=12582912,
        workingset_refault_anon=1203,
        workingset_refault_file=48211,
        pgmajfault=9301,
    )
    assert ms.refaults == 1203 + 48211


def test_memory_stat_unknown_keys_ignored() -> None:
    text = MEMORY_STAT_V2 + "pgpromote_success 0\nhugetlb 2097152\nfuture_thing n/a\n"
    assert p.parse_memory_stat(text, SRC) == p.parse_memory_stat(MEMORY_STAT_V2, SRC)


def test_memory_stat_old_kernel() -> None:
    # Before 5.9: one workingset_refault counter (file pages only), no anon/file split.
    text = "anon 4096\nfile 8192\ninactive_file 4096\nactive_file 4096\nworkingset_refault 77\n"
    ms = p.parse_memory_stat(text, SRC)
    assert ms.workingset_refault_file == 77
    assert ms.workingset_refault_anon == 0
    assert ms.pgmajfault == 0


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("anon 9.4M\nfile 1.2G\n", ("anon", "not an integer", "'9.4M'")),
        (MEMORY_STAT_V2.replace("pgmajfault 9301", "pgmajfault x"), ("pgmajfault",)),
        ("file 8192\n", ("missing key(s): anon",)),
        ("anon 4096\nfile 8192\ninact", ("line 3", "'inact'")),
        ("", ("missing key(s): anon, file",)),
    ],
    ids=["garbage", "malformed-known-key", "missing", "truncated", "empty"],
)
def test_memory_stat_bad(text: str, words: tuple[str, ...]) -> None:
    with raises_parse(*words):
        p.parse_memory_stat(text, SRC)


def test_memory_events() -> None:
    assert p.parse_memory_events(MEMORY_EVENTS, SRC) == MemoryEvents(
        low=0, high=12, max=37, oom=2, oom_kill=1, oom_group_kill=0
    )
    # 4.x kernels: no oom_kill / oom_group_kill; unknown keys ignored
    old = "low 1\nhigh 2\nmax 3\noom 4\nsomething_new 9\n"
    assert p.parse_memory_events(old, SRC) == MemoryEvents(1, 2, 3, 4, 0, 0)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("low 0\nhigh 0\noom 0\n", ("missing key(s): max",)),
        ("low 0\nhigh 0\nmax many\noom 0\n", ("max", "not an integer")),
        ("low 0\nhigh", ("line 2",)),
        ("", ("missing key(s): max, oom",)),
    ],
)
def test_memory_events_bad(text: str, words: tuple[str, ...]) -> None:
    with raises_parse(*words):
        p.parse_memory_events(text, SRC)


# --- v1 memory -------------------------------------------------------------------------


def test_memory_stat_v1_prefers_hierarchical_totals() -> None:
    assert p.parse_memory_stat_v1(MEMORY_STAT_V1, SRC) == MemoryStat(
        anon=205520896,
        file=60817408,
        inactive_file=18874368,
        active_file=35864576,
        workingset_refault_anon=7,
        workingset_refault_file=23004,
        pgmajfault=1201,
    )


def test_memory_stat_v1_local_keys_without_totals() -> None:
    text = "cache 8192\nrss 4096\ninactive_file 4096\nactive_file 4096\npgmajfault 3\n"
    ms = p.parse_memory_stat_v1(text, SRC)
    assert (ms.anon, ms.file, ms.inactive_file, ms.pgmajfault) == (4096, 8192, 4096, 3)
    assert ms.refaults == 0


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("cache 1\n", ("missing key(s): rss",)),
        ("", ("missing key(s): rss",)),
        ("rss 1\ntotal_rss 1x\n", ("total_rss", "not an integer")),
        ("rss 1\ncach", ("line 2",)),
    ],
)
def test_memory_stat_v1_bad(text: str, words: tuple[str, ...]) -> None:
    with raises_parse(*words):
        p.parse_memory_stat_v1(text, SRC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("9223372036854771712\n", None),  # "no limit" with 4 KiB pages
        ("9223372036854710272\n", None),  # with 64 KiB pages (arm64, ppc64le)
        ("268435456\n", 268435456),
    ],
)
def test_v1_limit_bytes(text: str, expected: int | None) -> None:
    assert p.parse_v1_limit_bytes(text, SRC) == expected
    assert p.V1_UNLIMITED == 0x7FFFFFFFFFFFF000


# --- /proc -----------------------------------------------------------------------------


def test_proc_stat() -> None:
    ps = p.parse_proc_stat(PROC_STAT, SRC)
    assert ps.ctxt == 262458
    assert ps.steal_ticks == 133
    assert ps.total_ticks == 6060 + 0 + 3812 + 62699 + 399 + 0 + 104 + 133
    assert ps.cpus == 2
    assert (ps.procs_running, ps.procs_blocked) == (1, 0)


def test_proc_stat_default_source() -> None:
    with pytest.raises(CgroupParseError) as ei:
        p.parse_proc_stat("")
    assert ei.value.source == "/proc/stat"


def test_proc_stat_without_procs_lines() -> None:
    text = "cpu  1 2 3 4 5 6 7 8\ncpu0 1 2 3 4 5 6 7 8\nctxt 10\n"
    ps = p.parse_proc_stat(text, SRC)
    assert (ps.ctxt, ps.steal_ticks, ps.total_ticks, ps.cpus) == (10, 8, 36, 1)
    assert ps.procs_running is None
    assert ps.procs_blocked is None


@pytest.mark.parametrize("fields", [4, 7])
def test_proc_stat_without_steal_column(fields: int) -> None:
    """Kernels before 2.6.11 print 4 or 7 CPU times: steal is unknown, not 0."""
    times = " ".join(str(v) for v in range(1, fields + 1))
    ps = p.parse_proc_stat(f"cpu  {times}\ncpu0 {times}\nctxt 10\n", SRC)
    assert ps.steal_ticks is None
    assert ps.total_ticks == sum(range(1, fields + 1))
    assert (ps.ctxt, ps.cpus) == (10, 1)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", ("missing 'cpu' or 'ctxt' line",)),
        (PROC_STAT.replace("ctxt 262458\n", ""), ("missing 'cpu' or 'ctxt' line",)),
        (PROC_STAT.replace("cpu  6060 0 3812 62699 399 0 104 133 0 0\n", ""), ("missing",)),
        ("cpu  1 2 3\nctxt 1\n", ("cpu line has 3 fields, need 4",)),
        ("cpu  1 2 3 4 5 6 7 x\nctxt 1\n", ("cpu", "not an integer")),
        (PROC_STAT.replace("ctxt 262458", "ctxt 26x"), ("ctxt", "not an integer")),
        (PROC_STAT.replace("procs_running 1", "procs_running ?"), ("procs_running",)),
    ],
)
def test_proc_stat_bad(text: str, words: tuple[str, ...]) -> None:
    with raises_parse(*words):
        p.parse_proc_stat(text, SRC)


def test_meminfo_total() -> None:
    assert p.parse_meminfo_total(MEMINFO, SRC) == 24683656 * 1024
    assert p.parse_meminfo_total("MemTotal: 1000\n", SRC) == 1000  # no unit: bytes


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", ("no MemTotal line",)),
        ("MemFree: 1 kB\n", ("no MemTotal line",)),
        ("MemTotal:\n", ("no MemTotal line",)),
        ("MemTotal:  12x kB\n", ("MemTotal", "not an integer")),
        # A node without memory would make every entitlement based on it zero.
        ("MemTotal:  0 kB\n", ("MemTotal", "out of range")),
        ("MemTotal:  -24683656 kB\n", ("MemTotal", "out of range")),
    ],
)
def test_meminfo_total_bad(text: str, words: tuple[str, ...]) -> None:
    with raises_parse(*words):
        p.parse_meminfo_total(text, SRC)
