"""The contention labs as reusable code: what each lab builds, runs and expects.

A lab is a handful of *lab containers* (:class:`~labs.cgroups.LabCgroup`: a
cgroup2 child for identity and PSI, plus a v1 ``cpu`` child for quota and shares on
hybrid nodes), each with a Kubernetes-style CPU request and limit and a bounded
workload. Each shows one rule of docs/findings.md on the real kernel: throttling, requests
becoming weights, and the three blame cases:

==========================  =========================================================
lab                         expected findings (docs/findings.md says why)
==========================  =========================================================
``throttled``               ``cpu-throttled`` for the 200m-limited container, no culprit
``weights``                 CPU split close to the 8:1 request ratio; ``noisy-neighbor``
                            for the 100m container naming the 800m one (it runs far
                            beyond its request); nothing for the 800m one
``noisy-neighbor``          ``noisy-neighbor`` for the light victim naming the greedy
                            container that has no request
``contended``               ``cpu-contended`` for each of three containers that all run
                            inside their requests: nobody is named
``throttled-with-neighbor`` ``cpu-throttled`` only for the limited container, never
                            ``noisy-neighbor``, although a busy neighbour is on the CPU
==========================  =========================================================

How a request and a limit reach the kernel (what the kubelet does on a real node):

* **request** → CPU weight, with the kubelet's formula (``cpu.shares`` =
  millicores * 1024 / 1000, at least 2; :func:`~labs.cgroups.kubelet_shares`);
* **limit** → CFS quota per 100 ms period (``cpu.cfs_quota_us``, or ``cpu.max`` on a
  pure cgroup v2 node);
* **no request** → the cgroup keeps the kernel's default weight (1024 shares, 100 as
  ``cpu.weight``), which is what a systemd unit, a docker container or any process on
  the host gets. (The kubelet would give a BestEffort container 2 shares; a lab models
  a host neighbour with no request: the textbook noisy neighbour.)
* the lab's containers sit in one parent cgroup, ``/contention-test-<lab>``, whose
  weight is what the kubelet gives ``kubepods``: the node's CPUs as shares (2048 on 2
  CPUs). As on a node, the host's own processes compete with the pods as a whole, not
  with each container separately; this keeps a lab's verdicts about the lab even
  when something else on the machine is busy (see :meth:`LabRun.host_cores`).

Requests live in the pod spec, not in the cgroup. The **labs-only metadata source** is
the exporter's ordinary host-mode metadata file (``--metadata.file``,
docs/host-mode.md): while a lab runs, :class:`MetadataFile` adds one entry per lab
container (``namespace: lab``, ``pod``, ``container``, ``cpu_request``, ``cpu_limit``)
and removes it when the lab ends. The exporter re-reads the file on change, so the
culprit test ("is the neighbour running beyond its request?") applies exactly as on a
cluster. Nothing else in the exporter knows about labs.

Every lab cleans up on every exit path: :class:`LabRun` is a context manager; its
``stop()`` kills only the workers it started (by PID / their process group), removes
every cgroup it created (``contention-test-*``) and its metadata entries, even when
starting failed half way. Workloads also end by themselves at their deadline.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar

import yaml

from .cgroups import PREFIX, LabCgroup, LabError, LabLayout, detect_layout, kubelet_shares
from .kube import LabPod, PodSink
from .workers import spawn_busy, spawn_periodic

LAB_NAMESPACE = "lab"
LAB_CONTAINER = "app"

# The labs' short-window threshold overrides (for the demo and the end-to-end tests):
# only the two timing knobs shrink, every threshold keeps its packaged default. A
# finding then needs one stalled minute instead of two, and the throttled ratio,
# blame shares and culprit usage are taken over 2 minutes instead of 5.
SHORT_WINDOW: dict[str, int] = {"windowMinutes": 2, "sustainMinutes": 1}


def write_short_window_config(directory: str) -> str:
    """Write :data:`SHORT_WINDOW` as a thresholds file (``--config.file``); its path."""
    path = os.path.join(directory, "thresholds-short-window.yaml")
    with open(path, "w") as f:
        f.write("# contention labs: short window and sustain; every threshold is the default\n")
        f.write(yaml.safe_dump(SHORT_WINDOW, sort_keys=False))
    return path


# --- what a lab is -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Box:
    """One lab container: its CPU request/limit and its workload.

    ``busy`` busy loops (separate processes), or ``periodic`` = (work ms, period ms):
    a light, latency-sensitive load that does a little CPU work on every tick.
    """

    role: str
    cpu_request: float | None = None  # cores; None: no request (default weight)
    cpu_limit: float | None = None  # cores; None: no quota
    busy: int = 0
    periodic: tuple[float, float] | None = None

    @property
    def shares(self) -> int | None:
        """``cpu.shares`` the kubelet would set for the request (None: kernel default)."""
        return None if self.cpu_request is None else kubelet_shares(self.cpu_request)


@dataclass(frozen=True, slots=True)
class Expect:
    """One finding the lab must produce (roles refer to :attr:`Box.role`)."""

    kind: str
    victim: str
    culprit: str | None = None
    severity: str = "critical"


class _Role(Protocol):
    @property
    def role(self) -> str: ...


BoxT = TypeVar("BoxT", bound=_Role)


class LabContainers(Generic[BoxT]):
    """How a real-kernel lab names its containers: one parent cgroup
    ``contention-test-<lab>`` (its "kubepods") with a child per role, each a pod of the
    labs' metadata file. Shared by the CPU labs here and the memory labs
    (``labs.memory``); a lab adds the requests and limits of :meth:`resources`."""

    __slots__ = ()
    name: str
    boxes: tuple[BoxT, ...]

    def box(self, role: str) -> BoxT:
        for b in self.boxes:
            if b.role == role:
                return b
        raise KeyError(f"lab {self.name} has no container {role!r}")

    @property
    def parent_name(self) -> str:
        """The lab's own parent cgroup: ``contention-test-<lab>``."""
        return f"{PREFIX}{self.name}"

    def cgroup_path(self, role: str) -> str:
        """The ``cgroup`` label the exporter gives a container: ``/<parent>/<role>``."""
        return f"/{self.parent_name}/{role}"

    def pod(self, role: str) -> str:
        return f"{self.name}-{role}"

    def ref(self, role: str) -> str:
        """The container's name on its series and alerts (the metadata file names
        every lab container): ``namespace/pod/container``."""
        return f"{LAB_NAMESPACE}/{self.pod(role)}/{LAB_CONTAINER}"

    def role_of(self, cgroup_path: str) -> str | None:
        for b in self.boxes:
            if self.cgroup_path(b.role) == cgroup_path:
                return b.role
        return None

    def resources(self, box: BoxT) -> dict[str, str]:
        """A container's requests and limits, as metadata-file keys."""
        raise NotImplementedError

    def metadata_entries(self) -> dict[str, dict[str, Any]]:
        """The labs-only metadata: one host-mode metadata-file entry per container."""
        return {
            self.cgroup_path(b.role): {
                "namespace": LAB_NAMESPACE,
                "pod": self.pod(b.role),
                "container": LAB_CONTAINER,
                **self.resources(b),
            }
            for b in self.boxes
        }


@dataclass(frozen=True, slots=True)
class Lab(LabContainers[Box]):
    name: str
    title: str
    docs: str  # where the rule it shows is written down (docs/...)
    story: str  # what it shows, in a few sentences
    boxes: tuple[Box, ...]
    expect: tuple[Expect, ...]
    quiet: tuple[str, ...] = ()  # roles that must have no finding at all
    never: tuple[str, ...] = ()  # finding kinds that must not appear for any lab box
    checks: tuple[str, ...] = ()  # kernel-side expectations, in words (see measure())
    one_cpu: bool = False  # pin every workload to one CPU (the last one) of the machine

    def resources(self, box: Box) -> dict[str, str]:
        out = {}
        if box.cpu_request is not None:
            out["cpu_request"] = f"{round(box.cpu_request * 1000)}m"
        if box.cpu_limit is not None:
            out["cpu_limit"] = f"{round(box.cpu_limit * 1000)}m"
        return out

    def describe(self) -> str:
        lines = [f"{self.name}: {self.title}  (see {self.docs})", "", self.story, ""]
        for b in self.boxes:
            req = "none" if b.cpu_request is None else f"{b.cpu_request * 1000:.0f}m"
            lim = "none" if b.cpu_limit is None else f"{b.cpu_limit * 1000:.0f}m"
            shares = "1024 (default)" if b.shares is None else str(b.shares)
            load = (
                f"{b.busy} busy loop(s)"
                if b.busy
                else f"{b.periodic[0]:g} ms of CPU every {b.periodic[1]:g} ms"
                if b.periodic
                else "idle"
            )
            lines.append(
                f"  {self.cgroup_path(b.role)}: request {req} (cpu.shares {shares}), "
                f"limit {lim}; {load}"
            )
        if self.one_cpu:
            lines.append(f"  every workload pinned to CPU {lab_cpu()} (sched_setaffinity)")
        lines += ["", *expected_lines(self.expect, self.quiet, self.never)]
        for c in self.checks:
            lines.append(f"  {c}")
        return "\n".join(lines)


def expected_lines(
    expect: Sequence[Expect],
    quiet: Sequence[str],
    never: Sequence[str],
    culprit_word: str = "culprit",
) -> list[str]:
    """The "expected:" part of a lab's description (real-kernel and replayed labs)."""
    lines = ["expected:"]
    for e in expect:
        culprit = f", {culprit_word} {e.culprit}" if e.culprit else ", no culprit"
        lines.append(f"  {e.kind} ({e.severity}) for {e.victim}{culprit}")
    lines += [f"  no finding for {r}" for r in quiet]
    lines += [f"  never {k}" for k in never]
    return lines


LABS: dict[str, Lab] = {
    lab.name: lab
    for lab in (
        Lab(
            name="throttled",
            title="a CPU limit becomes a budget: throttling",
            docs="docs/findings.md#cpu-throttled",
            story=(
                "Four busy loops share a 200m limit (20 ms of CPU per 100 ms period). "
                "They spend the budget in a few milliseconds and then wait for the next "
                "refill with CPUs idle: throttled in almost every period, and the wait "
                "shows in the container's own PSI (some and full). The cause is the "
                "container's own limit, so no neighbour is ever named."
            ),
            boxes=(Box("limited", cpu_request=0.2, cpu_limit=0.2, busy=4),),
            expect=(Expect("cpu-throttled", "limited", None, "critical"),),
            never=("noisy-neighbor", "cpu-contended"),
            checks=("limited: throttled ratio near 1, usage near 0.2 cores",),
        ),
        Lab(
            name="throttled-steady",
            title="a steady demand above its limit, and the limit that ends the throttling",
            docs="docs/labs.md#closed-loop-labs",
            story=(
                "A service needs a steady 0.6 cores (6 ms of CPU every 10 ms) under a 300m "
                "limit: its quota runs out in every period and it waits for the next one. "
                "Unlike the busy loops of throttled, which would take every CPU there is, "
                "its demand is finite, so the limit cpu-throttled suggests (its average use "
                "plus the time its quota held it back) can be applied and must end the "
                "throttling: the closed-loop test applies it."
            ),
            boxes=(Box("service", cpu_request=0.3, cpu_limit=0.3, periodic=(6.0, 10.0)),),
            expect=(Expect("cpu-throttled", "service", None, "critical"),),
            never=("noisy-neighbor", "cpu-contended"),
            checks=("service: throttled ratio near 1, usage near 0.3 cores",),
        ),
        Lab(
            name="throttled-bursty",
            title="throttled at 40 % CPU: bursts the limit cannot hold, and the limit that can",
            docs="docs/labs.md#closed-loop-labs",
            story=(
                "A service idles most of each second, then needs 100 ms of CPU at once "
                "(one thread), under a 250m limit: 25 ms of quota per 100 ms period. Each "
                "burst drains the quota in four periods in a row, so it is throttled in "
                "about 40 % of its periods while its average use (0.1 cores) is 40 % of "
                "its limit: the headline outage. Its average plus its throttled time fits "
                "the limit, so no average sizes a new one; the scheduler probe's burst "
                "count (threads wanting a CPU at once) does, and the closed-loop test "
                "applies it."
            ),
            boxes=(Box("service", cpu_request=0.25, cpu_limit=0.25, periodic=(100.0, 1000.0)),),
            # critical: its held-back bursts show in its own CPU PSI full (23 % seen)
            expect=(Expect("cpu-throttled", "service", None, "critical"),),
            never=("noisy-neighbor", "cpu-contended"),
            checks=("service: throttled in about 40 % of its periods, usage near 0.1 cores",),
        ),
        Lab(
            name="weights",
            title="CPU requests become weights",
            docs="docs/labs.md#what-a-lab-builds",
            story=(
                "Two greedy containers with no limits share one CPU (both pinned to it), "
                "each running a busy loop, so together they want twice what exists. "
                "Requests 100m and 800m become cpu.shares 102 and 819: the kernel splits "
                "the CPU close to 1:8. The 800m container gets what it asked for and "
                "more; the 100m one is starved, and since the 800m one runs beyond its "
                "own request (about 0.89 cores of 0.8), the culprit test names it."
            ),
            boxes=(
                Box("low", cpu_request=0.1, busy=1),
                Box("high", cpu_request=0.8, busy=1),
            ),
            one_cpu=True,
            expect=(Expect("noisy-neighbor", "low", "high", "critical"),),
            quiet=("high",),
            never=("cpu-throttled", "cpu-contended"),
            checks=("usage high/low close to the 8:1 request ratio (between 4 and 16)",),
        ),
        Lab(
            name="noisy-neighbor",
            title="a greedy neighbour with no request starves a light service",
            docs="docs/findings.md#noisy-neighbor",
            story=(
                "A latency-sensitive victim (request 100m, no limit) does 5 ms of work "
                "every 50 ms. On the same CPU a greedy batch job with no request runs a "
                "busy loop at the default weight, ten times the victim's. The victim's "
                "ticks wait behind the job: it is stalled, it is not throttled, and the "
                "scheduler probe shows the job on the CPU for most of its wait. The job "
                "has no request, so it is named."
            ),
            boxes=(
                Box("victim", cpu_request=0.1, periodic=(5.0, 50.0)),
                Box("greedy", cpu_request=None, busy=1),
            ),
            one_cpu=True,
            expect=(Expect("noisy-neighbor", "victim", "greedy", "critical"),),
            quiet=("greedy",),
            never=("cpu-throttled", "cpu-contended"),
            checks=("victim: blame share of greedy >= 40%",),
        ),
        Lab(
            name="contended",
            title="an oversubscribed node: everyone inside its request",
            docs="docs/findings.md#cpu-contended",
            story=(
                "Three containers each request 1 CPU (3 CPUs promised on a 2-CPU node: "
                "a host where nothing enforces requests) and each runs two busy loops. "
                "All three are stalled, none is throttled, and each one's wait is "
                "shared by the other two, but every one of them uses less than its "
                "request (about 0.67 cores of 1), so nobody passes the culprit test: "
                "the node is oversubscribed."
            ),
            boxes=(
                Box("a", cpu_request=1.0, busy=2),
                Box("b", cpu_request=1.0, busy=2),
                Box("c", cpu_request=1.0, busy=2),
            ),
            expect=(
                Expect("cpu-contended", "a", None, "critical"),
                Expect("cpu-contended", "b", None, "critical"),
                Expect("cpu-contended", "c", None, "critical"),
            ),
            never=("cpu-throttled", "noisy-neighbor"),
            checks=("each container's usage below its 1-core request",),
        ),
        Lab(
            name="throttled-with-neighbor",
            title="the must-not-fire case: throttling is never blamed on a neighbour",
            docs="docs/findings.md#noisy-neighbor (the hard gate)",
            story=(
                "A container limited to 100m runs four busy loops on one CPU, next to a "
                "busy neighbour (one busy loop, request 500m) on the same CPU. While "
                "the limited container waits for its quota, the CPU runs the neighbour, "
                "so the scheduler probe blames the neighbour for nearly all of the "
                "wait; the container is stalled and the neighbour runs beyond its "
                "request: everything a noisy-neighbor finding needs, except that the "
                "wait is the container's own quota. The hard gate holds: cpu-throttled, "
                "never noisy-neighbor. (The neighbour has a request so that the limited "
                "container's weight, 102 shares, can still win its 10 ms per period: "
                "against a neighbour at the default 1024 it would get 9% of the CPU, "
                "never reach its quota, and be a genuine noisy-neighbor victim.)"
            ),
            boxes=(
                Box("victim", cpu_request=0.1, cpu_limit=0.1, busy=4),
                Box("neighbor", cpu_request=0.5, busy=1),
            ),
            expect=(Expect("cpu-throttled", "victim", None, "critical"),),
            quiet=("neighbor",),
            never=("noisy-neighbor", "cpu-contended"),
            checks=("victim: throttled, and the neighbour holds >= 40% of its wait",),
            one_cpu=True,
        ),
    )
}


LAB_CPU_ENV = "CONTENTION_LAB_CPU"


def lab_cpu() -> int:
    """The CPU that ``one_cpu`` labs are pinned to: the machine's last one, so the rest
    of the host (the exporter, Prometheus, anything else) keeps the other CPUs and does
    not blur a lab about two containers sharing a CPU. ``$CONTENTION_LAB_CPU`` names
    another: scripts/test.sh runs a harness confined to the other CPUs with it."""
    chosen = os.environ.get(LAB_CPU_ENV, "")
    if chosen.isdigit():
        return int(chosen)
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[-1]


def _pin(pids: list[int], cpu: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            os.sched_setaffinity(pid, {cpu})


def get_lab(name: str) -> Lab:
    try:
        return LABS[name]
    except KeyError:
        raise KeyError(f"no lab {name!r}; labs: {', '.join(LABS)}") from None


# --- the labs-only metadata source ------------------------------------------------------


class MetadataFile:
    """The host-mode metadata file (``--metadata.file``) that gives lab cgroups their
    requests, limits and names. Labs add their entries while they run and remove them
    when they end; writes are atomic (temp file + rename) and serialised with a lock
    file, so concurrent labs sharing one exporter do not lose each other's entries."""

    def __init__(self, path: str) -> None:
        self.path = path
        if not os.path.exists(path):
            self._write({})

    @classmethod
    def temporary(cls, directory: str | None = None) -> MetadataFile:
        fd, path = tempfile.mkstemp(prefix="contention-labs-", suffix=".yaml", dir=directory)
        os.close(fd)
        os.unlink(path)
        return cls(path)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.path + ".lock", "a") as lk:
            fcntl.flock(lk, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lk, fcntl.LOCK_UN)

    def read(self) -> dict[str, dict[str, Any]]:
        try:
            with open(self.path) as f:
                doc = yaml.safe_load(f) or {}
        except FileNotFoundError:
            return {}
        cg = doc.get("cgroups") if isinstance(doc, dict) else None
        return dict(cg) if isinstance(cg, dict) else {}

    def _write(self, entries: Mapping[str, Mapping[str, Any]]) -> None:
        text = "# contention labs: requests and limits of lab cgroups (host-mode metadata)\n"
        text += yaml.safe_dump({"cgroups": {k: dict(v) for k, v in entries.items()}})
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.path)

    def add(self, entries: Mapping[str, Mapping[str, Any]]) -> None:
        with self._locked():
            cur = self.read()
            cur.update({k: dict(v) for k, v in entries.items()})
            self._write(cur)

    def remove(self, paths: list[str]) -> None:
        with self._locked():
            cur = self.read()
            for p in paths:
                cur.pop(p, None)
            self._write(cur)

    def delete(self) -> None:
        for p in (self.path, self.path + ".lock"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)


# --- kernel-side measurements (independent of the exporter) -------------------------------


@dataclass(frozen=True, slots=True)
class Counters:
    at: float  # time.monotonic()
    usage_s: float
    some_s: float
    full_s: float
    periods: int
    throttled: int


@dataclass(frozen=True, slots=True)
class Measured:
    """What the kernel says about one lab container between two readings."""

    role: str
    seconds: float
    usage_cores: float
    psi_some: float  # fraction of the wall time
    psi_full: float
    throttled_ratio: float | None  # None: no quota, or no periods

    def as_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "seconds": round(self.seconds, 1),
            "usage_cores": round(self.usage_cores, 3),
            "psi_some": round(self.psi_some, 3),
            "psi_full": round(self.psi_full, 3),
            "throttled_ratio": None
            if self.throttled_ratio is None
            else round(self.throttled_ratio, 3),
        }


def node_busy_seconds(procfs: str = "/proc") -> float:
    """CPU seconds the whole node has been busy (all CPUs, ``/proc/stat``)."""
    with open(os.path.join(procfs, "stat")) as f:
        fields = f.readline().split()
    # cpu user nice system idle iowait irq softirq steal ...
    ticks = [int(x) for x in fields[1:9]]
    busy = ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6] + ticks[7]
    return busy / float(os.sysconf("SC_CLK_TCK"))


def _counters(cg: LabCgroup) -> Counters:
    periods, throttled, _ = cg.throttling()
    return Counters(
        at=time.monotonic(),
        usage_s=cg.cpu_usage_usec() / 1e6,
        some_s=cg.cpu_pressure_total_usec("some") / 1e6,
        full_s=cg.cpu_pressure_total_usec("full") / 1e6,
        periods=periods,
        throttled=throttled,
    )


# --- running a lab ----------------------------------------------------------------------


@dataclass
class LabRun:
    """One run of a lab on this host; a context manager that always cleans up.

    ``seconds`` bounds every workload (they end by themselves then, even if this
    process dies). ``metadata`` is the file the exporter was started with; ``None``
    runs the lab without telling anyone its requests (kernel-side only). ``cpu`` pins
    every workload to that CPU (default: a ``one_cpu`` lab's :func:`lab_cpu`, others
    unpinned), so that two labs can run at once, each with a CPU of its own.

    ``pods``: Kubernetes mode (:mod:`labs.kube`): every container with a request is a
    pod sent to this API server, in a kubelet-shaped cgroup; the others stay plain
    cgroups named by their path. Then :meth:`cgroup_path` and :meth:`ref` say what the
    exporter names each container, and ``metadata`` is not used.
    """

    lab: Lab
    seconds: float
    metadata: MetadataFile | None = None
    layout: LabLayout | None = None
    cpu: int | None = None
    pods: PodSink | None = None
    lab_pods: dict[str, LabPod] = field(default_factory=dict)
    _chains: dict[str, list[LabCgroup]] = field(default_factory=dict)  # kube: above the leaf
    cgroups: dict[str, LabCgroup] = field(default_factory=dict)
    parent: LabCgroup | None = None
    started_at: float | None = None  # time.time() when the workloads started
    workloads_stopped_at: float | None = None
    stopped_at: float | None = None  # cgroups removed
    _start_counters: dict[str, Counters] = field(default_factory=dict)
    _stop_measured: dict[str, Measured] = field(default_factory=dict)
    _node_start: tuple[float, float] | None = None  # (monotonic, busy seconds)
    _host_cores: float | None = None

    def start(self) -> LabRun:
        layout = self.layout or detect_layout()
        try:
            if self.metadata is not None and self.pods is None:
                # Before the cgroups exist: their first sample already carries requests.
                self.metadata.add(self.lab.metadata_entries())
            self.parent = LabCgroup.create(
                self.lab.parent_name,
                cpu_shares=kubelet_shares(float(os.cpu_count() or 1)),
                layout=layout,
            )
            for b in self.lab.boxes:
                self.cgroups[b.role] = self._make_container(b, self.parent)
            for b in self.lab.boxes:
                cg = self.cgroups[b.role]
                if b.busy:
                    w = spawn_busy(cg, threads=b.busy, seconds=self.seconds)
                elif b.periodic is not None:
                    w = spawn_periodic(
                        cg, work_ms=b.periodic[0], period_ms=b.periodic[1], seconds=self.seconds
                    )
                else:
                    continue
                if self.pinned_to is not None:
                    _pin([w.pid, *w.children], self.pinned_to)
            self.started_at = time.time()
            self._start_counters = {r: _counters(cg) for r, cg in self.cgroups.items()}
            self._node_start = (time.monotonic(), node_busy_seconds())
        except BaseException:
            self.stop()
            raise
        return self

    def _make_container(self, b: Box, parent: LabCgroup) -> LabCgroup:
        """The container's cgroup: directly under the lab's parent, or in Kubernetes
        mode, for a container with a request, a pod (sent to the API server first, so
        its first sample is named) in a kubelet-shaped cgroup below a directory with
        its weight (:mod:`labs.kube`)."""
        if self.pods is None or b.cpu_request is None:
            return LabCgroup.create(
                b.role, cpu_quota_cores=b.cpu_limit, cpu_shares=b.shares, parent=parent
            )
        pod = LabPod.of(
            LAB_NAMESPACE, self.lab.pod(b.role), LAB_CONTAINER, b.cpu_request, b.cpu_limit
        )
        self.pods.create(pod.api_object())
        self.lab_pods[b.role] = pod
        chain = self._chains.setdefault(b.role, [])
        cg = LabCgroup.create(b.role, cpu_shares=b.shares, parent=parent)
        chain.append(cg)
        for i, name in enumerate(pod.cgroup_chain):
            last = i == len(pod.cgroup_chain) - 1
            cg = LabCgroup.create(
                name,
                cpu_quota_cores=b.cpu_limit if last else None,
                cpu_shares=b.shares,
                parent=cg,
            )
            if not last:
                chain.append(cg)
        return cg

    def cgroup_path(self, role: str) -> str:
        """The ``cgroup`` label the exporter gives the container (its path)."""
        cg = self.cgroups.get(role)
        return cg.path if cg is not None else self.lab.cgroup_path(role)

    def ref(self, role: str) -> str:
        """What the container's series and alerts name it by: ``namespace/pod/container``
        (the metadata file's names, or its pod's), else its cgroup path."""
        if self.pods is None or role in self.lab_pods:
            return self.lab.ref(role)
        return self.cgroup_path(role)

    @property
    def pinned_to(self) -> int | None:
        if self.cpu is not None:
            return self.cpu
        return lab_cpu() if self.lab.one_cpu else None

    def mark(self) -> dict[str, Counters]:
        """The kernel's counters of every container now: pass to :meth:`measure` to
        measure from here (a closed loop measures from the moment it applied a fix)."""
        return {r: _counters(cg) for r, cg in self.cgroups.items() if not cg.removed}

    def measure(self, since: Mapping[str, Counters] | None = None) -> dict[str, Measured]:
        """Kernel numbers per container since the workloads started (or since a
        :meth:`mark`; until they were stopped): CPU used, PSI fractions, throttled
        ratio."""
        if self._stop_measured and since is None:
            return dict(self._stop_measured)
        start = self._start_counters if since is None else since
        out: dict[str, Measured] = {}
        for role, cg in self.cgroups.items():
            a = start.get(role)
            if a is None or cg.removed:
                continue
            b = _counters(cg)
            dt = max(b.at - a.at, 1e-9)
            dp = b.periods - a.periods
            ratio = (b.throttled - a.throttled) / dp if dp > 0 else None
            out[role] = Measured(
                role,
                dt,
                (b.usage_s - a.usage_s) / dt,
                (b.some_s - a.some_s) / dt,
                (b.full_s - a.full_s) / dt,
                ratio,
            )
        return out

    def host_cores(self) -> float | None:
        """CPU the rest of the host (everything outside this lab: other processes, the
        exporter, Prometheus) used during the run, in cores. On a shared machine this
        is what can stall a lab container that the lab itself would leave alone."""
        if self._host_cores is not None:
            return self._host_cores
        if self._node_start is None:
            return None
        t0, busy0 = self._node_start
        dt = max(time.monotonic() - t0, 1e-9)
        node = (node_busy_seconds() - busy0) / dt
        lab = sum(m.usage_cores for m in self.measure().values())
        return max(0.0, node - lab)

    def workers_alive(self) -> bool:
        return all(w.alive() for cg in self.cgroups.values() for w in cg.workers)

    def remaining(self) -> float:
        """Seconds until the workloads' own deadline."""
        if self.started_at is None:
            return 0.0
        return max(0.0, self.seconds - (time.time() - self.started_at))

    def stop_workloads(self) -> None:
        """End the lab's workloads (only the workers it started) but keep its cgroups,
        idle, as a finished container stays on a node until it is deleted: its series
        decay and its alerts resolve the way they would for a real workload that went
        quiet. The numbers of :meth:`measure` are frozen here. Idempotent."""
        if self.cgroups and not self._stop_measured and self._start_counters:
            with contextlib.suppress(LabError, OSError, KeyError, ValueError):
                for cg in self.cgroups.values():
                    cg.stop_workers()
                self._host_cores = self.host_cores()
                self._stop_measured = self.measure()
        if self.workloads_stopped_at is None and self.started_at is not None:
            self.workloads_stopped_at = time.time()

    def stop(self) -> None:
        """Stop the workloads, remove the cgroups and the metadata entries. Idempotent;
        every step is attempted even if an earlier one failed."""
        self.stop_workloads()
        errors: list[str] = []
        parent = [] if self.parent is None else [self.parent]
        chains = [cg for c in self._chains.values() for cg in reversed(c)]
        for cg in [*reversed(list(self.cgroups.values())), *chains, *parent]:
            try:
                cg.remove()
            except (LabError, OSError) as e:
                errors.append(f"{cg.path}: {e}")
        for pod in self.lab_pods.values():
            try:
                assert self.pods is not None
                self.pods.delete(pod.namespace, pod.name)
            except (OSError, ValueError) as e:  # the emulator's HTTP errors are OSErrors
                errors.append(f"pod {pod.namespace}/{pod.name}: {e}")
        self.lab_pods.clear()
        if self.metadata is not None and self.pods is None:
            try:
                self.metadata.remove(list(self.lab.metadata_entries()))
            except OSError as e:
                errors.append(f"metadata {self.metadata.path}: {e}")
        if self.stopped_at is None and self.started_at is not None:
            self.stopped_at = time.time()
        if errors:
            raise LabError("lab cleanup failed: " + "; ".join(errors))

    def __enter__(self) -> LabRun:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# --- comparing what the exporter said with what the lab expects --------------------------


def finding_key(f: Mapping[str, Any]) -> tuple[str, str, str | None, str]:
    """``(kind, victim cgroup, culprit cgroup or None, severity)`` of a /findings row."""
    culprit = f.get("culprit") or None
    return (
        str(f.get("kind")),
        str((f.get("victim") or {}).get("cgroup")),
        None if culprit is None else str(culprit.get("cgroup")),
        str(f.get("severity")),
    )


def expected_keys(lab: Lab) -> set[tuple[str, str, str | None, str]]:
    return {
        (
            e.kind,
            lab.cgroup_path(e.victim),
            None if e.culprit is None else lab.cgroup_path(e.culprit),
            e.severity,
        )
        for e in lab.expect
    }


def lab_findings(lab: Lab, doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The rows of a /findings document whose victim is one of the lab's containers."""
    paths = {lab.cgroup_path(b.role) for b in lab.boxes}
    return [
        dict(f) for f in doc.get("findings") or [] if (f.get("victim") or {}).get("cgroup") in paths
    ]


def verdict(lab: Lab, doc: Mapping[str, Any]) -> tuple[bool, list[str]]:
    """Whether a /findings document holds exactly the lab's expected findings; the
    problems found otherwise (missing, unexpected, forbidden kinds)."""
    got = {finding_key(f) for f in lab_findings(lab, doc)}
    want = expected_keys(lab)
    problems: list[str] = []
    for k in sorted(want - got, key=str):
        problems.append(f"missing {k}")
    for k in sorted(got - want, key=str):
        problems.append(f"unexpected {k}")
    return (not problems, problems)
