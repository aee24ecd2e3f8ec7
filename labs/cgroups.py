"""Lab containers: cgroups the labs create on the real kernel, and remove again.

A *lab container* is what a Kubernetes container is to the exporter, made by hand:

* **hybrid node** (the test machines): a directory of the same name in the cgroup2
  hierarchy (``/sys/fs/cgroup/unified/<name>``: identity = its inode, PSI files,
  usage-only ``cpu.stat``) **and** in the v1 ``cpu`` hierarchy
  (``/sys/fs/cgroup/cpu/<name>``: ``cpu.cfs_quota_us``, ``cpu.shares``, throttling
  counters). Every process is put in both.
* **pure cgroup v2**: one directory with ``cpu.max`` and ``cpu.weight`` (needs the
  ``cpu`` controller enabled in the root's ``cgroup.subtree_control``; the labs never
  change it).

Scheduling note: a lab container is a direct child of the root, so on the CPU it is one
group entity of weight 1024 (``cpu.shares``; 100 as ``cpu.weight``) competing with every
task left in the root cgroup. Four busy loops in a lab therefore get about as much CPU
as *one* unrelated busy process at the root; labs that compare shares should compare
lab containers with each other.

Safety rules (docs/labs.md), enforced here rather than left to callers:

* names always start with :data:`PREFIX`; only directories with that prefix that this
  module created (or that a dead owner left behind) are ever removed;
* the v1 ``memory`` hierarchy and every other controller are never touched; cgroup2 is
  never mounted;
* removing a lab kills only the workers *it* started (by PID / their own process
  group); any other process found inside is moved back to the parent, not killed;
* every wait is bounded.

Ownership: before ``mkdir`` the creator records ``<pid> <starttime>`` in
``/run/contention-labs/<name>``. :func:`cleanup_stale` removes a prefixed cgroup only
when that owner is gone (or there is no record), so concurrent test runs of other
developers, which use the same prefix, are left alone.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

from exporter.cgroupfs.parsers import parse_cfs_v1, parse_cpu_max
from exporter.selftest.cgroups import procs, write_file

PREFIX = "contention-test-"
DEFAULT_CGROUP_ROOT = "/sys/fs/cgroup"
OWNER_DIR = "/run/contention-labs"
CFS_PERIOD_US = 100_000


class WorkerHandle(Protocol):
    """A workload started in a lab (``labs.workers.Worker``): the lab stops it on removal."""

    def alive(self) -> bool: ...

    def stop(self, timeout: float = 5.0) -> None: ...

    def discard_result(self) -> None: ...


class LabError(RuntimeError):
    """A lab cgroup could not be created, filled or removed."""


class LabUnavailable(LabError):
    """This machine (or user) cannot run real-kernel labs; the message says why."""


@dataclass(frozen=True, slots=True)
class LabLayout:
    """Where lab cgroups go on this node."""

    mode: str  # "hybrid" or "v2"
    v2_root: str  # the cgroup2 hierarchy (identity, PSI, usage; everything on pure v2)
    v1_cpu_root: str | None  # hybrid: the v1 cpu controller hierarchy (quota, shares)
    v2_cpu_controller: bool  # pure v2: "cpu" enabled for children of the root


def detect_layout(cgroup_root: str = DEFAULT_CGROUP_ROOT) -> LabLayout:
    """The node's cgroup layout, or :class:`LabUnavailable` with the reason."""
    if os.path.exists(os.path.join(cgroup_root, "cgroup.controllers")):
        try:
            with open(os.path.join(cgroup_root, "cgroup.subtree_control")) as f:
                cpu_on = "cpu" in f.read().split()
        except OSError:
            cpu_on = False
        return LabLayout("v2", cgroup_root, None, cpu_on)
    unified = os.path.join(cgroup_root, "unified")
    if os.path.exists(os.path.join(unified, "cgroup.controllers")):
        v1_cpu = None
        for cand in ("cpu", "cpu,cpuacct"):
            d = os.path.join(cgroup_root, cand)
            if os.path.exists(os.path.join(d, "cpu.cfs_quota_us")):
                v1_cpu = d
                break
        if v1_cpu is None:
            raise LabUnavailable(f"hybrid cgroups but no v1 cpu controller under {cgroup_root}")
        return LabLayout("hybrid", unified, v1_cpu, False)
    raise LabUnavailable(f"no cgroup2 hierarchy at {cgroup_root} or {unified}")


def unavailable_reason(cgroup_root: str = DEFAULT_CGROUP_ROOT) -> str | None:
    """Why real-kernel labs cannot run here (``None`` when they can): for test skips."""
    if os.geteuid() != 0:
        return "real-kernel labs need root (they create cgroups)"
    try:
        layout = detect_layout(cgroup_root)
    except LabUnavailable as e:
        return str(e)
    if not os.path.exists(os.path.join(layout.v2_root, "cpu.pressure")):
        return f"no PSI: {layout.v2_root}/cpu.pressure is missing (kernel without CONFIG_PSI?)"
    if not os.access(os.path.join(layout.v2_root, "cgroup.procs"), os.W_OK):
        return f"cannot write {layout.v2_root}/cgroup.procs"
    return None


# --- kubelet conversions (what a request/limit becomes on the node) -----------------


def kubelet_shares(request_cores: float) -> int:
    """The kubelet's ``MilliCPUToShares``: a CPU request as v1 ``cpu.shares``."""
    return max(2, int(round(request_cores * 1000)) * 1024 // 1000)


def shares_to_weight(shares: int) -> int:
    """v1 ``cpu.shares`` → v2 ``cpu.weight`` (runc's and the kernel's formula)."""
    shares = max(2, min(shares, 262144))
    return 1 + ((shares - 2) * 9999) // 262142


def weight_to_shares(weight: int) -> int:
    """v2 ``cpu.weight`` → v1 ``cpu.shares`` (the inverse, for hybrid nodes)."""
    weight = max(1, min(weight, 10000))
    return 2 + ((weight - 1) * 262142) // 9999


# --- ownership records ---------------------------------------------------------------


def _proc_starttime(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # Field 22 (starttime); the comm field (2) may contain spaces, so split after ')'.
    rest = data[data.rfind(b")") + 2 :].split()
    try:
        return int(rest[19])
    except (IndexError, ValueError):
        return None


def _owner_path(dirname: str, owner_dir: str) -> str:
    return os.path.join(owner_dir, dirname)


def _write_owner(dirname: str, owner_dir: str) -> None:
    os.makedirs(owner_dir, mode=0o755, exist_ok=True)
    me = os.getpid()
    with open(_owner_path(dirname, owner_dir), "w") as f:
        f.write(f"{me} {_proc_starttime(me) or 0}\n")


def _owner_alive(dirname: str, owner_dir: str) -> int | None:
    """The PID of a live owner of ``dirname``, else ``None`` (dead, or no record)."""
    try:
        with open(_owner_path(dirname, owner_dir)) as f:
            pid_s, start_s = f.read().split()[:2]
        pid, start = int(pid_s), int(start_s)
    except (OSError, ValueError):
        return None
    if _proc_starttime(pid) == start:
        return pid
    return None


def _results_dir(dirname: str, owner_dir: str) -> str:
    return os.path.join(owner_dir, "results", dirname)


def _drop_owner(dirname: str, owner_dir: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_owner_path(dirname, owner_dir))


# --- low-level cgroup file operations (writes and process lists: exporter.selftest's) --


def _evacuate(directory: str) -> int:
    """Move every process of ``directory`` to its parent cgroup; how many were moved."""
    parent_procs = os.path.join(os.path.dirname(directory), "cgroup.procs")
    moved = 0
    for pid in procs(directory):
        try:
            write_file(parent_procs, str(pid))
            moved += 1
        except OSError as e:
            if e.errno not in (errno.ESRCH, errno.ENOENT):
                raise
    return moved


def _rmdir_tree(directory: str, deadline: float) -> None:
    """Remove a cgroup directory and its child cgroups (deepest first), evacuating
    their processes to the parent; retries ``EBUSY`` until ``deadline``."""
    if not os.path.isdir(directory):
        return
    with os.scandir(directory) as it:
        children = [e.path for e in it if e.is_dir(follow_symlinks=False)]
    for child in children:
        _rmdir_tree(child, deadline)
    while True:
        try:
            _evacuate(directory)
            os.rmdir(directory)
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() >= deadline:
                left = procs(directory)
                raise LabError(f"cannot remove {directory}: {e.strerror}; pids left {left}") from e
        time.sleep(0.05)


# --- the lab container ----------------------------------------------------------------


class LabCgroup:
    """One lab container. Use :meth:`create` (a context manager) and :meth:`remove`."""

    def __init__(
        self,
        name: str,
        layout: LabLayout,
        owner_dir: str = OWNER_DIR,
        parent: LabCgroup | None = None,
    ) -> None:
        if parent is None and not name.startswith(PREFIX):
            name = PREFIX + name
        if "/" in name or name in (".", "..") or not name.isprintable():
            raise ValueError(f"bad lab cgroup name {name!r}")
        # A child of another lab cgroup (``parent``): it lives inside the parent's
        # directories (so under the prefix); its ownership record is "<parent>.<name>".
        self.parent: LabCgroup | None = parent
        self.leaf: str = name
        self.name: str = name if parent is None else f"{parent.name}.{name}"
        self.layout = layout
        self.owner_dir = owner_dir
        v2_base: str = layout.v2_root if parent is None else parent.v2_dir
        v1_base: str | None = layout.v1_cpu_root if parent is None else parent.v1_cpu_dir
        self.v2_dir: str = os.path.join(v2_base, name)
        self.v1_cpu_dir: str | None = os.path.join(v1_base, name) if v1_base is not None else None
        self.workers: list[WorkerHandle] = []  # labs.workers appends what it starts
        self._removed = False
        self._cgroup_id: int | None = None

    # construction ---------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        name: str,
        cpu_quota_cores: float | None = None,
        cpu_shares: int | None = None,
        cpu_weight: int | None = None,
        *,
        cpu_period_us: int = CFS_PERIOD_US,
        layout: LabLayout | None = None,
        owner_dir: str = OWNER_DIR,
        parent: LabCgroup | None = None,
        memory_max: int | None = None,
        memory_high: int | None = None,
    ) -> LabCgroup:
        """Make the lab container (both hierarchies on a hybrid node) and set its CPU
        limit (``cpu_quota_cores`` times the period) and weight (``cpu_shares`` or
        ``cpu_weight``, converted for the hierarchy that holds it).

        With ``parent`` (another lab cgroup) it is made inside the parent, like a pod's
        container inside ``kubepods``; remove the children before the parent. On pure
        cgroup v2 the parent delegates its controllers to its children first (its
        ``cgroup.subtree_control``), as systemd does for a pod's slice.

        ``memory_max`` / ``memory_high`` (bytes) are the container's ``memory.max`` and
        ``memory.high``: pure cgroup v2 only (the v1 memory hierarchy of hybrid nodes
        is never touched).

        A leftover of the same name from a dead owner is removed first; one that a live
        process owns raises :class:`LabError`.
        """
        if cpu_shares is not None and cpu_weight is not None:
            raise ValueError("give cpu_shares or cpu_weight, not both")
        if parent is not None:
            layout = parent.layout
        lab = cls(name, layout or detect_layout(), owner_dir, parent=parent)
        if (memory_max, memory_high) != (None, None) and lab.layout.mode != "v2":
            raise LabUnavailable(
                "memory limits need pure cgroup v2: the labs never touch v1 memory"
            )
        if parent is not None and lab.layout.mode == "v2":
            parent._delegate()
        lab._make(cpu_quota_cores, cpu_period_us, cpu_shares, cpu_weight)
        try:
            for fname, value in (("memory.max", memory_max), ("memory.high", memory_high)):
                if value is not None:
                    write_file(os.path.join(lab.v2_dir, fname), str(value))
        except BaseException:
            with contextlib.suppress(LabError, OSError):
                lab.remove()
            raise
        return lab

    def _delegate(self) -> None:
        """Enable for this (pure v2, process-free) cgroup's children the controllers it
        has among cpu, memory, io and pids."""
        with open(os.path.join(self.v2_dir, "cgroup.controllers")) as f:
            have = set(f.read().split())
        with open(os.path.join(self.v2_dir, "cgroup.subtree_control")) as f:
            on = set(f.read().split())
        want = [c for c in ("cpu", "memory", "io", "pids") if c in have and c not in on]
        if want:
            write_file(
                os.path.join(self.v2_dir, "cgroup.subtree_control"),
                " ".join("+" + c for c in want),
            )

    def _dirs(self) -> list[str]:
        return [d for d in (self.v2_dir, self.v1_cpu_dir) if d is not None]

    def _make(
        self,
        quota_cores: float | None,
        period_us: int,
        shares: int | None,
        weight: int | None,
    ) -> None:
        owner = _owner_alive(self.name, self.owner_dir)
        if owner is not None and owner != os.getpid():
            raise LabError(f"lab cgroup {self.name} is in use by live pid {owner}")
        if any(os.path.isdir(d) for d in self._dirs()):
            if owner == os.getpid():
                raise LabError(f"lab cgroup {self.name} already exists in this process")
            deadline = time.monotonic() + 5.0
            for d in self._dirs():
                _rmdir_tree(d, deadline)
        wants_cpu = (quota_cores, shares, weight) != (None, None, None)
        if self.layout.mode == "v2" and wants_cpu and not self.layout.v2_cpu_controller:
            raise LabUnavailable(
                f"the cpu controller is not enabled in {self.layout.v2_root}/"
                "cgroup.subtree_control; the labs do not change it"
            )
        _write_owner(self.name, self.owner_dir)  # before mkdir: cleanup_stale sees us
        try:
            for d in self._dirs():
                os.mkdir(d)
            self._configure(quota_cores, period_us, shares, weight)
        except BaseException:
            with contextlib.suppress(LabError, OSError):
                self.remove()
            raise

    def _configure(
        self,
        quota_cores: float | None,
        period_us: int,
        shares: int | None,
        weight: int | None,
    ) -> None:
        quota_us = None if quota_cores is None else max(1000, round(quota_cores * period_us))
        if self.v1_cpu_dir is not None:  # hybrid
            if quota_us is not None:
                write_file(os.path.join(self.v1_cpu_dir, "cpu.cfs_period_us"), str(period_us))
                write_file(os.path.join(self.v1_cpu_dir, "cpu.cfs_quota_us"), str(quota_us))
            if weight is not None:
                shares = weight_to_shares(weight)
            if shares is not None:
                write_file(os.path.join(self.v1_cpu_dir, "cpu.shares"), str(shares))
        else:  # pure v2
            if quota_us is not None:
                write_file(os.path.join(self.v2_dir, "cpu.max"), f"{quota_us} {period_us}")
            if shares is not None:
                weight = shares_to_weight(shares)
            if weight is not None:
                write_file(os.path.join(self.v2_dir, "cpu.weight"), str(weight))

    # resizing in place (what the kubelet does when a pod's resources change) -----------

    def set_cpu(
        self,
        quota_cores: float | None = None,
        shares: int | None = None,
        weight: int | None = None,
        *,
        period_us: int = CFS_PERIOD_US,
    ) -> None:
        """Change the container's CPU limit and/or weight while it runs, in the
        hierarchy that holds them (v1 ``cpu.cfs_quota_us`` / ``cpu.shares``, or v2
        ``cpu.max`` / ``cpu.weight``), with the same conversions as :meth:`create`."""
        if self._removed:
            raise LabError(f"{self.path} was removed")
        if shares is not None and weight is not None:
            raise ValueError("give shares or weight, not both")
        self._configure(quota_cores, period_us, shares, weight)

    def set_memory(self, memory_max: int, memory_high: int | None = None) -> None:
        """Change ``memory.max`` (and ``memory.high``) while the container runs: pure
        cgroup v2 only, like :meth:`create`'s memory limits."""
        if self._removed:
            raise LabError(f"{self.path} was removed")
        if self.layout.mode != "v2":
            raise LabUnavailable(
                "memory limits need pure cgroup v2: the labs never touch v1 memory"
            )
        write_file(os.path.join(self.v2_dir, "memory.max"), str(memory_max))
        if memory_high is not None:
            write_file(os.path.join(self.v2_dir, "memory.high"), str(memory_high))

    # identity ---------------------------------------------------------------------------

    @property
    def path(self) -> str:
        """Path relative to the cgroup2 root, as the exporter labels it (``/<name>``,
        ``/<parent>/<name>`` for a child)."""
        if self.parent is not None:
            return f"{self.parent.path}/{self.leaf}"
        return "/" + self.name

    @property
    def cgroup_id(self) -> int:
        """The cgroup id: inode of the cgroup2 directory (what BPF and the exporter see)."""
        if self._cgroup_id is None:
            self._cgroup_id = os.stat(self.v2_dir).st_ino
        return self._cgroup_id

    def results_dir(self) -> str:
        """Where this lab's workers write their summaries (removed with the lab, or by
        :func:`cleanup_stale` after a crash)."""
        return _results_dir(self.name, self.owner_dir)

    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a process must join, cgroup2 first."""
        return [os.path.join(d, "cgroup.procs") for d in self._dirs()]

    # membership -------------------------------------------------------------------------

    def add_pid(self, pid: int) -> None:
        """Move a process into the lab container (every hierarchy it spans)."""
        for f in self.procs_files():
            write_file(f, str(pid))

    def pids(self) -> list[int]:
        """Processes in the cgroup2 directory."""
        return procs(self.v2_dir)

    # reading (for labs and asserts; the exporter has its own readers) --------------------

    def read(self, filename: str, hierarchy: str = "v2") -> str:
        """Text of one of the lab's cgroup files (``hierarchy``: "v2" or "cpu")."""
        d = self.v2_dir if hierarchy == "v2" else self.v1_cpu_dir
        if d is None:
            raise LabError(f"{self.name} has no {hierarchy} directory on this node")
        with open(os.path.join(d, filename)) as f:
            return f.read()

    def cpu_usage_usec(self) -> int:
        return flat_keyed(self.read("cpu.stat"))["usage_usec"]

    def cpu_pressure_total_usec(self, line: str = "some") -> int:
        return psi_total_usec(self.read("cpu.pressure"), line, f"{self.v2_dir}/cpu.pressure")

    def quota_cores(self) -> float | None:
        """The CPU limit in force, in cores (``cpu.max`` or v1 quota / period), read
        with the exporter's own parsers; None: unlimited."""
        if self.v1_cpu_dir is not None:
            q, per = self.read("cpu.cfs_quota_us", "cpu"), self.read("cpu.cfs_period_us", "cpu")
            return parse_cfs_v1(q, per).limit_cores
        return parse_cpu_max(self.read("cpu.max")).limit_cores

    def throttling(self) -> tuple[int, int, float]:
        """``(nr_periods, nr_throttled, throttled_seconds)`` from the kernel."""
        if self.v1_cpu_dir is not None:
            s = flat_keyed(self.read("cpu.stat", "cpu"))
            return s["nr_periods"], s["nr_throttled"], s["throttled_time"] / 1e9
        s = flat_keyed(self.read("cpu.stat"))
        return s.get("nr_periods", 0), s.get("nr_throttled", 0), s.get("throttled_usec", 0) / 1e6

    # removal ----------------------------------------------------------------------------

    def stop_workers(self) -> None:
        """Kill the workers this lab started (only those, by their PID/process group)."""
        for w in self.workers:
            w.stop()

    def remove(self, timeout: float = 5.0) -> None:
        """Stop our workers, move any other process back to the parent cgroup, and
        remove every directory of the lab; retries ``EBUSY`` for up to ``timeout``."""
        if self._removed:
            return
        self.stop_workers()
        for w in self.workers:
            w.discard_result()
        deadline = time.monotonic() + timeout
        errors: list[str] = []
        for d in self._dirs():
            try:
                _rmdir_tree(d, deadline)
            except (LabError, OSError) as e:
                errors.append(str(e))
        if errors:
            raise LabError("; ".join(errors))
        shutil.rmtree(self.results_dir(), ignore_errors=True)
        _drop_owner(self.name, self.owner_dir)
        self._removed = True

    @property
    def removed(self) -> bool:
        return self._removed

    def __enter__(self) -> LabCgroup:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"LabCgroup({self.path!r}, mode={self.layout.mode})"


def flat_keyed(text: str) -> dict[str, int]:
    """A flat-keyed cgroup file (``cpu.stat``, ``memory.stat``, ``memory.events``):
    ``key value`` per line, integers only; anything else is left out."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            with contextlib.suppress(ValueError):
                out[parts[0]] = int(parts[1])
    return out


def psi_total_usec(text: str, line: str, source: str) -> int:
    """The ``total=`` microseconds of a PSI file's ``some`` or ``full`` line."""
    for row in text.splitlines():
        fields = row.split()
        if fields and fields[0] == line:
            return int(fields[-1].split("=", 1)[1])
    raise LabError(f"no {line!r} line in {source}")


def iter_lab_dirs(layout: LabLayout, prefix: str = PREFIX) -> Iterator[str]:
    """Every existing directory (both hierarchies) whose name starts with ``prefix``."""
    for root in (layout.v2_root, layout.v1_cpu_root):
        if root is None:
            continue
        try:
            with os.scandir(root) as it:
                for e in it:
                    if e.name.startswith(prefix) and e.is_dir(follow_symlinks=False):
                        yield e.path
        except FileNotFoundError:
            continue


def cleanup_stale(
    prefix: str = PREFIX,
    *,
    layout: LabLayout | None = None,
    owner_dir: str = OWNER_DIR,
    timeout: float = 5.0,
) -> list[str]:
    """Remove lab cgroups left by crashed runs: those named ``prefix*`` whose owner is
    no longer alive. Processes still inside are moved to the parent, not killed (lab
    workers end by themselves within their time bound). Returns the removed paths."""
    if not prefix.startswith(PREFIX):
        raise ValueError(f"cleanup_stale only removes {PREFIX}* cgroups, not {prefix!r}*")
    layout = layout or detect_layout()
    deadline = time.monotonic() + timeout
    removed: list[str] = []
    errors: list[str] = []
    for d in sorted(iter_lab_dirs(layout, prefix)):
        name = os.path.basename(d)
        if _owner_alive(name, owner_dir) is not None:
            continue  # a live process (maybe another test run) owns it
        try:
            _rmdir_tree(d, deadline)
            removed.append(d)
        except (LabError, OSError) as e:
            errors.append(str(e))
    # Owner records and worker results whose cgroups are gone and whose owner is dead.
    live_names = {os.path.basename(d) for d in iter_lab_dirs(layout, prefix)}
    results = os.path.join(owner_dir, "results")
    for base in (owner_dir, results):
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(base):
                stale = name.startswith(prefix) and name not in live_names
                if stale and _owner_alive(name, owner_dir) is None:
                    shutil.rmtree(_results_dir(name, owner_dir), ignore_errors=True)
                    _drop_owner(name, owner_dir)
    if errors:
        raise LabError("; ".join(errors))
    return removed
