"""The memory labs on a real kernel: pure cgroup v2, real reclaim, real refaults.

The replayed labs (:mod:`labs.replay`) script the memory files; these make the
kernel write them. They need what the test machines cannot give (their v1 memory
hierarchy is not the project's): a pure cgroup v2 node with the memory controller
delegated, no swap (as on a Kubernetes node), a disk-backed file system for the file
working sets, and a node small enough to be made short of memory as a whole. The VM
lane's guest (``tests/vm/``: 1 GiB, a scratch ext4 disk) is such a node.

==========================  =========================================================
lab                         what the kernel does, and the expected finding
==========================  =========================================================
``memory-limit-thrash``     ``app`` reads a 64 MiB file over and over inside a 48 MiB
                            ``memory.max`` (``memory.high`` 40 MiB): its page cache is
                            reclaimed at its own limit (``memory.events`` high and max
                            rise) and every page is read back from disk (refaults),
                            while the node has memory to spare. Expected:
                            ``memory-limit-thrash`` (warning) for ``app``, no culprit
``memory-limit-thrash-      the same, but ``app``'s file is memory-mapped and its disk
stalled``                   slow (``io.max``): it waits for every page it faults back,
                            so its own stall, and with it the node's memory PSI, is
                            well above ``nodeMemStallSome`` while the node has memory
                            to spare. Expected: ``memory-limit-thrash`` (critical) for
                            ``app``; today's rules say ``memory-pressure`` (see below)
``memory-pressure``         ``cache`` grows anonymous memory until the node has ~96 MiB
                            available and holds it there; ``db`` (a database with a
                            memory-mapped 160 MiB data file on a slow disk, inside its
                            request) no longer fits: its hot pages are reclaimed and
                            faulted back (working-set refaults, a memory stall), and
                            the node's memory PSI rises. Expected: ``memory-pressure``
                            for ``db`` naming ``cache`` (the largest working set beyond
                            its request) as the heuristic culprit; ``batch``, beyond
                            its request by 32 MiB, is not. Critical: ``db`` is one
                            task, so when it waits all of it waits (PSI full = some)
==========================  =========================================================

The node's memory PSI (``/proc/pressure/memory``) counts every task on the node, the
thrashing container's included: a container stalled on memory for 5 % of the time puts
the node at 5 % too. The findings therefore judge node pressure without the victim's
own stall in a minute it hit its limit (docs/findings.md); ``memory-limit-thrash``
paces its reads to stay under the node threshold, ``memory-limit-thrash-stalled``
stalls well above it and must still be told apart from node pressure.

Names and requests come from the labs-only metadata file, as for the CPU labs.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from .cgroups import (
    PREFIX,
    LabCgroup,
    LabError,
    LabLayout,
    detect_layout,
    flat_keyed,
    psi_total_usec,
)
from .scenarios import LAB_CONTAINER, LAB_NAMESPACE, Expect, MetadataFile, expected_lines
from .workers import Worker, spawn_memory

MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class MemBox:
    """One lab container: its memory request/limits and its workloads (MiB)."""

    role: str
    memory_request_mib: int | None = None
    memory_max_mib: int | None = None  # memory.max (the Kubernetes limit)
    memory_high_mib: int | None = None  # memory.high (MemoryQoS's throttle point)
    anon_mib: int = 0  # anonymous memory held
    scan_mib: int = 0  # a file of this size read over and over...
    scan_rate_mib: float = 0.0  # ...at this rate (MiB/s)...
    scan_pattern: str = "seq"  # ...front to back ("seq") or one page anywhere ("random")
    read_mib_per_s: float | None = None  # io.max rbps on the scratch disk (a slow disk)
    fill_reserve_mib: int | None = None  # grow until the node has this much available
    fill_max_mib: int = 4096


@dataclass(frozen=True, slots=True)
class MemoryLab:
    name: str
    title: str
    story: str
    boxes: tuple[MemBox, ...]
    expect: tuple[Expect, ...]
    quiet: tuple[str, ...] = ()
    never: tuple[str, ...] = ()
    node_pressure: bool = False  # whether the node itself is meant to be short of memory
    # Set when today's rules reach another verdict than ``expect`` on a real kernel:
    # what they say instead, and why. The VM lane then expects that verdict (a strict
    # xfail) and fails the day the rules get it right, so the note goes with the fix.
    known_gap: str = ""

    @property
    def parent_name(self) -> str:
        return f"{PREFIX}{self.name}"

    def cgroup_path(self, role: str) -> str:
        return f"/{self.parent_name}/{role}"

    def pod(self, role: str) -> str:
        return f"{self.name}-{role}"

    def box(self, role: str) -> MemBox:
        for b in self.boxes:
            if b.role == role:
                return b
        raise KeyError(f"lab {self.name} has no container {role!r}")

    def metadata_entries(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for b in self.boxes:
            e: dict[str, Any] = {
                "namespace": LAB_NAMESPACE,
                "pod": self.pod(b.role),
                "container": LAB_CONTAINER,
            }
            if b.memory_request_mib is not None:
                e["memory_request"] = f"{b.memory_request_mib}Mi"
            if b.memory_max_mib is not None:
                e["memory_limit"] = f"{b.memory_max_mib}Mi"
            out[self.cgroup_path(b.role)] = e
        return out

    def describe(self) -> str:
        lines = [f"{self.name}: {self.title}  (real kernel, pure cgroup v2)", "", self.story, ""]
        for b in self.boxes:
            parts = [f"request {b.memory_request_mib or 'none'}Mi"]
            if b.memory_max_mib is not None:
                parts.append(f"memory.max {b.memory_max_mib}Mi")
            if b.memory_high_mib is not None:
                parts.append(f"memory.high {b.memory_high_mib}Mi")
            if b.anon_mib:
                parts.append(f"{b.anon_mib} MiB anonymous")
            if b.scan_mib:
                parts.append(
                    f"reads a {b.scan_mib} MiB file ({b.scan_pattern}) at {b.scan_rate_mib:g} MiB/s"
                )
            if b.read_mib_per_s is not None:
                parts.append(f"disk reads capped at {b.read_mib_per_s:g} MiB/s (io.max)")
            if b.fill_reserve_mib is not None:
                parts.append(f"grows until the node has {b.fill_reserve_mib} MiB available")
            lines.append(f"  {self.cgroup_path(b.role)}: " + ", ".join(parts))
        lines += ["", *expected_lines(self.expect, self.quiet, self.never, "heuristic culprit")]
        if self.known_gap:
            lines.append(f"today's rules say otherwise: {self.known_gap}")
        return "\n".join(lines)


MEMORY_LABS: dict[str, MemoryLab] = {
    lab.name: lab
    for lab in (
        MemoryLab(
            name="memory-limit-thrash",
            title="thrashing under its own memory limit on a calm node",
            story=(
                "An app limited to 48 MiB (memory.high 40 MiB) reads a 64 MiB file over "
                "and over. Its page cache is reclaimed at its own limit, so every page "
                "comes back from disk: refaults by the thousand per minute, memory.events "
                "high and max rising. The node has plenty of memory. Its own limit is the "
                "cause: no culprit."
            ),
            boxes=(
                MemBox(
                    "app",
                    memory_request_mib=32,
                    memory_max_mib=48,
                    memory_high_mib=40,
                    scan_mib=64,
                    scan_rate_mib=2.0,
                ),
                MemBox("web", memory_request_mib=64, anon_mib=24),
            ),
            expect=(Expect("memory-limit-thrash", "app", None, "warning"),),
            quiet=("web",),
            never=("memory-pressure",),
        ),
        MemoryLab(
            name="memory-limit-thrash-stalled",
            title="thrashing under its own memory limit, stalled enough to move the node's PSI",
            story=(
                "The app and limits of memory-limit-thrash, but its 64 MiB data file is "
                "memory-mapped, as a database's, and its disk gives it 3 MiB/s (io.max). "
                "Each page reclaimed at its own limit is faulted back and waited for: the "
                "app stalls on memory far more than 5 % of the time, and since the node's "
                "memory PSI counts every task, the node's does too, although the node has "
                "memory to spare. Its own limit is still the cause: memory-limit-thrash, "
                "critical (one task: PSI full = some), no culprit."
            ),
            boxes=(
                MemBox(
                    "app",
                    memory_request_mib=32,
                    memory_max_mib=48,
                    memory_high_mib=40,
                    scan_mib=64,
                    scan_rate_mib=4.0,
                    scan_pattern="mmap",
                    read_mib_per_s=3.0,
                ),
                MemBox("web", memory_request_mib=64, anon_mib=24),
            ),
            expect=(Expect("memory-limit-thrash", "app", None, "critical"),),
            quiet=("web",),
            never=("memory-pressure",),
        ),
        MemoryLab(
            name="memory-pressure",
            title="a node short of memory, and whose growth caused it",
            story=(
                "A cache with a 64 MiB request grows until the node has only ~96 MiB "
                "available and stays there. A database inside its 192 MiB request reads "
                "its memory-mapped 160 MiB data file, on a disk that gives it 3 MiB/s: "
                "the file no longer fits in what is left, so its hot pages are reclaimed "
                "and faulted back, and it waits for them (a memory stall, for all of "
                "its one task: critical); so does the node. The cache holds nearly all "
                "of the node's memory beyond requests, so it is named as the heuristic "
                "culprit; the batch job beyond its request by 32 MiB is not."
            ),
            boxes=(
                MemBox(
                    "db",
                    memory_request_mib=192,
                    anon_mib=16,
                    scan_mib=160,
                    scan_rate_mib=6.0,
                    scan_pattern="mmap",
                    read_mib_per_s=3.0,
                ),
                MemBox("cache", memory_request_mib=64, fill_reserve_mib=96),
                MemBox("batch", memory_request_mib=32, anon_mib=64),
            ),
            expect=(Expect("memory-pressure", "db", "cache", "critical"),),
            quiet=("cache", "batch"),
            never=("memory-limit-thrash",),
            node_pressure=True,
        ),
    )
}


def get_memory_lab(name: str) -> MemoryLab:
    try:
        return MEMORY_LABS[name]
    except KeyError:
        raise KeyError(f"no memory lab {name!r}; labs: {', '.join(MEMORY_LABS)}") from None


# --- kernel-side numbers (independent of the exporter) ----------------------------------


def _psi_totals(text: str, source: str) -> tuple[int, int]:
    """``(some, full)`` ``total=`` microseconds of a PSI file."""
    return psi_total_usec(text, "some", source), psi_total_usec(text, "full", source)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


@dataclass(frozen=True, slots=True)
class MemCounters:
    at: float
    current: int
    working_set: int  # memory.current - inactive_file (as the exporter computes it)
    some_us: int
    full_us: int
    refaults: int  # workingset_refault_anon + _file
    high: int
    max: int
    oom_kill: int


def read_counters(cg: LabCgroup) -> MemCounters:
    stat = flat_keyed(cg.read("memory.stat"))
    events = flat_keyed(cg.read("memory.events"))
    some, full = _psi_totals(cg.read("memory.pressure"), f"{cg.v2_dir}/memory.pressure")
    current = int(cg.read("memory.current"))
    return MemCounters(
        at=time.monotonic(),
        current=current,
        working_set=max(0, current - stat.get("inactive_file", 0)),
        some_us=some,
        full_us=full,
        refaults=stat.get("workingset_refault_anon", 0) + stat.get("workingset_refault_file", 0),
        high=events.get("high", 0),
        max=events.get("max", 0),
        oom_kill=events.get("oom_kill", 0),
    )


def node_memory_some_us(procfs: str = "/proc") -> int:
    path = os.path.join(procfs, "pressure", "memory")
    return psi_total_usec(_read(path), "some", path)


def mem_available_mib(procfs: str = "/proc") -> int:
    for line in _read(os.path.join(procfs, "meminfo")).splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024
    raise LabError("no MemAvailable in /proc/meminfo")


@dataclass(frozen=True, slots=True)
class MemMeasured:
    """What the kernel says about one lab container between two readings."""

    role: str
    seconds: float
    working_set_mib: float  # at the end
    psi_some: float
    psi_full: float
    refaults_per_min: float
    limit_hits_per_min: float  # memory.events high + max
    oom_kills: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "seconds": round(self.seconds, 1),
            "working_set_mib": round(self.working_set_mib, 1),
            "psi_some": round(self.psi_some, 3),
            "psi_full": round(self.psi_full, 3),
            "refaults_per_min": round(self.refaults_per_min),
            "limit_hits_per_min": round(self.limit_hits_per_min),
            "oom_kills": self.oom_kills,
        }


def measured(role: str, a: MemCounters, b: MemCounters) -> MemMeasured:
    dt = max(b.at - a.at, 1e-9)
    return MemMeasured(
        role=role,
        seconds=dt,
        working_set_mib=b.working_set / MIB,
        psi_some=(b.some_us - a.some_us) / 1e6 / dt,
        psi_full=(b.full_us - a.full_us) / 1e6 / dt,
        refaults_per_min=(b.refaults - a.refaults) / dt * 60,
        limit_hits_per_min=((b.high - a.high) + (b.max - a.max)) / dt * 60,
        oom_kills=b.oom_kill - a.oom_kill,
    )


# --- running a lab ----------------------------------------------------------------------


@dataclass
class MemoryLabRun:
    """One run of a memory lab; a context manager that always cleans up (workers by
    PID, cgroups, scan files, metadata entries). ``scratch`` is a directory on a
    disk-backed file system for the scanned files."""

    lab: MemoryLab
    seconds: float
    scratch: str
    metadata: MetadataFile | None = None
    layout: LabLayout | None = None
    cgroups: dict[str, LabCgroup] = field(default_factory=dict)
    parent: LabCgroup | None = None
    files: list[str] = field(default_factory=list)
    started_at: float | None = None
    _start: dict[str, MemCounters] = field(default_factory=dict)
    _node_start: tuple[float, int] | None = None
    _frozen: dict[str, Any] | None = None

    def start(self) -> MemoryLabRun:
        layout = self.layout or detect_layout()
        if layout.mode != "v2":
            raise LabError("the memory labs need a pure cgroup v2 node")
        try:
            if self.metadata is not None:
                self.metadata.add(self.lab.metadata_entries())
            self.parent = LabCgroup.create(self.lab.parent_name, layout=layout)
            for b in self.lab.boxes:
                self.cgroups[b.role] = LabCgroup.create(
                    b.role,
                    parent=self.parent,
                    memory_max=None if b.memory_max_mib is None else b.memory_max_mib * MIB,
                    memory_high=None if b.memory_high_mib is None else b.memory_high_mib * MIB,
                )
            for b in self.lab.boxes:
                self._spawn(b)
            self.started_at = time.time()
            self._start = {r: read_counters(cg) for r, cg in self.cgroups.items()}
            self._node_start = (time.monotonic(), node_memory_some_us())
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, b: MemBox) -> list[Worker]:
        cg = self.cgroups[b.role]
        out = []
        if b.anon_mib:
            out.append(spawn_memory(cg, ["anon", "--mib", str(b.anon_mib)], self.seconds))
        if b.scan_mib:
            path = os.path.join(self.scratch, f"{self.lab.parent_name}-{b.role}.data")
            self.files.append(path)
            args = ["scan", "--file", path, "--mib", str(b.scan_mib)]
            args += ["--rate-mib", f"{b.scan_rate_mib:g}", "--pattern", b.scan_pattern]
            out.append(spawn_memory(cg, args, self.seconds))
        if b.read_mib_per_s is not None:
            # After the scan's warm-up read (spawn returns once it is done).
            dev = os.stat(self.scratch).st_dev
            rbps = int(b.read_mib_per_s * MIB)
            with open(os.path.join(cg.v2_dir, "io.max"), "w") as f:
                f.write(f"{os.major(dev)}:{os.minor(dev)} rbps={rbps}")
        if b.fill_reserve_mib is not None:
            args = ["fill", "--reserve-mib", str(b.fill_reserve_mib)]
            args += ["--max-mib", str(b.fill_max_mib)]
            out.append(spawn_memory(cg, args, self.seconds))
        return out

    def mark(self) -> tuple[dict[str, MemCounters], tuple[float, int]]:
        """The kernel's counters now: pass to :meth:`measure` to measure from here."""
        cgs = {r: read_counters(cg) for r, cg in self.cgroups.items() if not cg.removed}
        return cgs, (time.monotonic(), node_memory_some_us())

    def measure(
        self, since: tuple[dict[str, MemCounters], tuple[float, int]] | None = None
    ) -> dict[str, Any]:
        """Kernel numbers since the workloads started (or since a :meth:`mark`): per
        container, and the node's memory PSI some fraction and MemAvailable."""
        if self._frozen is not None and since is None:
            return dict(self._frozen)
        start, node_start = (self._start, self._node_start) if since is None else since
        out: dict[str, Any] = {}
        for role, cg in self.cgroups.items():
            a = start.get(role)
            if a is not None and not cg.removed:
                out[role] = measured(role, a, read_counters(cg)).as_dict()
        if node_start is not None:
            t0, some0 = node_start
            dt = max(time.monotonic() - t0, 1e-9)
            out["node"] = {
                "memory_some": round((node_memory_some_us() - some0) / 1e6 / dt, 3),
                "mem_available_mib": mem_available_mib(),
            }
        return out

    def stop_workloads(self) -> None:
        """End the workloads (only ours), freezing :meth:`measure`; cgroups stay."""
        if self._frozen is None and self._start:
            with contextlib.suppress(LabError, OSError, ValueError):
                self._frozen = self.measure()
        for cg in self.cgroups.values():
            cg.stop_workers()

    def stop(self) -> None:
        """Stop the workloads, remove the cgroups, the files and the metadata entries.
        Idempotent; every step is attempted even if an earlier one failed."""
        self.stop_workloads()
        errors: list[str] = []
        parent = [] if self.parent is None else [self.parent]
        for cg in [*reversed(list(self.cgroups.values())), *parent]:
            try:
                cg.remove()
            except (LabError, OSError) as e:
                errors.append(f"{cg.path}: {e}")
        for path in self.files:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        if self.metadata is not None:
            try:
                self.metadata.remove(list(self.lab.metadata_entries()))
            except OSError as e:
                errors.append(f"metadata {self.metadata.path}: {e}")
        if errors:
            raise LabError("memory lab cleanup failed: " + "; ".join(errors))

    def __enter__(self) -> MemoryLabRun:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
