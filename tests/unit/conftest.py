"""Shared helpers for unit tests: the fixture trees, and a guard against the host's
/sys and /proc (unit tests run on fixture trees only)."""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.cgroupfs import mode
from exporter.cgroupfs.mode import NodeLayout

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

TREES = ("v2-systemd", "v2-cgroupfs", "hybrid", "v1-only", "no-psi", "no-quota", "malformed")


def tree(name: str) -> Path:
    """The host root of a fixture tree (it has ``sys/`` and ``proc/`` below it)."""
    root = FIXTURES / name
    assert root.is_dir(), f"missing fixture tree {root}"
    return root


def detect(name: str) -> NodeLayout:
    root = tree(name)
    return mode.detect(sysfs=str(root / "sys"), procfs=str(root / "proc"))


def inode(path: str | os.PathLike[str]) -> int:
    return os.stat(path).st_ino


def _is_host_path(path: object) -> bool:
    if isinstance(path, int):  # a file descriptor
        return False
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str | os.PathLike):
        return False
    p = os.path.abspath(os.fspath(path))
    return any(p == top or p.startswith(top + "/") for top in ("/sys", "/proc"))


@pytest.fixture
def no_host_fs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail the test if code under test touches the host's /sys or /proc."""

    def guard(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
        def wrapped(path: Any = ".", *args: Any, **kwargs: Any) -> Any:
            if _is_host_path(path):
                raise AssertionError(f"unit test touched the host: {name}({path!r})")
            return fn(path, *args, **kwargs)

        return wrapped

    for mod, attr in (
        (os, "open"),
        (os, "stat"),
        (os, "lstat"),
        (os, "scandir"),
        (os, "listdir"),
        (builtins, "open"),
    ):
        monkeypatch.setattr(mod, attr, guard(getattr(mod, attr), attr))
    yield
