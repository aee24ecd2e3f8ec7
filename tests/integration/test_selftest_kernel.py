"""``contention-exporter selftest`` on the real kernel: killed at any point (SIGTERM,
SIGKILL) it leaves no cgroup and no process behind. That it passes is checked in the
end-to-end lane, while the labs' alerts resolve (``tests/support/selftest_run.py``).

The self-test's cgroups are ``contention-test-selftest-<pid>`` here (the hidden
``--selftest.cgroup-prefix``), so the suite's own safety rules hold: it touches only
cgroups it creates.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.cgroupfs.mode import detect
from exporter.selftest.hosting import EXIT_INTERRUPTED
from tests.support.selftest_run import CLI, PREFIX

pytestmark = pytest.mark.kernel


def _roots() -> list[Path]:
    layout = detect()
    roots = [layout.v2_root, layout.v1_cpu_root if layout.mode.value == "hybrid" else None]
    return [Path(r) for r in roots if r]


def _dirs(pid: int, base: str = "") -> list[Path]:
    return [r / base / f"{PREFIX}{pid}" for r in _roots()]


@contextlib.contextmanager
def _cgroup_namespace() -> Iterator[tuple[str, list[str]]]:
    """A cgroup of the test's own in each hierarchy the self-test uses, as a
    container's (the runtime makes one at the same path in each): the argv prefix
    starts the command in it under ``unshare --cgroup``, in a cgroup namespace whose
    root it is, the hierarchy still mounted from the node's root (the DaemonSet's
    hostPath mount). Removed after; fails if anything is left in it."""
    base = f"contention-test-ns-{os.getpid()}"
    made = [r / base for r in _roots()]
    for d in made:
        d.mkdir()
    join = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 97; shift; done; shift; exec "$@"'
    procs = [str(d / "cgroup.procs") for d in made]
    try:
        yield base, ["/bin/sh", "-c", join, "sh", *procs, "--", "unshare", "--cgroup"]
    finally:
        deadline = time.monotonic() + 10
        for d in made:
            while d.exists():
                try:
                    d.rmdir()
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)


def _load_pids(pid: int, base: str = "") -> list[int]:
    out: list[int] = []
    for d in _dirs(pid, base):
        for procs in d.glob("*/cgroup.procs"):
            out += [int(x) for x in procs.read_text().split()]
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone for our purpose
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def _started(p: subprocess.Popen[bytes], timeout: float = 60.0, base: str = "") -> list[int]:
    """The load PIDs once the victim, the bully and the limited one run."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert p.poll() is None, "the self-test ended before its load started"
        pids = _load_pids(p.pid, base)
        if len(pids) >= 3:
            return pids
        time.sleep(0.2)
    raise AssertionError("the self-test's load did not start")


def _gone(pid: int, load: list[int], timeout: float = 20.0, base: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [d for d in _dirs(pid, base) if d.exists()]
        alive = [x for x in load if _alive(x)]
        if not left and not alive:
            return
        time.sleep(0.2)
    raise AssertionError(f"left behind: cgroups {left}, processes {alive}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
@pytest.mark.any_load
def test_killed_selftest_leaves_nothing_behind(sig: signal.Signals) -> None:
    """SIGTERM: it cleans up and exits 130. SIGKILL: nothing can run in it, so the load
    dies by PR_SET_PDEATHSIG and the watchdog removes the cgroups.

    The SIGKILL case runs in a cgroup namespace of its own (as the DaemonSet's
    container has): its cgroups go below its own cgroup, not at the root, where the
    kernel would refuse to move its load into them, and the watchdog removes them
    there."""
    with contextlib.ExitStack() as stack:
        base, prefix = "", list[str]()
        if sig == signal.SIGKILL:
            base, prefix = stack.enter_context(_cgroup_namespace())
        p = subprocess.Popen(
            [*prefix, *CLI, "--no-probe"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        try:
            load = _started(p, base=base)
            assert not any(d.exists() for d in _dirs(p.pid)) or not base  # not at the root
            p.send_signal(sig)
            rc = p.wait(30)
            _gone(p.pid, load, base=base)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert rc == (EXIT_INTERRUPTED if sig == signal.SIGTERM else -signal.SIGKILL)


@pytest.mark.any_load
def test_killed_load_process_fails_the_run_and_is_cleaned_up() -> None:
    """A load process killed from outside: the run says so, fails, and cleans up."""
    p = subprocess.Popen([*CLI, "--no-probe", "--json"], stdout=subprocess.PIPE)
    try:
        load = _started(p)
        victim = [int(x) for x in (_dirs(p.pid)[0] / "victim" / "cgroup.procs").read_text().split()]
        os.kill(victim[0], signal.SIGKILL)  # the self-test's own victim process
        out, _ = p.communicate(timeout=60)
        _gone(p.pid, load)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    report = json.loads(out)
    assert p.returncode == 1 and not report["passed"]
    assert any("died early" in x for x in report["problems"]), report["problems"]
