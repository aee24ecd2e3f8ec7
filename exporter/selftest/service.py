"""The self-test inside a running exporter (``run --selftest.enabled``): ``POST
/selftest`` starts one on the exporter's own sampler, window and probe (one at a time),
``GET /selftest`` says how it goes and gives the last result, which the ``selftest``
collector exports as ``contention_selftest_*``."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..cgroupfs.mode import NodeLayout
from ..findings.thresholds import Thresholds
from ..sampler.snapshot import Snapshot
from ..window.model import Window
from . import DEFAULT_SECONDS
from .hosting import CannotHost
from .load import LoadError
from .report import summary
from .run import Options, Selftest

log = logging.getLogger(__name__)

Observer = Callable[[Snapshot, Window | None], None]
MAX_SECONDS = 600.0


class SelftestService:
    """One self-test at a time on the passes of a running agent."""

    def __init__(
        self,
        layout: NodeLayout,
        thresholds: Callable[[], Thresholds],
        observers: list[Observer],
        options: Options | None = None,
    ) -> None:
        self.layout, self.thresholds, self.observers = layout, thresholds, observers
        self.options = options or Options()
        self._lock = threading.Lock()
        self._running: Selftest | None = None
        self._last: dict[str, Any] | None = None

    def last(self) -> dict[str, Any] | None:
        """The last finished self-test's result (the collector's input)."""
        return self._last

    def state(self) -> dict[str, Any]:
        with self._lock:
            if self._running is not None:
                return {"state": "running"}
            if self._last is None:
                return {"state": "idle"}
            return {"state": "done", "result": self._last}

    def start(self, seconds: float = DEFAULT_SECONDS) -> tuple[int, dict[str, Any]]:
        """Start one in the background: (HTTP status, body)."""
        if not 0 < seconds <= MAX_SECONDS:
            return 400, {"error": f"timeout must be in (0, {MAX_SECONDS:.0f}] seconds"}
        with self._lock:
            if self._running is not None:
                return 409, {"error": "a self-test is already running", "state": "running"}
            opts = dataclasses.replace(self.options, seconds=seconds)
            try:
                test = Selftest(self.layout, self.thresholds(), opts)
            except CannotHost as e:
                self._finish({"passed": False, "exit_code": e.code, "error": str(e)})
                return 200, {"state": "done", "result": self._last}
            self._running = test
        threading.Thread(target=self._run, args=(test,), name="selftest", daemon=True).start()
        return 202, {"state": "running"}

    def _finish(self, result: dict[str, Any]) -> None:
        result["ended_at"] = time.time()
        self._last = result

    def _run(self, test: Selftest) -> None:
        """The whole run in this thread: the load processes die with it (PDEATHSIG)."""
        result: dict[str, Any]
        try:
            test.start()
            self.observers.append(test.on_pass)
            try:
                test.done.wait(test.options.seconds + 30)
            finally:
                self.observers.remove(test.on_pass)
            report = test.finish()
            report.mode = "exporter"
            result = report.to_dict()
            log.info("self-test finished:\n%s", summary(report))
        except CannotHost as e:
            result = {"passed": False, "exit_code": e.code, "error": str(e)}
        except (OSError, LoadError) as e:
            result = {"passed": False, "exit_code": 1, "error": f"self-test failed to run: {e}"}
        finally:
            test.stop()
        with self._lock:
            self._finish(result)
            self._running = None
