"""What else the machine was doing while a real-kernel test ran.

A real-kernel test judges CPU contention it builds itself, on two shared CPUs: other
work on the machine (another test suite, a build, an editor's indexer) competes with the
test's workloads and can change what the kernel and the probe see. When such a test
fails, :func:`LoadWindow.note` says how busy the machine was outside the test: the CPU
the whole node used (``/proc/stat``), the part used by the test's own processes (the
pytest process and every descendant: the exporter, Prometheus; and every process in its
lab cgroups, ``contention-test-*``, which lab workers join however they were started),
by those lab cgroups alone and by kernel threads, and the busiest processes
outside it. A failure that says "3.1 cores outside this test" asks for a rerun on a quiet
machine, not a debugging session.

Pure reads of ``/proc`` (the root is an argument, for the unit test); no process is
touched.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from labs.scenarios import node_busy_seconds

# Above this many cores used outside the test, a failure says the machine was busy.
BUSY_CORES = 0.3
TOP = 5


@dataclass(frozen=True, slots=True)
class Proc:
    pid: int
    ppid: int
    comm: str
    cpu_s: float  # utime + stime
    children_s: float  # cutime + cstime: the children it waited for
    kernel_thread: bool
    in_lab: bool  # in a lab cgroup (contention-test-*): the test's, wherever it was forked


def _ticks() -> float:
    return float(os.sysconf("SC_CLK_TCK"))


def parse_stat(text: str) -> tuple[int, str, int, float, int] | None:
    """``/proc/<pid>/stat`` → (ppid, comm, utime+stime ticks, cutime+cstime ticks,
    flags); None when malformed. ``comm`` may hold spaces and parentheses: it runs
    from the first ``(`` to the last ``)``."""
    lo, hi = text.find("("), text.rfind(")")
    if lo < 0 or hi < lo:
        return None
    rest = text[hi + 2 :].split()
    try:
        ppid, flags = int(rest[1]), int(rest[6])
        own = int(rest[11]) + int(rest[12])
        children = float(int(rest[13]) + int(rest[14]))
    except (IndexError, ValueError):
        return None
    return ppid, text[lo + 1 : hi], own, children, flags


PF_KTHREAD = 0x00200000


def processes(procfs: str = "/proc", lab_prefix: str = "contention-test-") -> dict[int, Proc]:
    """Every process's CPU so far; a process that vanishes while read is left out."""
    out: dict[int, Proc] = {}
    tick = _ticks()
    for name in os.listdir(procfs):
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(procfs, name, "stat")) as f:
                parsed = parse_stat(f.read())
            with open(os.path.join(procfs, name, "cgroup")) as f:
                in_lab = f"/{lab_prefix}" in f.read()
        except OSError:
            continue
        if parsed is None:
            continue
        ppid, comm, own, children, flags = parsed
        out[int(name)] = Proc(
            int(name), ppid, comm, own / tick, children / tick, bool(flags & PF_KTHREAD), in_lab
        )
    return out


def descendants(root: int, procs: Mapping[int, Proc]) -> set[int]:
    """``root`` and every process below it."""
    kids: dict[int, list[int]] = {}
    for p in procs.values():
        kids.setdefault(p.ppid, []).append(p.pid)
    seen, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        todo.extend(kids.get(pid, ()))
    return seen


def lab_cgroup_seconds(cgroup_roots: Iterable[str], prefix: str = "contention-test-") -> float:
    """CPU seconds used so far by the lab cgroups (``<root>/<prefix>*``, their
    ``cpu.stat`` ``usage_usec`` on cgroup2, ``cpuacct.usage`` on v1), summed over the
    first root that has any."""
    for root in cgroup_roots:
        try:
            names = [n for n in os.listdir(root) if n.startswith(prefix)]
        except OSError:
            continue
        total, found = 0.0, False
        for n in names:
            secs = _cgroup_seconds(os.path.join(root, n))
            if secs is not None:
                total, found = total + secs, True
        if found:
            return total
    return 0.0


def _cgroup_seconds(path: str) -> float | None:
    try:
        with open(os.path.join(path, "cpu.stat")) as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
    except (OSError, ValueError):
        pass
    try:
        with open(os.path.join(path, "cpuacct.usage")) as f:
            return int(f.read()) / 1e9
    except (OSError, ValueError):
        return None


CGROUP_ROOTS = ("/sys/fs/cgroup/unified", "/sys/fs/cgroup", "/sys/fs/cgroup/cpuacct")


@dataclass
class LoadWindow:
    """Opened when a test starts; :meth:`note` when it fails."""

    procfs: str = "/proc"
    root_pid: int = 0
    cgroup_roots: tuple[str, ...] = CGROUP_ROOTS

    def __post_init__(self) -> None:
        self.root_pid = self.root_pid or os.getpid()
        self.t0 = time.monotonic()
        self.busy0 = node_busy_seconds(self.procfs)
        self.procs0 = processes(self.procfs)
        self.lab0 = lab_cgroup_seconds(self.cgroup_roots)

    def figures(self) -> Figures:
        dt = max(time.monotonic() - self.t0, 1e-6)
        procs1 = processes(self.procfs)
        node = (node_busy_seconds(self.procfs) - self.busy0) / dt
        mine = descendants(self.root_pid, procs1) | descendants(self.root_pid, self.procs0)
        mine |= {p.pid for p in procs1.values() if p.in_lab}

        def used(pid: int, reaped: bool = False) -> float:
            """CPU per second over the window; with ``reaped`` also its waited-for
            children's (the test's processes reap their own workers; init's reaped
            orphans say nothing about who used the CPU)."""
            now = procs1.get(pid)
            if now is None:
                return 0.0
            before = self.procs0.get(pid)
            if before is None or before.comm != now.comm:  # new, or the pid reused
                before = replace(now, cpu_s=0.0, children_s=0.0)
            total = now.cpu_s - before.cpu_s
            if reaped:
                total += now.children_s - before.children_s
            return max(0.0, total) / dt

        own = sum(used(p, reaped=True) for p in mine)
        kthreads = sum(used(p.pid) for p in procs1.values() if p.kernel_thread)
        others = sorted(
            (
                (used(p.pid), p)
                for p in procs1.values()
                if p.pid not in mine and not p.kernel_thread
            ),
            key=lambda x: -x[0],
        )
        return Figures(
            seconds=dt,
            node_cores=node,
            test_cores=own,
            lab_cgroup_cores=(lab_cgroup_seconds(self.cgroup_roots) - self.lab0) / dt,
            kernel_thread_cores=kthreads,
            # What the node's total leaves over, or at least what the processes seen
            # outside used (kernel-thread and /proc/stat accounting can disagree on a VM).
            outside_cores=max(0.0, node - own - kthreads, sum(c for c, _ in others)),
            top_outside=tuple(
                f"{p.comm} (pid {p.pid}) {c:.2f}" for c, p in others[:TOP] if c >= 0.01
            ),
        )

    def note(self) -> tuple[bool, str]:
        """(busy, text): whether the machine was busy outside this test, and the
        figures in one paragraph."""
        f = self.figures()
        busy = f.outside_cores > BUSY_CORES
        head = (
            f"NOTE: the machine was busy outside this test: {f.outside_cores:.2f} cores on "
            "average over its run. A real-kernel test shares the CPUs with that load, which "
            "can change what it measures: rerun it on a quiet machine before debugging."
            if busy
            else f"The machine was quiet outside this test ({f.outside_cores:.2f} cores)."
        )
        return busy, f"{head}\n{f.describe()}"


@dataclass(frozen=True, slots=True)
class Figures:
    """CPU over a test's run, in cores (CPU seconds per second)."""

    seconds: float
    node_cores: float  # the whole node, /proc/stat
    test_cores: float  # the pytest process and its descendants
    lab_cgroup_cores: float  # the test's lab cgroups (a part of test_cores)
    kernel_thread_cores: float
    outside_cores: float  # the rest: other processes, exited ones included
    top_outside: tuple[str, ...]

    def describe(self) -> str:
        top = f"; busiest outside: {', '.join(self.top_outside)}" if self.top_outside else ""
        return (
            f"machine load over {self.seconds:.1f} s: node {self.node_cores:.2f} cores busy "
            f"(/proc/stat); this test's processes {self.test_cores:.2f} (its lab cgroups "
            f"{self.lab_cgroup_cores:.2f}); kernel threads {self.kernel_thread_cores:.2f}; "
            f"outside {self.outside_cores:.2f}{top}"
        )
