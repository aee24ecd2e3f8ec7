"""``contention-exporter [run]``: sample this host and serve /metrics, /findings, /healthz."""

from __future__ import annotations

import argparse
import logging
import signal
import threading

from ..agent import Agent
from ..server import App, Server
from .common import (
    DEFAULT_PORT,
    add_node_arguments,
    add_render_argument,
    agent_config,
    thresholds_or_exit,
)
from .logs import setup_logging

log = logging.getLogger("contention-exporter")

DESCRIPTION = "Sample every cgroup on this host and serve /metrics, /findings, /healthz."


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("web")
    g.add_argument(
        "--web.listen-address",
        dest="listen",
        default=f":{DEFAULT_PORT}",
        metavar="ADDR",
        help="address to serve on, host:port or :port (default: %(default)s)",
    )
    add_render_argument(g)
    add_node_arguments(p)


def cmd_run(args: argparse.Namespace) -> int:
    setup_logging(args.log_level, args.log_format)
    th = thresholds_or_exit(args.config)
    if th is None:
        return 2
    try:
        agent = Agent(agent_config(args, render=args.render), th)
    except ValueError as e:
        log.error("%s", e)
        return 2
    f = agent.facts
    log.info(
        "node: cgroup mode=%s supported=%s%s psi=%s btf=%s",
        f.mode.value,
        f.supported,
        f" ({f.reason})" if f.reason else "",
        f.psi,
        f.btf,
    )
    if agent.kube is not None and not agent.kube.wait_synced(5):
        # Names in the first scrape, if the API answers.
        log.warning("Kubernetes API not synced yet: naming cgroups by path until it is")
    app = App(agent.exposition, agent.facts, agent.config.sample_interval, agent.status)
    try:
        server = Server(app, args.listen)
    except (OSError, ValueError) as e:
        log.error("cannot listen on %s: %s", args.listen, e)
        agent.close()
        return 1
    stop = threading.Event()

    def _handle(signum: int, _frame: object) -> None:
        log.info("received signal %d, stopping", signum)
        stop.set()

    # Before serving: a signal that arrives once the port answers is always handled.
    signal.signal(signal.SIGTERM, _handle)
    signal.signal(signal.SIGINT, _handle)
    agent.run_pass()  # the first scrape already has data
    agent.start()
    server.start()
    host = args.listen.rpartition(":")[0] or ""
    log.info("serving on %s:%d (metrics at /metrics)", host, server.port)
    stop.wait()
    server.stop()
    agent.close()
    return 0
