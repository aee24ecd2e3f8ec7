"""The seeded byte-level fuzz run of the per-cgroup path (tests/support/reader_fuzz.py):
every bad read costs that cgroup, counted with a reason; nothing implausible is kept."""

from __future__ import annotations

import pytest

from tests.support import parser_fuzz, reader_fuzz

pytestmark = pytest.mark.fuzz

# About 1 s on tmpfs; every mutation kind is made at least 35 times at this size.
# `python -m tests.support.reader_fuzz` runs 40,000 (bench/README.md).
INPUTS = 4_000
SEED = 16
MIN_MADE = 3  # each kind of mutation, at least this many times


def test_reader_fuzz_no_escape_nothing_implausible() -> None:
    fig = reader_fuzz.run(INPUTS, SEED)
    assert fig.inputs == INPUTS
    assert fig.escapes == 0 and fig.implausible == 0, fig.examples
    # the mutations reach both outcomes: samples and counted losses
    assert fig.sampled > INPUTS // 2
    assert fig.lost.get("malformed", 0) > INPUTS // 10
    assert parser_fuzz.unexercised(fig.mutations, reader_fuzz.MUTATION_KINDS, MIN_MADE) == {}
