"""The accuracy maths the real-kernel blame tests report with (tests/support/accuracy.py)."""

from __future__ import annotations

import pytest

from tests.support.accuracy import (
    Distribution,
    percentile,
    split_error_pp,
)


def test_split_error_is_the_largest_gap_in_points() -> None:
    # CPU 25/75; blame 30/70 among the culprits (idle and others ignored) -> 5 points.
    blamed = {"a": 0.3, "b": 0.7, "idle": 5.0}
    assert split_error_pp(blamed, {"a": 1.0, "b": 3.0}) == pytest.approx(5.0)
    # A culprit the victim never waited behind counts as 0 blame.
    assert split_error_pp({"a": 1.0}, {"a": 1.0, "b": 1.0}) == pytest.approx(50.0)
    with pytest.raises(ValueError):
        split_error_pp({"x": 1.0}, {"a": 1.0})


def test_percentiles_and_share_within() -> None:
    errs = [float(i) for i in range(1, 21)]  # 1..20
    assert percentile(errs, 50) == 10.0 and percentile(errs, 90) == 18.0
    assert percentile(errs, 100) == 20.0 and percentile([3.0], 1) == 3.0
    d = Distribution.of(errs, limit_pp=10.0)
    assert d.n == 20 and d.within == 0.5 and d.percentiles[95] == 19.0
    assert "50% within ±10" in str(d)
