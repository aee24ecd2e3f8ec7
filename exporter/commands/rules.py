"""``contention-exporter rules generate|print``: the Prometheus rule pack from the
threshold config (exporter.rules)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..findings.thresholds import ThresholdsError
from ..rules import DEFAULT_INTERVAL
from .common import (
    add_config_argument,
    add_generate_arguments,
    thresholds_or_exit,
    warn_renamed,
)
from .generated_files import sync

COMMAND = "contention-exporter rules generate"
DESCRIPTION = "Generate Prometheus recording rules and alerts from the thresholds."
GENERATE_DESCRIPTION = (
    "Write rules/contention.rules.yaml (recording rules and alerts for plain Prometheus), "
    "deploy/prometheusrule.yaml (the same groups as a prometheus-operator "
    "PrometheusRule) and rules/alertmanager.inhibit.yaml (the Alertmanager inhibit rule "
    "for kube-prometheus-stack's CPUThrottlingHigh) from the threshold config. With "
    "--check, write nothing and exit 1 when a file differs from what would be written "
    "(what CI runs)."
)


# The rule pack (exporter.rules.pack and what it imports) is imported where a command
# uses it: the exporter builds every command's parser at start, and never needs it.


def _interval(text: str) -> str:
    from ..rules.pack import check_interval

    try:
        return check_interval(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _add_interval(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--interval",
        type=_interval,
        default=DEFAULT_INTERVAL,
        metavar="DURATION",
        help="how often Prometheus evaluates the rule group (default: %(default)s; the "
        "committed files use the default; it must divide 1m)",
    )


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help(sys.stderr)
    return 2


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="rules_command", metavar="command")
    p.set_defaults(handler=lambda _args: _usage(p))
    g = sub.add_parser(
        "generate",
        help="write rules/contention.rules.yaml, deploy/prometheusrule.yaml and "
        "rules/alertmanager.inhibit.yaml",
        description=GENERATE_DESCRIPTION,
    )
    add_generate_arguments(g)
    g.add_argument(
        "--promtool", action="store_true", help="run promtool check rules on the rule file"
    )
    _add_interval(g)
    g.set_defaults(handler=cmd_generate)
    pr = sub.add_parser(
        "print",
        help="print the effective config or rule file to stdout",
        description="Print the effective threshold config, or the rule file, to stdout.",
    )
    pr.add_argument("what", choices=["config", "rules"])
    add_config_argument(pr)
    _add_interval(pr)
    pr.set_defaults(handler=cmd_print)


def cmd_generate(args: argparse.Namespace) -> int:
    from ..rules.pack import RULE_FILE, render_files
    from ..rules.promtool import PromtoolMissing, check_rules

    warn_renamed(args)
    th = thresholds_or_exit(args.config)
    if th is None:
        return 2
    root = Path(args.out_dir)
    try:
        files = render_files(th, args.interval)
    except ThresholdsError as e:
        sys.stderr.write(f"error: {args.config or 'thresholds'}: {e}\n")
        return 2
    rc = sync(root, files, verify=args.check, command=COMMAND)
    if rc != 0 or not args.promtool:
        return rc
    try:
        res = check_rules(root / RULE_FILE)
    except PromtoolMissing as e:
        sys.stderr.write(f"error: {e}\n")
        return 1
    sys.stdout.write(res.output)
    return 0 if res.ok else 1


def cmd_print(args: argparse.Namespace) -> int:
    from ..rules.pack import render_rule_file
    from ..yamlout import dump_yaml

    warn_renamed(args)
    th = thresholds_or_exit(args.config)
    if th is None:
        return 2
    if args.what == "config":
        sys.stdout.write(dump_yaml(th.to_yaml_dict()))
    else:
        try:
            text = render_rule_file(th, args.interval)
        except ThresholdsError as e:
            sys.stderr.write(f"error: {args.config or 'thresholds'}: {e}\n")
            return 2
        sys.stdout.write(text)
    return 0
