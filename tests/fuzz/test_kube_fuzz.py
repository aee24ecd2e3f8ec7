"""The seeded fuzz run of pod objects (tests/support/kube_fuzz.py): a malformed pod is
refused with the declared error (counted, costing only itself), never an escape."""

from __future__ import annotations

import pytest

from tests.support import kube_fuzz

pytestmark = pytest.mark.fuzz

INPUTS = 20_000
SEED = 16


def test_kube_fuzz_no_escape_nothing_implausible() -> None:
    fig = kube_fuzz.run(INPUTS, SEED)
    assert fig.inputs == INPUTS
    assert fig.escapes == 0 and fig.implausible == 0, fig.examples
    assert fig.read > INPUTS // 10 and fig.refused > INPUTS // 10
