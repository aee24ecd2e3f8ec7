"""Suite-wide hooks: a real-kernel test that fails says how busy the machine was.

Tests marked ``kernel``, ``probe``, ``e2e`` or ``vm`` measure contention they build on
shared CPUs. Each one's run is watched (:mod:`tests.support.machine_load`); when it
fails, its report gets a "machine load" section (the node's CPU, the test's own, the
rest and who used it; in a VM lane's guest also the host's, which the lane records:
:mod:`tests.support.host_load`), and the end of the session lists the failures that ran
while the machine was busy with other work, so a reader knows a rerun on a quiet
machine is the first answer.
"""

from __future__ import annotations

import os
import time
from collections.abc import Generator

import pytest

from tests.support import host_load
from tests.support.machine_load import BUSY_CORES, LoadWindow

REAL_KERNEL = ("kernel", "probe", "e2e", "vm")
_WINDOW = pytest.StashKey[LoadWindow]()
_STARTED = pytest.StashKey[float]()  # wall clock: the host's samples use it
_BUSY_FAILURES = pytest.StashKey[list[str]]()


def _real_kernel(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(m) is not None for m in REAL_KERNEL)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if _real_kernel(item):
        item.stash[_WINDOW] = LoadWindow()
        item.stash[_STARTED] = time.time()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    outcome = yield
    report = outcome.get_result()
    window = item.stash.get(_WINDOW, None)
    if window is None or not report.failed or report.when == "teardown":
        return
    try:
        busy, text = window.note()
    except OSError as e:  # never let the diagnosis hide the failure
        busy, text = False, f"machine load unknown: {e}"
    report.sections.append(("machine load", text))
    # In a VM lane's guest, the host's side too (the guest cannot see it).
    host = host_load.note(
        item.stash[_STARTED], time.time(), os.environ.get(host_load.ENV), BUSY_CORES
    )
    if host is not None:
        host_busy, host_text = host
        report.sections.append(("host load", host_text))
        if host_busy:  # the host's note is the one the summary lists
            busy, text = True, host_text
    if busy:
        item.config.stash.setdefault(_BUSY_FAILURES, []).append(
            f"{item.nodeid}: {text.splitlines()[-1]}"
        )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    busy = terminalreporter.config.stash.get(_BUSY_FAILURES, [])
    if busy:
        terminalreporter.section("real-kernel failures on a busy machine", sep="=")
        terminalreporter.line(
            "These failed while other work used the CPUs; rerun them on a quiet machine "
            "(nothing else running) before debugging:"
        )
        for line in busy:
            terminalreporter.line(f"  {line}")
