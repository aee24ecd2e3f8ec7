"""The busy-machine note real-kernel failures carry (tests/support/machine_load.py), on a
fake /proc: who counts as the test, who as outside, and when the machine is busy."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import host_load, machine_load
from tests.support.machine_load import LoadWindow, descendants, parse_stat, processes

TCK = os.sysconf("SC_CLK_TCK")


def _stat_line(pid: int, comm: str, ppid: int, ticks: int, kthread: bool = False) -> str:
    flags = machine_load.PF_KTHREAD if kthread else 0
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
    # utime stime cutime cstime ...
    return f"{pid} ({comm}) S {ppid} 1 1 0 -1 {flags} 0 0 0 0 {ticks} 0 0 0 20 0 1 0\n"


def _write(proc: Path, node_busy_ticks: int, procs: list[tuple[int, str, int, int, bool]]) -> None:
    proc.mkdir(exist_ok=True)
    (proc / "stat").write_text(f"cpu  {node_busy_ticks} 0 0 1000000 0 0 0 0 0 0\n")
    for d in proc.iterdir():
        if d.is_dir():
            for f in d.iterdir():
                f.unlink()
            d.rmdir()
    for pid, comm, ppid, ticks, kthread in procs:
        (proc / str(pid)).mkdir()
        (proc / str(pid) / "stat").write_text(_stat_line(pid, comm, ppid, ticks, kthread))
        cgroup = "/contention-test-lab/a" if comm.startswith("lab-") else "/user.slice"
        (proc / str(pid) / "cgroup").write_text(f"0::{cgroup}\n")


def test_parse_stat_takes_comm_up_to_the_last_parenthesis() -> None:
    parsed = parse_stat(_stat_line(7, "a) (b", 3, 40))
    assert parsed is not None
    ppid, comm, own, children, flags = parsed
    assert (ppid, comm, own, children, flags) == (3, "a) (b", 40, 0.0, 0)
    assert parse_stat("garbage") is None
    assert parse_stat("1 (x) S") is None


def test_descendants_follow_the_tree(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    tree = [(10, "pytest", 1), (11, "w", 10), (12, "ww", 11), (20, "other", 1)]
    _write(proc, 0, [(pid, comm, ppid, 0, False) for pid, comm, ppid in tree])
    assert descendants(10, processes(str(proc))) == {10, 11, 12}


def test_busy_outside_is_said_and_names_the_busiest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = tmp_path / "proc"
    clock = iter([100.0, 110.0])
    monkeypatch.setattr("tests.support.machine_load.time.monotonic", lambda: next(clock))
    _write(
        proc,
        0,
        [
            (10, "pytest", 1, 0, False),
            (11, "worker", 10, 0, False),
            (30, "mypy", 1, 0, False),
            (31, "lab-busy", 1, 0, False),
        ],
    )
    window = LoadWindow(procfs=str(proc), root_pid=10, cgroup_roots=(str(tmp_path / "none"),))
    # Over 10 s: the node used 30 CPU-seconds; the test 15 (its worker 10, a lab
    # process re-parented to init 5), a kernel thread 1, mypy 12; the 2 unaccounted
    # are a process that came and went.
    _write(
        proc,
        30 * TCK,
        [
            (10, "pytest", 1, 0, False),
            (11, "worker", 10, 10 * TCK, False),
            (31, "lab-busy", 1, 5 * TCK, False),
            (30, "mypy", 1, 12 * TCK, False),
            (40, "kworker/0:1", 2, 1 * TCK, True),
        ],
    )
    busy, text = window.note()
    assert busy
    assert text.startswith("NOTE: the machine was busy outside this test: 1.40 cores")
    assert "this test's processes 1.50" in text and "kernel threads 0.10" in text
    assert "busiest outside: mypy (pid 30) 1.20" in text


def test_a_quiet_machine_is_not_called_busy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = tmp_path / "proc"
    clock = iter([0.0, 10.0])
    monkeypatch.setattr("tests.support.machine_load.time.monotonic", lambda: next(clock))
    _write(proc, 0, [(10, "pytest", 1, 0, False)])
    window = LoadWindow(procfs=str(proc), root_pid=10, cgroup_roots=())
    _write(proc, 20 * TCK, [(10, "pytest", 1, 19 * TCK, False)])
    busy, text = window.note()
    assert not busy and text.startswith("The machine was quiet outside this test (0.10 cores)")


INNER = """
import time
import pytest

@pytest.mark.kernel
def test_measures_something():
    time.sleep(2.0)
    assert False, "the lab's verdict was wrong"
"""

# A busy loop outside the pytest process tree (its parent exits at once, so it is
# re-parented to init) until the test ends it by its PID (printed), 30 s at most: the
# inner pytest can take seconds to start on a loaded machine, and a loop of a fixed
# 4 s was over before the inner test measured anything.
BUSY_OUTSIDE = (
    "import os, time\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    os.close(1)\n"  # the pipes the test reads end with its parent
    "    os.close(2)\n"
    "    end = time.monotonic() + 30.0\n"
    "    while time.monotonic() < end: pass\n"
    "    os._exit(0)\n"
    "print(pid)\n"
)


def test_a_failing_real_kernel_test_says_the_machine_was_busy(tmp_path: Path) -> None:
    """The hooks of tests/conftest.py, in a pytest run of their own: a real-kernel test
    fails while a process outside it keeps a CPU busy."""
    (tmp_path / "test_inner.py").write_text(INNER)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    busy = subprocess.run(
        [sys.executable, "-c", BUSY_OUTSIDE], check=True, timeout=10, capture_output=True
    )
    try:
        r = _run_inner(tmp_path, env)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(busy.stdout), signal.SIGKILL)  # the loop this test started
    assert r.returncode == 1, r.stdout + r.stderr
    assert "NOTE: the machine was busy outside this test" in r.stdout, r.stdout
    assert "real-kernel failures on a busy machine" in r.stdout, r.stdout
    assert "python" in r.stdout.split("busiest outside:")[-1], r.stdout


def _run_inner(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "-c",
            os.devnull,
            "--rootdir",
            str(tmp_path),
            str(tmp_path / "test_inner.py"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )


def test_the_host_load_recorder_writes_what_a_guest_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tests/support/host_load.py on a fake /proc: the lane's process tree (qemu under
    it) is the guest; the rest of the host's busy time is other work."""
    proc, path = tmp_path / "proc", str(tmp_path / "host-load.tsv")
    clock = iter([1000.0, 1010.0, 1020.0])
    monkeypatch.setattr("tests.support.host_load.time.time", lambda: next(clock))
    tree = [(10, "vm-test", 1), (11, "qemu-system-x86", 10), (20, "buildah", 1)]
    _write(proc, 0, [(pid, comm, ppid, 0, False) for pid, comm, ppid in tree])
    rec = host_load.Recorder(path, root=10, procfs=str(proc))
    rec.sample()
    # Over 10 s the host was busy 18 CPU-seconds: the guest's emulator 9, the rest 9.
    ticks = {10: 1 * TCK, 11: 8 * TCK, 20: 9 * TCK}
    _write(proc, 18 * TCK, [(p, c, pp, ticks[p], False) for p, c, pp in tree])
    rec.sample()
    # Then the guest powers off: qemu exits and is reaped, its time now in the lane's
    # children's (cutime); over the next 10 s the lane and the host are idle.
    _write(proc, 18 * TCK, [(10, "vm-test", 1, 1 * TCK, False), (20, "buildah", 1, 9 * TCK, False)])
    stat = (proc / "10" / "stat").read_text().split()
    stat[15] = str(8 * TCK)  # cutime
    (proc / "10" / "stat").write_text(" ".join(stat) + "\n")
    rec.sample()
    assert [x.guest_s for x in rec.samples] == [0.0, 9.0, 9.0]
    with open(path, "a") as out:
        out.write("not\ta sample\n")  # skipped, never the note's failure
    cpus, samples = host_load.read(path)
    assert cpus == os.cpu_count() and [s.at for s in samples] == [1000.0, 1010.0, 1020.0]
    f = host_load.figures(path, 1002.0, 1008.0)
    assert f is not None
    assert (f.seconds, f.node_cores, f.guest_cores) == (10.0, 1.8, 0.9)
    assert f.outside_cores == pytest.approx(0.9)
    busy, text = host_load.note(1002.0, 1008.0, path, machine_load.BUSY_CORES) or (False, "")
    assert busy and text.startswith("NOTE: the host was busy beside this guest: 0.90 cores")
    quiet = host_load.note(1002.0, 1008.0, path, busy_cores=1.0)
    assert quiet is not None and not quiet[0]
    assert host_load.note(1002.0, 1008.0, None, 0.3) is None  # not in a guest
    missing = host_load.note(0.0, 1.0, str(tmp_path / "missing"), 0.3)
    assert missing is not None and missing[1].startswith("host load unknown")


def test_a_failing_guest_test_says_the_host_was_busy(tmp_path: Path) -> None:
    """The hooks of tests/conftest.py in a guest (CONTENTION_VM_HOST_LOAD set): a
    real-kernel test fails while the lane's samples show other work on the host."""
    (tmp_path / "test_inner.py").write_text(INNER)
    path = tmp_path / "host-load.tsv"
    now = time.time()
    # 200 s around the test: the host 1.8 of 2 CPUs busy, this guest's emulator 0.9.
    path.write_text(f"#cpus\t2\n{now - 100:.3f}\t0\t0\n{now + 100:.3f}\t360\t180\n")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), host_load.ENV: str(path)}
    r = _run_inner(tmp_path, env)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "host load" in r.stdout, r.stdout
    assert "NOTE: the host was busy beside this guest: 0.90 cores" in r.stdout, r.stdout
    summary = r.stdout.split("real-kernel failures on a busy machine")[-1]
    assert "this guest's emulator 0.90; other work 0.90" in summary, r.stdout
