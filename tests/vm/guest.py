"""Boot a Debian kernel under qemu and run one command in it: the VM lane's building block.

The guest is the host itself, seen through a different kernel: virtme-ng shares the
host's root filesystem read-only over 9p, so every binary and package of the host (the
project's venv, Prometheus, BCC...) is there, and boots a Debian 6.12 kernel with a
pure unified cgroup hierarchy and PSI on. No KVM is needed: qemu runs TCG (about 20x
slower than the host for CPU work). Chosen over a hand-made qemu command line because
virtme-ng already solves the guest's init, module loading and console; see
docs/testing.md.

Contract of :func:`run`:

* one **shared results directory** (read-write in the guest, at the same path): the
  command's output (``output.log``, echoed live on the host), its exit status
  (``exit-status``) and whatever the command writes there;
* **bounded in time**: the guest gives its command ``timeout_s`` minus a margin; the
  host kills the qemu it started, by PID, when the whole boot passes ``timeout_s``;
* **bounded in memory**: the guest has ``memory`` of RAM (qemu ``-m``), so the guest as
  a whole can be pushed into memory pressure without touching the host;
* **leaves nothing behind**: the temporary directory (results, scratch disk) is removed
  unless ``keep`` is set; the guest's own writes outside the shared directory go to
  tmpfs overlays that vanish with it.

Prerequisites (qemu, virtme-ng, the kernel and its modules and headers, and any extra
Debian packages a caller needs in the guest, e.g. a container runtime) are installed by
``scripts/setup-vm.sh``; :func:`prepare` calls it and says why the lane cannot start
when it cannot.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support import host_load

ROOT = Path(__file__).resolve().parents[2]
SETUP_SCRIPT = ROOT / "scripts" / "setup-vm.sh"
GUEST_INIT = Path(__file__).with_name("guest_init.sh")
CACHE = Path("/var/cache/contention-exporter/vm")

# A pure unified hierarchy (as on a Kubernetes node today) with PSI on.
V2_CMDLINE = ("cgroup_no_v1=all", "systemd.unified_cgroup_hierarchy=1", "psi=1")
# The guest gives its command this much less than the host's hard timeout, so a
# command that hangs is stopped inside the guest and its output still comes back.
GUEST_MARGIN_S = 60.0


class GuestUnavailable(RuntimeError):
    """The VM cannot be started on this machine; the message says why."""


@dataclass(frozen=True, slots=True)
class Kernel:
    """An unpacked Debian kernel: ``vmlinuz``, ``lib/modules/<release>``, ``headers``."""

    directory: Path

    @property
    def release(self) -> str:
        return (self.directory / ".complete").read_text().strip()

    @property
    def vmlinuz(self) -> Path:
        return self.directory / "vmlinuz"

    @property
    def headers(self) -> Path:
        return self.directory / "headers"


@dataclass(frozen=True, slots=True)
class GuestSpec:
    kernel: Kernel
    memory: str = "1G"  # qemu -m
    cpus: int = 2
    timeout_s: float = 900.0  # the whole boot, hard
    # Host directories shared read-only with the page cache on (loose 9p): the
    # project, its venv, the Python it was made with. Everything else is reachable
    # through the uncached root share.
    loose_dirs: tuple[str, ...] = ()
    scratch_disk_mib: int = 0  # a blank disk, ext4 in the guest at $CONTENTION_VM_SCRATCH
    append: tuple[str, ...] = V2_CMDLINE
    env: Mapping[str, str] = field(default_factory=dict)
    workdir: str = str(ROOT)
    # While the guest's results hold BOOST_FILE (tests.support.host_load.boosted), its
    # session's autogroup runs at this nice value instead of the lane's (None: never).
    boost_nice: int | None = None


@dataclass(frozen=True, slots=True)
class GuestResult:
    status: int | None  # the command's exit status; None when it did not finish
    reason: str  # why there is no status ("" when there is one)
    wall_s: float  # boot to power-off, as the host saw it
    boot_s: float | None  # guest uptime when the command started
    results_dir: str
    console_tail: str  # the last lines qemu printed (kernel messages), for failures
    boosted_s: float = 0.0  # how long the guest ran at GuestSpec.boost_nice on request


def vng_binary() -> Path:
    return CACHE / "virtme-ng" / "bin" / "vng"


def prepare(packages: Sequence[str] = ()) -> Kernel:
    """Install what the VM needs (idempotent; quick once cached) and return the kernel.
    Raises :class:`GuestUnavailable` with the reason when it cannot."""
    if os.geteuid() != 0:
        raise GuestUnavailable("the VM lane needs root (it installs qemu and a kernel)")
    argv = ["bash", str(SETUP_SCRIPT)]
    if packages:
        argv += ["--packages", " ".join(packages)]
    try:
        # Two lanes starting together (scripts/test.sh's two guests) install in turn.
        CACHE.parent.mkdir(parents=True, exist_ok=True)
        with open(CACHE.parent / "vm-setup.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            res = subprocess.run(argv, stdout=subprocess.PIPE, stderr=None, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise GuestUnavailable(f"{SETUP_SCRIPT.name} failed: {e}") from e
    if res.returncode != 0:
        raise GuestUnavailable(
            f"{SETUP_SCRIPT.name} failed (exit {res.returncode}): no qemu, virtme-ng or "
            "kernel image; its log is above"
        )
    kernel = Kernel(Path(res.stdout.strip().splitlines()[-1]))
    for need in (kernel.vmlinuz, vng_binary()):
        if not need.exists():
            raise GuestUnavailable(f"{need} is missing after {SETUP_SCRIPT.name}")
    if shutil.which("qemu-system-x86_64") is None:
        raise GuestUnavailable("qemu-system-x86_64 is not installed")
    return kernel


def python_dirs() -> tuple[str, ...]:
    """The trees a Python process of this venv reads from: the project, the venv and
    the Python installation it was made with (outer directories only)."""
    dirs = sorted({str(ROOT), sys.prefix, sys.base_prefix})
    out: list[str] = []
    for d in dirs:
        if not any(d == o or d.startswith(o + "/") for o in out):
            out.append(d)
    return tuple(out)


def guest_loose_dirs(spec: GuestSpec) -> tuple[str, ...]:
    """The shares remounted with the page cache on: the caller's, and the kernel's own
    directory (modules, headers), which the guest's tmpfs on /var/cache would hide."""
    return (*spec.loose_dirs, str(spec.kernel.directory))


def vng_argv(spec: GuestSpec, results: str, disk: str | None) -> list[str]:
    argv = [
        str(vng_binary()),
        "--run",
        str(spec.kernel.vmlinuz),
        "--disable-kvm",
        "--force-9p",
        "--verbose",  # kernel messages to the console log: a panic's trace comes back
        "--memory",
        spec.memory,
        "--cpus",
        str(spec.cpus),
        "--rwdir",
        results,
        "--cwd",
        "/",  # nothing may hold the shares that guest_init.sh remounts
    ]
    for d in guest_loose_dirs(spec):
        argv += ["--rodir", d]
    if disk is not None:
        argv += ["--disk", disk]
    # One host thread runs every vCPU in turn. With qemu's default multi-threaded TCG
    # the guest kernel oopsed on an int3 left in __schedule by its own live patching
    # (text_poke_bp, run each time the probe attaches or detaches its sched_switch
    # tracepoints): a vCPU still ran the old translation after the patch had completed
    # (RIP one byte into a patched call or jmp, two boots of two in one CI run).
    # Single-threaded TCG makes each code write visible before any other vCPU runs.
    argv += ["--qemu-opts=-accel tcg,thread=single"]
    argv += ["--append", " ".join(spec.append)]
    # Run from the results share: a script read from a share it remounts keeps it busy.
    argv += ["--exec", f"bash {results}/guest_init.sh {results}"]
    return argv


def _write_guest_files(spec: GuestSpec, results: str, command: Sequence[str]) -> None:
    for d in guest_loose_dirs(spec):
        if not d.startswith("/") or any(c.isspace() for c in d):
            raise ValueError(f"a shared directory must be an absolute path without spaces: {d!r}")
    env = {
        "VM_LOOSE_DIRS": " ".join(guest_loose_dirs(spec)),
        "VM_SCRATCH": "1" if spec.scratch_disk_mib else "0",
        "VM_WORKDIR": spec.workdir,
        "VM_COMMAND_TIMEOUT": str(max(30, int(spec.timeout_s - GUEST_MARGIN_S))),
        "CONTENTION_VM_GUEST": "1",
        "CONTENTION_VM_RESULTS": results,
        **spec.env,
    }
    with open(os.path.join(results, "guest.env"), "w") as f:
        for k, v in env.items():
            f.write(f"export {k}={shlex.quote(v)}\n")
    shutil.copyfile(GUEST_INIT, os.path.join(results, "guest_init.sh"))
    with open(os.path.join(results, "command.sh"), "w") as f:
        f.write(shlex.join(command) + "\n")


def _descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (children first), from /proc."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(x) for x in f.read().split()]
            except OSError:
                continue
            out.extend(kids)
            todo.extend(kids)
    return out


def autogroup_nice(pid: int, niceness: int, procfs: str = "/proc") -> None:
    """Weigh the session of ``pid`` as one task at ``niceness`` (autogroup scheduling);
    a machine without autogroup, or a negative value without root, keeps its weight."""
    path = os.path.join(procfs, str(pid), "autogroup")
    with contextlib.suppress(OSError), open(path, "w") as f:
        f.write(str(niceness))


@dataclass
class Boost:
    """The guest's priority on request: while ``flag`` exists (the guest writes it in its
    results share around the tests whose throttling or stall a busy host would distort),
    the guest's session runs at ``niceness``, otherwise at the lane's own nice value."""

    flag: str
    niceness: int
    on: bool = False
    seconds: float = 0.0  # boosted so far
    _since: float = 0.0

    def update(self, pid: int, procfs: str = "/proc") -> None:
        want = os.path.exists(self.flag)
        if want == self.on:
            return
        now = time.monotonic()
        if want:
            self._since = now
        else:
            self.seconds += now - self._since
        autogroup_nice(pid, self.niceness if want else os.nice(0), procfs)
        self.on = want

    def total(self) -> float:
        """Seconds boosted so far, the current stretch included."""
        return self.seconds + (time.monotonic() - self._since if self.on else 0.0)


def keep_priority(pid: int, procfs: str = "/proc") -> None:
    """Give the new session of ``pid`` this process's nice value. With autogroup
    scheduling (``/proc/sys/kernel/sched_autogroup_enabled``) a session is weighed
    against the others as one nice-0 task whatever its processes' nice values, so the
    guest started in a session of its own would lose the priority ``scripts/test.sh``
    gives the lane (docs/testing.md). A machine without autogroup, or a negative value
    without root, keeps the default: the guest runs, at the usual weight."""
    niceness = os.nice(0)
    if niceness != 0:
        autogroup_nice(pid, niceness, procfs)


def _kill_tree(popen: subprocess.Popen[bytes]) -> None:
    """SIGKILL the qemu we started and every other process under our vng, by PID."""
    for pid in reversed(_descendants(popen.pid)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.kill(popen.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(10)


class _Tail:
    """Copies what the guest appends to ``output.log`` to a stream, as it arrives."""

    def __init__(self, path: str, out: Callable[[str], object]) -> None:
        self.path = path
        self.out = out
        self.pos = 0

    def pump(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
        except FileNotFoundError:
            return
        if data:
            # Only whole lines, so two pumps never split one.
            cut = data.rfind(b"\n") + 1
            if cut:
                self.pos += cut
                self.out(data[:cut].decode("utf-8", "replace"))


def run(
    spec: GuestSpec,
    command: Sequence[str],
    *,
    results_dir: str | None = None,
    echo: Callable[[str], object] | None = None,
    keep: bool = False,
) -> GuestResult:
    """Boot the guest, run ``command`` in it (argv, as root, in ``spec.workdir``), power
    off. ``echo`` receives the guest's output as it arrives (default: this process's
    stdout). The command finds the shared directory in ``$CONTENTION_VM_RESULTS``."""
    write = echo or (lambda s: (sys.stdout.write(s), sys.stdout.flush()))
    own_dir = results_dir is None
    work = tempfile.mkdtemp(prefix="contention-vm-")
    results = results_dir or os.path.join(work, "results")
    os.makedirs(results, exist_ok=True)
    disk = None
    if spec.scratch_disk_mib:
        disk = os.path.join(work, "scratch.img")
        with open(disk, "wb") as f:
            f.truncate(spec.scratch_disk_mib << 20)  # sparse: costs only what is written
    _write_guest_files(spec, results, command)
    console = os.path.join(work, "console.log")
    tail = _Tail(os.path.join(results, "output.log"), write)
    started = time.monotonic()
    boost = None
    flag = os.path.join(results, host_load.BOOST_FILE)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(flag)  # left by an earlier guest killed while it asked
    if spec.boost_nice is not None:
        boost = Boost(flag, spec.boost_nice)
    try:
        reason = _boot(spec, vng_argv(spec, results, disk), console, tail, boost)
    finally:
        tail.pump()
        status, boot_s = _read_status(results)
        console_tail = _last_lines(console, 40)
        if not keep:
            _remove_work(work, own_dir, console, disk)
    if status is None and not reason:
        reason = "the guest powered off without the command's exit status (see the console)"
    return GuestResult(
        status=status,
        reason=reason,
        wall_s=time.monotonic() - started,
        boot_s=boot_s,
        results_dir=results if (keep or not own_dir) else "",
        console_tail=console_tail,
        boosted_s=boost.total() if boost is not None else 0.0,
    )


def _boot(
    spec: GuestSpec, argv: list[str], console: str, tail: _Tail, boost: Boost | None = None
) -> str:
    """Run virtme-ng until the guest powers off; past ``spec.timeout_s``, or when this
    process is interrupted or terminated, kill the qemu it started (by PID). Returns
    why the guest was killed ("" when it powered off by itself). ``boost``: the guest's
    priority on its request, checked at each poll."""
    deadline = time.monotonic() + spec.timeout_s
    popen: subprocess.Popen[bytes] | None = None
    old: dict[signal.Signals, Any] = {}

    def on_signal(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        for s in (signal.SIGTERM, signal.SIGHUP):
            old[s] = signal.signal(s, on_signal)
        with open(console, "wb") as con:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=con,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "PATH": f"{vng_binary().parent}:{os.environ.get('PATH', '')}"},
            )
            keep_priority(popen.pid)
            while popen.poll() is None:
                tail.pump()
                if boost is not None:
                    boost.update(popen.pid)
                if time.monotonic() >= deadline:
                    _kill_tree(popen)
                    return f"the guest did not power off within {spec.timeout_s:.0f}s: killed"
                time.sleep(0.5)
        return ""
    finally:
        if popen is not None and popen.poll() is None:
            _kill_tree(popen)
        for s, h in old.items():
            signal.signal(s, h)


def _remove_work(work: str, own_dir: bool, console: str, disk: str | None) -> None:
    """Remove the temporary directory, or (when the results live inside it and the
    caller gave them a home elsewhere) just the console log and the scratch disk."""
    if own_dir:
        shutil.rmtree(work, ignore_errors=True)
        return
    for path in (console, disk):
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    with contextlib.suppress(OSError):
        os.rmdir(work)


def _read_status(results: str) -> tuple[int | None, float | None]:
    status = boot = None
    with contextlib.suppress(OSError, ValueError):
        status = int(Path(results, "exit-status").read_text().strip())
    with contextlib.suppress(OSError, ValueError):
        boot = float(Path(results, "command-started").read_text().strip())
    return status, boot


def _last_lines(path: str, n: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-n:])
