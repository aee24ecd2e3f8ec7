"""Command line: ``contention-exporter [run] ...`` and its subcommands.

The top layer: every subcommand, argument parsing, logging setup, and the typed
settings built from arguments. Nothing below imports from here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NamedTuple

from .. import __version__
from ..selftest.hosting import EXIT_INTERRUPTED
from . import dashboards, demo, diagnose, findings, rules, run, selftest


class Command(NamedTuple):
    name: str
    help: str
    description: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    handler: Callable[[argparse.Namespace], int] | None  # None: subcommands set it


COMMANDS = (
    Command(
        "run", "run the exporter (the default)", run.DESCRIPTION, run.add_arguments, run.cmd_run
    ),
    Command(
        "findings",
        "show a running exporter's findings",
        findings.DESCRIPTION,
        findings.add_arguments,
        findings.cmd_findings,
    ),
    Command(
        "diagnose",
        "sample this host for a while and print findings with evidence",
        diagnose.DESCRIPTION,
        diagnose.add_arguments,
        diagnose.cmd_diagnose,
    ),
    Command(
        "rules",
        "generate the Prometheus rule pack from the threshold config",
        rules.DESCRIPTION,
        rules.add_arguments,
        None,
    ),
    Command(
        "dashboards",
        "generate the Grafana dashboards from the threshold config",
        dashboards.DESCRIPTION,
        dashboards.add_arguments,
        None,
    ),
    Command(
        "demo",
        "run a contention lab on this host and show the finding it produces",
        demo.DESCRIPTION,
        demo.add_arguments,
        demo.cmd_demo,
    ),
    Command(
        "selftest",
        "prove the exporter on this node: a victim, a bully, the finding and its numbers",
        selftest.DESCRIPTION,
        selftest.add_arguments,
        selftest.cmd_selftest,
    ),
)


def build_parser() -> argparse.ArgumentParser:
    """The top level takes ``run``'s flags too: without a command it runs the exporter,
    and ``--help`` shows the commands and the exporter's flags together."""
    parser = argparse.ArgumentParser(
        prog="contention-exporter",
        usage="%(prog)s [-h] [--version] [command] [options]",
        description=(
            "Prometheus exporter that tells whether each container on this node is starved "
            "of CPU or memory, and by whom. Without a command it runs the exporter with "
            "the options below (the same as 'contention-exporter run')."
        ),
        epilog="Run 'contention-exporter <command> --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    run.add_arguments(parser)
    sub = parser.add_subparsers(dest="command", metavar="command", title="commands")
    for c in COMMANDS:
        p = sub.add_parser(c.name, help=c.help, description=c.description)
        c.add_arguments(p)
        if c.handler is not None:
            p.set_defaults(handler=c.handler)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        if args.command is None:
            return run.cmd_run(args)
        return int(args.handler(args))
    except KeyboardInterrupt:
        # Ctrl-C before a command takes SIGINT over (loading the probe takes seconds):
        # what it had set up was undone on the way out; a traceback would say nothing.
        print("contention-exporter: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
