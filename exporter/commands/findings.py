"""``contention-exporter findings``: ask a running exporter for its findings, and the
table both ``findings`` and ``diagnose`` print."""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from typing import Any, TextIO

from .common import positive_float

DEFAULT_URL = "http://127.0.0.1:10366/findings"
DESCRIPTION = "Fetch /findings from a running exporter and print a table (or JSON)."
DEMO_HINT = (
    "to see a finding happen on purpose, run a contention lab from a source checkout: "
    "contention-exporter demo --list (docs/labs.md)"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default=DEFAULT_URL, help="findings URL (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print the raw JSON document")
    p.add_argument("--evidence", action="store_true", help="print each finding's numbers")
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=5.0,
        metavar="SECONDS",
        help="(default: %(default)s)",
    )


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
        if doc.get("containers") == 0:
            out.write(f"no containers tracked on this host, so no findings; {DEMO_HINT}\n")
        else:
            out.write(f"no findings ({DEMO_HINT})\n")
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
        why = (f.get("suggestion") or {}).get("reason")
        if why:
            out.write(f"  (no suggested value: {why})\n")
        if evidence:
            for k, v in (f.get("evidence") or {}).items():
                out.write(f"    {k}: {json.dumps(v)}\n")


def cmd_findings(args: argparse.Namespace) -> int:
    try:
        with urllib.request.urlopen(args.url, timeout=args.timeout) as resp:
            doc = json.load(resp)
    except urllib.error.HTTPError as e:
        sys.stderr.write(f"error: {args.url}: HTTP {e.code} {e.reason}\n")
        return 1
    except (urllib.error.URLError, OSError) as e:
        reason = e.reason if isinstance(e, urllib.error.URLError) else e
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
