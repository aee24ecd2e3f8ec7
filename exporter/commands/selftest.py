"""``contention-exporter selftest``: prove the exporter on this node (docs/troubleshooting.md).

Without ``--selftest.url`` it runs an exporter agent of its own (sampling every second)
and the scene of :mod:`exporter.selftest.run`; with it, it asks that running exporter
(``POST /selftest``) to run the scene under its own sampler, probe and privileges, and
prints what the exporter reports. Exit codes: :mod:`exporter.selftest.hosting`.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from types import FrameType
from typing import TYPE_CHECKING, Any

from ..agent import Agent
from ..selftest import DEFAULT_SECONDS
from ..selftest.hosting import EXIT_EXPORTER, EXIT_INTERRUPTED, EXIT_USAGE, CannotHost
from .common import (
    DEFAULT_PORT,
    add_node_arguments,
    agent_config,
    positive_float,
    thresholds_or_exit,
)
from .logs import setup_logging

# The self-test itself (its run, load, report) is imported where it runs: the exporter
# builds every command's parser at start, and needs it only with --selftest.enabled.
if TYPE_CHECKING:
    from ..selftest.report import Report
    from ..selftest.run import Selftest

DESCRIPTION = (
    "Make a victim and a bully in cgroups of this self-test's own on this node (bounded "
    "in time and CPU, removed afterwards, even when killed), let the exporter's sampler, "
    "window and scheduler probe observe them, and report whether the probe loaded, "
    "whether the findings came out right (noisy-neighbor naming the bully; cpu-throttled "
    "for a quota-limited container where the node allows a quota), the blame share "
    "against the kernel's own CPU accounting, the time to the first finding and the "
    "probe's cost per context switch. Exit 0 pass, 1 fail, 3 no permission, 4 cgroup v1 "
    "only, 5 read-only cgroupfs, 6 no PSI, 7 exporter unreachable. See "
    "docs/troubleshooting.md."
)


def cgroup_prefix(text: str) -> str:
    """An argparse type: the self-test's cgroup name prefix (tests: contention-test-)."""
    if not text.startswith("contention-") or "/" in text or not text.isprintable():
        raise argparse.ArgumentTypeError("must start with contention- and hold no '/'")
    return text


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("selftest")
    g.add_argument("--json", action="store_true", help="print the report as JSON")
    g.add_argument(
        "--selftest.url",
        dest="selftest_url",
        default=None,
        metavar="URL",
        help=f"ask the exporter at URL (http://NODE:{DEFAULT_PORT}) to run the self-test itself, "
        "under its own sampler, probe and privileges, instead of a copy in this process",
    )
    g.add_argument(
        "--selftest.timeout",
        dest="selftest_seconds",
        type=positive_float,
        default=DEFAULT_SECONDS,
        metavar="SECONDS",
        help="give up on a finding that has not come after this long (default: %(default)s)",
    )
    g.add_argument(
        "--selftest.cgroup-prefix",
        dest="selftest_prefix",
        type=cgroup_prefix,
        default="contention-selftest-",
        help=argparse.SUPPRESS,  # the test suite's cgroups are contention-test-*
    )
    add_node_arguments(p)
    p.set_defaults(sample_interval=1.0)


class Interrupted(BaseException):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(signum)


def _emit(report: Report, as_json: bool) -> int:
    from ..selftest.report import summary

    if as_json:
        json.dump(report.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(summary(report))
    return report.exit_code


def _fail(code: int, message: str, as_json: bool) -> int:
    if as_json:
        json.dump({"passed": False, "exit_code": code, "error": message}, sys.stdout)
        sys.stdout.write("\n")
    sys.stderr.write(f"selftest: cannot run here: {message}\n")
    return code


def cmd_selftest(args: argparse.Namespace) -> int:
    if args.selftest_url:
        return _remote(args)
    from ..selftest.load import LoadError
    from ..selftest.run import Options, Selftest, run_with

    setup_logging(args.log_level, args.log_format)
    th = thresholds_or_exit(args.config)
    if th is None:
        return EXIT_USAGE
    old = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    agent: Agent | None = None
    try:
        agent = Agent(agent_config(args), th)
        options = Options(
            args.selftest_seconds, args.selftest_prefix, args.procfs, sampler=agent.sampler
        )
        test = Selftest(agent.facts, th, options)
        report = run_with(test, lambda on_pass: _drive(agent, test, on_pass))
    except CannotHost as e:
        return _fail(e.code, str(e), args.json)
    except (ValueError, LoadError) as e:
        return _fail(EXIT_USAGE if isinstance(e, ValueError) else 1, str(e), args.json)
    except Interrupted as e:
        sys.stderr.write(f"selftest: stopped by signal {e.signum}; its cgroups are removed\n")
        return EXIT_INTERRUPTED
    finally:
        if agent is not None:
            agent.close()
        for s, h in old.items():
            signal.signal(s, h)
    return _emit(report, args.json)


def _drive(agent: Agent, test: Selftest, on_pass: Any) -> None:
    stop = threading.Event()

    def each(snap: Any) -> None:
        pub = agent.publish(snap)
        on_pass(snap, pub.result.window if pub.result is not None else None)
        if test.done.is_set():
            stop.set()

    agent.sampler.run(each, stop=stop, until=time.monotonic() + test.options.seconds + 5)


def _remote(args: argparse.Namespace) -> int:
    """Ask a running exporter to run it; poll until it has a report."""
    from ..selftest.report import Report

    base = args.selftest_url.rstrip("/")
    try:
        started = _http(f"{base}/selftest?timeout={args.selftest_seconds:g}", b"")
        if "error" in started:
            return _fail(int(started.get("exit_code", EXIT_EXPORTER)), started["error"], args.json)
        deadline = time.monotonic() + args.selftest_seconds + 60
        while time.monotonic() < deadline:
            doc = _http(f"{base}/selftest", None)
            if doc.get("state") == "done":
                result = doc["result"]
                if "error" in result:
                    return _fail(int(result["exit_code"]), result["error"], args.json)
                return _emit(Report.from_dict(result), args.json)
            time.sleep(2)
    except (OSError, ValueError) as e:
        return _fail(EXIT_EXPORTER, f"the exporter at {base} did not answer: {e}", args.json)
    return _fail(EXIT_EXPORTER, f"the exporter at {base} gave no report in time", args.json)


def _http(url: str, body: bytes | None) -> dict[str, Any]:
    req = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            doc: dict[str, Any] = json.load(r)
    except urllib.error.HTTPError as e:
        doc = json.loads(e.read() or b"{}")
        if not doc:
            raise
    return doc
