"""The seeded fuzz run of the metadata and thresholds files (tests/support/config_fuzz.py):
at start, a value or one clear line; as a live edit, the last good contents stay."""

from __future__ import annotations

import pytest

from tests.support import config_fuzz, parser_fuzz

pytestmark = pytest.mark.fuzz

# About 9 s; every mutation kind is made at least 5 times at this size (each operator in
# each file, each hostile value over both). `python -m tests.support.config_fuzz` runs
# 2,000 (bench/README.md).
INPUTS = 600
SEED = 16
MIN_MADE = 3  # each kind of mutation, at least this many times


def test_config_fuzz_no_traceback_last_good_kept() -> None:
    fig = config_fuzz.run(INPUTS, SEED)
    assert sum(fig.inputs.values()) == INPUTS
    assert fig.ok, fig.examples
    for kind in ("metadata", "thresholds"):  # both outcomes reached for both files
        assert fig.accepted.get(kind, 0) > 0 and fig.refused.get(kind, 0) > 0, kind
    assert parser_fuzz.unexercised(fig.mutations, config_fuzz.file_kinds(), MIN_MADE) == {}


def test_the_oracle_catches_implausible_values() -> None:
    assert config_fuzz.metadata_implausible({"/a": {"cpu_request_cores": float("inf")}})
    assert config_fuzz.metadata_implausible({"/a": {"opted_out": "false"}})
    assert config_fuzz.metadata_implausible({"/a": {"memory_limit_bytes": -1}})
