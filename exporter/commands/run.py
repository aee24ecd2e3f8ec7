"""``contention-exporter [run]``: sample this host and serve /metrics, /findings, /healthz."""

from __future__ import annotations

import argparse
import ctypes
import gc
import logging
import os
import resource
import signal
import threading

from ..agent import Agent
from ..selftest.cgroups import PREFIX
from ..server import METRICS_PATH, App, Server, check_metrics_path
from ..web.config import WebConfigError, WebConfigSource
from .common import (
    DEFAULT_PORT,
    add_collector_arguments,
    add_node_arguments,
    add_render_argument,
    agent_config,
    thresholds_or_exit,
    warn_renamed,
)
from .logs import setup_logging
from .selftest import cgroup_prefix

log = logging.getLogger("contention-exporter")

DESCRIPTION = "Sample every cgroup on this host and serve /metrics, /findings, /healthz."


def telemetry_path(text: str) -> str:
    """An argparse type: a path /metrics can be served at."""
    try:
        return check_metrics_path(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("web")
    g.add_argument(
        "--web.listen-address",
        dest="listen",
        action="append",
        default=None,
        metavar="ADDR",
        help=f"address to serve on; repeat for several. :PORT and [::]:PORT are every "
        f"address, IPv4 and IPv6 (IPv4 only where the kernel has no IPv6); "
        f"0.0.0.0:PORT is IPv4 only, [::1]:PORT an IPv6 address, HOST:PORT every "
        f"address HOST resolves to (default: :{DEFAULT_PORT})",
    )
    g.add_argument(
        "--web.config.file",
        dest="web_config",
        default=None,
        metavar="YAML",
        help="TLS, client certificates and basic auth, in the web configuration format of "
        "node_exporter and Prometheus (exporter-toolkit); re-read when it or a file it "
        "names changes; see docs/serving.md",
    )
    g.add_argument(
        "--web.telemetry-path",
        dest="metrics_path",
        type=telemetry_path,
        default=METRICS_PATH,
        metavar="PATH",
        help="path under which to expose metrics (default: %(default)s)",
    )
    g.add_argument(
        "--web.disable-exporter-metrics",
        dest="disable_exporter_metrics",
        action="store_true",
        help="leave out the exporter's own process_* and python_gc_* families (its CPU, "
        "memory, file descriptors and garbage collections), as node_exporter's flag does",
    )
    add_render_argument(g)
    p.add_argument_group("selftest").add_argument(
        "--selftest.enabled",
        dest="selftest_enabled",
        action="store_true",
        help="let POST /selftest run the self-test in this exporter (cgroups of its own, "
        "a few minutes of load on one CPU; docs/troubleshooting.md): off by default, "
        "anyone who reaches the port could start it",
    )
    p.add_argument(
        "--selftest.cgroup-prefix",
        dest="selftest_prefix",
        type=cgroup_prefix,
        default=PREFIX,
        help=argparse.SUPPRESS,  # the test suite's cgroups are contention-test-*
    )
    add_node_arguments(p)
    add_collector_arguments(p)


def cmd_run(args: argparse.Namespace) -> int:
    setup_logging(args.log_level, args.log_format)
    warn_renamed(args)
    th = thresholds_or_exit(args.config)
    if th is None:
        return 2
    listen = args.listen or [f":{DEFAULT_PORT}"]
    web_config = None
    if args.web_config:
        try:
            web_config = WebConfigSource(args.web_config)
        except WebConfigError as e:
            log.error("%s", e)
            return 2
    raise_fd_limit()
    tune_malloc()  # before the first pass allocates
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
    service = None
    if args.selftest_enabled:
        # Imported only when enabled (off by default): the self-test's run, load and
        # report are ≈ 0.4 MB of modules a node that never runs it does not hold.
        from ..selftest.run import Options
        from ..selftest.service import SelftestService

        service = SelftestService(
            agent.facts,
            lambda: agent.thresholds,
            agent.pass_observers,
            Options(prefix=args.selftest_prefix, procfs=args.procfs, sampler=agent.sampler),
        )
        agent.exposition.sources.selftest = service.last
    app = App(
        agent.exposition,
        agent.facts,
        agent.config.sample_interval,
        agent.status,
        args.metrics_path,
        selftest=service,
    )
    try:
        server = Server(app, listen, web_config)
    except (OSError, ValueError) as e:
        log.error("cannot listen on %s: %s", " ".join(listen), e)
        agent.close()
        return 1
    agent.exposition.sources.attach_http(server)
    stop = threading.Event()

    def _handle(signum: int, _frame: object) -> None:
        log.info("received signal %d, stopping", signum)
        stop.set()

    # Before serving: a signal that arrives once the port answers is always handled.
    signal.signal(signal.SIGTERM, _handle)
    signal.signal(signal.SIGINT, _handle)
    agent.first_pass()  # the first scrape already has data (or says why not)
    tune_gc()
    agent.start()
    server.start()
    scheme = "https" if server.http.tls else "http"
    auth = web_config is not None and bool(web_config.config.users)
    for addr in server.addresses:
        log.info(
            "serving %s on %s (metrics at %s%s)",
            scheme,
            addr,
            args.metrics_path,
            ", basic auth" if auth else "",
        )
    stop.wait()
    server.stop()
    agent.close()
    return 0


# gen0 threshold, then how many gen0 (gen1) collections before a gen1 (gen2) one. A
# pass at 1,000 containers allocates ~10^5 objects that mostly die young: with the
# default (700, 10, 10) a pass ran ~30 collections, ≈ 19 ms of its CPU; with these
# ≈ 5 ms (bench/README.md). Cycles are still collected, every few passes.
GC_THRESHOLDS = (20_000, 20, 10)


def tune_gc() -> None:
    """After start-up: what start-up made (modules, the first pass) is frozen out of
    later collections, and collections run less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


# glibc's malloc serves a block of at least its mmap threshold from a mapping of its
# own, returned to the kernel when freed; but each such block freed raises the
# threshold to its size (up to 32 MiB). After the first render frees its bodies (up to
# ≈ 1 MB each at 1,000 containers), every big buffer of a pass or a render comes from
# the heap, where freed space stays mapped and fragments. Fixed at glibc's own starting
# value: ≈ 3 MB less RSS after a full window (bench/README.md).
MMAP_THRESHOLD = 128 * 1024
_M_MMAP_THRESHOLD = -3  # <malloc.h>


def tune_malloc() -> bool:
    """Fix glibc malloc's mmap threshold, unless the environment sets it (glibc reads
    ``MALLOC_MMAP_THRESHOLD_`` or its tunable at start: the operator's choice wins).
    False where it is not done: set by the environment, no glibc (musl), refused."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "malloc.mmap_threshold" in os.environ.get(
        "GLIBC_TUNABLES", ""
    ):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library the interpreter runs on
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    ok: bool = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    if not ok:
        log.debug("mallopt(M_MMAP_THRESHOLD) refused: malloc keeps its own threshold")
    return ok


def raise_fd_limit() -> None:
    """Open files up to the hard limit, as Go programs do at start: every client
    connection is a file, and the connection limit is well above the usual soft 1024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as e:
            log.debug("open files limit stays at %d: %s", soft, e)
