"""The last self-test's verdict and figures (``POST /selftest``, docs/troubleshooting.md),
built by ``exporter.exposition.selftest``. No series until a self-test has run in this
exporter; then they stay until the next one replaces them, so a fleet dashboard can
compare node images by their last run."""

from __future__ import annotations

from .model import NO_UNIT, RATIO, SECONDS, Family, Label, Scope, Type

E = Scope.EXPORTER
GAUGE = Type.GAUGE
CHECK = Label("check", ("noisy-neighbor", "blame share", "cpu-throttled"), every_value=True)

SELFTEST_SUCCESS = Family(
    "contention_selftest_success",
    GAUGE,
    NO_UNIT,
    "1 if the last self-test passed, 0 if it failed or the node could not host it.",
    "selftest",
    E,
    doc="the last self-test's verdict",
)
SELFTEST_EXIT_CODE = Family(
    "contention_selftest_exit_code",
    GAUGE,
    NO_UNIT,
    "Exit code of the last self-test (0 pass, 1 fail, 3 and above: the node cannot host "
    "it, docs/troubleshooting.md).",
    "selftest",
    E,
    doc="0 pass, 1 fail; 3 no permission to create cgroups, 4 cgroup v1 only, 5 read-only "
    "cgroupfs, 6 no PSI or no cpu controller "
    "([troubleshooting.md](troubleshooting.md#the-self-test))",
)
SELFTEST_TIMESTAMP_SECONDS = Family(
    "contention_selftest_timestamp_seconds",
    GAUGE,
    SECONDS,
    "Unix time the last self-test ended.",
    "selftest",
    E,
    doc="when the last self-test ended",
)
SELFTEST_DURATION_SECONDS = Family(
    "contention_selftest_duration_seconds",
    GAUGE,
    SECONDS,
    "Wall time of the last self-test, from its load's start to its end.",
    "selftest",
    E,
    doc="wall time of the last self-test",
)
SELFTEST_CHECK_SUCCESS = Family(
    "contention_selftest_check_success",
    GAUGE,
    NO_UNIT,
    "1 if the last self-test's check passed, 0 if not; no series for a check the node "
    "could not hold (cpu-throttled where no quota can be set).",
    "selftest",
    E,
    (CHECK,),
    doc="each check of the last self-test",
)
SELFTEST_FIRST_FINDING_SECONDS = Family(
    "contention_selftest_first_finding_seconds",
    GAUGE,
    SECONDS,
    "Seconds from the last self-test's load start to its first expected finding.",
    "selftest",
    E,
    doc="time to the first finding (a one-minute window: at least a minute)",
)
SELFTEST_BLAME = Family(
    "contention_selftest_blame_ratio",
    GAUGE,
    RATIO,
    "Share of the self-test victim's wait the exporter blamed on the bully.",
    "selftest",
    E,
    doc="the noisy-neighbor finding's blame share of the bully (the scheduler probe's), as "
    "`contention_blame_ratio` gives it",
)
SELFTEST_KERNEL_BLAME = Family(
    "contention_selftest_kernel_blame_ratio",
    GAUGE,
    RATIO,
    "The bully's share of the CPU time its CPU spent on anything but the victim, from "
    "the kernel's accounting (what the blame share is checked against).",
    "selftest",
    E,
    doc="the same share from the kernel's CPU accounting (what the blame check holds "
    "`contention_selftest_blame_ratio` against): the two cgroups' `cpu.stat` and the "
    "CPU's line of `/proc/stat`",
)
SELFTEST_PROBE_SWITCH_COST_SECONDS = Family(
    "contention_selftest_probe_switch_cost_seconds",
    GAUGE,
    SECONDS,
    "Kernel time of the scheduler probe's programs per context switch, measured by the "
    "last self-test (BPF statistics on for its duration only).",
    "selftest",
    E,
    doc="the probe's cost per context switch on this node, with BPF run-time statistics "
    "on for the self-test only",
)

FAMILIES = (
    SELFTEST_SUCCESS,
    SELFTEST_EXIT_CODE,
    SELFTEST_TIMESTAMP_SECONDS,
    SELFTEST_DURATION_SECONDS,
    SELFTEST_CHECK_SUCCESS,
    SELFTEST_FIRST_FINDING_SECONDS,
    SELFTEST_BLAME,
    SELFTEST_KERNEL_BLAME,
    SELFTEST_PROBE_SWITCH_COST_SECONDS,
)
