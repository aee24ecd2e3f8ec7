"""``contention-exporter dashboards generate``: the Grafana dashboards from the threshold
config (exporter.dashboards), so their threshold lines match the alerts.

Needs the ``dashboards`` extra (``pip install 'contention-exporter[dashboards]'``),
imported only when the command runs: the exporter itself never needs it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .common import add_generate_arguments, thresholds_or_exit, warn_renamed
from .generated_files import sync

COMMAND = "contention-exporter dashboards generate"
DESCRIPTION = "Generate the Grafana dashboards (JSON and sidecar ConfigMaps)."
GENERATE_DESCRIPTION = (
    "Build the Grafana dashboards from the threshold config and write dashboards/*.json "
    "and deploy/dashboards/ (ConfigMaps for the Grafana sidecar and their kustomization). "
    "With --check, write nothing and exit 1 when a file differs from what would be "
    "written (what CI runs). Needs the dashboards extra: "
    "pip install 'contention-exporter[dashboards]'."
)


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help(sys.stderr)
    return 2


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="dashboards_command", metavar="command")
    p.set_defaults(handler=lambda _args: _usage(p))
    g = sub.add_parser(
        "generate",
        help="write dashboards/*.json and deploy/dashboards/",
        description=GENERATE_DESCRIPTION,
    )
    add_generate_arguments(g)
    g.set_defaults(handler=cmd_generate)


def cmd_generate(args: argparse.Namespace) -> int:
    warn_renamed(args)
    try:
        from ..dashboards.render import render_all
    except ModuleNotFoundError as e:  # pragma: no cover - depends on the installed extras
        if not (e.name or "").startswith("grafana_foundation_sdk"):
            raise
        sys.stderr.write(
            f"error: the dashboard generator needs grafana-foundation-sdk ({e}); "
            "install it with: pip install 'contention-exporter[dashboards]'\n"
        )
        return 2
    th = thresholds_or_exit(args.config)
    if th is None:
        return 2
    return sync(Path(args.out_dir), render_all(th), verify=args.check, command=COMMAND)
