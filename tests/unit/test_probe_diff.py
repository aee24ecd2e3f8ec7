"""Map diffing: never clear kernel counters, diff in userspace (no kernel)."""

from __future__ import annotations

from exporter.probe.diff import diff_counters, diff_totals


def test_new_key_counts_from_zero() -> None:
    assert diff_counters({}, {1: (3, 0, 7)}) == {1: (3, 0, 7)}


def test_growth_is_the_difference_and_zero_deltas_are_omitted() -> None:
    prev = {1: (3, 0, 7), 2: (1, 1, 1)}
    cur = {1: (5, 1, 9), 2: (1, 1, 1)}
    assert diff_counters(prev, cur) == {1: (2, 1, 2)}


def test_vanished_key_then_back_is_a_fresh_baseline() -> None:
    s1 = {1: (10, 10), 2: (4, 4)}
    s2 = {1: (12, 10)}  # key 2 deleted (pruned / evicted)
    assert diff_counters(s1, s2) == {1: (2, 0)}
    s3 = {1: (12, 10), 2: (1, 3)}  # key 2 re-created by the kernel
    assert diff_counters(s2, s3) == {2: (1, 3)}


def test_a_decrease_means_the_key_was_recreated() -> None:
    assert diff_counters({7: (100, 5)}, {7: (3, 9)}) == {7: (3, 9)}
    assert diff_counters({7: (100, 5)}, {7: (100, 4)}) == {7: (100, 4)}


def test_tuple_keys_and_shape_change() -> None:
    prev = {(1, 2): (5, 1)}
    cur = {(1, 2): (8, 2), (1, 0): (4, 1)}
    assert diff_counters(prev, cur) == {(1, 2): (3, 1), (1, 0): (4, 1)}
    assert diff_counters({1: (1,)}, {1: (1, 2)}) == {1: (1, 2)}


def test_diff_totals() -> None:
    assert diff_totals(None, (3, 4)) == (3, 4)
    assert diff_totals((1, 1), (3, 4)) == (2, 3)
    assert diff_totals((5, 1), (3, 4)) == (3, 3)  # a reset counts from zero


def test_sum_of_deltas_equals_kernel_growth_over_a_sequence() -> None:
    reads: list[dict[int, tuple[int, ...]]] = [
        {1: (1, 100)},
        {1: (4, 400), 2: (1, 10)},
        {2: (3, 30)},  # 1 pruned
        {1: (2, 20), 2: (3, 30)},  # 1 back
    ]
    total: dict[int, list[int]] = {}
    prev: dict[int, tuple[int, ...]] = {}
    for cur in reads:
        for k, d in diff_counters(prev, cur).items():
            acc = total.setdefault(k, [0, 0])
            acc[0] += d[0]
            acc[1] += d[1]
        prev = cur
    assert total == {1: [6, 420], 2: [3, 30]}
