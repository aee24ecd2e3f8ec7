"""``contention-exporter rules generate [--check] [--verify]``.

Writes, from the threshold config:

* ``rules/contention.rules.yaml`` — recording rules and alerts (plain Prometheus);
* ``rules/tests/contention.rules.test.yaml`` — promtool unit tests rendered from the
  scenarios marked ``unit: true`` (full labels and annotations);
* ``deploy/prometheusrule.yaml`` — the same groups as a prometheus-operator
  ``PrometheusRule``.

``--check`` runs ``promtool check rules`` and ``promtool test rules`` on the output;
``--verify`` writes nothing and fails when a file differs from what would be written
(what CI runs).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from ..findings.thresholds import Thresholds, ThresholdsError, load_thresholds
from ..generated_files import sync
from .generator import (
    DEFAULT_INTERVAL,
    HEADER,
    check_interval,
    dump_yaml,
    render_prometheus_rule,
    render_rule_file,
)
from .promtool import PromtoolMissing, check_rules, render_tests, unit_test_rules
from .scenarios import ScenarioError, load_corpus

RULE_FILE = Path("rules/contention.rules.yaml")
TEST_FILE = Path("rules/tests/contention.rules.test.yaml")
MANIFEST = Path("deploy/prometheusrule.yaml")
SCENARIOS = Path("tests/scenarios")


def render_all(
    th: Thresholds, scenarios_dir: Path | None, interval: str = DEFAULT_INTERVAL
) -> dict[Path, str]:
    out = {
        RULE_FILE: render_rule_file(th, interval),
        MANIFEST: render_prometheus_rule(th, interval),
    }
    if scenarios_dir is not None and scenarios_dir.is_dir():
        unit = [s for s in load_corpus(scenarios_dir) if s.unit]
        doc = render_tests(unit, th, "../contention.rules.yaml", with_annotations=True)
        out[TEST_FILE] = HEADER + _dump_tests(doc)
    return out


def _dump_tests(doc: dict[str, Any]) -> str:
    # Long input_series lines stay on one line: easier to read side by side.
    return str(yaml.safe_dump(doc, sort_keys=False, width=4096, allow_unicode=True))


def cmd_rules_generate(args: argparse.Namespace) -> int:
    try:
        th = load_thresholds(args.config)
    except ThresholdsError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    root = Path(args.out_dir)
    scen = Path(args.scenarios) if args.scenarios else root / SCENARIOS
    try:
        files = render_all(th, scen, args.interval)
    except ScenarioError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    rc = sync(root, files, verify=args.verify, command="contention-exporter rules generate")
    if args.verify:
        return rc
    if args.check:
        try:
            res = check_rules(root / RULE_FILE)
            sys.stdout.write(res.output)
            if not res.ok:
                return 1
            if TEST_FILE in files:
                res = unit_test_rules(root / TEST_FILE)
                sys.stdout.write(res.output)
                if not res.ok:
                    return 1
        except PromtoolMissing as e:
            sys.stderr.write(f"error: {e}\n")
            return 1
    return 0


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
        help="write rules/, rules/tests/ and deploy/prometheusrule.yaml",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g.add_argument("--config", default=None, metavar="FILE", help="thresholds YAML override")
    g.add_argument("--out-dir", default=".", metavar="DIR", help="repository root (default: .)")
    g.add_argument(
        "--scenarios",
        default=None,
        metavar="DIR",
        help="scenario corpus for the promtool tests (default: <out-dir>/tests/scenarios)",
    )
    g.add_argument("--check", action="store_true", help="run promtool check/test on the output")
    g.add_argument(
        "--verify", action="store_true", help="write nothing; exit 1 if any file is stale"
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
