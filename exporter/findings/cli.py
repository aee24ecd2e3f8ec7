"""CLI commands: ``findings`` (ask a running exporter), ``diagnose`` (sample this host
for a while and explain), and ``rules`` (generate the rule pack; exporter.rules.cli)."""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from typing import Any, TextIO

from ..window import Window
from .evaluator import evaluate
from .model import Finding
from .thresholds import Thresholds, ThresholdsError, load_thresholds

DEFAULT_URL = "http://127.0.0.1:10366/findings"
SCHEMA_VERSION = 1


def findings_document(
    findings: list[Finding],
    now: float,
    window: Window | None = None,
    thresholds: Thresholds | None = None,
) -> dict[str, Any]:
    """The ``/findings`` body (schema: exporter/data/finding.schema.json)."""
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "evaluated_at": now,
        "window_minutes": thresholds.window_minutes if thresholds else None,
        "probe_loaded": window.probe_loaded if window is not None else None,
        "containers": len(window.containers) if window is not None else None,
        "findings": [f.to_dict() for f in findings],
    }
    return doc


# -- rendering ----------------------------------------------------------------------


def _pct(x: Any) -> str:
    return "-" if not isinstance(x, int | float) else f"{x * 100:.0f}%"


def _victim(d: dict[str, Any]) -> str:
    return str(d.get("ref") or d.get("cgroup") or "?")


def _culprit(d: dict[str, Any] | None) -> str:
    if not d:
        return "-"
    tag = " (heuristic)" if d.get("heuristic") else ""
    return f"{d.get('ref')} [{d.get('kind')}] {_pct(d.get('blame_share'))}{tag}"


def render_table(doc: dict[str, Any], out: TextIO, evidence: bool = False) -> None:
    rows = doc.get("findings") or []
    if not rows:
        out.write("no findings\n")
        return
    header = ("SEVERITY", "KIND", "VICTIM", "CULPRIT", "SINCE")
    table = [header]
    for f in rows:
        since = time.strftime("%H:%M", time.localtime(float(f.get("first_seen") or 0)))
        table.append(
            (
                str(f.get("severity")),
                str(f.get("kind")),
                _victim(f.get("victim") or {}),
                _culprit(f.get("culprit")),
                since,
            )
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for r in table:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")
    out.write("\n")
    for f in rows:
        out.write(f"- {f.get('message')}\n  fix: {f.get('remediation')}\n")
        if evidence:
            for k, v in (f.get("evidence") or {}).items():
                out.write(f"    {k}: {json.dumps(v)}\n")


# -- findings -------------------------------------------------------------------------


def cmd_findings(args: argparse.Namespace) -> int:
    try:
        with urllib.request.urlopen(args.url, timeout=args.timeout) as resp:
            doc = json.load(resp)
    except urllib.error.HTTPError as e:
        sys.stderr.write(f"error: {args.url}: HTTP {e.code} {e.reason}\n")
        return 1
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        sys.stderr.write(
            f"error: cannot reach {args.url}: {reason}\n"
            "Is the exporter running? (`contention-exporter run`, or pass --url)\n"
        )
        return 1
    except json.JSONDecodeError as e:
        sys.stderr.write(f"error: {args.url} did not return JSON: {e}\n")
        return 1
    if args.json:
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render_table(doc, sys.stdout, evidence=args.evidence)
    return 0


# -- diagnose -------------------------------------------------------------------------


def cmd_diagnose(args: argparse.Namespace) -> int:
    try:
        th = load_thresholds(args.config)
    except ThresholdsError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    need = (th.sustain_minutes + 1) * 60
    if args.duration < need:
        sys.stderr.write(
            f"note: findings need {th.sustain_minutes} complete minutes of samples; "
            f"with --duration {args.duration:g} most findings cannot fire yet "
            f"(use --duration {need} or more)\n"
        )
    from ..assemble import assemble
    from ..cli import setup_logging

    setup_logging(args.log_level)
    try:
        assembly = assemble(args, th)
    except ValueError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    if not assembly.facts.supported:
        sys.stderr.write(f"warning: compute not supported here: {assembly.facts.reason}\n")
    sampler = assembly.sampler
    end = time.monotonic() + args.duration
    passes = 0
    while True:
        sampler.run_once()
        passes += 1
        left = end - time.monotonic()
        if left <= 0:
            break
        if not args.quiet:
            sys.stderr.write(f"\rsampling... {left:4.0f} s left ({passes} passes) ")
            sys.stderr.flush()
        time.sleep(min(args.sample_interval, left))
    if not args.quiet:
        sys.stderr.write("\n")
    assembly.close()
    now = time.time()
    window: Window = sampler.window()
    findings = evaluate(window, th, now)
    doc = findings_document(findings, now, window, th)
    if args.json:
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(
            f"{len(window.containers)} containers sampled, probe "
            f"{'loaded' if window.probe_loaded else 'not loaded (no blame)'}\n"
        )
        render_table(doc, sys.stdout, evidence=True)
    return 0


# -- registration -----------------------------------------------------------------------


def _duration(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return v


def register_subcommands(subparsers: Any) -> None:
    """Add ``findings``, ``diagnose`` and ``rules`` to ``build_parser()``'s subparsers.
    Each sets ``handler`` (``args.handler(args) -> int``)."""
    f = subparsers.add_parser(
        "findings",
        help="show a running exporter's findings",
        description="Fetch /findings from a running exporter and print a table (or JSON).",
    )
    f.add_argument("--url", default=DEFAULT_URL, help="findings URL (default: %(default)s)")
    f.add_argument("--json", action="store_true", help="print the raw JSON document")
    f.add_argument("--evidence", action="store_true", help="print each finding's numbers")
    f.add_argument("--timeout", type=_duration, default=5.0, help="seconds (default: 5)")
    f.set_defaults(handler=cmd_findings)

    d = subparsers.add_parser(
        "diagnose",
        help="sample this host for a while and print findings with evidence",
        description=(
            "Sample every cgroup on this host for --duration seconds, then evaluate the "
            "findings over the complete minutes seen and print them with their evidence."
        ),
    )
    d.add_argument(
        "--duration",
        type=_duration,
        default=180.0,
        metavar="SECONDS",
        help="how long to sample (default: %(default)s; findings need whole minutes)",
    )
    d.add_argument("--config", default=None, metavar="FILE", help="thresholds YAML override")
    d.add_argument("--json", action="store_true", help="print the /findings JSON document")
    d.add_argument("--quiet", action="store_true", help="no progress on stderr")
    from ..cli import add_node_arguments

    add_node_arguments(d)
    d.set_defaults(handler=cmd_diagnose)

    from ..rules.cli import register as register_rules

    register_rules(subparsers)
