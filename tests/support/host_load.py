"""What the host was doing while a VM lane's guest ran its tests.

Inside a TCG guest the host is invisible: the guest's clock keeps running while the host
keeps the emulator's vCPU thread off a CPU, and the guest's kernel charges that time to
whatever task it was running (no steal time under TCG). A guest test that measures
throttling or stall can fail because the host was busy, and nothing in the guest's own
``/proc`` says so. So the lane records the host's side: :class:`Recorder` samples, every
``interval`` seconds, the host's busy CPU (``/proc/stat``) and the CPU of the lane's own
process tree (qemu and its helpers: this guest), and rewrites one file in the results
share the guest sees. A guest test that fails reads the samples around its run
(:func:`figures`) and says how much of the host this guest got and how much other work
took (``tests.support.machine_load``).

File format, tab-separated: a ``#cpus N`` header, then ``wall_time node_busy_s
guest_s`` per sample (wall clock: the guest's is set from the host's at boot).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from labs.scenarios import node_busy_seconds
from tests.support.machine_load import descendants, processes

ENV = "CONTENTION_VM_HOST_LOAD"  # the file's path, in the guest's environment
INTERVAL_S = 2.0
# In the guest's results share while it asks the host for priority (:func:`boosted`).
BOOST_FILE = ".boost"
_boost_depth = 0


@dataclass(frozen=True, slots=True)
class Sample:
    at: float  # wall clock, seconds
    node_busy_s: float  # the host's busy CPU seconds so far
    guest_s: float  # the lane's process tree's CPU seconds so far


@dataclass(frozen=True, slots=True)
class HostFigures:
    """The host over a span, in cores (CPU seconds per second)."""

    seconds: float
    cpus: int
    node_cores: float
    guest_cores: float  # this guest's emulator and helpers

    @property
    def outside_cores(self) -> float:
        return max(0.0, self.node_cores - self.guest_cores)

    def as_dict(self) -> dict[str, float]:
        return {
            "seconds": round(self.seconds, 1),
            "cpus": self.cpus,
            "node_cores": round(self.node_cores, 2),
            "guest_cores": round(self.guest_cores, 2),
            "outside_cores": round(self.outside_cores, 2),
        }

    def describe(self) -> str:
        return (
            f"host over {self.seconds:.0f} s: {self.node_cores:.2f} of {self.cpus} CPUs "
            f"busy; this guest's emulator {self.guest_cores:.2f}; other work "
            f"{self.outside_cores:.2f}"
        )


def tree_cpu_seconds(root: int, procfs: str = "/proc") -> float:
    """CPU seconds of ``root`` and its descendants (all their threads), the exited ones
    included: a process reaped by its parent is in the parent's ``children_s`` (the
    kernel adds a reaped child's own and children's time there), so the sum over the
    live tree of both counts each process once, qemu after the guest powered off too."""
    procs = processes(procfs)
    return sum(procs[p].cpu_s + procs[p].children_s for p in descendants(root, procs) if p in procs)


class Recorder:
    """Samples the host for the guest of the lane process ``root`` into ``path``."""

    def __init__(
        self, path: str, root: int, procfs: str = "/proc", interval: float = INTERVAL_S
    ) -> None:
        self.path, self.root, self.procfs, self.interval = path, root, procfs, interval
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="host-load", daemon=True)

    def sample(self) -> None:
        self.samples.append(
            Sample(
                time.time(),
                node_busy_seconds(self.procfs),
                tree_cpu_seconds(self.root, self.procfs),
            )
        )
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            f.write(f"#cpus\t{os.cpu_count() or 1}\n")
            f.writelines(
                f"{s.at:.3f}\t{s.node_busy_s:.2f}\t{s.guest_s:.2f}\n" for s in self.samples
            )
        os.replace(tmp, self.path)  # the guest reads a whole file or the previous one

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(OSError):  # a diagnosis: never the lane's failure
                self.sample()

    def start(self) -> None:
        self.sample()
        self._thread.start()

    def stop(self) -> HostFigures | None:
        """Stop sampling; the figures over the whole run."""
        self._stop.set()
        self._thread.join(timeout=self.interval + 5.0)
        with contextlib.suppress(OSError):
            self.sample()
        return span(self.samples, os.cpu_count() or 1)


def read(path: str) -> tuple[int, list[Sample]]:
    """(host CPUs, samples) from the file; malformed lines are skipped."""
    cpus, samples = 1, []
    with open(path) as f:
        for line in f:
            fields = line.split("\t")
            try:
                if fields[0] == "#cpus":
                    cpus = int(fields[1])
                else:
                    samples.append(Sample(*(float(x) for x in fields[:3])))
            except (IndexError, ValueError, TypeError):
                continue
    return cpus, samples


def span(samples: list[Sample], cpus: int) -> HostFigures | None:
    """The figures between the first and last sample; None with fewer than two."""
    if len(samples) < 2 or samples[-1].at <= samples[0].at:
        return None
    a, b = samples[0], samples[-1]
    dt = b.at - a.at
    return HostFigures(
        dt, cpus, (b.node_busy_s - a.node_busy_s) / dt, max(0.0, b.guest_s - a.guest_s) / dt
    )


def figures(path: str, start: float, end: float) -> HostFigures | None:
    """The host over ``[start, end]`` (wall clock), from the samples that bracket it;
    None when the file has too few."""
    cpus, samples = read(path)
    before = [s for s in samples if s.at <= start]
    inside = [s for s in samples if start < s.at < end]
    after = [s for s in samples if s.at >= end]
    chosen = before[-1:] + inside + after[:1]
    return span(chosen, cpus)


def note(start: float, end: float, path: str | None, busy_cores: float) -> tuple[bool, str] | None:
    """(busy, text) for a guest test that ran over ``[start, end]``: whether other work
    on the host took more than ``busy_cores``. None outside a guest (no ``path``) or
    without samples."""
    if not path:
        return None
    try:
        f = figures(path, start, end)
    except OSError as e:
        return False, f"host load unknown: {e}"
    if f is None:
        return None
    busy = f.outside_cores > busy_cores
    head = (
        f"NOTE: the host was busy beside this guest: {f.outside_cores:.2f} cores of other "
        "work. A TCG guest's clock runs on while the host keeps its vCPU off a CPU, and "
        "its kernel charges that time to the task it was running: throttling and stall "
        "measured in the guest grow with the host's load. Rerun it on a quiet host "
        "before debugging."
        if busy
        else f"The host was quiet beside this guest ({f.outside_cores:.2f} cores of other work)."
    )
    return busy, f"{head}\n{f.describe()}"


@contextlib.contextmanager
def boosted() -> Iterator[None]:
    """Ask the host to run this guest ahead of the work beside it (tests/vm/guest.py
    ``Boost``: the lane's ``--boost-nice``) while the block measures throttling or stall
    that a busy host would distort. Outside a VM lane's guest, or nested, it does
    nothing more."""
    global _boost_depth
    results = os.environ.get("CONTENTION_VM_RESULTS")
    path = os.path.join(results, BOOST_FILE) if results else None
    _boost_depth += 1
    try:
        if path is not None and _boost_depth == 1:
            with contextlib.suppress(OSError), open(path, "w") as f:
                f.write(f"{time.time():.3f}\n")
        yield
    finally:
        _boost_depth -= 1
        if path is not None and _boost_depth == 0:
            with contextlib.suppress(OSError):
                os.unlink(path)
