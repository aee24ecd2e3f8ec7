"""node_exporter's web flags: ``--web.telemetry-path`` moves /metrics, and
``--web.disable-exporter-metrics`` leaves out the exporter's own process_* and
python_gc_* families (docs/serving.md). The real command serves both."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.commands import build_parser
from exporter.commands.common import agent_config

from .test_health import get
from .test_logs import exporter_argv

ROOT = Path(__file__).resolve().parents[2]


def families(text: str) -> set[str]:
    return {f.name for f in text_string_to_metric_families(text)}


@pytest.fixture
def exporter(request: pytest.FixtureRequest) -> Iterator[str]:
    """The exporter run with ``request.param``'s flags on a fixture node; its base URL."""
    proc = subprocess.Popen(
        exporter_argv(*request.param),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
    )
    assert proc.stderr is not None
    try:
        deadline = time.monotonic() + 60
        port = None
        while port is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            assert line, "the exporter exited before serving"
            m = re.search(r"serving http on 127\.0\.0\.1:(\d+)", line)
            port = m.group(1) if m else None
        assert port is not None, "the exporter did not say where it serves"
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize(
    "exporter",
    [["--web.telemetry-path=/probe/metrics", "--web.disable-exporter-metrics"]],
    indirect=True,
)
def test_metrics_at_the_telemetry_path_without_the_exporters_own(exporter: str) -> None:
    status, text = get(exporter + "/probe/metrics")
    assert status == 200
    names = families(text)
    assert "contention_build_info" in names and "contention_cpu_usage_seconds" in names
    assert not {n for n in names if n.startswith(("process_", "python_gc_"))}, names
    assert get(exporter + "/metrics")[0] == 404
    landing = get(exporter + "/")[1]
    assert 'href="/probe/metrics"' in landing and 'href="/metrics"' not in landing
    assert get(exporter + "/healthz")[0] == 200  # the other paths stay where they are


@pytest.mark.parametrize("exporter", [[]], indirect=True)
def test_by_default_metrics_at_metrics_with_the_exporters_own(exporter: str) -> None:
    status, text = get(exporter + "/metrics")
    assert status == 200
    names = families(text)
    assert "process_resident_memory_bytes" in names and "python_gc_objects_collected" in names


def test_the_flags_reach_the_settings() -> None:
    args = build_parser().parse_args(["--web.disable-exporter-metrics"])
    assert agent_config(args).process_metrics is False
    args = build_parser().parse_args([])
    assert args.metrics_path == "/metrics" and agent_config(args).process_metrics is True


@pytest.mark.parametrize("bad", ["metrics", "/healthz", "/findings", "/", "/m?x=1"])
def test_a_telemetry_path_that_cannot_be_served_is_refused(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([f"--web.telemetry-path={bad}"])
    assert e.value.code == 2
    assert "--web.telemetry-path" in capsys.readouterr().err
