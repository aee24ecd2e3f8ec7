"""The one YAML writer of generated files (exporter/yamlout.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from exporter.yamlout import dump_yaml

ROOT = Path(__file__).resolve().parents[2]
# Every committed YAML file a generator writes (scripts/check-generated.sh keeps them
# fresh): the shared writer must give each back byte for byte.
GENERATED = (
    "rules/contention.rules.yaml",
    "rules/alertmanager.inhibit.yaml",
    "deploy/prometheusrule.yaml",
    "deploy/dashboards/contention-container-drilldown.yaml",
    "deploy/dashboards/contention-node-overview.yaml",
    "deploy/dashboards/kustomization.yaml",
)


def test_order_literal_blocks_unicode_and_round_trip() -> None:
    doc = {"z": 1, "a": {"expr": "sum by (x) (\n  rate(y[1m])\n)\n", "why": "≥ 20 ms → slow"}}
    text = dump_yaml(doc)
    assert text.index("z:") < text.index("a:")  # the order given, not sorted
    assert "expr: |\n    sum by (x) (\n      rate(y[1m])\n    )\n" in text
    assert "≥ 20 ms → slow" in text  # UTF-8, not \u escapes
    assert yaml.safe_load(text) == doc


def test_a_value_used_twice_is_written_twice() -> None:
    labels = {"severity": "warning"}
    text = dump_yaml({"a": labels, "b": labels})
    assert "&" not in text and "*" not in text
    assert text.count("severity: warning") == 2


def test_width_folds_long_plain_strings_only_past_it() -> None:
    words = " ".join(["word"] * 40)
    assert len(dump_yaml({"k": words}).splitlines()) > 1
    assert len(dump_yaml({"k": words}, width=4096).splitlines()) == 1


@pytest.mark.parametrize("name", GENERATED)
def test_every_committed_generated_yaml_file_comes_back_byte_for_byte(name: str) -> None:
    text = (ROOT / name).read_text("utf-8")
    lines = text.splitlines(keepends=True)
    header = 0
    while lines[header].startswith("#"):
        header += 1
    body = "".join(lines[header:])
    assert dump_yaml(yaml.safe_load(body)) == body
