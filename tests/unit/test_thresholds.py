"""The threshold config: packaged defaults (docs/configuration.md) and user overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

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
        ("stallSome: high\n", "must be a number"),
        ("stallSome: true\n", "must be a number"),
        ("windowMinutes: 2.5\n", "whole number"),
        ("windowMinutes: 0\n", "too small"),
        ("sustainMinutes: 6\n", "must not exceed windowMinutes"),
        ("runqP99Ms: 30\n", "not a run-queue histogram bound"),
        ("criticalRunqP99Ms: 5\n", "criticalRunqP99Ms must be >= runqP99Ms"),
        ("throttledRatioMax: 0.5\n", "throttledRatioMax"),
        ("nodeLabels: []\n", "non-empty list"),
        ("nodeLabels: [bad-label]\n", "not a valid Prometheus label name"),
        ("refaultPerMin: -1\n", "must be > 0"),
        ("- a\n- b\n", "expected a mapping"),
        ("stallSome: [\n", "not valid YAML"),
    ],
)
def test_bad_overrides_are_clear_errors(tmp_path: Path, text: str, needle: str) -> None:
    p = tmp_path / "t.yaml"
    p.write_text(text)
    with pytest.raises(ThresholdsError) as e:
        load_thresholds(p)
    assert needle in str(e.value)
    assert str(p) in str(e.value)


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
