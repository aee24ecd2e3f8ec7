"""The lane table of scripts/test.sh (tests/support/lane_report.py) on small records and
junit files: statuses, the VM lane's parts and what ran beside it, the slowest tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import lane_report as lr
from tests.vm import guest, lane

UNIT_XML = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="0" tests="3" time="9.5">
<testcase classname="tests.unit.test_parsers" name="test_cpu_stat" time="0.012" />
<testcase classname="tests.unit.test_rules.TestPack" name="test_promtool[core]" time="7.25">
<failure message="assert False">boom</failure></testcase>
<testcase classname="tests.unit.test_parsers" name="test_pressure" time="2.001" />
</testsuite></testsuites>
"""
GUEST_XML = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="1" time="300">
<testcase classname="tests.vm.test_v2_labs" name="test_memory_pressure" time="301.5" />
</testsuite></testsuites>
"""
LANE_JSON = {
    "kernel": "6.12.57+deb13-amd64",
    "prepare_s": 3.5,
    "image_s": 1.5,
    "image": "built",
    "wall_s": 640.0,
    "boot_s": 26.0,
    "status": 0,
    "reason": "",
}


def tsv(*lines: str) -> str:
    return "\n".join(["#started\t1000.0", *lines]) + "\n"


RECORDS = tsv(
    "setup\t1000.0\t1040.0\t0\tstep\t-",
    "image build (core)\t1040.0\t1100.0\t0\tstep\t-",
    "VM\t1100.0\t1760.5\t0\tvm\tvm",
    "lint+types\t1100.5\t1160.0\t1\tstep\t-",
    "unit\t1160.0\t1300.0\t1\tpytest\tunit.xml",
    "fuzz\t1300.0\t1330.0\t5\tpytest\tfuzz.xml",
    "kernel\t1761.0\t2100.0\t0\tpytest\tkernel.xml",
)


def test_records_parse_and_bad_lines_are_skipped() -> None:
    started, recs = lr.parse_records(
        tsv("a\t1\t2\t0\tstep\t-", "junk", "b\tx\t2\t0\tstep", "c\t3\t4\t-\tvm\tnot root")
    )
    assert started == 1000.0
    assert [r.name for r in recs] == ["a", "c"]
    assert recs[0] == lr.Record("a", 1.0, 2.0, 0, "step", "")
    assert recs[1].rc is None and lr.status(recs[1]) == "left out"
    assert lr.rows(recs, {}) == [
        lr.Row("a", 1.0, "passed"),
        lr.Row("VM lane", None, "left out", "not root"),
    ]


def test_statuses_no_tests_collected_is_a_failure() -> None:
    assert lr.status(lr.Record("u", 0, 1, 0, "pytest")) == "passed"
    assert lr.status(lr.Record("u", 0, 1, 5, "pytest")) == "FAILED (no tests collected)"
    assert lr.status(lr.Record("s", 0, 1, 5, "step")) == "FAILED (exit 5)"
    assert lr.Record("u", 0, 1, 5, "pytest").failed


def test_the_vm_lane_in_three_parts_beside_the_lanes_it_overlapped() -> None:
    _, recs = lr.parse_records(RECORDS)
    rows = lr.rows(recs, {"VM": LANE_JSON}, {"unit": True, "fuzz": False, "kernel": True})
    by = {r.lane: r for r in rows}
    assert [r.lane for r in rows] == [
        "setup",
        "image build (core)",
        lr.VM_SETUP,
        lr.VM_BOOT,
        lr.VM_GUEST,
        "lint+types",
        "unit",
        "fuzz",
        "kernel",
    ]
    assert by[lr.VM_SETUP].seconds == 5.0
    assert by[lr.VM_BOOT].seconds == 26.0
    assert by[lr.VM_GUEST].seconds == 614.0  # the guest's wall time less its boot
    assert by[lr.VM_GUEST].status == "passed"
    note = by[lr.VM_GUEST].note
    assert "VM lane 11:00 in all" in note
    assert "in the background beside: lint+types, unit, fuzz" in note
    assert "kernel" not in note and "image build" not in note  # before and after it
    assert by["unit"].note == "beside the VM lane"
    assert by["fuzz"].status == "FAILED (no tests collected)"
    assert by["fuzz"].note == "beside the VM lane; no junit file"
    assert by["kernel"].note == ""


def test_a_vm_lane_without_lane_json_or_left_out() -> None:
    skipped = lr.Record("VM", 0.0, 2.0, 0, "vm", "vm")
    (row,) = lr.vm_rows(skipped, None, [])
    assert (row.lane, row.status) == ("VM lane", "skipped (see vm.log)")
    (row,) = lr.vm_rows(skipped, {"skipped": "not root"}, [])
    assert row.status == "skipped: not root"
    (row,) = lr.vm_rows(lr.Record("VM", 0.0, 9.0, 1, "vm", "vm"), None, [])
    assert row.status == "FAILED (exit 1)" and row.seconds == 9.0
    left_out = lr.Record("VM", 5.0, 5.0, None, "vm", "CONTENTION_VM_LANE=0")
    (row,) = lr.vm_rows(left_out, None, [])
    assert (row.seconds, row.status, row.note) == (None, "left out", "CONTENTION_VM_LANE=0")


def test_a_vm_image_error_and_a_second_boot_are_noted() -> None:
    summary = dict(LANE_JSON, image="scripts/build-image.sh failed: E: no network", boots=2)
    summary["status"], summary["reason"] = 1, ""
    rows = lr.vm_rows(lr.Record("VM", 0.0, 700.0, 1, "vm", "vm"), summary, [])
    assert rows[0].note == "no image: scripts/build-image.sh failed: E: no network"
    assert rows[1].note == "booted 2 times (guest kernel crash)"
    assert rows[2].status == "FAILED (exit 1)"


def test_total_from_the_start_to_the_last_lane() -> None:
    started, recs = lr.parse_records(RECORDS)
    row = lr.total(started, recs)
    assert row.seconds == 1100.0
    assert row.status == "FAILED: lint+types, unit, fuzz"
    assert row.note == "7 lanes"


def test_test_ids_as_pytest_names_them() -> None:
    assert lr.test_id("tests.unit.test_x", "test_y[a.b]") == "tests/unit/test_x.py::test_y[a.b]"
    assert lr.test_id("tests.unit.test_x.TestK", "test_y") == "tests/unit/test_x.py::TestK::test_y"
    assert lr.test_id("", "tests.unit.test_x") == "tests.unit.test_x"  # a collection error


def test_slowest_over_every_junit_file() -> None:
    times = lr.junit_times(UNIT_XML, "unit") + lr.junit_times(GUEST_XML, lr.VM_GUEST)
    top = lr.slowest(times, 2)
    assert top == [
        lr.TestTime(lr.VM_GUEST, 301.5, "tests/vm/test_v2_labs.py::test_memory_pressure"),
        lr.TestTime("unit", 7.25, "tests/unit/test_rules.py::TestPack::test_promtool[core]"),
    ]


def test_a_results_directory_end_to_end(tmp_path: Path) -> None:
    (tmp_path / "lanes.tsv").write_text(RECORDS)
    (tmp_path / "unit.xml").write_text(UNIT_XML)
    (tmp_path / "kernel.xml").write_text("<testsuites><testsuite>not closed")
    (tmp_path / "vm").mkdir()
    (tmp_path / "vm" / "lane.json").write_text(json.dumps(LANE_JSON))
    (tmp_path / "vm" / "junit.xml").write_text(GUEST_XML)
    assert lr.main([str(tmp_path), "--top", "3"]) == 0
    report = lr.load(tmp_path, 3)
    assert report.tests == 4
    assert [t.seconds for t in report.slowest] == [301.5, 7.25, 2.001]
    assert {r.lane: r.note for r in report.rows}["kernel"] == "no junit file"
    lines = [line.split() for line in lr.render_text(report).splitlines()]
    assert lines[7][:8] == ["unit", "2:20", "140.0", "s", "FAILED", "(exit", "1)", "beside"]
    assert lines[11][:5] == ["total", "18:20", "1100.0", "s", "FAILED:"]
    text = lr.render_text(report)
    assert "3 slowest tests (junit time: setup + call + teardown" in text
    md = (tmp_path / "lanes.md").read_text()
    assert "| VM guest | 10:14 | 614.0 s | passed |" in md
    assert "| **total** | **18:20** | **1100.0 s** |" in md
    assert "| 301.50 | VM guest | `tests/vm/test_v2_labs.py::test_memory_pressure` |" in md


def test_an_empty_results_directory(tmp_path: Path) -> None:
    report = lr.load(tmp_path)
    assert report.rows == [] and report.total.status == "no lanes ran"
    assert "(no junit files)" in lr.render_text(report)


# -- the VM lane's side: what tests/vm/lane.py leaves in --results for the report ------


def _cannot_start(_packages: object = ()) -> guest.Kernel:
    raise guest.GuestUnavailable("qemu-system-x86_64 is not installed")


@pytest.mark.parametrize("ci", ["", "true"])
def test_a_lane_that_cannot_start_leaves_its_reason(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ci: str
) -> None:
    monkeypatch.setattr(guest, "prepare", _cannot_start)
    monkeypatch.setenv("CI", ci)
    results = tmp_path / "vm"
    assert lane.main(["--results", str(results)]) == (1 if ci else 0)
    summary = json.loads((results / "lane.json").read_text())
    rc = 1 if ci else 0
    (row,) = lr.vm_rows(lr.Record("VM", 0.0, 3.0, rc, "vm", "vm"), summary, [])
    if ci:
        assert row.status == "FAILED (exit 1)"
        assert row.note.startswith("cannot start: qemu-system-x86_64 is not installed")
    else:
        assert row.status == "skipped: qemu-system-x86_64 is not installed"


def test_the_lane_keeps_an_image_it_was_given(tmp_path: Path) -> None:
    given = tmp_path / "image"
    given.mkdir()
    args = lane._parser().parse_args(["--image", str(given)])
    env: dict[str, str] = {}
    assert lane._image(args, env) is None  # nothing for the lane to remove
    assert "rootfs-core.tar is missing" in env["CONTENTION_VM_IMAGE_ERROR"]
    assert given.is_dir()
    args = lane._parser().parse_args(["--image", str(given), "--image-error", "E: no network"])
    env = {}
    assert lane._image(args, env) is None
    assert env == {"CONTENTION_VM_IMAGE_ERROR": "E: no network"}


def test_results_inside_the_shared_trees_go_through_a_copy(tmp_path: Path) -> None:
    # the guest remounts the checkout and the venv read-only: a read-write share below
    # them would stop it (tests/vm/guest_init.sh), so the lane writes elsewhere first
    assert lane.inside_shares(str(guest.ROOT / "build" / "test-results" / "vm"))
    assert lane.inside_shares(str(guest.ROOT))
    assert not lane.inside_shares(str(tmp_path))


def test_two_vm_lanes_one_guest_each_named_by_their_part() -> None:
    text = (
        "#started\t0\n"
        "VM lane (labs)\t10.0\t500.0\t0\tvm\tvm-labs\n"
        "VM lane (agent)\t11.0\t400.0\t1\tvm\tvm\n"
        "unit\t20.0\t200.0\t0\tpytest\tunit.xml\n"
    )
    _, recs = lr.parse_records(text)
    labs = dict(LANE_JSON, wall_s=480.0, boot_s=10.0, part="labs")
    agent = dict(LANE_JSON, wall_s=380.0, boot_s=9.0, part="agent")
    rows = lr.rows(recs, {"VM lane (labs)": labs, "VM lane (agent)": agent}, {"unit": True})
    by = {r.lane: r for r in rows}
    assert by["VM guest (labs)"].seconds == 470.0 and by["VM guest (labs)"].status == "passed"
    assert by["VM guest (agent)"].seconds == 371.0
    assert by["VM guest (agent)"].status == "FAILED (exit 1)"
    assert "VM lane (labs) 8:10 in all" in by["VM guest (labs)"].note
    assert "VM boot (labs)" in by and "VM setup+image (agent)" in by
    assert by["unit"].note == "beside the VM lanes"
    assert lr.vm_names("VM lane") == ("VM lane", lr.VM_SETUP, lr.VM_BOOT, lr.VM_GUEST)


def by_lane(text: str) -> dict[str, lr.Row]:
    """The table's rows of these records, by lane."""
    _, recs = lr.parse_records(text)
    return {r.lane: r for r in lr.rows(recs, {})}


def test_host_lanes_side_by_side_name_each_other() -> None:
    # scripts/test.sh runs "any load" in the background beside "kernel (lab CPU)"
    text = (
        "#started\t0\n"
        "kernel (lab CPU)\t10.0\t150.0\t0\tpytest\tkernel (lab CPU).xml\n"
        "any load\t9.0\t160.0\t0\tpytest\tany load.xml\n"
        "kernel\t160.0\t500.0\t0\tpytest\tkernel.xml\n"
    )
    by = by_lane(text)
    assert by["any load"].note == "beside kernel (lab CPU)"
    assert by["kernel (lab CPU)"].note == "beside any load"
    assert by["kernel"].note == ""
    assert list(by) == ["any load", "kernel (lab CPU)", "kernel"]


def test_a_lane_run_at_idle_priority_says_so() -> None:
    # scripts/test.sh runs lint+types and generated files at idle priority, in the
    # background for the whole run
    text = (
        "#started\t0\n"
        "lint+types\t5.0\t400.0\t0\tstep\t-\tidle\n"
        "unit\t10.0\t200.0\t0\tpytest\tunit.xml\n"
        "unit (untimed)\t400.0\t450.0\t0\tpytest\tunit (untimed).xml\tidle\n"
        "kernel\t500.0\t800.0\t0\tpytest\tkernel.xml\n"
    )
    by = by_lane(text)
    assert by["lint+types"].note == "at idle priority; beside unit"
    assert by["unit"].note == "beside lint+types"
    assert by["unit (untimed)"].note == "at idle priority"
    assert by["kernel"].note == ""
