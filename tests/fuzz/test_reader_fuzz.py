"""The seeded byte-level fuzz run of the per-cgroup path (tests/support/reader_fuzz.py):
every bad read costs that cgroup, counted with a reason; nothing implausible is kept."""

from __future__ import annotations

import pytest

from tests.support import reader_fuzz

pytestmark = pytest.mark.fuzz

INPUTS = 4_000  # `python -m tests.support.reader_fuzz` runs 40,000 (bench/README.md)
SEED = 16


def test_reader_fuzz_no_escape_nothing_implausible() -> None:
    fig = reader_fuzz.run(INPUTS, SEED)
    assert fig.inputs == INPUTS
    assert fig.escapes == 0 and fig.implausible == 0, fig.examples
    # the mutations reach both outcomes: samples and counted losses
    assert fig.sampled > INPUTS // 2
    assert fig.lost.get("malformed", 0) > INPUTS // 10
