"""Property-based tests (hypothesis): every parser and both configuration loaders, on
any input, either return a value the kernel or the docs allow, or raise their declared
error, never anything else. Derandomized, so CI sees the same examples every run; the
long seeded fuzz runs are in tests/fuzz/."""

from __future__ import annotations

import math
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.cgroupfs import parsers as p
from exporter.cgroupfs.errors import CgroupParseError
from exporter.cgroupfs.model import CpuStat, PressureLine
from exporter.config_file import ConfigError
from exporter.findings.thresholds import Thresholds, parse_thresholds
from exporter.metadata_file import parse_metadata_file
from exporter.quantity import parse_quantity
from tests.support.parser_fuzz import PARSERS, implausible

# No bound but against hangs (no server, clock or subprocess bound): scripts/test.sh
# runs these at idle priority (docs/testing.md).
pytestmark = [pytest.mark.untimed, pytest.mark.timeout(900)]

SETTINGS = settings(
    derandomize=True,
    deadline=None,
    max_examples=150,
    suppress_health_check=[HealthCheck.too_slow],
)
U64 = 2**64 - 1

# Numbers as they appear in bad files: in and out of the kernel's range, in forms it
# never writes.
numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "inf", "1e400", "+5", "1_000", "\u0663", "9" * 5000, "", "max"]),
    st.text(max_size=8),
)
keys = st.one_of(
    st.sampled_from(
        [
            "usage_usec", "user_usec", "system_usec", "nr_periods", "nr_throttled",
            "throttled_usec", "throttled_time", "anon", "file", "inactive_file", "rss",
            "total_rss", "max", "oom", "high", "low", "oom_kill", "pgmajfault",
            "workingset_refault_file", "ctxt", "cpu", "cpu0", "MemTotal:",
        ]
    ),
    st.text(min_size=1, max_size=6).filter(lambda s: not any(c.isspace() for c in s)),
)  # fmt: skip
flat_files = st.lists(st.tuples(keys, numbers), max_size=12).map(
    lambda kv: "".join(f"{k} {v}\n" for k, v in kv)
)
psi_line = st.tuples(st.sampled_from(["some", "full"]), numbers, numbers, numbers, numbers).map(
    lambda t: f"{t[0]} avg10={t[1]} avg60={t[2]} avg300={t[3]} total={t[4]}\n"
)
psi_files = st.lists(psi_line, max_size=3).map("".join)
any_text = st.one_of(st.text(), flat_files, psi_files, numbers.map(lambda n: n + "\n"))


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_parsers_return_plausible_values_or_their_declared_error(name: str) -> None:
    parser = PARSERS[name][0]

    @SETTINGS
    @given(text=any_text)
    def check(text: str) -> None:
        try:
            value = parser(text, "<prop>")
        except CgroupParseError as e:
            assert e.source == "<prop>" or e.source == "quota"
            assert len(str(e)) < 400  # a 5,000-digit value is named, not printed
            return
        assert implausible(value) is None, (text, value)

    check()


@SETTINGS
@given(st.lists(st.integers(min_value=0, max_value=U64), min_size=6, max_size=6))
def test_cpu_stat_round_trip(v: list[int]) -> None:
    periods, throttled = max(v[3], v[4]), min(v[3], v[4])
    text = (
        f"usage_usec {v[0]}\nuser_usec {v[1]}\nsystem_usec {v[2]}\n"
        f"nr_periods {periods}\nnr_throttled {throttled}\nthrottled_usec {v[5]}\n"
    )
    assert p.parse_cpu_stat(text) == CpuStat(v[0], v[1], v[2], periods, throttled, v[5])


@SETTINGS
@given(
    st.lists(st.integers(min_value=0, max_value=10000), min_size=3, max_size=3),
    st.integers(min_value=0, max_value=U64),
)
def test_pressure_round_trip(avgs: list[int], total: int) -> None:
    a = [f"{x // 100}.{x % 100:02d}" for x in avgs]
    text = f"some avg10={a[0]} avg60={a[1]} avg300={a[2]} total={total}\n"
    line = p.parse_pressure(text).some
    assert line == PressureLine(avgs[0] / 100, avgs[1] / 100, avgs[2] / 100, total)


# -- configuration files -----------------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(["500m", "1Gi", "1e999999", "-1", "false", "0.3", "1E", ".5", "99Ei"]),
)
documents = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
META_KEYS = [
    "namespace", "pod", "container", "cpu_request", "cpu_limit", "memory_request",
    "memory_limit", "opted_out", "other",
]  # fmt: skip
metadata_docs = st.one_of(
    documents,
    st.dictionaries(
        st.sampled_from(["/a", "/b/c", "x", ""]),
        st.dictionaries(st.sampled_from(META_KEYS), scalars, max_size=4),
        max_size=3,
    ).map(lambda cg: {"cgroups": cg}),
)
THRESHOLD_KEYS = ["windowMinutes", "sustainMinutes", "stallSome", "runqP99Ms", "nodeLabels"]
threshold_docs = st.one_of(
    documents,
    st.dictionaries(st.sampled_from([*THRESHOLD_KEYS, "bogus"]), documents, max_size=4),
)


def _dump(doc: Any) -> bytes:
    return yaml.safe_dump(doc).encode()


@SETTINGS
@given(metadata_docs)
def test_metadata_loader_accepts_only_bounded_typed_values(doc: Any) -> None:
    try:
        entries = parse_metadata_file(_dump(doc), "meta.yaml")
    except ConfigError as e:
        assert str(e).startswith("meta.yaml: ") and "\n" not in str(e)
        return
    for path, fields in entries.items():
        assert path.startswith("/")
        for k, v in fields.items():
            if k.endswith("_cores"):
                assert isinstance(v, float) and math.isfinite(v) and 0 <= v <= 1e6
            elif k.endswith("_bytes"):
                assert isinstance(v, int) and 0 <= v < 2**63
            elif k == "opted_out":
                assert isinstance(v, bool)
            else:
                assert isinstance(v, str) and len(v) <= 253


@SETTINGS
@given(threshold_docs)
def test_thresholds_loader_accepts_only_bounded_typed_values(doc: Any) -> None:
    try:
        th = parse_thresholds(_dump(doc), "t.yaml")
    except ConfigError as e:
        assert str(e).startswith("t.yaml: ") and "\n" not in str(e)
        return
    assert isinstance(th, Thresholds)
    assert 1 <= th.sustain_minutes <= th.window_minutes <= 60
    assert 0 < th.stall_some <= 1


@SETTINGS
@given(st.binary(max_size=300))
def test_config_loaders_on_any_bytes(data: bytes) -> None:
    for load in (parse_metadata_file, parse_thresholds):
        try:
            load(data, "f.yaml")
        except ConfigError as e:
            assert "\n" not in str(e)


@SETTINGS
@given(st.one_of(st.text(max_size=70), st.integers(), st.floats(), st.booleans()))
def test_quantities_are_bounded_or_refused(value: Any) -> None:
    try:
        q = parse_quantity(value)
    except ValueError:
        return
    assert q.is_finite() and 0 <= q <= 2**63
