"""The lane table ``scripts/test.sh`` prints at its end, and the slowest tests.

    python -m tests.support.lane_report DIR [--top 25]

``DIR`` is the run's results directory (``build/test-results/`` by default,
``$CONTENTION_TEST_RESULTS``). ``scripts/test.sh`` writes there, for each lane it runs,
one line of ``lanes.tsv`` (see :func:`parse_records`), each pytest lane's
``--junitxml`` file, and each VM lane's ``--results`` directory (``lane.json``, the
guest's ``junit.xml``, ``vm.log``; two lanes, one guest each, in a full run). This
prints:

* the lanes: wall time (m:ss and seconds) and status of each, each VM lane split into
  its set-up, boot and guest parts (from its ``lane.json``), which lanes ran beside
  which (the VM lanes run in the background), and the whole run's wall time;
* the slowest tests over every junit file, host lanes and the guest's.

and writes both as markdown to ``DIR/lanes.md``. Standard library only: it runs with
whatever Python is there, even when the lanes failed to set up the venv.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RECORDS = "lanes.tsv"
MARKDOWN = "lanes.md"
EXIT_NO_TESTS = 5  # pytest: no tests collected (a failure in every lane)
TOP = 25
IDLE = "idle"  # the last column of a lane scripts/test.sh ran at idle priority
VM_SETUP, VM_BOOT, VM_GUEST = "VM setup+image", "VM boot", "VM guest"


def vm_names(lane: str) -> tuple[str, str, str, str]:
    """The rows of a VM lane: the lane's own (when it has no others), set-up, boot,
    guest; a lane of one part of the guest's tests (``VM lane (labs)``) gets its part in
    each (``VM guest (labs)``)."""
    part = lane[len("VM lane") :].strip() if lane.startswith("VM lane") else ""
    if not part:
        return "VM lane", VM_SETUP, VM_BOOT, VM_GUEST
    return lane, f"{VM_SETUP} {part}", f"{VM_BOOT} {part}", f"{VM_GUEST} {part}"


SLOWEST_HEADER = (
    "slowest tests (junit time: setup + call + teardown of each test together, "
    "the three phases pytest --durations lists apart)"
)


@dataclass(frozen=True)
class Record:
    """One lane as ``scripts/test.sh`` ran it. ``rc`` None: the lane was left out.
    ``kind``: ``step`` (a command), ``pytest`` (``path``: its junit file) or ``vm``
    (``path``: the VM lane's results directory). Paths are relative to the results
    directory, or absolute. For a lane left out, ``path`` says why."""

    name: str
    start: float
    end: float
    rc: int | None
    kind: str
    path: str = ""
    idle: bool = False  # run at idle priority (scripts/at-idle.sh)

    @property
    def seconds(self) -> float:
        return max(0.0, self.end - self.start)

    @property
    def failed(self) -> bool:
        return self.rc is not None and self.rc != 0


@dataclass(frozen=True)
class Row:
    lane: str
    seconds: float | None
    status: str
    note: str = ""


@dataclass(frozen=True)
class TestTime:
    lane: str
    seconds: float
    test_id: str


@dataclass(frozen=True)
class Report:
    rows: list[Row]
    total: Row
    slowest: list[TestTime]
    tests: int  # testcases read from junit files


def parse_records(text: str) -> tuple[float | None, list[Record]]:
    """``lanes.tsv``: a ``#started<TAB>EPOCH`` line (when the run began), then one line
    per lane: ``name<TAB>start<TAB>end<TAB>rc<TAB>kind<TAB>path[<TAB>idle]`` (epoch
    seconds; rc ``-`` for a lane left out, path then the reason; ``idle`` for a lane run
    at idle priority). Lines that do not parse are skipped."""
    started: float | None = None
    records: list[Record] = []
    for line in text.splitlines():
        cells = line.split("\t")
        if cells[0] == "#started" and len(cells) >= 2:
            started = _float(cells[1])
            continue
        if line.startswith("#") or len(cells) < 5:
            continue
        start, end = _float(cells[1]), _float(cells[2])
        if start is None or end is None:
            continue
        rc = None if cells[3] in ("", "-") else _int(cells[3])
        path = cells[5] if len(cells) > 5 and cells[5] != "-" else ""
        idle = len(cells) > 6 and cells[6] == IDLE
        records.append(Record(cells[0], start, end, rc, cells[4], path, idle))
    return started, records


def _float(s: str) -> float | None:
    try:
        v = float(s)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _int(s: str) -> int | None:
    try:
        return int(s)
    except ValueError:
        return None


def status(rec: Record) -> str:
    if rec.rc is None:
        return "left out"
    if rec.rc == 0:
        return "passed"
    if rec.rc == EXIT_NO_TESTS and rec.kind == "pytest":
        return "FAILED (no tests collected)"
    return f"FAILED (exit {rec.rc})"


def beside(records: Sequence[Record]) -> dict[str, list[str]]:
    """For each lane, the lanes whose run overlapped its own in time (one after the
    other, they do not: each starts after the one before has ended)."""
    out: dict[str, list[str]] = {r.name: [] for r in records}
    for a in records:
        for b in records:
            if a is not b and min(a.end, b.end) > max(a.start, b.start):
                out[a.name].append(b.name)
    return out


def _num(summary: Mapping[str, Any], key: str) -> float | None:
    v = summary.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def vm_rows(rec: Record, summary: Mapping[str, Any] | None, others: Sequence[str]) -> list[Row]:
    """The VM lane's rows from its ``lane.json`` (``prepare_s``, ``image_s``, ``boot_s``,
    ``wall_s``, ``image``, ``reason``, ``skipped``): set-up and image, the guest's boot,
    the guest's tests (its wall time less the boot). Without a ``lane.json`` (the lane
    was left out, or did not reach the guest), one row with the lane's own wall time."""
    lane_row, setup_row, boot_row, guest_row = vm_names(rec.name)
    if rec.rc is None:
        return [Row(lane_row, None, "left out", rec.path)]
    lane_note = f"{lane_row} {fmt_time(rec.seconds)} in all"
    if others:
        lane_note += ", in the background beside: " + ", ".join(others)
    if summary is not None and summary.get("skipped"):
        return [Row(lane_row, rec.seconds, f"skipped: {summary['skipped']}", lane_note)]
    wall = _num(summary, "wall_s") if summary is not None else None
    if summary is None or wall is None:
        st = status(rec)
        if rec.rc == 0:
            st = "skipped (see vm.log)"
        why = str(summary.get("reason") or "") if summary is not None else "no lane.json"
        note = "; ".join(x for x in (why, lane_note) if x)
        return [Row(lane_row, rec.seconds, st, note)]
    prepare = (_num(summary, "prepare_s") or 0.0) + (_num(summary, "image_s") or 0.0)
    image = str(summary.get("image", ""))
    setup_note = "" if image in ("", "built") else f"no image: {image}"
    boot = _num(summary, "boot_s")
    boots = summary.get("boots", 1)
    boot_note = f"booted {boots} times (guest kernel crash)" if boots != 1 else ""
    guest_note = lane_note
    reason = str(summary.get("reason") or "")
    if reason:
        guest_note = f"{reason}; {guest_note}"
    return [
        Row(setup_row, prepare, "done", setup_note),
        Row(boot_row, boot, "done" if boot is not None else "did not boot", boot_note),
        Row(guest_row, wall - (boot or 0.0), status(rec), guest_note),
    ]


def rows(
    records: Sequence[Record],
    summaries: Mapping[str, Mapping[str, Any] | None],
    has_junit: Mapping[str, bool] | None = None,
) -> list[Row]:
    """The table's rows in the order the lanes were started. ``summaries``: each VM
    lane's ``lane.json`` (None when it has none); ``has_junit``: whether each pytest
    lane's junit file was there."""
    records = sorted(records, key=lambda r: r.start)
    over = beside(records)
    vm_lanes = {r.name for r in records if r.kind == "vm"}
    out: list[Row] = []
    for rec in records:
        if rec.kind == "vm":
            out += vm_rows(rec, summaries.get(rec.name), over[rec.name])
            continue
        if rec.rc is None:
            out.append(Row(rec.name, None, "left out", rec.path))
            continue
        notes = ["at idle priority"] if rec.idle else []
        vm = [o for o in over[rec.name] if o in vm_lanes]
        if vm:
            notes.append("beside the VM lane" + ("s" if len(vm) > 1 else ""))
        host = [o for o in over[rec.name] if o not in vm_lanes]
        if host:
            notes.append("beside " + ", ".join(host))
        if rec.kind == "pytest" and has_junit is not None and not has_junit.get(rec.name):
            notes.append("no junit file")
        out.append(Row(rec.name, rec.seconds, status(rec), "; ".join(notes)))
    return out


def total(started: float | None, records: Sequence[Record]) -> Row:
    """The whole run: from its start (else the first lane's) to the last lane's end."""
    if not records:
        return Row("total", None, "no lanes ran")
    begin = started if started is not None else min(r.start for r in records)
    failed = [r.name for r in records if r.failed]
    left_out = sum(r.rc is None for r in records)
    st = f"FAILED: {', '.join(failed)}" if failed else "passed"
    note = f"{len(records) - left_out} lanes" + (f", {left_out} left out" if left_out else "")
    return Row("total", max(r.end for r in records) - begin, st, note)


def test_id(classname: str, name: str) -> str:
    """pytest's node id from a junit testcase: ``tests.unit.test_x.TestY`` and ``test_z``
    give ``tests/unit/test_x.py::TestY::test_z`` (a class starts with ``Test``, as
    pytest collects them)."""
    if not classname:
        return name
    parts = classname.split(".")
    cut = next((i for i, p in enumerate(parts) if p.startswith("Test")), len(parts))
    module = "/".join(parts[:cut]) + ".py" if cut else ""
    return "::".join([x for x in [module, *parts[cut:]] if x] + [name])


def junit_times(xml_text: str, lane: str) -> list[TestTime]:
    """Every testcase of a junit file with its time (pytest's ``time`` attribute: setup,
    call and teardown together, ``junit_duration_report = total``)."""
    root = ET.fromstring(xml_text)
    out = []
    for case in root.iter("testcase"):
        seconds = _float(case.get("time", "0")) or 0.0
        out.append(
            TestTime(lane, seconds, test_id(case.get("classname", ""), case.get("name", "")))
        )
    return out


def slowest(times: Iterable[TestTime], n: int = TOP) -> list[TestTime]:
    return sorted(times, key=lambda t: (-t.seconds, t.lane, t.test_id))[:n]


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(round(seconds))
    return f"{s // 60}:{s % 60:02d}"


def fmt_seconds(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f} s"


def _cells(row: Row) -> list[str]:
    return [row.lane, fmt_time(row.seconds), fmt_seconds(row.seconds), row.status, row.note]


def render_text(report: Report) -> str:
    table = [["lane", "wall", "seconds", "status", "notes"]]
    table += [_cells(r) for r in report.rows]
    table.append(_cells(report.total))
    widths = [max(len(line[i]) for line in table) for i in range(4)]
    right = (False, True, True, False)

    def line(cells: list[str]) -> str:
        cols = [
            c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=False)
        ]
        return "  ".join([*cols, cells[4]]).rstrip()

    out = [line(table[0])] + [line(c) for c in table[1:-1]]
    out += ["-" * (sum(widths) + 8), line(table[-1]), ""]
    out.append(f"{len(report.slowest)} {SLOWEST_HEADER}, of {report.tests} tests:")
    if report.slowest:
        w = max(len(t.lane) for t in report.slowest)
        out += [f"  {t.seconds:8.2f} s  {t.lane:<{w}}  {t.test_id}" for t in report.slowest]
    else:
        out.append("  (no junit files)")
    return "\n".join(out) + "\n"


def _md(cell: str) -> str:
    return cell.replace("|", "\\|")


def render_markdown(report: Report) -> str:
    out = ["| lane | wall | seconds | status | notes |", "| --- | ---: | ---: | --- | --- |"]
    out += ["| " + " | ".join(_md(c) for c in _cells(r)) + " |" for r in report.rows]
    t = _cells(report.total)
    out.append("| " + " | ".join(f"**{_md(c)}**" if c else "" for c in t) + " |")
    out += ["", f"The {len(report.slowest)} {SLOWEST_HEADER}, of {report.tests} tests:", ""]
    out += ["| seconds | lane | test |", "| ---: | --- | --- |"]
    out += [f"| {t.seconds:.2f} | {_md(t.lane)} | `{t.test_id}` |" for t in report.slowest]
    return "\n".join(out) + "\n"


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _junit(path: Path, lane: str) -> list[TestTime] | None:
    try:
        return junit_times(path.read_text(errors="replace"), lane)
    except (OSError, ET.ParseError):
        return None


def load(results: Path, top: int = TOP) -> Report:
    """Read a results directory (see the module's docstring)."""
    try:
        text = (results / RECORDS).read_text()
    except OSError:
        text = ""
    started, records = parse_records(text)
    summaries: dict[str, dict[str, Any] | None] = {}
    has_junit: dict[str, bool] = {}
    times: list[TestTime] = []
    for rec in records:
        if not rec.path or rec.rc is None:
            continue
        path = results / rec.path
        if rec.kind == "vm":
            summaries[rec.name] = _read_json(path / "lane.json")
            times += _junit(path / "junit.xml", vm_names(rec.name)[3]) or []
        elif rec.kind == "pytest":
            found = _junit(path, rec.name)
            has_junit[rec.name] = found is not None
            times += found or []
    return Report(
        rows(records, summaries, has_junit),
        total(started, records),
        slowest(times, top),
        len(times),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tests.support.lane_report", description=__doc__.splitlines()[0]
    )
    ap.add_argument("results", type=Path, help="the run's results directory")
    ap.add_argument("--top", type=int, default=TOP, help=f"slowest tests to list ({TOP})")
    args = ap.parse_args(argv)
    report = load(args.results, args.top)
    sys.stdout.write(render_text(report))
    try:
        (args.results / MARKDOWN).write_text(render_markdown(report))
    except OSError as e:
        print(f"lane_report: cannot write {args.results / MARKDOWN}: {e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
