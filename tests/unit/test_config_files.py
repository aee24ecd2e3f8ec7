"""The thresholds and metadata files: one validation path, strict types, bounds; a bad
file at start is one clear line and exit 2; a bad edit at run time keeps the last
good contents, is logged once and counted, and sampling goes on."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exporter.agent import Agent, AgentConfig
from exporter.findings import load_thresholds
from exporter.metadata_file import FileIdentityResolver, MetadataFileError
from exporter.probe import ProbeConfig

FIXTURES = Path(__file__).parent.parent / "fixtures"
UNIT = "/system.slice/kubelet.service"

BILLION_LAUGHS = "\n".join(
    ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
)

# Bad metadata files, and what the one line says. Each used to be accepted wrongly,
# cost a traceback, or cost every pass (docs/host-mode.md).
BAD_METADATA: list[tuple[bytes, str]] = [
    (b"cgroups:\n  /a: {opted_out: 'false'}\n", "cgroups./a.opted_out: must be true or false"),
    (b"cgroups:\n  /a: {cpu_request: [1]}\n", "cgroups./a.cpu_request: must be CPU cores"),
    (b"cgroups:\n  /a: {cpu_request: '1e400'}\n", "cpu_request: quantity too large"),
    (b"cgroups:\n  /a: {cpu_request: '1e999999'}\n", "cpu_request: quantity too large"),
    (b"cgroups:\n  /a: {cpu_request: -1}\n", "cpu_request: must be CPU cores"),
    (b"cgroups:\n  /a: {cpu_request: .nan}\n", "line 2: .nan is not a finite number"),
    (b"cgroups:\n  /a: {memory_limit: .inf}\n", "line 2: .inf is not a finite number"),
    (b"cgroups:\n  /a: {cpu_request: true}\n", "cpu_request: must be CPU cores"),
    (b"cgroups:\n  /a: {cpu_request: {a: 1}}\n", "cpu_request: must be CPU cores"),
    (b"cgroups:\n  /a: {cpu_request: }\n", "cgroups./a.cpu_request: must be CPU cores"),
    (b"cgroups:\n  /a: {memory_request: 1Gi}\n\xff\n", "not UTF-8 text (byte 0xff"),
    (b"cgroups:\n  /a: {memory_request: 99Ei}\n", "memory_request: quantity too large"),
    (b"cgroups:\n  /a: {pod: 12}\n", "cgroups./a.pod: must be a string"),
    (b"cgroups:\n  /a:\n", "cgroups./a: must be a mapping (got None)"),
    (b"cgroups:\n  a: {}\n", "must be a cgroup path starting with '/'"),
    (b"cgroup: {}\n", "unknown key(s) cgroup; known keys: cgroups"),
    (b"cgroups: {/a: {cpu_request: 1}, /a: {cpu_request: 2}}\n", "duplicate key '/a'"),
    (b"cgroups:\n  /a: {cpu_request: " + b"9" * 5000 + b"}\n", "more than 30 digits"),
    (b"cgroups:\n" + BILLION_LAUGHS.encode(), "YAML aliases (*a0) are not allowed"),
    (b"cgroups: " + b"[" * 20000 + b"\n", "nested deeper than 32"),
    (b"cgroups: {\n", "not valid YAML: line 2"),
]

BAD_THRESHOLDS: list[tuple[bytes, str]] = [
    (b"windowMinutes: 1000000000\n", "windowMinutes: must be <= 60"),
    (b"stallSome: '0.3'\n", "stallSome: must be a fraction in (0, 1]"),
    (b"stallSome: true\n", "stallSome: must be a fraction in (0, 1]"),
    (b"stallSome: .inf\n", ".inf is not a finite number"),
    (b"windowMinutes: " + b"9" * 5000 + b"\n", "more than 30 digits"),
    (
        b"stallSome:\n" + b"\n".join(b"  " + x.encode() for x in BILLION_LAUGHS.split("\n")),
        "YAML aliases (*a0) are not allowed",
    ),
    (b"stallSome: " + b"[" * 20000 + b"\n", "nested deeper than 32"),
    (b"stallSome: 0.3\n\xfe\n", "not UTF-8 text (byte 0xfe"),
    (b"sustainMinutes: 9\n", "sustainMinutes must not exceed windowMinutes"),
    # many unknown keys: five named, the rest counted (the line stays short)
    (
        b"".join(b"k%d: 1\n" % i for i in range(1000)),
        "unknown key(s) k0, k1, k10, k100, k101 and 995 more; known keys: alertLabels",
    ),
    (b"alertLabels: {severity: page}\n", "alertLabels: 'severity' is set by the rule pack itself"),
    (b"disabledAlerts: [not an alert]\n", "disabledAlerts.0: 'not an alert' is not an alert name"),
    (b"exporterDownFor: 0s\n", "exporterDownFor: '0s' is not a Prometheus duration"),
    (b"selector: job=x\n", 'selector: expected matchers like job="contention-exporter"'),
]


def _ids(cases: list[tuple[bytes, str]]) -> list[str]:
    return [needle for _, needle in cases]


@pytest.mark.parametrize(("data", "needle"), BAD_METADATA, ids=_ids(BAD_METADATA))
def test_bad_metadata_is_one_clear_error(tmp_path: Path, data: bytes, needle: str) -> None:
    meta = tmp_path / "meta.yaml"
    meta.write_bytes(data)
    with pytest.raises(MetadataFileError) as e:
        FileIdentityResolver(str(meta))
    msg = str(e.value)
    assert msg.startswith(f"{meta}: "), msg
    assert needle in msg
    assert "\n" not in msg and len(msg) < 400


def test_metadata_strict_values_accepted(tmp_path: Path) -> None:
    meta = tmp_path / "meta.yaml"
    meta.write_text(
        "cgroups:\n"
        "  /a: {cpu_request: 500m, cpu_limit: 2, memory_request: 256Mi, memory_limit: 1e9,"
        " opted_out: false, namespace: ns, pod: p, container: c}\n"
        "  /b: {cpu_request: 0.25, memory_request: '1.5Gi', opted_out: true}\n"
    )
    entries = FileIdentityResolver(str(meta))._file.value
    assert entries["/a"] == {
        "cpu_request_cores": 0.5,
        "cpu_limit_cores": 2.0,
        "memory_request_bytes": 256 << 20,
        "memory_limit_bytes": 10**9,
        "opted_out": False,
        "namespace": "ns",
        "pod": "p",
        "container": "c",
    }
    assert entries["/b"]["memory_request_bytes"] == 3 << 29
    assert entries["/b"]["opted_out"] is True


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("contention-exporter")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "exporter"]
    # a hang bound: the tests that start the CLI run at idle priority in CI (untimed)
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=300, check=False)


def _node_args(tmp_path: Path) -> list[str]:
    root = FIXTURES / "v2-systemd"
    return [
        "--path.sysfs", str(root / "sys"), "--path.procfs", str(root / "proc"),
        "--no-probe", "--web.listen-address", "127.0.0.1:0",
    ]  # fmt: skip


# An interpreter's start each (about 7 s of the unit lane's CPU in CI), and nothing timed.
@pytest.mark.untimed
@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("flag", "data", "needle"),
    [("--metadata.file", d, n) for d, n in BAD_METADATA[::3]]
    + [("--config.file", d, n) for d, n in BAD_THRESHOLDS[::2]],
    ids=[f"metadata:{n}" for _, n in BAD_METADATA[::3]]
    + [f"thresholds:{n}" for _, n in BAD_THRESHOLDS[::2]],
)
def test_bad_file_at_start_exits_2_with_one_line(
    tmp_path: Path, flag: str, data: bytes, needle: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(data)
    r = _cli("run", *_node_args(tmp_path), flag, str(bad))
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert needle in lines[0] and str(bad) in lines[0]


# -- at run time -----------------------------------------------------------------------


class Node:
    """A running agent over a copy of a fixture node, with both files watched."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "node"
        shutil.copytree(FIXTURES / "v2-systemd", self.root)
        self.meta = tmp_path / "meta.yaml"
        self.meta.write_text(f"cgroups:\n  {UNIT}: {{cpu_request: 250m, pod: kubelet}}\n")
        self.th = tmp_path / "thresholds.yaml"
        self.th.write_text("stallSome: 0.3\n")
        self.agent = Agent(
            AgentConfig(
                sysfs=str(self.root / "sys"),
                procfs=str(self.root / "proc"),
                metadata_file=str(self.meta),
                thresholds_file=str(self.th),
                probe=ProbeConfig(enabled=False),
            ),
            load_thresholds(self.th),
        )
        self.now = 1_700_000_000.0

    def edit(self, path: Path, data: bytes) -> None:
        path.write_bytes(data)
        st = path.stat()  # a new version even within the filesystem's mtime granularity
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))

    def run_pass(self) -> dict[str, float]:
        self.now += 5
        pub = self.agent.run_pass(now=self.now)
        assert pub.result is not None
        out: dict[str, float] = {}
        for fam in pub.families():
            for s in fam.samples:
                if s.name.startswith("contention_config_"):
                    out[f"{s.name}{{{s.labels['kind']}}}"] = s.value
        return out

    def unit(self) -> object:
        pub = self.agent.published()
        assert pub.result is not None
        (c,) = [c for c in pub.result.snapshot.containers if c.identity.cgroup == UNIT]
        return c.identity

    def close(self) -> None:
        self.agent.close()


@pytest.fixture
def node(tmp_path: Path) -> object:
    n = Node(tmp_path)
    yield n
    n.close()


def test_bad_metadata_edits_keep_the_last_good_contents(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    m = node.run_pass()
    assert m == {
        "contention_config_last_reload_successful{metadata}": 1,
        "contention_config_reload_failures_total{metadata}": 0,
        "contention_config_last_reload_successful{thresholds}": 1,
        "contention_config_reload_failures_total{thresholds}": 0,
    }
    assert node.unit().cpu_request_cores == 0.25  # type: ignore[attr-defined]
    for n, (data, needle) in enumerate(BAD_METADATA, 1):
        caplog.clear()
        node.edit(node.meta, data)
        for _ in range(2):  # the same bad version: counted and logged once
            m = node.run_pass()
            assert node.unit().cpu_request_cores == 0.25  # type: ignore[attr-defined]
        assert m["contention_config_last_reload_successful{metadata}"] == 0
        assert m["contention_config_reload_failures_total{metadata}"] == n
        logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(logged) == 1, logged
        assert "keeping the last good contents" in logged[0] and needle in logged[0]
    node.edit(node.meta, f"cgroups:\n  {UNIT}: {{cpu_request: 1}}\n".encode())
    m = node.run_pass()
    assert node.unit().cpu_request_cores == 1.0  # type: ignore[attr-defined]
    assert m["contention_config_last_reload_successful{metadata}"] == 1
    # deleted: the last good contents stay too
    node.meta.unlink()
    m = node.run_pass()
    assert node.unit().cpu_request_cores == 1.0  # type: ignore[attr-defined]
    assert m["contention_config_last_reload_successful{metadata}"] == 0


def test_bad_thresholds_edits_keep_the_last_good_ones(node: Node) -> None:
    node.run_pass()
    assert node.agent.thresholds.stall_some == 0.3
    for n, (data, _) in enumerate(BAD_THRESHOLDS, 1):
        node.edit(node.th, data)
        started = time.monotonic()
        m = node.run_pass()
        assert time.monotonic() - started < 30  # no YAML bomb expansion (a hang guard)
        assert node.agent.thresholds.stall_some == 0.3
        assert node.agent.sampler.window_minutes == 5
        assert m["contention_config_reload_failures_total{thresholds}"] == n
        assert m["contention_config_last_reload_successful{thresholds}"] == 0
    node.edit(node.th, b"stallSome: 0.4\nwindowMinutes: 3\nsustainMinutes: 3\n")
    m = node.run_pass()
    assert node.agent.thresholds.stall_some == 0.4
    assert node.agent.sampler.window_minutes == node.agent.sampler.folds.minutes == 3
    assert m["contention_config_last_reload_successful{thresholds}"] == 1
    pub = node.agent.published()
    assert pub.result is not None and pub.result.window_minutes == 3
