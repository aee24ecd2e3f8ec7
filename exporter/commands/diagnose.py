"""``contention-exporter diagnose``: sample this host for a while, then print the findings
of the last pass with their evidence.

It runs the exporter's own loop (``Agent.run_for``: the same passes, the same
evaluation, the same published document as ``/findings``) and reads the last pass
before it closes the probe, so what it says about the probe is what that pass saw.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from ..agent import Agent
from .common import (
    add_node_arguments,
    agent_config,
    positive_float,
    thresholds_or_exit,
    warn_renamed,
)
from .findings import render_table
from .logs import setup_logging

log = logging.getLogger("contention-exporter")

DESCRIPTION = (
    "Sample every cgroup on this host for --duration seconds, then print the findings of "
    "the last pass (evaluated over the complete minutes seen) with their evidence."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--duration",
        type=positive_float,
        default=180.0,
        metavar="SECONDS",
        help="how long to sample (default: %(default)s; findings need whole minutes)",
    )
    p.add_argument("--json", action="store_true", help="print the /findings JSON document")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    add_node_arguments(p)


def probe_line(doc: dict[str, Any], status: dict[str, str]) -> str:
    """One line on the scheduler probe, as the last pass saw it."""
    probe = status.get("scheduler probe")
    if doc.get("probe_loaded"):
        return f"scheduler probe {probe or 'loaded'}: culprits can be named"
    why = probe or "not configured (compute not supported here)"
    return f"scheduler probe {why}: no blame data, no culprit can be named"


def cmd_diagnose(args: argparse.Namespace) -> int:
    th = thresholds_or_exit(args.config)
    if th is None:
        return 2
    need = (th.sustain_minutes + 1) * 60
    if args.duration < need:
        sys.stderr.write(
            f"note: findings need {th.sustain_minutes} complete minutes of samples; "
            f"with --duration {args.duration:g} most findings cannot fire yet "
            f"(use --duration {need} or more)\n"
        )
    setup_logging(args.log_level, args.log_format)
    warn_renamed(args)
    try:
        agent = Agent(agent_config(args), th)
    except ValueError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    try:
        if not agent.facts.supported:
            sys.stderr.write(f"warning: compute not supported here: {agent.facts.reason}\n")

        def progress(passes: int, left: float) -> None:
            if not args.quiet and left > 0:
                sys.stderr.write(f"\rsampling... {left:4.0f} s left ({passes} passes) ")
                sys.stderr.flush()

        passes = agent.run_for(args.duration, progress)
        if not args.quiet:
            sys.stderr.write("\n")
        # Read the last pass while everything it describes is still open.
        pub = agent.published()
        status = agent.status()
    finally:
        agent.close()
    if pub.result is None:
        sys.stderr.write("error: no sampler pass completed\n")
        return 1
    doc = pub.result.findings_document()
    if args.json:
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    sys.stdout.write(
        f"{doc.get('containers') or 0} containers sampled in {passes} passes; "
        f"{probe_line(doc, status)}\n"
    )
    render_table(doc, sys.stdout, evidence=True)
    return 0
