"""The seeded fuzz run of the metadata and thresholds files (tests/support/config_fuzz.py):
at start, a value or one clear line; as a live edit, the last good contents stay."""

from __future__ import annotations

import pytest

from tests.support import config_fuzz

pytestmark = pytest.mark.fuzz

INPUTS = 600  # `python -m tests.support.config_fuzz` runs 2,000 (bench/README.md)
SEED = 16


def test_config_fuzz_no_traceback_last_good_kept() -> None:
    fig = config_fuzz.run(INPUTS, SEED)
    assert sum(fig.inputs.values()) == INPUTS
    assert fig.ok, fig.examples
    for kind in ("metadata", "thresholds"):  # both outcomes reached for both files
        assert fig.accepted.get(kind, 0) > 0 and fig.refused.get(kind, 0) > 0, kind


def test_the_oracle_catches_implausible_values() -> None:
    assert config_fuzz.metadata_implausible({"/a": {"cpu_request_cores": float("inf")}})
    assert config_fuzz.metadata_implausible({"/a": {"opted_out": "false"}})
    assert config_fuzz.metadata_implausible({"/a": {"memory_limit_bytes": -1}})
