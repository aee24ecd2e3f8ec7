"""Mode detection on each fixture tree, and edge cases on trees built in tmp_path."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from exporter.cgroupfs import mode
from exporter.cgroupfs.mode import CgroupMode

from .conftest import detect, tree

pytestmark = pytest.mark.usefixtures("no_host_fs")

PSI_LINE = "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"


@pytest.mark.parametrize(
    ("name", "cg_mode", "supported", "reason", "psi", "psi_reason", "btf"),
    [
        ("v2-systemd", CgroupMode.V2, True, "", True, "", True),
        ("v2-cgroupfs", CgroupMode.V2, True, "", True, "", True),
        ("hybrid", CgroupMode.HYBRID, True, "", True, "", True),
        ("no-quota", CgroupMode.V2, True, "", True, "", True),
        ("malformed", CgroupMode.V2, True, "", True, "", True),
        ("no-psi", CgroupMode.V2, False, "no /proc/pressure", False, "no /proc/pressure", False),
        ("v1-only", CgroupMode.V1, False, "cgroup v1 only", False, "no cgroup2 hierarchy", False),
    ],
)
def test_detect_trees(
    name: str,
    cg_mode: CgroupMode,
    supported: bool,
    reason: str,
    psi: bool,
    psi_reason: str,
    btf: bool,
) -> None:
    f = detect(name)
    assert f.mode is cg_mode
    assert f.supported is supported
    assert f.psi is psi
    assert f.btf is btf
    if reason:
        assert reason in f.reason
    else:
        assert f.reason == ""
    if psi_reason:
        assert psi_reason in f.psi_reason
    else:
        assert f.psi_reason == ""


@pytest.mark.parametrize("name", ["v2-systemd", "v2-cgroupfs", "no-psi", "no-quota", "malformed"])
def test_pure_v2_roots(name: str) -> None:
    f = detect(name)
    assert f.v2_root == str(tree(name) / "sys/fs/cgroup")
    assert f.v1_cpu_root is None
    assert f.v1_memory_root is None


def test_hybrid_roots() -> None:
    f = detect("hybrid")
    base = tree("hybrid") / "sys/fs/cgroup"
    assert f.v2_root == str(base / "unified")
    # /sys/fs/cgroup/cpu is a symlink to cpu,cpuacct, as systemd mounts it
    assert f.v1_cpu_root == str(base / "cpu")
    assert os.path.islink(f.v1_cpu_root)
    assert f.v1_memory_root == str(base / "memory")


def test_v1_only_roots() -> None:
    f = detect("v1-only")
    base = tree("v1-only") / "sys/fs/cgroup"
    assert f.v2_root is None
    assert f.v1_cpu_root == str(base / "cpu")
    assert f.v1_memory_root == str(base / "memory")


def _write(path: Path, text: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _detect(root: Path) -> mode.NodeLayout:
    return mode.detect(sysfs=str(root / "sys"), procfs=str(root / "proc"))


def test_nothing_mounted(tmp_path: Path) -> None:
    (tmp_path / "sys/fs/cgroup").mkdir(parents=True)
    (tmp_path / "proc").mkdir()
    f = _detect(tmp_path)
    assert f.mode is CgroupMode.NONE
    assert not f.supported
    assert "no cgroup hierarchy found" in f.reason
    assert (f.v2_root, f.v1_cpu_root, f.v1_memory_root) == (None, None, None)
    assert not f.psi
    assert not f.btf


def test_v2_without_cgroup_pressure_files(tmp_path: Path) -> None:
    """The kernel has PSI but the cgroup2 files do not show it."""
    _write(tmp_path / "sys/fs/cgroup/cgroup.controllers", "cpu memory\n")
    _write(tmp_path / "sys/fs/cgroup/a.service/cpu.stat", "usage_usec 1\n")
    _write(tmp_path / "proc/pressure/cpu", PSI_LINE)
    f = _detect(tmp_path)
    assert f.mode is CgroupMode.V2
    assert not f.psi
    assert not f.supported
    assert f.reason == f.psi_reason == "no per-cgroup cpu.pressure in the cgroup2 hierarchy"


def test_v2_pressure_only_below_root(tmp_path: Path) -> None:
    """Kernels before 5.2 hide the pressure files on the root cgroup only."""
    _write(tmp_path / "sys/fs/cgroup/cgroup.controllers", "cpu memory\n")
    _write(tmp_path / "sys/fs/cgroup/a.service/cpu.pressure", PSI_LINE)
    _write(tmp_path / "proc/pressure/cpu", PSI_LINE)
    f = _detect(tmp_path)
    assert f.psi
    assert f.supported


def test_psi_unreadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """/proc/pressure/cpu exists but cannot be read: EOPNOTSUPP with psi=0 on older
    kernels (made up here: no file in a tmp tree fails so), or not a file at all."""
    _write(tmp_path / "sys/fs/cgroup/cgroup.controllers", "cpu memory\n")
    _write(tmp_path / "sys/fs/cgroup/cpu.pressure", PSI_LINE)
    (tmp_path / "proc/pressure/cpu").mkdir(parents=True)
    f = _detect(tmp_path)
    assert not f.psi
    assert not f.supported
    assert f.psi_reason.startswith("PSI unusable: ")
    assert str(tmp_path / "proc/pressure/cpu") in f.psi_reason
    assert "not a regular file (a directory)" in f.psi_reason

    def eopnotsupp(path: str) -> str | None:
        raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP), path)

    monkeypatch.setattr(mode, "read_text", eopnotsupp)
    f = _detect(tmp_path)
    assert f.psi_reason.startswith("PSI disabled: ")
    assert str(tmp_path / "proc/pressure/cpu") in f.psi_reason


def test_hybrid_with_cpu_cpuacct_only(tmp_path: Path) -> None:
    base = tmp_path / "sys/fs/cgroup"
    _write(base / "unified/cgroup.controllers")
    _write(base / "unified/cpu.pressure", PSI_LINE)
    _write(base / "cpu,cpuacct/cpu.shares", "1024\n")
    _write(tmp_path / "proc/pressure/cpu", PSI_LINE)
    f = _detect(tmp_path)
    assert f.mode is CgroupMode.HYBRID
    assert f.supported
    assert f.v1_cpu_root == str(base / "cpu,cpuacct")
    assert f.v1_memory_root is None


def test_hybrid_without_psi_is_unsupported(tmp_path: Path) -> None:
    base = tmp_path / "sys/fs/cgroup"
    _write(base / "unified/cgroup.controllers")
    _write(base / "cpu/cpu.shares", "1024\n")
    (tmp_path / "proc").mkdir()
    f = _detect(tmp_path)
    assert f.mode is CgroupMode.HYBRID
    assert not f.supported
    assert "no /proc/pressure" in f.reason


def test_mode_values_are_strings() -> None:
    assert [m.value for m in CgroupMode] == ["v2", "hybrid", "v1", "none"]


def test_unit_tests_cannot_read_the_host() -> None:
    """The ``no_host_fs`` guard is on: the default roots are the host's."""
    with pytest.raises(AssertionError, match="touched the host"):
        mode.detect()
