"""The seeded fuzz run of pod objects (tests/support/kube_fuzz.py): a malformed pod is
refused with the declared error (counted, costing only itself), never an escape."""

from __future__ import annotations

import pytest

from tests.support import kube_fuzz, parser_fuzz

pytestmark = pytest.mark.fuzz

INPUTS = 20_000  # about 2 s: the full run's size; every mutation kind made over 900 times
SEED = 16
MIN_MADE = 3  # each kind of mutation, at least this many times


def test_kube_fuzz_no_escape_nothing_implausible() -> None:
    fig = kube_fuzz.run(INPUTS, SEED)
    assert fig.inputs == INPUTS
    assert fig.escapes == 0 and fig.implausible == 0, fig.examples
    assert fig.read > INPUTS // 10 and fig.refused > INPUTS // 10
    assert parser_fuzz.unexercised(fig.mutations, kube_fuzz.MUTATION_KINDS, MIN_MADE) == {}
