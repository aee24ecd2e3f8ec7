"""``contention-exporter demo <lab>``: run a contention lab and show its finding.

The labs (``labs/`` in the source checkout) are not part of the installed package:
the command imports them from the checkout this package runs from, and says plainly
that it needs one when installed from a wheel.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from types import ModuleType

from .common import add_config_argument, warn_renamed

DESCRIPTION = (
    "Run one contention lab (cgroups and bounded workloads it creates and removes) with "
    "an exporter sampling every second, and print the findings it produces with their "
    "evidence. Real-kernel labs need root; replayed labs do not. The labs live in the "
    "source checkout (labs/), not in the installed package. See docs/labs.md."
)
NEEDS_CHECKOUT = (
    "error: the demo needs a source checkout of contention-exporter: the labs (labs/) "
    "are not part of the installed package. Clone the repository, run ./scripts/run.sh "
    "once, then .venv/bin/contention-exporter demo --list\n"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("lab", nargs="?", help="lab name (see --list)")
    p.add_argument("--list", action="store_true", help="list the labs and exit")
    p.add_argument(
        "--seconds",
        type=float,
        default=180.0,
        metavar="S",
        help="give up waiting for the findings after this long (default: %(default)s)",
    )
    add_config_argument(
        p, "threshold config (default: packaged thresholds with the labs' short window)"
    )
    p.add_argument(
        "--no-probe",
        dest="probe",
        action="store_false",
        help="run the exporter without the scheduler probe (no culprits)",
    )


def checkout_root() -> Path:
    """Where a source checkout would be, if this package runs from one."""
    return Path(__file__).resolve().parents[2]


def import_labs_demo(root: Path | None = None) -> ModuleType | None:
    """``labs.demo`` from the checkout, or None when there is none (installed wheel)."""
    root = checkout_root() if root is None else root
    if not (root / "labs" / "demo.py").is_file():
        return None
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return importlib.import_module("labs.demo")


def cmd_demo(args: argparse.Namespace) -> int:
    warn_renamed(args)
    demo = import_labs_demo()
    if demo is None:
        sys.stderr.write(NEEDS_CHECKOUT)
        return 2
    if args.list or not args.lab:
        demo.list_labs(sys.stdout)
        return 0 if args.list else 2
    if args.lab not in demo.lab_names():
        sys.stderr.write(f"error: no lab {args.lab!r} (see `contention-exporter demo --list`)\n")
        return 2
    return int(demo.run_demo(args.lab, args.seconds, args.config, args.probe))
