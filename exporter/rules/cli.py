"""``contention-exporter rules generate [--check] [--promtool]``.

Writes, from the threshold config:

* ``rules/contention.rules.yaml`` — recording rules and alerts (plain Prometheus);
* ``deploy/prometheusrule.yaml`` — the same groups as a prometheus-operator
  ``PrometheusRule``.

``--check`` writes nothing and fails when a file differs from what would be written
(what CI runs); ``--promtool`` runs ``promtool check rules`` on the rule file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..findings.thresholds import Thresholds, ThresholdsError, load_thresholds
from ..generated_files import sync
from .generator import (
    DEFAULT_INTERVAL,
    check_interval,
    dump_yaml,
    render_prometheus_rule,
    render_rule_file,
)
from .promtool import PromtoolMissing, check_rules

RULE_FILE = Path("rules/contention.rules.yaml")
MANIFEST = Path("deploy/prometheusrule.yaml")


def render_all(th: Thresholds, interval: str = DEFAULT_INTERVAL) -> dict[Path, str]:
    return {
        RULE_FILE: render_rule_file(th, interval),
        MANIFEST: render_prometheus_rule(th, interval),
    }


def cmd_rules_generate(args: argparse.Namespace) -> int:
    try:
        th = load_thresholds(args.config)
    except ThresholdsError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    root = Path(args.out_dir)
    files = render_all(th, args.interval)
    rc = sync(root, files, verify=args.check, command="contention-exporter rules generate")
    if rc != 0 or not args.promtool:
        return rc
    try:
        res = check_rules(root / RULE_FILE)
    except PromtoolMissing as e:
        sys.stderr.write(f"error: {e}\n")
        return 1
    sys.stdout.write(res.output)
    return 0 if res.ok else 1


def cmd_rules_print(args: argparse.Namespace) -> int:
    try:
        th = load_thresholds(args.config)
    except ThresholdsError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    if args.what == "config":
        sys.stdout.write(dump_yaml(th.to_yaml_dict()))
    else:
        sys.stdout.write(render_rule_file(th, args.interval))
    return 0


def _interval(text: str) -> str:
    try:
        return check_interval(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


_INTERVAL_ARGS = ("--interval",)
_INTERVAL_KW = {
    "type": _interval,
    "default": DEFAULT_INTERVAL,
    "metavar": "DURATION",
    "help": "how often Prometheus evaluates the rule group (default: %(default)s; the "
    "committed files use the default)",
}


def register(subparsers: Any) -> None:
    r = subparsers.add_parser(
        "rules",
        help="generate the Prometheus rule pack from the threshold config",
        description="Generate Prometheus recording rules and alerts from the thresholds.",
    )
    sub = r.add_subparsers(dest="rules_command", metavar="command")
    g = sub.add_parser(
        "generate",
        help="write rules/contention.rules.yaml and deploy/prometheusrule.yaml",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g.add_argument("--config", default=None, metavar="FILE", help="thresholds YAML override")
    g.add_argument("--out-dir", default=".", metavar="DIR", help="repository root (default: .)")
    g.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if any file is stale"
    )
    g.add_argument(
        "--promtool", action="store_true", help="run promtool check rules on the rule file"
    )
    g.add_argument(*_INTERVAL_ARGS, **_INTERVAL_KW)
    g.set_defaults(handler=cmd_rules_generate)
    p = sub.add_parser("print", help="print the effective config or rule file to stdout")
    p.add_argument("what", choices=["config", "rules"])
    p.add_argument("--config", default=None, metavar="FILE", help="thresholds YAML override")
    p.add_argument(*_INTERVAL_ARGS, **_INTERVAL_KW)
    p.set_defaults(handler=cmd_rules_print)

    def _help(_args: argparse.Namespace) -> int:
        r.print_help()
        return 2

    r.set_defaults(handler=_help)
