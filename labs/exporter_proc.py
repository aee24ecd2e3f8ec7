"""Run the real exporter as a subprocess on 127.0.0.1 and read its ``/metrics``.

Used by the real-kernel tests, the probe tests and the demo: start on a free port, wait
for ``/healthz`` (bounded, with the exporter's own log in the error), scrape and parse
with ``prometheus_client``'s parser, stop by PID.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from prometheus_client.parser import text_string_to_metric_families

_MAIN = "import sys; from exporter.commands import main; sys.exit(main())"


class ExporterError(RuntimeError):
    """The exporter did not start, died, or answered badly; the message has its log."""


def terminate(p: subprocess.Popen[bytes], timeout: float = 10.0) -> int | None:
    """End a process we started, by its PID: SIGTERM, then SIGKILL after ``timeout``.
    Returns its exit status."""
    if p.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
            p.wait(5)
    return p.returncode


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def exporter_command() -> list[str]:
    """The console script next to this interpreter, else ``python -c`` on the CLI."""
    script = Path(sys.executable).with_name("contention-exporter")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", _MAIN]


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


class Scrape:
    """One parsed ``/metrics`` response."""

    def __init__(self, text: str, taken_at: float) -> None:
        self.text = text
        self.taken_at = taken_at  # time.monotonic() when the response arrived
        self.samples: list[Sample] = []
        self.families: dict[str, str] = {}  # family name -> type
        for fam in text_string_to_metric_families(text):
            self.families[fam.name] = fam.type
            for s in fam.samples:
                self.samples.append(Sample(s.name, dict(s.labels), float(s.value)))

    def select(self, name: str, **labels: str) -> list[Sample]:
        """Samples named exactly ``name`` whose labels include ``labels``."""
        return [
            s
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def value(self, name: str, **labels: str) -> float | None:
        """The single sample's value, ``None`` if absent; more than one is an error."""
        found = self.select(name, **labels)
        if not found:
            return None
        if len(found) > 1:
            raise ExporterError(f"{len(found)} series match {name}{labels}: {found[:3]}")
        return found[0].value

    def total(self, name: str, **labels: str) -> float:
        return sum(s.value for s in self.select(name, **labels))

    def cgroups(self, name: str = "contention_cpu_usage_seconds_total") -> set[str]:
        """The ``cgroup`` label values present on ``name``."""
        return {s.labels["cgroup"] for s in self.select(name) if "cgroup" in s.labels}


class ExporterProcess:
    """``contention-exporter`` on ``127.0.0.1:<free port>``; a context manager."""

    def __init__(
        self,
        *,
        sample_interval: float = 1.0,
        probe: bool = False,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        port: int | None = None,
        log_path: str | None = None,
    ) -> None:
        self.sample_interval = sample_interval
        self.probe = probe
        # How long one scrape may take: 5 s on a host; a TCG guest sets more.
        self.scrape_timeout = 5.0
        self.extra_args = list(extra_args)
        self.env = dict(os.environ if env is None else env)
        self.port = port
        self._own_log = log_path is None
        if log_path is None:
            fd, log_path = tempfile.mkstemp(prefix="contention-exporter-", suffix=".log")
            os.close(fd)
        self.log_path = log_path
        self.popen: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        if self.popen is None:
            raise ExporterError("exporter not started")
        return self.popen.pid

    def argv(self) -> list[str]:
        args = [
            *exporter_command(),
            "--web.listen-address",
            f"127.0.0.1:{self.port}",
            "--sampler.interval",
            f"{self.sample_interval:g}",
        ]
        if not self.probe:
            args.append("--no-probe")
        return args + self.extra_args

    def start(self, timeout: float = 30.0, attempts: int = 3) -> ExporterProcess:
        """Start and wait until ``/healthz`` answers 200 (retrying on a port clash)."""
        fixed_port = self.port is not None
        last = ""
        for _ in range(attempts):
            if not fixed_port:
                self.port = free_port()
            with open(self.log_path, "ab") as log:
                self.popen = subprocess.Popen(
                    self.argv(),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    close_fds=True,
                )
            try:
                self._wait_healthy(timeout)
                return self
            except ExporterError as e:
                last = str(e)
                self.stop()
                if fixed_port or "in use" not in self.log_tail().lower():
                    break
        raise ExporterError(last)

    def _wait_healthy(self, timeout: float) -> None:
        assert self.popen is not None
        deadline = time.monotonic() + timeout
        why = "no answer yet"
        while time.monotonic() < deadline:
            rc = self.popen.poll()
            if rc is not None:
                raise ExporterError(
                    f"exporter exited with status {rc} before /healthz answered; "
                    f"argv={self.argv()}\n--- exporter log ---\n{self.log_tail()}"
                )
            try:
                status, _body = self.get("/healthz", timeout=1.0)
                if status == 200:
                    return
                why = f"/healthz answered {status}"
            except OSError as e:
                why = str(e)
            time.sleep(0.1)
        raise ExporterError(
            f"exporter not healthy within {timeout:.0f}s ({why}); argv={self.argv()}\n"
            f"--- exporter log ---\n{self.log_tail()}"
        )

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        """``(status, body)`` of one HTTP GET; HTTP errors are returned, not raised."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
                return int(r.status), r.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            return int(e.code), e.read().decode("utf-8", "replace")

    def scrape(self, timeout: float | None = None) -> Scrape:
        status, body = self.get("/metrics", self.scrape_timeout if timeout is None else timeout)
        if status != 200:
            raise ExporterError(f"/metrics answered {status}: {body[:500]}")
        return Scrape(body, time.monotonic())

    def wait_for(
        self,
        what: str,
        predicate: Callable[[Scrape], bool],
        timeout: float = 15.0,
        interval: float = 0.2,
    ) -> Scrape:
        """Scrape until ``predicate(scrape)`` is true; a clear error after ``timeout``."""
        deadline = time.monotonic() + timeout
        last: Scrape | None = None
        while True:
            last = self.scrape()
            if predicate(last):
                return last
            if time.monotonic() >= deadline:
                break
            self.check_alive()
            time.sleep(interval)
        raise ExporterError(f"timed out after {timeout:.0f}s waiting for {what}")

    def next_snapshot(self, key: str, timeout: float = 10.0, **labels: str) -> Scrape:
        """Poll until the value of ``key{labels}`` changes: aligns a scrape with the
        sampler publishing a new snapshot (to within the poll interval: 20 ms, or as
        long as the last scrape took, so that polling takes at most half of a slow
        machine's CPU from the exporter it waits for; in a TCG guest on a loaded host
        back-to-back scrapes kept its passes from publishing for 20 s)."""
        first = self.scrape().value(key, **labels)
        deadline = time.monotonic() + timeout
        pause = 0.02
        while time.monotonic() < deadline:
            time.sleep(pause)
            t = time.monotonic()
            s = self.scrape()
            pause = max(0.02, time.monotonic() - t)
            if s.value(key, **labels) != first:
                return s
        raise ExporterError(f"{key}{labels} did not change within {timeout:.0f}s")

    def check_alive(self) -> None:
        if self.popen is None or self.popen.poll() is not None:
            rc = None if self.popen is None else self.popen.returncode
            raise ExporterError(f"exporter is not running (status {rc})\n{self.log_tail()}")

    def log_text(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM by PID, then SIGKILL after ``timeout``; returns the exit status."""
        return None if self.popen is None else terminate(self.popen, timeout)

    def close(self) -> None:
        self.stop()
        if self._own_log:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.log_path)

    def __enter__(self) -> ExporterProcess:
        return self.start() if self.popen is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
