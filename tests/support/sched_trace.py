"""An exact reference for blame: the kernel's own scheduler events, from tracefs.

The unpinned accuracy tests (docs/probe.md, "Accuracy with nothing pinned") need to
know who was on the CPU while each victim waited. ``cpu.stat`` says how much each
culprit ran, not where; sampling ``schedstat`` every 20 ms says where, at that
resolution. This records every ``sched_switch``, ``sched_wakeup``,
``sched_wakeup_new`` and ``sched_migrate_task`` event in a trace instance of its own
(the machine's other tracing users are not touched), with window boundaries written
to the instance's ``trace_marker``, and replays them:

* a victim's wait starts when it is woken (on the CPU it is woken onto) or preempted
  (``prev_state`` R), moves with each ``sched_migrate_task`` while it waits, and ends
  when a ``sched_switch`` puts it on a CPU;
* each part of the wait goes to whoever ran on the CPU it was spent on, for as long
  as they overlapped (the CPU's run intervals come from its switches; idle is
  ``IDLE``);
* waits shorter than ``min_wait_s`` are left out, as the probe leaves them out of
  its matrix; each wait counts in the window in which it ended.

That is the probe's rule, computed independently from the kernel's events in the
test process instead of in BPF at each switch: where the probe agrees with this, its
attribution is right; where a sampled truth disagrees with this, the sampled truth is
wrong. Tracing costs every switch a little on the whole machine while the instance is
on; the test and the probe see the same run.
"""

from __future__ import annotations

import bisect
import os
import re
import time
import warnings
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
IDLE = "idle"
OTHER = "other"
TRACEFS = "/sys/kernel/tracing"
EVENTS = ("sched_switch", "sched_wakeup", "sched_wakeup_new", "sched_migrate_task")
MARK = "contention-window"
# Written just before the harness reads the probe, so that the waits that ended while
# it read (counted in either window by the probe) can be reported.
POLL_MARK = "contention-poll"

# "<comm>-<pid> [001] d..2. 123.456789: sched_switch: ..." (the flags column depends on
# the trace options, so it is optional).
_LINE = re.compile(r"\[(\d+)\]\s+(?:\S+\s+)?(\d+\.\d+): (\w+): (.*)$")
_SWITCH = re.compile(r"prev_pid=(-?\d+) prev_prio=-?\d+ prev_state=(\S+) ==> .*next_pid=(\d+)")
_WAKE = re.compile(r"pid=(\d+) prio=-?\d+ target_cpu=(\d+)")
_MIGRATE = re.compile(r"pid=(\d+) prio=-?\d+ orig_cpu=(\d+) dest_cpu=(\d+)")


class TraceError(RuntimeError):
    """The trace is unusable: tracefs missing, or events lost."""


@dataclass
class Replay(Generic[K]):
    """Per window (between two marks): per victim pid, wait seconds behind each key."""

    windows: list[dict[int, dict[K | str, float]]] = field(default_factory=list)
    marks: list[str] = field(default_factory=list)
    # Per window: victims' waits that moved CPU at least once while queued.
    migrated: list[int] = field(default_factory=list)
    # Per window: victims' waits that ended between the poll mark and the window mark
    # (while the harness read the probe), and the longest such read (seconds).
    in_poll: list[int] = field(default_factory=list)
    poll_s: list[float] = field(default_factory=list)
    waits: int = 0  # victims' waits counted in a window
    unseen_moves: int = 0  # waits switched in on another CPU than the trace queued them on

    @property
    def migrated_waits(self) -> int:
        return sum(self.migrated)


Part = tuple[int, float, float]  # (cpu, from, to) of one part of a wait


class _Events:
    """The trace's events, read line by line: each CPU's run intervals, the victims'
    ended waits in parts, and the marks."""

    def __init__(self, victims: set[int], min_wait_s: float, follow_migrations: bool):
        self.victims = victims
        self.min_wait_s = min_wait_s
        self.follow = follow_migrations
        # Per CPU: when each run interval started (its switches) and who ran in it.
        self.starts: dict[int, list[float]] = defaultdict(list)
        self.runner: dict[int, list[int]] = defaultdict(list)
        # Per waiting victim: (cpu, since) of the part not closed yet, the closed parts,
        # and when the wait began.
        self.waiting: dict[int, tuple[int, float]] = {}
        self.parts: dict[int, list[Part]] = {}
        self.began: dict[int, float] = {}
        self.ended: list[tuple[float, int, list[Part]]] = []
        self.marks: list[tuple[float, str]] = []
        self.polls: list[float] = []
        self.unseen = 0

    def read(self, line: str) -> None:
        m = _LINE.search(line)
        if m is None:
            return
        cpu, t, event, rest = int(m.group(1)), float(m.group(2)), m.group(3), m.group(4)
        if event == "sched_switch":
            self.switch(cpu, t, rest)
        elif event in ("sched_wakeup", "sched_wakeup_new"):
            w = _WAKE.search(rest)
            pid = int(w.group(1)) if w is not None else -1
            if w is not None and pid in self.victims and pid not in self.waiting:
                self.begin(pid, int(w.group(2)), t)
        elif event == "sched_migrate_task":
            g = _MIGRATE.search(rest)
            if self.follow and g is not None and int(g.group(1)) in self.waiting:
                pid = int(g.group(1))
                wcpu, since = self.waiting[pid]
                self.parts[pid].append((wcpu, since, t))
                self.waiting[pid] = (int(g.group(3)), t)
        elif event == "tracing_mark_write" and rest.startswith(MARK):
            self.marks.append((t, rest.strip()))
        elif event == "tracing_mark_write" and rest.startswith(POLL_MARK):
            self.polls.append(t)

    def begin(self, pid: int, cpu: int, t: float) -> None:
        self.waiting[pid] = (cpu, t)
        self.parts[pid] = []
        self.began[pid] = t

    def switch(self, cpu: int, t: float, rest: str) -> None:
        s = _SWITCH.search(rest)
        if s is None:
            return
        prev, state, nxt = int(s.group(1)), s.group(2), int(s.group(3))
        self.starts[cpu].append(t)
        self.runner[cpu].append(nxt)
        if prev in self.victims and state.startswith("R"):
            self.begin(prev, cpu, t)  # preempted: queued on this CPU from now
        if nxt in self.waiting:
            wcpu, since = self.waiting.pop(nxt)
            # Switched in elsewhere than where the trace left it queued: a move the
            # trace did not show; the last part goes to the CPU it ran on.
            self.unseen += wcpu != cpu
            done = [*self.parts.pop(nxt), (cpu, since, t)]
            if t - self.began.pop(nxt) >= self.min_wait_s:
                self.ended.append((t, nxt, done))


def replay(
    lines: Iterable[str],
    victims: Iterable[int],
    owner: Mapping[int, K],
    min_wait_s: float = 50e-6,
    follow_migrations: bool = True,
) -> Replay[K]:
    """Replay a text trace (the ``trace`` file of an instance with :data:`EVENTS`
    and marks) into per-window blame. ``owner`` maps a pid (task id) to its key; pid 0
    is ``IDLE``, any other pid ``OTHER``. With ``follow_migrations`` off, a whole wait
    goes to the CPU it ended on (the rule before the probe's migration hook). Events
    before the first mark only set up state; waits ending after the last mark are
    dropped."""
    ev = _Events(set(victims), min_wait_s, follow_migrations)
    for line in lines:
        ev.read(line)
    bounds = [t for t, _ in ev.marks]
    n = max(0, len(bounds) - 1)
    out: Replay[K] = Replay(
        windows=[{v: {} for v in ev.victims} for _ in range(n)],
        marks=[label for _, label in ev.marks[1:]],
        migrated=[0] * n,
        in_poll=[0] * n,
        unseen_moves=ev.unseen,
    )
    # The poll mark before each window's end mark (none: the read took no time).
    poll_at = []
    for b in bounds[1:]:
        j = bisect.bisect_left(ev.polls, b) - 1
        poll_at.append(ev.polls[j] if j >= 0 else b)
    out.poll_s = [b - p for b, p in zip(bounds[1:], poll_at, strict=True)]
    for t_end, pid, done in ev.ended:
        i = bisect.bisect_left(bounds, t_end) - 1
        if i < 0 or i >= n:
            continue
        out.waits += 1
        out.migrated[i] += len(done) > 1
        out.in_poll[i] += t_end >= poll_at[i]
        row = out.windows[i][pid]
        for cpu, a, b in done:
            for key, secs in _overlap(ev.starts[cpu], ev.runner[cpu], a, b):
                k: K | str = IDLE if key == 0 else owner.get(key, OTHER)
                row[k] = row.get(k, 0.0) + secs
    return out


def _overlap(starts: list[float], runner: list[int], a: float, b: float) -> list[tuple[int, float]]:
    """(pid, seconds) that ran on one CPU within ``[a, b]``."""
    out: list[tuple[int, float]] = []
    i = max(0, bisect.bisect_right(starts, a) - 1)
    while i < len(starts) and starts[i] < b:
        end = starts[i + 1] if i + 1 < len(starts) else b
        lo, hi = max(a, starts[i]), min(b, end)
        if hi > lo:
            out.append((runner[i], hi - lo))
        i += 1
    return out


def available(root: str = TRACEFS) -> str | None:
    """None when trace instances can be made under ``root``, else why not."""
    if not os.path.isdir(os.path.join(root, "instances")):
        return f"{root}/instances: tracefs is not mounted here"
    if not os.access(os.path.join(root, "instances"), os.W_OK):
        return f"{root}/instances: not writable (needs root)"
    return None


class SchedTrace:
    """A tracefs instance recording :data:`EVENTS`; ``mark()`` between windows.

    Use as a context manager: the instance is removed on exit. Raises
    :class:`TraceError` when tracefs is not there or the buffer lost events."""

    # Per CPU. The 32-cgroup test records about 14,000 events per CPU (about 1.5 MB);
    # a buffer that overruns fails the run rather than replay a trace with holes.
    def __init__(self, name: str, buffer_kb: int = 8192, root: str = TRACEFS):
        self.path = os.path.join(root, "instances", name)
        self.root = root
        self.buffer_kb = buffer_kb
        self._marker: int | None = None

    def __enter__(self) -> SchedTrace:
        why = available(self.root)
        if why is not None:
            raise TraceError(why)
        os.mkdir(self.path)
        try:
            self._write("buffer_size_kb", str(self.buffer_kb))
            self._write("trace_clock", "mono")
            for ev in EVENTS:
                self._write(f"events/sched/{ev}/enable", "1")
            self._marker = os.open(os.path.join(self.path, "trace_marker"), os.O_WRONLY)
            self._write("tracing_on", "1")
        except BaseException:
            self._remove()
            raise
        return self

    def mark(self, label: str, prefix: str = MARK) -> None:
        assert self._marker is not None
        os.write(self._marker, f"{prefix} {label}".encode())

    def stop(self) -> list[str]:
        """Stop recording; the trace's lines. Raises if any CPU's buffer overran."""
        self._write("tracing_on", "0")
        lost = []
        for cpu in sorted(os.listdir(os.path.join(self.path, "per_cpu"))):
            with open(os.path.join(self.path, "per_cpu", cpu, "stats")) as f:
                stats = dict(line.split(":", 1) for line in f if ":" in line)
            n = int(stats.get("overrun", "0")) + int(stats.get("dropped events", "0"))
            if n:
                lost.append(f"{cpu}: {n} events lost")
        if lost:
            raise TraceError("trace buffer too small: " + ", ".join(lost))
        with open(os.path.join(self.path, "trace")) as f:
            return f.read().splitlines()

    def __exit__(self, *exc: object) -> None:
        self._remove()

    def _write(self, rel: str, value: str) -> None:
        with open(os.path.join(self.path, rel), "w") as f:
            f.write(value)

    def _remove(self) -> None:
        if self._marker is not None:
            os.close(self._marker)
            self._marker = None
        try:
            self._write("tracing_on", "0")
            for ev in EVENTS:
                self._write(f"events/sched/{ev}/enable", "0")
        except OSError:
            pass
        # The kernel refused the removal now and then (2 of about 40 runs left their
        # instance behind, disabled, removable by hand later): retry for a few
        # seconds, then say so instead of leaving it silently.
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError as e:
                err = e
                time.sleep(0.1)
        warnings.warn(f"{self.path} not removed ({err}): rmdir it by hand", stacklevel=2)
