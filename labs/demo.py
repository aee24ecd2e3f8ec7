"""``contention-exporter demo <lab>``: run one lab on this host and show what the exporter
concludes, with its evidence. (The command itself is ``exporter/commands/demo.py``; the
labs live outside the shipped package, so it needs a source checkout.)

It starts the exporter (sampling every second, scheduler probe on when it can load)
with the labs' short-window thresholds (see :data:`~labs.scenarios.SHORT_WINDOW`)
and a temporary metadata file giving the lab containers their requests and limits,
starts the lab, polls ``/findings`` until the lab's expected findings are all there
(or ``--seconds`` pass), prints them with every number, and cleans up: the lab's
cgroups, its workers and the exporter, whatever happens. Replayed labs
(``memory-pressure``, ``memory-limit-thrash``, ``cpu-steal``) need no root: the
exporter reads a fixture tree the demo rewrites every second.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, TextIO

from .cgroups import LabError, cleanup_stale, detect_layout, unavailable_reason
from .exporter_proc import ExporterError, ExporterProcess
from .replay import REPLAYS, ReplayRun, get_replay
from .scenarios import (
    LABS,
    SHORT_WINDOW,
    LabRun,
    MetadataFile,
    expected_keys,
    finding_key,
    get_lab,
    lab_findings,
    write_short_window_config,
)


def _findings(exp: ExporterProcess) -> dict[str, Any]:
    status, body = exp.get("/findings")
    if status != 200:
        raise ExporterError(f"/findings answered {status}: {body[:300]}")
    doc: dict[str, Any] = json.loads(body)
    return doc


def _pct(x: Any) -> str:
    return "-" if not isinstance(x, int | float) else f"{x * 100:.0f}%"


def print_findings(rows: list[dict[str, Any]], out: TextIO) -> None:
    if not rows:
        out.write("  (no findings for the lab's containers)\n")
        return
    for f in rows:
        c = f.get("culprit")
        who = "no culprit" if not c else f"culprit {c.get('ref')} [{c.get('kind')}]"
        share = "" if not c else f", blame share {_pct(c.get('blame_share'))}"
        out.write(
            f"  {f.get('severity')}  {f.get('kind')}  victim {f['victim'].get('ref')}  "
            f"{who}{share}\n"
        )
        out.write(f"    {f.get('message')}\n")
        out.write(f"    fix: {f.get('remediation')}\n")
        for k, v in (f.get("evidence") or {}).items():
            out.write(f"      {k}: {json.dumps(v)}\n")


def _wait_findings(
    exp: ExporterProcess,
    select: Callable[[dict[str, Any]], list[dict[str, Any]]],
    want: set[tuple[str, str, str | None, str]],
    deadline: float,
    out: TextIO,
    progress: Any,
) -> tuple[bool, list[dict[str, Any]]]:
    rows: list[dict[str, Any]] = []
    last_print = 0.0
    while True:
        doc = _findings(exp)
        rows = select(doc)
        got = {finding_key(f) for f in rows}
        if want and want <= got:
            return True, rows
        now = time.monotonic()
        if now >= deadline:
            return False, rows
        if now - last_print >= 15:
            last_print = now
            seen = ", ".join(f"{k[0]}({k[3]}) {k[1]}" for k in sorted(got, key=str)) or "none"
            out.write(f"  ... {progress()}; findings so far: {seen}\n")
            out.flush()
        exp.check_alive()
        time.sleep(2)


def run_demo(
    name: str,
    seconds: float,
    config: str | None,
    probe: bool,
    out: TextIO = sys.stdout,
) -> int:
    """Run one lab; 0 when its expected findings appeared, 1 when not, 2 on setup errors."""
    with tempfile.TemporaryDirectory(prefix="contention-demo-") as tmp:
        cfg = config or write_short_window_config(tmp)
        meta = MetadataFile(os.path.join(tmp, "metadata.yaml"))
        out.write(
            "thresholds: "
            + (config or f"packaged defaults with short window {json.dumps(SHORT_WINDOW)}")
            + "\n\n"
        )
        if name in REPLAYS:
            return _demo_replay(name, seconds, cfg, meta, out)
        return _demo_lab(name, seconds, cfg, meta, probe, out)


def _demo_lab(
    name: str, seconds: float, cfg: str, meta: MetadataFile, probe: bool, out: TextIO
) -> int:
    lab = get_lab(name)
    reason = unavailable_reason()
    if reason is not None:
        out.write(f"cannot run the {name} lab here: {reason}\n")
        return 2
    out.write(lab.describe() + "\n\n")
    layout = detect_layout()
    with contextlib.suppress(LabError):
        cleanup_stale(layout=layout)
    exp = ExporterProcess(
        sample_interval=1.0,
        probe=probe,
        extra_args=["--metadata.file", meta.path, "--config.file", cfg],
    )
    try:
        exp.start()
        if probe:
            loaded = exp.scrape().value("contention_probe_loaded")
            if loaded != 1:
                out.write(
                    "note: the scheduler probe did not load (see the exporter log below); "
                    "no culprit can be named\n"
                )
                out.write(exp.log_tail(10) + "\n")
        out.write(f"exporter on {exp.url} (pid {exp.pid}); starting the lab\n")
        out.flush()
        with LabRun(lab, seconds=seconds + 15, metadata=meta, layout=layout) as run:

            def progress() -> str:
                m = run.measure()
                return "; ".join(
                    f"{r}: {x.usage_cores:.2f} cores, some {_pct(x.psi_some)}, "
                    f"full {_pct(x.psi_full)}, throttled {_pct(x.throttled_ratio)}"
                    for r, x in m.items()
                )

            want = expected_keys(lab)
            ok, rows = _wait_findings(
                exp,
                lambda doc: lab_findings(lab, doc),
                want,
                time.monotonic() + seconds,
                out,
                progress,
            )
            measured = run.measure()
        out.write("\nkernel numbers over the run (from the lab's own cgroup files):\n")
        for r, m in measured.items():
            out.write(f"  {lab.cgroup_path(r)}: {json.dumps(m.as_dict())}\n")
        out.write("\nwhat the exporter found (/findings):\n")
        print_findings(rows, out)
        return _conclude(ok, out, seconds)
    except (ExporterError, LabError) as e:
        out.write(f"error: {e}\n")
        return 2
    finally:
        exp.close()


def _demo_replay(name: str, seconds: float, cfg: str, meta: MetadataFile, out: TextIO) -> int:
    lab = get_replay(name)
    out.write(lab.describe() + "\n\n")
    with ReplayRun(lab, stall_seconds=seconds + 15, metadata=meta) as run:
        exp = run.exporter(cfg)
        try:
            exp.start()
            out.write(f"exporter on {exp.url} reading {run.root}; replaying\n")
            out.flush()
            ok, rows = _wait_findings(
                exp,
                lab.findings,
                lab.expected_keys(),
                time.monotonic() + seconds,
                out,
                lambda: f"{time.time() - (run.started_at or time.time()):.0f}s replayed",
            )
            out.write("\nwhat the exporter found (/findings):\n")
            print_findings(rows, out)
            return _conclude(ok, out, seconds)
        except ExporterError as e:
            out.write(f"error: {e}\n")
            return 2
        finally:
            exp.close()


def _conclude(ok: bool, out: TextIO, seconds: float) -> int:
    if ok:
        out.write("\nresult: the lab's expected findings appeared.\n")
        return 0
    out.write(f"\nresult: the expected findings did not all appear within {seconds:.0f}s.\n")
    return 1


def list_labs(out: TextIO = sys.stdout) -> None:
    """One line per lab: its name, whether it runs on the real kernel, its title."""
    for lab in LABS.values():
        out.write(f"{lab.name:26} real kernel  {lab.title}\n")
    for r in REPLAYS.values():
        out.write(f"{r.name:26} replayed     {r.title}\n")


def lab_names() -> list[str]:
    return [*LABS, *REPLAYS]
