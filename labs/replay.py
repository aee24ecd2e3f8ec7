"""Replayed labs: findings the test machines cannot produce, from a fixture tree that
changes every second.

Memory findings cannot be produced on the real kernel of the test machines: the v1
``memory`` hierarchy there is not the project's to use, so no lab creates or moves
anything in it. CPU steal cannot either: it is the hypervisor's doing, and the test VMs
lose about 1 % to it, not the 10 % ``cpu-steal`` needs. Instead a replayed lab writes a
**pure cgroup v2 host** under a
temporary directory (``<root>/sys/fs/cgroup/...`` and ``<root>/proc/...``, files in
the kernel's exact formats) and advances its counters once a second, as the kernel
would: PSI ``total=`` microseconds (``cpu.pressure``, ``memory.pressure``),
``memory.events``, workingset refaults, CPU usage, ``/proc/pressure/*`` and the steal
column of ``/proc/stat``. The exporter reads it through ``--path.sysfs`` and
``--path.procfs`` like any host, so the whole chain (sampler → window → evaluator →
``/metrics`` → Prometheus → rules → Alertmanager) runs unchanged; only the kernel is
replaced by a script.

==========================  =========================================================
replayed lab                expected finding
==========================  =========================================================
``memory-pressure``         ``memory-pressure`` (warning) for ``db``, heuristic culprit
                            ``cache`` (the largest working set beyond its request,
                            ~91 % of the node's overage); the node is under pressure
``memory-limit-thrash``     ``memory-limit-thrash`` (warning) for ``app``: stalled on
                            memory and hitting its own ``memory.high``/``memory.max``
                            while the node is not under pressure; no culprit
``cpu-steal``               ``cpu-steal`` (warning) for the node, culprit the
                            hypervisor (20 % steal), and ``cpu-contended`` (info: no
                            probe, so PSI alone) for ``api``, stalled while no
                            neighbour runs beyond its request; its remediation points
                            at the VM's host first
==========================  =========================================================

A node-level finding's victim is :data:`NODE` and its culprit :data:`HYPERVISOR`
(``/findings`` gives neither a cgroup; the alert carries no victim labels).

A replay has two phases: the *stall* (the scripted pressure, ``stall_seconds``), then
*calm* (every counter stops moving, as when the pressure ends), during which alerts
must resolve. Requests and names come from the same labs-only metadata file as the
real-kernel labs (:class:`~labs.scenarios.MetadataFile`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from exporter.findings.model import CULPRIT_HYPERVISOR

from .exporter_proc import ExporterProcess
from .scenarios import LAB_CONTAINER, LAB_NAMESPACE, Expect, MetadataFile, expected_lines

GIB = 1 << 30
MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class ReplayBox:
    """One replayed container. Rates apply during the stall phase only."""

    role: str
    working_set: int  # bytes (memory.current minus inactive_file)
    memory_request: int | None = None
    memory_limit: int | None = None  # memory.max (None: "max")
    memory_high: int | None = None
    cpu_cores: float = 0.1  # CPU used, both phases
    cpu_request: float | None = None  # cores
    cpu_some: float = 0.0  # cpu.pressure some, fraction of each second
    cpu_full: float = 0.0
    mem_some: float = 0.0  # memory.pressure some, fraction of each second
    mem_full: float = 0.0
    refaults_per_min: float = 0.0
    limit_hits_per_min: float = 0.0  # memory.events high + max increments


# A node-level finding's victim and culprit in an Expect (cpu-steal): not lab roles.
NODE = "node"
HYPERVISOR = CULPRIT_HYPERVISOR

FindingKey = tuple[str, str, str | None, str]


@dataclass(frozen=True, slots=True)
class ReplayLab:
    name: str
    title: str
    story: str
    boxes: tuple[ReplayBox, ...]
    expect: tuple[Expect, ...]
    node_mem_some: float = 0.0  # /proc/pressure/memory some during the stall
    node_cpu_steal: float = 0.0  # /proc/stat steal over the node's CPUs during the stall
    quiet: tuple[str, ...] = ()
    never: tuple[str, ...] = ()
    heuristic_share: float | None = None  # the culprit's share of the node's overage

    def cgroup_path(self, role: str) -> str:
        return f"/{self.name}-{role}"

    def pod(self, role: str) -> str:
        return f"{self.name}-{role}"

    def ref(self, role: str) -> str:
        """The container's name on its series and alerts (``namespace/pod/container``)."""
        return f"{LAB_NAMESPACE}/{self.pod(role)}/{LAB_CONTAINER}"

    def box(self, role: str) -> ReplayBox:
        for b in self.boxes:
            if b.role == role:
                return b
        raise KeyError(role)

    @property
    def container_expects(self) -> tuple[Expect, ...]:
        """The expected findings about one of the lab's containers (not the node)."""
        return tuple(e for e in self.expect if e.victim != NODE)

    def alert_victim(self, role: str) -> str | None:
        """Who an alert's victim labels name (``namespace/pod/container``); None for
        the node: a node-level alert has no victim labels."""
        return None if role == NODE else self.ref(role)

    def _finding_cgroup(self, role: str | None) -> str | None:
        if role is None:
            return None
        return "" if role in (NODE, HYPERVISOR) else self.cgroup_path(role)

    def expected_keys(self) -> set[FindingKey]:
        """The expected findings as :func:`~labs.scenarios.finding_key` gives them
        (the node and the hypervisor have no cgroup: ``""``)."""
        return {
            (
                e.kind,
                str(self._finding_cgroup(e.victim)),
                self._finding_cgroup(e.culprit),
                e.severity,
            )
            for e in self.expect
        }

    def findings(self, doc: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The rows of a replay exporter's /findings about the lab: its containers' and
        the node's (no cgroup): that exporter reads this lab's tree alone, so its node
        is the lab's, and a node-level finding no lab expects is one too many."""
        paths = {"", *(self.cgroup_path(b.role) for b in self.boxes)}
        return [
            dict(f)
            for f in doc.get("findings") or []
            if ((f.get("victim") or {}).get("cgroup") or "") in paths
        ]

    def metadata_entries(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for b in self.boxes:
            e: dict[str, Any] = {
                "namespace": LAB_NAMESPACE,
                "pod": self.pod(b.role),
                "container": LAB_CONTAINER,
            }
            if b.memory_request is not None:
                e["memory_request"] = str(b.memory_request)
            if b.cpu_request is not None:
                e["cpu_request"] = f"{round(b.cpu_request * 1000)}m"
            out[self.cgroup_path(b.role)] = e
        return out

    def describe(self) -> str:
        lines = [f"{self.name}: {self.title}  (replayed: a fixture tree, not the kernel)", ""]
        lines += [self.story, "", f"  node memory.pressure some {self.node_mem_some:.0%}"]
        if self.node_cpu_steal:
            lines.append(f"  node CPU steal {self.node_cpu_steal:.0%} (/proc/stat)")
        for b in self.boxes:
            req = "none" if b.memory_request is None else f"{b.memory_request / GIB:g}Gi"
            cpu_req = "none" if b.cpu_request is None else f"{b.cpu_request * 1000:.0f}m"
            lines.append(
                f"  {self.cgroup_path(b.role)}: working set {b.working_set / GIB:g}Gi, "
                f"request {req}, memory some {b.mem_some:.0%}, refaults "
                f"{b.refaults_per_min:g}/min, limit hits {b.limit_hits_per_min:g}/min; "
                f"CPU {b.cpu_cores * 1000:.0f}m, request {cpu_req}, some {b.cpu_some:.0%}"
            )
        word = "culprit" if self.heuristic_share is None else "heuristic culprit"
        lines += ["", *expected_lines(self.expect, self.quiet, self.never, word)]
        return "\n".join(lines)


REPLAYS: dict[str, ReplayLab] = {
    lab.name: lab
    for lab in (
        ReplayLab(
            name="memory-pressure",
            title="a node under memory pressure, and whose growth caused it",
            story=(
                "The node spends 12% of each second stalled on memory. A database "
                "inside its 2Gi request is stalled 25% of the time and refaults its "
                "working set; a cache with a 1Gi request has grown to 6Gi. The cache "
                "holds 5Gi of the node's 5.5Gi beyond requests (91%), so it is named "
                "as the heuristic culprit; the batch job beyond its request by 0.5Gi "
                "is not."
            ),
            node_mem_some=0.12,
            boxes=(
                ReplayBox(
                    "db",
                    working_set=2 * GIB,
                    memory_request=2 * GIB,
                    cpu_cores=0.3,
                    mem_some=0.25,
                    mem_full=0.04,
                    refaults_per_min=600,
                ),
                ReplayBox("cache", working_set=6 * GIB, memory_request=1 * GIB, cpu_cores=0.2),
                ReplayBox("batch", working_set=1536 * MIB, memory_request=1 * GIB, cpu_cores=0.5),
            ),
            expect=(Expect("memory-pressure", "db", "cache", "warning"),),
            quiet=("cache", "batch"),
            never=("memory-limit-thrash",),
            heuristic_share=5 / 5.5,
        ),
        ReplayLab(
            name="memory-limit-thrash",
            title="thrashing under its own memory limit on a calm node",
            story=(
                "An app with a 512Mi memory.max keeps hitting it (memory.events high "
                "and max rising) and refaults 3000 pages a minute, stalled 20% of the "
                "time, while the node itself is not under memory pressure. Its own "
                "limit is the cause: no culprit."
            ),
            node_mem_some=0.0,
            boxes=(
                ReplayBox(
                    "app",
                    working_set=500 * MIB,
                    memory_request=256 * MIB,
                    memory_limit=512 * MIB,
                    memory_high=480 * MIB,
                    cpu_cores=0.4,
                    mem_some=0.20,
                    mem_full=0.03,
                    refaults_per_min=3000,
                    limit_hits_per_min=30,
                ),
                ReplayBox("web", working_set=300 * MIB, memory_request=512 * MIB, cpu_cores=0.2),
            ),
            expect=(Expect("memory-limit-thrash", "app", None, "warning"),),
            quiet=("web",),
            never=("memory-pressure",),
        ),
        ReplayLab(
            name="cpu-steal",
            title="a VM whose hypervisor takes its CPU",
            story=(
                "The hypervisor gives 20% of this VM's CPU time to other guests "
                "(/proc/stat steal). An API server using 300m of its 500m request is "
                "stalled 30% of the time waiting for a CPU; its neighbour runs inside "
                "its own request, so no cgroup on the node is to blame. The node gets a "
                "cpu-steal finding naming the hypervisor, and the API server's "
                "cpu-contended says the CPU went to steal and points at the VM's host "
                "first. Without the scheduler probe the stall is PSI alone: info."
            ),
            node_cpu_steal=0.20,
            boxes=(
                ReplayBox(
                    "api",
                    working_set=512 * MIB,
                    memory_request=1 * GIB,
                    cpu_cores=0.3,
                    cpu_request=0.5,
                    cpu_some=0.30,
                    cpu_full=0.04,
                ),
                ReplayBox(
                    "web",
                    working_set=256 * MIB,
                    memory_request=512 * MIB,
                    cpu_cores=0.6,
                    cpu_request=1.0,
                    cpu_some=0.05,
                ),
            ),
            expect=(
                Expect("cpu-contended", "api", None, "info"),
                Expect("cpu-steal", NODE, HYPERVISOR, "warning"),
            ),
            quiet=("web",),
            never=("noisy-neighbor", "cpu-throttled"),
        ),
    )
}


def get_replay(name: str) -> ReplayLab:
    try:
        return REPLAYS[name]
    except KeyError:
        raise KeyError(f"no replayed lab {name!r}; replays: {', '.join(REPLAYS)}") from None


# --- the fixture tree --------------------------------------------------------------------


def _psi(some_us: float, full_us: float) -> str:
    return (
        f"some avg10=0.00 avg60=0.00 avg300=0.00 total={int(some_us)}\n"
        f"full avg10=0.00 avg60=0.00 avg300=0.00 total={int(full_us)}\n"
    )


def _write(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)  # readers never see a half-written file


@dataclass
class _BoxState:
    usage_us: float = 0.0
    cpu_some_us: float = 0.0
    cpu_full_us: float = 0.0
    some_us: float = 0.0
    full_us: float = 0.0
    refault_file: float = 0.0
    refault_anon: float = 0.0
    high: float = 0.0
    max: float = 0.0
    pgmajfault: float = 0.0


@dataclass
class ReplayTree:
    """A fake host root (``sysfs``, ``procfs`` under :attr:`root`) driven by a lab."""

    lab: ReplayLab
    root: str
    # The exporter takes the node's cores from the machine it runs on (os.cpu_count()),
    # so /proc/stat has that many CPUs: the steal share it computes is the lab's.
    ncpu: int = field(default_factory=lambda: os.cpu_count() or 1)
    node_mem_bytes: int = 16 * GIB
    _state: dict[str, _BoxState] = field(default_factory=dict)
    _node_mem_some_us: float = 0.0
    _node_cpu_some_us: float = 0.0
    _node_cpu_ticks: float = 0.0
    _node_steal_ticks: float = 0.0
    _ctxt: float = 0.0

    @property
    def sysfs(self) -> str:
        return os.path.join(self.root, "sys")

    @property
    def procfs(self) -> str:
        return os.path.join(self.root, "proc")

    @property
    def cgroup_root(self) -> str:
        return os.path.join(self.sysfs, "fs", "cgroup")

    def build(self) -> None:
        cg = self.cgroup_root
        os.makedirs(cg, exist_ok=True)
        os.makedirs(os.path.join(self.procfs, "pressure"), exist_ok=True)
        os.makedirs(os.path.join(self.sysfs, "kernel", "btf"), exist_ok=True)
        _write(os.path.join(self.sysfs, "kernel", "btf", "vmlinux"), "")
        _write(os.path.join(cg, "cgroup.controllers"), "cpuset cpu io memory pids\n")
        _write(os.path.join(cg, "cgroup.subtree_control"), "cpu io memory pids\n")
        _write(os.path.join(cg, "cgroup.procs"), "")
        kb = self.node_mem_bytes // 1024
        _write(
            os.path.join(self.procfs, "meminfo"),
            f"MemTotal:       {kb} kB\nMemFree:        {kb // 2} kB\n"
            f"MemAvailable:   {kb // 2} kB\n",
        )
        for b in self.lab.boxes:
            d = os.path.join(cg, self.lab.cgroup_path(b.role).lstrip("/"))
            os.makedirs(d, exist_ok=True)
            _write(os.path.join(d, "cgroup.procs"), "")
            _write(os.path.join(d, "cpu.max"), "max 100000\n")
            _write(os.path.join(d, "cpu.weight"), "100\n")
            lim = "max" if b.memory_limit is None else str(b.memory_limit)
            high = "max" if b.memory_high is None else str(b.memory_high)
            _write(os.path.join(d, "memory.max"), lim + "\n")
            _write(os.path.join(d, "memory.high"), high + "\n")
            self._state[b.role] = _BoxState()
        self.advance(0.0, stalled=False)

    def advance(self, dt: float, stalled: bool) -> None:
        """Move every counter on by ``dt`` seconds (stall rates only when ``stalled``)."""
        node_cpu = 0.0
        for b in self.lab.boxes:
            s = self._state[b.role]
            s.usage_us += b.cpu_cores * dt * 1e6
            node_cpu += b.cpu_cores
            if stalled:
                s.cpu_some_us += b.cpu_some * dt * 1e6
                s.cpu_full_us += b.cpu_full * dt * 1e6
                s.some_us += b.mem_some * dt * 1e6
                s.full_us += b.mem_full * dt * 1e6
                s.refault_file += b.refaults_per_min * dt / 60 * 0.75
                s.refault_anon += b.refaults_per_min * dt / 60 * 0.25
                s.high += b.limit_hits_per_min * dt / 60 / 2
                s.max += b.limit_hits_per_min * dt / 60 / 2
                s.pgmajfault += b.refaults_per_min * dt / 60 / 10
            self._write_box(b, s)
        if stalled:
            self._node_mem_some_us += self.lab.node_mem_some * dt * 1e6
            # some task on the node waits whenever one of the containers' does
            self._node_cpu_some_us += (
                max((b.cpu_some for b in self.lab.boxes), default=0) * dt * 1e6
            )
            self._node_steal_ticks += self.lab.node_cpu_steal * self.ncpu * dt * 100
        self._node_cpu_ticks += node_cpu * dt * 100
        self._ctxt += 2000 * dt
        self._write_node()

    def _write_box(self, b: ReplayBox, s: _BoxState) -> None:
        d = os.path.join(self.cgroup_root, self.lab.cgroup_path(b.role).lstrip("/"))
        usage = int(s.usage_us)
        _write(
            os.path.join(d, "cpu.stat"),
            f"usage_usec {usage}\nuser_usec {usage * 3 // 4}\n"
            f"system_usec {usage - usage * 3 // 4}\nnice_usec 0\n"
            "core_sched.force_idle_usec 0\nnr_periods 0\nnr_throttled 0\n"
            "throttled_usec 0\nnr_bursts 0\nburst_usec 0\n",
        )
        _write(os.path.join(d, "cpu.pressure"), _psi(s.cpu_some_us, s.cpu_full_us))
        _write(os.path.join(d, "io.pressure"), _psi(0, 0))
        _write(os.path.join(d, "memory.pressure"), _psi(s.some_us, s.full_us))
        inactive_file = 64 * MIB
        current = b.working_set + inactive_file
        anon = b.working_set * 3 // 4
        file = current - anon
        _write(os.path.join(d, "memory.current"), f"{current}\n")
        _write(
            os.path.join(d, "memory.stat"),
            f"anon {anon}\nfile {file}\nkernel 4194304\nshmem 0\n"
            f"inactive_anon {anon // 4}\nactive_anon {anon - anon // 4}\n"
            f"inactive_file {inactive_file}\nactive_file {file - inactive_file}\n"
            f"unevictable 0\nworkingset_refault_anon {int(s.refault_anon)}\n"
            f"workingset_refault_file {int(s.refault_file)}\n"
            "workingset_activate_anon 0\nworkingset_activate_file 0\n"
            f"pgfault {int(s.pgmajfault) * 20}\npgmajfault {int(s.pgmajfault)}\n",
        )
        _write(
            os.path.join(d, "memory.events"),
            f"low 0\nhigh {int(s.high)}\nmax {int(s.max)}\noom 0\noom_kill 0\n"
            "oom_group_kill 0\n",
        )

    def _write_node(self) -> None:
        cg = self.cgroup_root
        usage = int(self._node_cpu_ticks * 10_000)
        _write(
            os.path.join(cg, "cpu.stat"),
            f"usage_usec {usage}\nuser_usec {usage}\nsystem_usec 0\nnice_usec 0\n",
        )
        _write(os.path.join(cg, "cpu.pressure"), _psi(self._node_cpu_some_us, 0))
        _write(os.path.join(cg, "memory.pressure"), _psi(self._node_mem_some_us, 0))
        _write(os.path.join(cg, "io.pressure"), _psi(0, 0))
        p = os.path.join(self.procfs, "pressure")
        _write(os.path.join(p, "cpu"), _psi(self._node_cpu_some_us, 0))
        _write(os.path.join(p, "io"), _psi(0, 0))
        _write(os.path.join(p, "memory"), _psi(self._node_mem_some_us, 0))
        busy = int(self._node_cpu_ticks)
        steal = int(self._node_steal_ticks)  # the 8th CPU time
        idle = max(int(time.monotonic() * 100 * self.ncpu) - busy - steal, 0)
        n = self.ncpu
        lines = [f"cpu  {busy} 0 0 {idle} 0 0 0 {steal} 0 0"]
        for i in range(n):
            lines.append(f"cpu{i} {busy // n} 0 0 {idle // n} 0 0 0 {steal // n} 0 0")
        lines += [f"ctxt {int(self._ctxt)}", "btime 1764460800", "processes 1000"]
        lines += ["procs_running 1", "procs_blocked 0"]
        _write(os.path.join(self.procfs, "stat"), "\n".join(lines) + "\n")


class ReplayRun:
    """Drive a :class:`ReplayTree` once a second from a thread: ``stall_seconds`` of
    the scripted pressure, then calm until :meth:`stop`. A context manager; the tree
    (a temporary directory unless ``root`` is given) is deleted on exit."""

    def __init__(
        self,
        lab: ReplayLab,
        stall_seconds: float,
        *,
        metadata: MetadataFile | None = None,
        root: str | None = None,
        tick: float = 1.0,
    ) -> None:
        self.lab = lab
        self.stall_seconds = stall_seconds
        self.metadata = metadata
        self._own_root = root is None
        self.root = root or tempfile.mkdtemp(prefix=f"contention-replay-{lab.name}-")
        self.tree = ReplayTree(lab, self.root)
        self.tick = tick
        self.started_at: float | None = None  # time.time()
        self.calm_at: float | None = None  # time.time() when the stall phase ended
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.tree.build()
        if metadata is not None:
            metadata.add(lab.metadata_entries())

    def start(self) -> ReplayRun:
        self.started_at = time.time()
        self._thread = threading.Thread(
            target=self._run, name=f"replay-{self.lab.name}", daemon=True
        )
        self._thread.start()
        return self

    def end_stall(self) -> None:
        """End the stall phase now (the counters stop moving from the next tick)."""
        self.stall_seconds = 0.0

    @property
    def stalled(self) -> bool:
        return self.calm_at is None

    def _run(self) -> None:
        assert self.started_at is not None
        last = time.monotonic()
        t0 = last
        try:
            while not self._stop.wait(self.tick):
                now = time.monotonic()
                stalled = now - t0 < self.stall_seconds
                if not stalled and self.calm_at is None:
                    self.calm_at = time.time()
                self.tree.advance(now - last, stalled)
                last = now
        except BaseException as e:  # surfaced by stop()
            self.error = e

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self.metadata is not None:
            with contextlib.suppress(OSError):
                self.metadata.remove(list(self.lab.metadata_entries()))
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)
        if self.error is not None:
            raise RuntimeError(f"replay {self.lab.name} failed: {self.error}") from self.error

    def exporter(self, config: str, log_path: str | None = None) -> ExporterProcess:
        """An exporter (not started; no probe) reading this replay's tree, with the
        lab's metadata file and the threshold ``config``."""
        args = ["--path.sysfs", self.tree.sysfs, "--path.procfs", self.tree.procfs]
        if self.metadata is not None:
            args += ["--metadata.file", self.metadata.path]
        return ExporterProcess(
            sample_interval=1.0,
            probe=False,
            extra_args=[*args, "--config.file", config],
            log_path=log_path,
        )

    def __enter__(self) -> ReplayRun:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
