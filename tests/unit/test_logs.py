"""Log lines: valid logfmt (what Loki's and Vector's logfmt parsers read) or JSON, one
line per event, with the keys and levels of Prometheus 3 and node_exporter 1.9
(docs/serving.md, "Logs").

The logfmt lines are read back by a strict parser written here from the format's
grammar (go-logfmt's): keys of printable characters without ``=`` or ``"``, values
bare or double-quoted, quoted ones decoded as JSON strings.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.commands import build_parser
from exporter.commands.logs import (
    JSONFormatter,
    LogfmtFormatter,
    log_level,
    logfmt_value,
    setup_logging,
    source,
)

from .conftest import FIXTURES

ROOT = Path(__file__).resolve().parents[2]
TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
KEY = r'[^\s="]+'
BARE = r'[^\s="]+'
QUOTED = r'"(?:[^"\\\x00-\x1f]|\\.)*"'
PAIR = re.compile(rf"({KEY})=({QUOTED}|{BARE}|)(?: |$)")


def parse_logfmt(line: str) -> dict[str, str]:
    assert "\n" not in line and "\r" not in line
    out: dict[str, str] = {}
    pos = 0
    while pos < len(line):
        m = PAIR.match(line, pos)
        assert m, f"not logfmt at {pos}: {line[pos:]!r} in {line!r}"
        key, raw = m.group(1), m.group(2)
        out[key] = json.loads(raw) if raw.startswith('"') else raw
        pos = m.end()
    return out


def record(
    msg: str, *args: object, level: int = logging.WARNING, exc: bool = False
) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("boom\nsecond line")
        except ValueError:
            exc_info = sys.exc_info()
    return logging.LogRecord(
        "exporter.probe.loader", level, __file__, 42, msg, args or None, exc_info
    )


NASTY = [
    "scheduler probe not loaded",
    'a "quoted" word',
    "key=value inside",
    "line one\nline two\r\n\ttabbed",
    "back\\slash",
    "control \x00\x01\x1b[31m and \x7f \x85",
    "unicode: żółć ✓ \u2028",
    "lone surrogate from a file name: \udcff",
    "",
]


@pytest.mark.parametrize("msg", NASTY)
def test_logfmt_lines_parse_back(msg: str) -> None:
    line = LogfmtFormatter().format(record("%s", msg))
    fields = parse_logfmt(line)
    assert list(fields) == ["time", "level", "source", "msg"]
    assert TS.fullmatch(fields["time"]) and fields["level"] == "WARN"
    assert fields["source"] == "tests/unit/test_logs.py:42"
    expected = msg.encode("utf-8", "backslashreplace").decode()
    assert fields["msg"] == expected
    assert line.split(" ", 3)[3].startswith('msg="')  # msg is always quoted


@pytest.mark.parametrize("msg", NASTY)
def test_json_lines_parse_back(msg: str) -> None:
    line = JSONFormatter().format(record("%s", msg, level=logging.ERROR))
    assert "\n" not in line
    line.encode("utf-8")  # no lone surrogate reaches the stream
    doc = json.loads(line)
    assert list(doc) == ["time", "level", "source", "msg"] and doc["level"] == "ERROR"
    assert doc["msg"] == msg.encode("utf-8", "backslashreplace").decode()


def test_a_traceback_stays_on_the_line() -> None:
    for fmt, parse in ((LogfmtFormatter(), parse_logfmt), (JSONFormatter(), json.loads)):
        line = fmt.format(record("failed: %s", "x", exc=True))
        fields = parse(line)
        assert fields["msg"] == "failed: x"
        assert "Traceback" in fields["exc"] and "ValueError: boom\nsecond line" in fields["exc"]


def test_bare_values_follow_go_logfmt() -> None:
    assert logfmt_value("plain") == "plain"
    assert logfmt_value("") == '""'
    assert logfmt_value("a=b") == '"a=b"'
    assert logfmt_value("tab\there") == '"tab\\there"'
    assert logfmt_value("plain", quote=True) == '"plain"'


def test_levels_and_the_warning_alias() -> None:
    assert [log_level(x) for x in ("debug", "info", "warn", "warning", "ERROR")] == [
        "debug",
        "info",
        "warn",
        "warn",
        "error",
    ]
    args = build_parser().parse_args(["--log.level=warning", "--log.format=json"])
    assert args.log_level == "warn" and args.log_format == "json"
    for bad in (["--log.level=verbose"], ["--log.format=text"]):
        with pytest.raises(SystemExit) as e:
            build_parser().parse_args(bad)
        assert e.value.code == 2


def test_level_names_as_exporters_write_them() -> None:
    out = io.StringIO()
    setup_logging("debug", "logfmt", stream=out)
    try:
        log = logging.getLogger("exporter.test")
        log.debug("d")
        log.info("i")
        log.warning("w")
        log.error("e")
        log.critical("c")
        logging.getLogger("urllib3.connectionpool").warning("library line")
        setup_logging("warn", "logfmt", stream=out)
        log.info("filtered out")
    finally:
        setup_logging("info", "logfmt")
    lines = [parse_logfmt(x) for x in out.getvalue().splitlines()]
    assert [x["level"] for x in lines] == ["DEBUG", "INFO", "WARN", "ERROR", "ERROR", "WARN"]
    assert all(x["source"].startswith("tests/unit/test_logs.py:") for x in lines)


def test_lines_go_to_stderr_as_it_is_when_logged(monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread that logs after sys.stderr was swapped (and the old one closed, as a
    test's capture is) writes to the current stream, not to the closed file."""
    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    setup_logging("info", "logfmt")
    try:
        monkeypatch.setattr(sys, "stderr", second)
        first.close()
        logging.getLogger("exporter.test").warning("after the swap")
    finally:
        monkeypatch.undo()
        setup_logging("info", "logfmt")
    (line,) = second.getvalue().splitlines()
    assert parse_logfmt(line)["msg"] == "after the swap"


def test_source_names_the_package_path(tmp_path: Path) -> None:
    pkg = tmp_path / "lib" / "urllib3"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    assert source(str(pkg / "connectionpool.py"), 812) == "urllib3/connectionpool.py:812"
    assert source(str(tmp_path / "six.py"), 3) == "six.py:3"
    loader = ROOT / "exporter" / "probe" / "loader.py"
    assert source(str(loader), 1) == "exporter/probe/loader.py:1"


def exporter_argv(*flags: str) -> list[str]:
    """The real command on a fixture node, no probe, on a free loopback port."""
    node = FIXTURES / "v2-systemd"
    return [
        sys.executable,
        "-m",
        "exporter",
        f"--path.sysfs={node / 'sys'}",
        f"--path.procfs={node / 'proc'}",
        "--no-probe",
        "--web.listen-address=127.0.0.1:0",
        *flags,
    ]


@pytest.fixture
def exporter_run(request: pytest.FixtureRequest) -> Iterator[subprocess.Popen[str]]:
    fmt = request.param
    proc = subprocess.Popen(
        exporter_argv("--log.level=debug", f"--log.format={fmt}"),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONWARNINGS": "default"},
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


@pytest.mark.parametrize("exporter_run", ["logfmt", "json"], indirect=True)
def test_the_running_exporter_writes_one_parsable_line_per_event(
    exporter_run: subprocess.Popen[str],
) -> None:
    """The real command: every line it writes from start to SIGTERM parses."""
    assert exporter_run.stderr is not None
    lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = exporter_run.stderr.readline()
        assert line, "the exporter exited before serving"
        lines.append(line.rstrip("\n"))
        if "serving" in line:
            break
    exporter_run.send_signal(signal.SIGTERM)
    _, rest = exporter_run.communicate(timeout=30)
    assert exporter_run.returncode == 0
    lines += rest.splitlines()
    parse = json.loads if lines[0].startswith("{") else parse_logfmt
    events = [parse(x) for x in lines]
    assert len(events) >= 3
    for e in events:
        assert list(e)[:4] == ["time", "level", "source", "msg"], e
        assert TS.fullmatch(e["time"]) and e["level"] in ("DEBUG", "INFO", "WARN", "ERROR")
        assert re.fullmatch(r"[\w/.-]+\.py:\d+", e["source"]), e
    msgs = [e["msg"] for e in events]
    assert any(m.startswith("serving") and "127.0.0.1:" in m for m in msgs)
    assert any("stopping" in m for m in msgs)
