"""Command line: ``contention-exporter [run] ...`` and its subcommands."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from . import __version__, kube

log = logging.getLogger("contention-exporter")

DEFAULT_PORT = 10366  # outside Prometheus's allocated 9100-9999 range; see README
SUBCOMMANDS = ("run", "findings", "diagnose", "rules", "dashboards", "demo")


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return v


def add_node_arguments(p: argparse.ArgumentParser) -> None:
    """Flags shared by ``run`` and ``diagnose``: where to read, how often, identity,
    thresholds and the scheduler probe."""
    from .assemble import add_probe_arguments

    g = p.add_argument_group("node")
    g.add_argument(
        "--path.sysfs",
        dest="sysfs",
        default="/sys",
        metavar="DIR",
        help="sysfs mount point (default: %(default)s)",
    )
    g.add_argument(
        "--path.procfs",
        dest="procfs",
        default="/proc",
        metavar="DIR",
        help="procfs mount point (default: %(default)s)",
    )
    g.add_argument(
        "--sample-interval",
        type=_positive_float,
        default=5.0,
        metavar="SECONDS",
        help="seconds between sampler passes over every cgroup (default: %(default)s)",
    )
    g.add_argument(
        "--metadata-file",
        metavar="YAML",
        help="requests, limits and names for cgroups on a host without Kubernetes "
        "(see docs/host-mode.md); re-read when it changes",
    )
    if not any(a.dest == "config" for a in p._actions):
        g.add_argument(
            "--config",
            default=None,
            metavar="YAML",
            help="threshold overrides (see docs/configuration.md); defaults ship in the package",
        )
    g.add_argument(
        "--log.level",
        dest="log_level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="(default: %(default)s)",
    )
    add_probe_arguments(p)
    kube.add_arguments(p)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="contention-exporter",
        description=(
            "Prometheus exporter that tells whether each container on this node is starved "
            "of CPU or memory, and by whom. Without a subcommand it runs the exporter."
        ),
        epilog="Run 'contention-exporter <command> --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="command")
    run = sub.add_parser(
        "run",
        help="run the exporter (the default)",
        description="Sample every cgroup on this host and serve /metrics, /findings, /healthz.",
    )
    run.add_argument(
        "--web.listen-address",
        dest="listen",
        default=f":{DEFAULT_PORT}",
        metavar="ADDR",
        help="address to serve on, host:port or :port (default: %(default)s)",
    )
    add_node_arguments(run)

    from .dashboards import register_subcommands as register_dashboards
    from .findings import register_subcommands as register_findings

    register_findings(sub)  # findings, diagnose, rules
    register_dashboards(sub)
    _register_demo(sub)
    return parser


def _register_demo(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "demo",
        help="run a contention lab on this host and show the finding it produces",
        description=(
            "Run one contention lab (cgroups and bounded workloads it creates and removes) "
            "with an exporter sampling every second, and print the findings it produces "
            "with their evidence. The labs live in the source checkout (labs/), not in "
            "the installed package: run it from a checkout. See docs/labs.md."
        ),
    )
    p.add_argument("lab", nargs="?", help="lab name (see --list)")
    p.add_argument("--list", action="store_true", help="list the labs and exit")
    p.add_argument(
        "--seconds",
        type=float,
        default=180.0,
        metavar="S",
        help="give up waiting for the findings after this long (default: %(default)s)",
    )
    p.add_argument(
        "--config",
        default=None,
        metavar="YAML",
        help="threshold config (default: packaged thresholds with the labs' short window)",
    )
    p.add_argument(
        "--no-probe",
        dest="probe",
        action="store_false",
        help="run the exporter without the scheduler probe (no culprits)",
    )
    p.set_defaults(handler=_cmd_demo)


def _import_labs_demo() -> Any:
    """``labs.demo`` from the source checkout this package runs from, or None when the
    package is installed from a wheel (the labs are not shipped)."""
    import importlib
    from pathlib import Path

    checkout = Path(__file__).resolve().parents[1]
    if not (checkout / "labs" / "__init__.py").is_file():
        return None
    if str(checkout) not in sys.path:
        sys.path.insert(0, str(checkout))
    return importlib.import_module("labs.demo")


def _cmd_demo(args: argparse.Namespace) -> int:
    demo = _import_labs_demo()
    if demo is None:
        sys.stderr.write(
            "error: the demo needs a source checkout of contention-exporter: the labs "
            "(labs/) are not part of the installed package. Clone the repository and run "
            "./scripts/run.sh once, then .venv/bin/contention-exporter demo --list\n"
        )
        return 2
    if args.list or not args.lab:
        demo.list_labs(sys.stdout)
        return 0 if args.list else 2
    if args.lab not in demo.lab_names():
        sys.stderr.write(f"error: no lab {args.lab!r} (see `contention-exporter demo --list`)\n")
        return 2
    return int(demo.run_demo(args.lab, args.seconds, args.config, args.probe))


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s level=%(levelname)s logger=%(name)s msg=%(message)s",
    )


def cmd_run(args: argparse.Namespace) -> int:
    from prometheus_client import CollectorRegistry
    from prometheus_client.gc_collector import GCCollector
    from prometheus_client.process_collector import ProcessCollector

    from .assemble import assemble
    from .collector import ContentionCollector
    from .findings import ThresholdsError, load_thresholds
    from .server import App, Server

    setup_logging(args.log_level)
    try:
        thresholds = load_thresholds(args.config)
    except ThresholdsError as e:
        log.error("%s", e)
        return 2
    try:
        a = assemble(args, thresholds)
    except ValueError as e:
        log.error("%s", e)
        return 2
    f = a.facts
    log.info(
        "node: cgroup mode=%s supported=%s%s psi=%s btf=%s",
        f.mode.value,
        f.supported,
        f" ({f.reason})" if f.reason else "",
        f.psi,
        f.btf,
    )
    registry = CollectorRegistry()
    registry.register(ContentionCollector(a.sampler, extra=[a.extra_families]))
    # The exporter's own CPU and RSS, so its overhead is visible in the same scrape.
    ProcessCollector(namespace="contention_exporter", registry=registry, proc=args.procfs)
    GCCollector(registry=registry)
    if a.kube is not None:
        from .kube.metrics import KubeMetadataCollector

        registry.register(KubeMetadataCollector(a.kube))
        if not a.kube.wait_synced(5):  # names in the first scrape, if the API answers
            log.warning("Kubernetes API not synced yet: naming cgroups by path until it is")

    def status() -> dict[str, str]:
        out = {}
        if a.probe is not None:
            st = a.probe.status
            out["scheduler probe"] = (
                f"loaded ({st.attribution})" if st.loaded else f"off: {st.reason}: {st.detail}"
            )
        out["identity"] = "kubernetes" if a.kube is not None else "host (cgroup paths)"
        return out

    try:
        server = Server(App(a.sampler, registry, a.findings_doc, status), args.listen)
    except (OSError, ValueError) as e:
        log.error("cannot listen on %s: %s", args.listen, e)
        a.close()
        return 1
    a.sampler.run_once()  # the first scrape already has data
    a.sampler.start()
    server.start()
    log.info("serving on %s (metrics at /metrics)", args.listen)

    stop = threading.Event()

    def _handle(signum: int, _frame: object) -> None:
        log.info("received signal %d, stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, _handle)
    signal.signal(signal.SIGINT, _handle)
    stop.wait()
    server.stop()
    a.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # "run" is the default: flags without a subcommand are run's flags.
    if not argv or (argv[0] not in SUBCOMMANDS and argv[0] not in ("-h", "--help", "--version")):
        argv.insert(0, "run")
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "run":
        return cmd_run(args)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    return int(handler(args))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
