"""CgroupReader on the fixture trees: pure v2, hybrid (v1 controllers), missing
optional files, vanished cgroups and malformed files."""

from __future__ import annotations

import errno
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from exporter.cgroupfs import parsers
from exporter.cgroupfs import reader as reader_mod
from exporter.cgroupfs.discovery import walk
from exporter.cgroupfs.errors import CgroupParseError, CgroupVanishedError
from exporter.cgroupfs.files import MAX_FILE_BYTES
from exporter.cgroupfs.mode import detect as detect_at
from exporter.cgroupfs.model import (
    CpuMax,
    CpuStat,
    CpuStatV1,
    MemoryEvents,
    MemoryStat,
    Pressure,
    PressureLine,
)
from exporter.cgroupfs.reader import CgroupReader, read_text, shares_to_weight

from .conftest import detect, tree

pytestmark = pytest.mark.usefixtures("no_host_fs")

BURST_POD = (
    "/kubepods.slice/kubepods-burstable.slice/"
    "kubepods-burstable-pod8e2b7c10_45fa_4d3e_a1c9_6b0f5e2d9c74.slice"
)
V2_BURST_CID = "4eda0309568c2864a44099c86c0254737df8f43d51562d8bf58c3596c9928afe"
HYBRID_CID = "c00ca6d5ba37165225c9f75eae7f0ee4b61590660b9bb625909608d600714e57"
V2_BURST = f"{BURST_POD}/cri-containerd-{V2_BURST_CID}.scope"
HYBRID_CTR = f"{BURST_POD}/cri-containerd-{HYBRID_CID}.scope"
NO_QUOTA_CTR = (
    "/kubepods.slice/kubepods-besteffort.slice/"
    "kubepods-besteffort-pod5b7e0d93_a8c2_4e61_b4f0_91c3d7a2e858.slice/"
    "cri-containerd-4b06d01615c2183a024ceb280b2cb73a66a1a9741c52a7da25596d28bde01078.scope"
)
V2_FILES = (
    "cpu.stat",
    "cpu.pressure",
    "memory.pressure",
    "io.pressure",
    "cpu.max",
    "cpu.weight",
    "memory.current",
    "memory.max",
    "memory.high",
    "memory.stat",
    "memory.events",
)


def reader_for(name: str) -> CgroupReader:
    return CgroupReader(detect(name))


# --- pure v2 ---------------------------------------------------------------------------


def test_v2_container_every_file() -> None:
    r = reader_for("v2-systemd").read(V2_BURST)
    assert r.cpu_stat == CpuStat(
        usage_usec=1049990012,
        user_usec=734993008,
        system_usec=314997004,
        nr_periods=120007,
        nr_throttled=95210,
        throttled_usec=7612004557,
        nr_bursts=0,
        burst_usec=0,
    )
    assert r.cpu_stat_v1 is None
    assert r.cpu_max == CpuMax(quota_usec=50000, period_usec=100000)
    assert r.cpu_max.limit_cores == 0.5
    assert r.cpu_weight == 10
    assert r.cpu_pressure == Pressure(
        some=PressureLine(81.50, 80.12, 79.33, 7702118334),
        full=PressureLine(80.92, 79.88, 79.01, 7640331200),
    )
    assert r.memory_pressure is not None
    assert r.memory_pressure.some.avg10 == 14.20
    assert r.io_pressure == Pressure(PressureLine(0, 0, 0, 0), PressureLine(0, 0, 0, 0))
    assert r.memory_current == 261969792
    assert r.memory_max == 256 << 20
    assert r.memory_high is None  # "max"
    assert r.memory_stat == MemoryStat(
        anon=236978176,
        file=18874368,
        inactive_file=6291456,
        active_file=12582912,
        workingset_refault_anon=1203,
        workingset_refault_file=48211,
        pgmajfault=9301,
    )
    assert r.memory_events == MemoryEvents(low=0, high=0, max=37, oom=0, oom_kill=0)
    assert r.files_read == len(V2_FILES)
    assert r.missing == ()


def test_v2_root_missing_optional_files_are_none() -> None:
    """The root cgroup has no cpu.max, cpu.weight or memory.* limits: no data."""
    r = reader_for("v2-systemd").read("/")
    assert r.cpu_stat is not None
    assert r.cpu_stat.usage_usec == 4102338114
    assert r.cpu_pressure is not None
    assert r.cpu_max is None
    assert r.cpu_weight is None
    assert r.memory_current is None
    assert r.memory_max is None
    assert r.memory_stat is None
    assert r.memory_events is None
    assert r.files_read == 4
    assert set(r.missing) == {
        "cpu.max",
        "cpu.weight",
        "memory.current",
        "memory.max",
        "memory.high",
        "memory.stat",
        "memory.events",
    }


def test_v2_cgroupfs_container() -> None:
    r = reader_for("v2-cgroupfs").read(
        "/kubepods/pod3f9d2a41-6c0e-4b7a-9f15-2d8c7e41b0a3/"
        "3dd2a2e2150b8c4abbb6c71cb5c9c5d334d628b49ea583a3704e5cb82f057b0a"
    )
    assert r.cpu_max == CpuMax(200000, 100000)
    assert r.cpu_max.limit_cores == 2.0
    assert r.memory_max == 1 << 30
    assert r.cpu_weight == 79


def test_no_quota() -> None:
    rd = reader_for("no-quota")
    for path in (NO_QUOTA_CTR, "/system.slice/postgresql.service"):
        r = rd.read(path)
        assert r.cpu_max == CpuMax(quota_usec=None, period_usec=100000)
        assert r.cpu_max.limit_cores is None
        assert r.memory_max is None
        assert r.memory_high is None
        assert r.memory_current is not None
        assert r.missing == ()


def test_no_memory_controller_is_no_data() -> None:
    """batch.slice does not delegate memory: its child has no memory.* files."""
    r = reader_for("no-quota").read("/batch.slice/report.service")
    assert r.cpu_stat is not None
    assert r.cpu_pressure is not None
    assert r.memory_pressure is not None  # PSI files exist without the controller
    assert (r.memory_current, r.memory_max, r.memory_high) == (None, None, None)
    assert (r.memory_stat, r.memory_events) == (None, None)
    assert set(r.missing) == {
        "memory.current",
        "memory.max",
        "memory.high",
        "memory.stat",
        "memory.events",
    }


def test_no_psi_is_no_data() -> None:
    r = reader_for("no-psi").read("/system.slice/sshd.service")
    assert (r.cpu_pressure, r.memory_pressure, r.io_pressure) == (None, None, None)
    assert r.cpu_stat is not None
    assert r.memory_stat is not None
    assert set(r.missing) == {"cpu.pressure", "memory.pressure", "io.pressure"}


@pytest.mark.parametrize("name", ["v2-systemd", "v2-cgroupfs", "no-quota", "no-psi", "hybrid"])
def test_every_cgroup_of_the_good_trees_reads(name: str) -> None:
    facts = detect(name)
    assert facts.v2_root is not None
    rd = CgroupReader(facts)
    for ref in walk(facts.v2_root):
        r = rd.read(ref.path)
        assert r.cpu_stat is not None, ref.path
        if r.memory_current is not None and r.memory_max is not None:
            assert r.memory_current <= r.memory_max, ref.path


# --- hybrid ----------------------------------------------------------------------------


def test_hybrid_container_reads_v1_controllers() -> None:
    r = reader_for("hybrid").read(HYBRID_CTR)
    # usage and PSI from the unified (cgroup2) directory
    assert r.cpu_stat == CpuStat(usage_usec=60981223, user_usec=42686856, system_usec=18294367)
    assert r.cpu_stat.nr_periods is None  # no cpu controller on the v2 side
    assert r.cpu_pressure is not None
    assert r.cpu_pressure.some.avg10 == 80.12
    # throttling and quota from the v1 cpu directory at the same path
    assert r.cpu_stat_v1 == CpuStatV1(
        nr_periods=3051, nr_throttled=2440, throttled_time_ns=243918004117
    )
    assert r.cpu_max == CpuMax(quota_usec=20000, period_usec=100000)
    assert r.cpu_max.limit_cores == 0.2
    assert r.cpu_weight == 10  # cpu.shares 256 (a 250m request)
    # memory from the v1 memory directory
    assert r.memory_current == (196 << 20) + (58 << 20)
    assert r.memory_max == 256 << 20
    assert r.memory_high is None  # v1 has no memory.high
    assert r.memory_stat is not None
    assert r.memory_stat.anon == 196 << 20
    assert r.memory_stat.inactive_file == 18 << 20
    assert r.memory_stat.workingset_refault_file == 23004
    assert r.memory_stat.pgmajfault == 1201
    assert r.memory_events == MemoryEvents(max=412)  # memory.failcnt
    assert r.missing == ()


def test_hybrid_pod_uses_hierarchical_totals() -> None:
    r = reader_for("hybrid").read(BURST_POD)
    assert r.memory_stat is not None
    assert r.memory_stat.anon == 197 << 20  # total_rss; the pod's own rss is 0
    assert r.cpu_stat_v1 == CpuStatV1(0, 0, 0)


def test_hybrid_root() -> None:
    r = reader_for("hybrid").read("/")
    assert r.cpu_max == CpuMax(None, 100000)  # cfs_quota_us -1
    assert r.cpu_weight == 39  # cpu.shares 1024
    assert r.memory_max is None  # v1 "no limit"
    assert r.memory_stat is not None
    assert r.memory_stat.anon == 5074944


def test_hybrid_without_v1_memory_dir() -> None:
    """A cgroup made by hand in unified and cpu v1 only (the v1 memory hierarchy is
    not ours to touch): no memory data, not an error."""
    r = reader_for("hybrid").read("/contention-test")
    assert r.cpu_stat_v1 == CpuStatV1(601, 588, 47950332001)
    assert r.cpu_max == CpuMax(20000, 100000)
    assert r.cpu_weight == 39
    assert (r.memory_current, r.memory_max, r.memory_stat, r.memory_events) == (
        None,
        None,
        None,
        None,
    )
    assert r.missing == ()


def test_hybrid_unified_only_cgroup() -> None:
    r = reader_for("hybrid").read("/user.slice/user-1000.slice")
    assert r.cpu_stat is not None
    assert r.cpu_pressure is not None
    assert (r.cpu_stat_v1, r.cpu_max, r.cpu_weight) == (None, None, None)
    assert (r.memory_current, r.memory_stat) == (None, None)
    assert r.files_read == 4


def test_hybrid_without_v1_roots() -> None:
    facts = detect("hybrid")
    rd = CgroupReader(replace(facts, v1_cpu_root=None, v1_memory_root=None))
    r = rd.read(HYBRID_CTR)
    assert r.cpu_stat is not None
    assert (r.cpu_stat_v1, r.cpu_max, r.memory_current) == (None, None, None)


@pytest.mark.parametrize(
    ("shares", "weight"),
    [(0, 1), (2, 1), (256, 10), (1024, 39), (2048, 79), (262144, 10000), (10**7, 10000)],
)
def test_shares_to_weight(shares: int, weight: int) -> None:
    assert shares_to_weight(shares) == weight


# --- vanished and malformed ------------------------------------------------------------


def test_vanished_cgroup() -> None:
    rd = reader_for("v2-systemd")
    with pytest.raises(CgroupVanishedError) as ei:
        rd.read("/system.slice/gone.service")
    assert ei.value.errno == errno.ENOENT
    assert isinstance(ei.value, OSError)
    assert "gone.service" in str(ei.value)


def test_vanished_hybrid_cgroup() -> None:
    with pytest.raises(CgroupVanishedError):
        reader_for("hybrid").read("/system.slice/gone.service")


def _copy(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(tree(name), dst, symlinks=True)
    return dst


def test_vanished_while_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _copy("v2-systemd", tmp_path)
    facts = detect_at(sysfs=str(root / "sys"), procfs=str(root / "proc"))
    rd = CgroupReader(facts)
    cg = root / "sys/fs/cgroup/system.slice/kubelet.service"
    real = reader_mod.read_text

    def read_then_remove(path: str) -> str | None:
        text = real(path)
        if path.endswith("/cpu.stat"):
            shutil.rmtree(cg)  # the unit stops after its first file was read
        return text

    monkeypatch.setattr(reader_mod, "read_text", read_then_remove)
    with pytest.raises(CgroupVanishedError):
        rd.read("/system.slice/kubelet.service")


@pytest.mark.parametrize("code", [errno.ENODEV, errno.ENOENT, errno.ESRCH])
def test_gone_errno_while_reading(monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    """Reading a file of a removed cgroup through an open fd fails with ENODEV."""

    def fail(path: str) -> str | None:
        raise OSError(code, "gone", path)

    rd = reader_for("v2-systemd")
    monkeypatch.setattr(reader_mod, "read_text", fail)
    with pytest.raises(CgroupVanishedError) as ei:
        rd.read("/init.scope")
    assert ei.value.errno == code


def test_other_os_errors_propagate(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(path: str) -> str | None:
        raise PermissionError(errno.EACCES, "denied", path)

    rd = reader_for("v2-systemd")
    monkeypatch.setattr(reader_mod, "read_text", fail)
    with pytest.raises(PermissionError):
        rd.read("/init.scope")


def test_malformed_truncated_cpu_stat() -> None:
    root = tree("malformed") / "sys/fs/cgroup/system.slice/truncated.service"
    with pytest.raises(CgroupParseError) as ei:
        reader_for("malformed").read("/system.slice/truncated.service")
    assert ei.value.source == str(root / "cpu.stat")
    assert "line 3" in ei.value.reason
    assert "system_u" in ei.value.reason


def test_malformed_garbage_memory_stat() -> None:
    root = tree("malformed") / "sys/fs/cgroup/system.slice/garbage.service"
    with pytest.raises(CgroupParseError) as ei:
        reader_for("malformed").read("/system.slice/garbage.service")
    assert ei.value.source == str(root / "memory.stat")
    assert ei.value.reason == "anon: not an integer: '9.4M'"


def test_malformed_tree_others_are_fine() -> None:
    rd = reader_for("malformed")
    r = rd.read("/system.slice/good.service")
    assert r.cpu_stat is not None
    assert r.memory_stat is not None
    assert r.missing == ()
    rd.read("/system.slice")
    rd.read("/")


def test_malformed_v1_file(tmp_path: Path) -> None:
    root = _copy("hybrid", tmp_path)
    cpu_dir = root / "sys/fs/cgroup/cpu,cpuacct/system.slice/cron.service"
    (cpu_dir / "cpu.cfs_period_us").write_text("")
    facts = detect_at(sysfs=str(root / "sys"), procfs=str(root / "proc"))
    with pytest.raises(CgroupParseError) as ei:
        CgroupReader(facts).read("/system.slice/cron.service")
    assert ei.value.source.endswith("/system.slice/cron.service/cpu.cfs_period_us")
    (cpu_dir / "cpu.cfs_period_us").write_text("100000\n")
    (cpu_dir / "cpu.stat").write_text("")  # an empty v1 cpu.stat is malformed too
    with pytest.raises(CgroupParseError, match="missing key"):
        CgroupReader(facts).read("/system.slice/cron.service")


def test_reader_needs_cgroup2() -> None:
    with pytest.raises(ValueError, match="no cgroup2 hierarchy"):
        reader_for("v1-only")


# --- read_text -------------------------------------------------------------------------


def test_read_text(tmp_path: Path) -> None:
    assert read_text(str(tmp_path / "missing")) is None
    small = tmp_path / "small"
    small.write_text("usage_usec 1\n")
    assert read_text(str(small)) == "usage_usec 1\n"
    big = tmp_path / "big"
    body = "".join(f"key_{i} {i}\n" for i in range(20000))  # > 64 KiB
    big.write_text(body)
    assert len(body) > 2 * 65536
    assert read_text(str(big)) == body
    exact = tmp_path / "exact"
    exact.write_text("x" * 65536)
    assert read_text(str(exact)) == "x" * 65536


def test_read_text_refuses_what_the_kernel_never_has(tmp_path: Path) -> None:
    """Nothing can make a read hang or grow: a FIFO with no writer (opened without
    O_NONBLOCK it would block the sampler forever), a directory, a file too long."""
    fifo = tmp_path / "cpu.stat"
    os.mkfifo(fifo)
    with pytest.raises(CgroupParseError, match=r"not a regular file \(a FIFO\)"):
        read_text(str(fifo))
    with pytest.raises(CgroupParseError, match=r"not a regular file \(a directory\)"):
        read_text(str(tmp_path))
    big = tmp_path / "memory.stat"
    big.write_bytes(b"x" * (MAX_FILE_BYTES + 1))
    with pytest.raises(CgroupParseError, match=f"longer than {MAX_FILE_BYTES} bytes"):
        read_text(str(big))
    big.write_bytes(b"x" * MAX_FILE_BYTES)
    assert read_text(str(big)) == "x" * MAX_FILE_BYTES
    with pytest.raises(CgroupParseError, match="longer than"):
        read_text(str(big), limit=4 * 16384)


def test_what_is_not_a_regular_file_is_refused_without_a_stat_per_read(tmp_path: Path) -> None:
    """The type is looked at only when a read is empty, fills the buffer or fails:
    /dev/null reads empty, /dev/zero fills any buffer; an empty regular file is ""."""
    for dev in ("/dev/null", "/dev/zero"):
        link = tmp_path / os.path.basename(dev)
        link.symlink_to(dev)
        with pytest.raises(CgroupParseError, match=r"not a regular file \(a character device\)"):
            read_text(str(link))
    empty = tmp_path / "cgroup.subtree_control"
    empty.write_text("")
    assert read_text(str(empty)) == ""


def test_an_unchanged_file_is_not_parsed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same text, same path: the last result (a parser is a pure function of both);
    changed text is parsed anew; files of cgroups not read for a pass are forgotten."""
    root = _copy("v2-systemd", tmp_path)
    reader = CgroupReader(detect_at(sysfs=str(root / "sys"), procfs=str(root / "proc")))
    parsed: list[str] = []
    real = parsers.parse_cpu_stat

    def counting(text: str, source: str) -> object:
        parsed.append(source)
        return real(text, source)

    monkeypatch.setattr(parsers, "parse_cpu_stat", counting)  # the reader looks it up
    path = "/system.slice/kubelet.service"
    stat = root / "sys/fs/cgroup" / path.lstrip("/") / "cpu.stat"
    reader.begin_pass()
    first = reader.read(path)
    reader.begin_pass()
    again = reader.read(path)
    assert len(parsed) == 1 and again.cpu_stat is first.cpu_stat
    stat.write_text(stat.read_text().replace("usage_usec ", "usage_usec 9", 1))
    reader.begin_pass()
    moved = reader.read(path)
    assert len(parsed) == 2 and moved.cpu_stat is not None and first.cpu_stat is not None
    assert moved.cpu_stat.usage_usec != first.cpu_stat.usage_usec
    stat.write_text("usage_usec x\n")  # malformed: raises every time, nothing kept
    for _ in range(2):
        reader.begin_pass()
        with pytest.raises(CgroupParseError):
            reader.read(path)
    reader.begin_pass()
    reader.begin_pass()
    assert reader._parsed_last == {} and reader._parsed == {}


def test_fifo_in_a_cgroup_costs_that_cgroup(tmp_path: Path) -> None:
    root = _copy("v2-systemd", tmp_path)
    facts = detect_at(sysfs=str(root / "sys"), procfs=str(root / "proc"))
    cg = root / "sys/fs/cgroup/system.slice/kubelet.service"
    (cg / "memory.stat").unlink()
    os.mkfifo(cg / "memory.stat")
    with pytest.raises(CgroupParseError, match="FIFO") as ei:
        CgroupReader(facts).read("/system.slice/kubelet.service")
    assert ei.value.source == str(cg / "memory.stat")
    # the others read as before
    assert CgroupReader(facts).read("/init.scope").cpu_stat is not None


def test_fifo_at_start_does_not_block_detection(tmp_path: Path) -> None:
    root = _copy("v2-systemd", tmp_path)
    psi = root / "proc/pressure/cpu"
    psi.unlink()
    os.mkfifo(psi)
    facts = detect_at(sysfs=str(root / "sys"), procfs=str(root / "proc"))
    assert not facts.psi
    assert "FIFO" in facts.psi_reason
