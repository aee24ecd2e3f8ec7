"""``contention-exporter dashboards generate [--check]``.

Builds the Grafana dashboards from the threshold config (so their threshold lines match
the alerts) and writes ``dashboards/*.json`` and ``deploy/dashboards/`` (ConfigMaps for
the Grafana sidecar plus their kustomization). ``--check`` writes nothing and exits 1
when a file differs from what would be written (what CI runs).

Needs the ``dashboards`` extra (``pip install 'contention-exporter[dashboards]'``),
imported only when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..findings.thresholds import ThresholdsError, load_thresholds
from ..generated_files import sync


def cmd_generate(args: argparse.Namespace) -> int:
    try:
        from .render import render_all
    except ImportError as e:  # pragma: no cover - depends on the installed extras
        sys.stderr.write(
            f"error: the dashboard generator needs grafana-foundation-sdk ({e}); "
            "install it with: pip install 'contention-exporter[dashboards]'\n"
        )
        return 2
    try:
        th = load_thresholds(args.config)
    except ThresholdsError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    root = Path(args.out_dir)
    files = render_all(th)
    return sync(root, files, verify=args.check, command="contention-exporter dashboards generate")


def register_subcommands(subparsers: Any) -> None:
    """Add ``dashboards generate`` to the CLI's subparsers (``add_subparsers()`` result).

    Sets ``handler`` on the parsed namespace, like the other command groups.
    """
    top = subparsers.add_parser(
        "dashboards",
        help="generate the Grafana dashboards from the threshold config",
        description="Generate the Grafana dashboards (JSON and sidecar ConfigMaps).",
    )
    sub = top.add_subparsers(dest="dashboards_command", metavar="command")
    g = sub.add_parser(
        "generate",
        help="write dashboards/*.json and deploy/dashboards/",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g.add_argument("--config", default=None, metavar="FILE", help="thresholds YAML override")
    g.add_argument("--out-dir", default=".", metavar="DIR", help="repository root (default: .)")
    g.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if any file is stale"
    )
    g.set_defaults(handler=cmd_generate)

    def _help(_args: argparse.Namespace) -> int:
        top.print_help()
        return 2

    top.set_defaults(handler=_help)
