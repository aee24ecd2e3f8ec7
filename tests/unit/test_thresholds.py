"""The threshold config: packaged defaults (docs/configuration.md) and user overrides."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from exporter.findings.model import Kind
from exporter.findings.thresholds import DEFAULT_KEYS, ThresholdsError, load_thresholds

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_are_the_documented_ones() -> None:
    th = load_thresholds()
    assert th.window_minutes == 5
    assert th.sustain_minutes == 2
    assert th.throttled_ratio == 0.25
    assert th.throttled_ratio_max == 0.10
    assert th.stall_some == 0.20
    assert th.runq_p99_ms == 20
    assert th.runq_bound_s == 0.02
    assert th.min_runq_events == 50
    assert th.blame_share == 0.40
    assert th.mem_stall_some == 0.10
    assert th.refault_per_min == 1000
    assert th.node_mem_stall_some == 0.05
    assert th.mem_culprit_share == 0.40
    assert th.critical_cpu_full == 0.10
    assert th.critical_runq_p99_ms == 200
    assert th.critical_runq_bound_s == 0.2
    assert th.node_labels == ("instance",)
    # one alert per kind, its severity label fixed: every kind warning by default
    assert dict(th.alert_severity) == {k.value: "warning" for k in Kind}


def test_alert_severity_overrides_only_the_kinds_it_names(tmp_path: Path) -> None:
    p = tmp_path / "t.yaml"
    p.write_text("alertSeverity: {noisy-neighbor: critical, cpu-steal: info}\n")
    th = load_thresholds(p)
    assert th.severity_of("noisy-neighbor") == "critical"
    assert th.severity_of("cpu-steal") == "info"
    assert th.severity_of("cpu-throttled") == "warning"  # untouched
    assert [k for k, _ in th.alert_severity] == [k.value for k in Kind]
    p.write_text("alertSeverity:\n")  # empty: the packaged severities
    assert load_thresholds(p) == load_thresholds()


def test_override_a_subset(tmp_path: Path) -> None:
    p = tmp_path / "t.yaml"
    p.write_text("stallSome: 0.3\nrunqP99Ms: 50\nnodeLabels: [cluster, instance]\n")
    th = load_thresholds(p)
    assert th.stall_some == 0.3
    assert th.runq_bound_s == 0.05
    assert th.node_labels == ("cluster", "instance")
    assert th.blame_share == 0.40  # untouched


def test_empty_file_means_defaults(tmp_path: Path) -> None:
    p = tmp_path / "t.yaml"
    p.write_text("# nothing\n")
    assert load_thresholds(p) == load_thresholds()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("stallsome: 0.2\n", "unknown key(s) stallsome"),
        ("stallSome: 20\n", "fraction in (0, 1]"),
        ("stallSome: 0\n", "fraction in (0, 1]"),
        ("stallSome: high\n", "stallSome: must be a fraction in (0, 1]"),
        ("stallSome: true\n", "must be a fraction in (0, 1], e.g. 0.25 for 25% (got True)"),
        ("stallSome: '0.3'\n", "(got '0.3')"),  # a quoted number is a string
        ("windowMinutes: 2.5\n", "whole number"),
        ("windowMinutes: 0\n", "windowMinutes: must be >= 1 (got 0)"),
        # bounded: a window of a billion minutes used to allocate gigabytes per pass
        ("windowMinutes: 1000000000\n", "windowMinutes: must be <= 60 (got 1000000000)"),
        ("windowMinutes: " + "9" * 5000 + "\n", "integer with more than 30 digits"),
        ("stallSome: .nan\n", ".nan is not a finite number"),
        ("stallSome: 1.0e+400\n", "not a finite number"),
        ("minRunqEvents: 1e9\n", "(got '1e9')"),  # YAML 1.1: not a number
        ("stallSome: 0.2\nstallSome: 0.3\n", "line 2: duplicate key 'stallSome'"),
        ("? [a]\n: 1\n", "keys must be strings"),
        ("a: &x [1]\nb: *x\n", "line 2: YAML aliases (*x) are not allowed"),
        ("stallSome: " + "[" * 20000 + "\n", "nested deeper than 32"),
        ("sustainMinutes: 6\n", "must not exceed windowMinutes"),
        ("runqP99Ms: 30\n", "not a run-queue histogram bound"),
        ("criticalRunqP99Ms: 5\n", "criticalRunqP99Ms must be >= runqP99Ms"),
        ("throttledRatioMax: 0.5\n", "throttledRatioMax"),
        ("nodeLabels: []\n", "non-empty list"),
        ("nodeLabels: [bad-label]\n", "nodeLabels.0: must be a valid Prometheus label name"),
        ("refaultPerMin: -1\n", "must be > 0"),
        ("- a\n- b\n", "must be a mapping (got ['a', 'b'])"),
        ("stallSome: [\n", "not valid YAML"),
        ("alertSeverity: {noisy: critical}\n", "alertSeverity: unknown key(s) noisy; known keys"),
        (
            "alertSeverity: {noisy-neighbor: page}\n",
            "alertSeverity.noisy-neighbor: must be critical, warning or info (got 'page')",
        ),
        ("alertSeverity: [critical]\n", "alertSeverity: must be a mapping of finding kind"),
    ],
)
def test_bad_overrides_are_clear_errors(tmp_path: Path, text: str, needle: str) -> None:
    p = tmp_path / "t.yaml"
    p.write_text(text)
    with pytest.raises(ThresholdsError) as e:
        load_thresholds(p)
    assert needle in str(e.value)
    assert str(p) in str(e.value)


def test_yaml_bomb_fails_fast_with_a_short_message(tmp_path: Path) -> None:
    """A "billion laughs" document under a known key: refused at its first alias,
    before anything is expanded (it used to build a 28 MB message or run out of
    memory)."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    p = tmp_path / "t.yaml"
    p.write_text("stallSome:\n" + "\n".join("  " + x for x in lines) + "\n")
    with pytest.raises(ThresholdsError) as e:
        load_thresholds(p)
    assert str(e.value) == f"{p}: line 3: YAML aliases (*a0) are not allowed"


def test_non_utf8_and_oversized_files(tmp_path: Path) -> None:
    p = tmp_path / "t.yaml"
    p.write_bytes(b"stallSome: 0.3 # caf\xe9\n")
    with pytest.raises(ThresholdsError, match=r"not UTF-8 text \(byte 0xe9 at offset 20\)"):
        load_thresholds(p)
    p.write_bytes(b"#" * (4 << 20) + b"\n")
    with pytest.raises(ThresholdsError, match="longer than 4194304 bytes"):
        load_thresholds(p)
    p.unlink()
    os.mkfifo(p)  # opened non-blocking: refused at once, never waits for a writer
    with pytest.raises(ThresholdsError, match=r"not a regular file \(a FIFO\)"):
        load_thresholds(p)


def test_schema_defaults_and_dataclass_agree() -> None:
    """A new key needs all three: its default, its bounds, its field."""
    from exporter.config_file import schema

    in_schema = set(schema("thresholds")["properties"])
    assert in_schema == set(DEFAULT_KEYS), "exporter/data/thresholds.schema.json"


def test_packaged_defaults_pass_the_schema() -> None:
    """The run time loads the packaged file without the schema (no jsonschema import):
    this is where it is checked, file and merged defaults both."""
    from exporter.config_file import load_yaml, validate
    from exporter.findings.thresholds import SCHEMA, defaults_text, from_mapping

    doc = load_yaml(defaults_text().encode(), "packaged thresholds.yaml")
    validate(doc, SCHEMA, "packaged thresholds.yaml")
    assert from_mapping(dict(doc)) == load_thresholds()


def test_defaults_do_not_import_jsonschema() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from exporter.findings import load_thresholds; load_thresholds(); "
        "print('jsonschema' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "False", out.stderr


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ThresholdsError, match="cannot read thresholds file"):
        load_thresholds(tmp_path / "nope.yaml")


def test_round_trip() -> None:
    th = load_thresholds()
    d = th.to_yaml_dict()
    assert sorted(d) == list(DEFAULT_KEYS)


def test_every_knob_is_documented() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text()
    for key in DEFAULT_KEYS:
        assert f"`{key}`" in doc, f"docs/configuration.md does not document {key}"
