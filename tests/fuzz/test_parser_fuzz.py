"""The bounded, seeded parser fuzz run (tests/support/parser_fuzz.py): 100,000 mutated
kernel files through every parser; no escape, no implausible value accepted. The full
run is `python -m tests.support.parser_fuzz --inputs 260000 --seed 16` (bench/README.md)."""

from __future__ import annotations

import pytest

from tests.support import parser_fuzz

pytestmark = pytest.mark.fuzz

INPUTS = 100_000  # about 3 s; every mutation kind is made over 1,900 times at this size
SEED = 16
MIN_MADE = 3  # each kind of mutation, at least this many times


def test_parsers_fuzz_no_escape_nothing_implausible() -> None:
    fig = parser_fuzz.run(INPUTS, SEED)
    assert fig.inputs == INPUTS
    assert fig.escapes == 0, fig.examples
    assert fig.implausible == 0, fig.examples
    assert parser_fuzz.unexercised(fig.mutations, parser_fuzz.MUTATION_KINDS, MIN_MADE) == {}
    # every parser was fed, and both accepted and refused some of its inputs: the
    # mutations reach the checks rather than failing early on every input
    for name, (fed, accepted) in fig.per_parser.items():
        assert fed >= INPUTS // len(fig.per_parser), name
        assert 0 < accepted < fed, name


def test_the_fuzzer_finds_what_an_unchecked_parser_lets_through() -> None:
    """The oracle is not vacuous: a parser that trusts int() is caught at once."""

    def naive(text: str, source: str) -> int:
        return int(text.strip())

    fed = escaped = implausible = 0
    import random

    rng = random.Random(SEED)
    for _ in range(2000):
        text = parser_fuzz.mutate(rng, "4096\n")
        fed += 1
        try:
            value = naive(text, "<fuzz>")
        except ValueError:
            escaped += 1
            continue
        implausible += parser_fuzz.implausible(value) is not None
    assert escaped > 0 and implausible > 0
