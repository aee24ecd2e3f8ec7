"""What several commands share: the node flags (``run``, ``diagnose``), turning them into
an :class:`~exporter.agent.AgentConfig`, thresholds, logging, argument types."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ..agent import AgentConfig
from ..catalog import OPTIONAL_COLLECTORS
from ..catalog.probe import ANTAGONIST_WAIT_SECONDS, BLAME_RATIO, WORKLOAD_BLAME_RATIO
from ..exposition.published import RENDER_MODES
from ..findings.thresholds import Thresholds, ThresholdsError, load_thresholds
from ..kube import NODE_NAME_ENV, KubeConfig
from ..probe.blame import DEFAULT_ANTAGONIST_TOP_K, DEFAULT_TOP_K
from ..probe.config import ProbeConfig
from ..probe.core import DEFAULT_BTF
from ..probe.loader import ATTRIBUTIONS
from ..probe.select import LOADER_CHOICES
from ..probe.status import KERNEL_SOURCE_ORDER
from .logs import add_log_arguments

DEFAULT_PORT = 10366  # outside Prometheus's allocated 9100-9999 range; see README

log = logging.getLogger("contention-exporter")

# Flags renamed to ``--<concern>.<name>`` (CHANGELOG): the old spelling still works for
# one release, with a warning naming the new one. Old -> new.
RENAMED_FLAGS = {
    "--sample-interval": "--sampler.interval",
    "--metadata-file": "--metadata.file",
    "--config": "--config.file",
    "--kubeconfig": "--kubernetes.kubeconfig",
    "--node-name": "--kubernetes.node-name",
    "--out-dir": "--output.dir",
}
_NEW_TO_OLD = {new: old for old, new in RENAMED_FLAGS.items()}


class _Renamed(argparse.Action):
    """The old spelling of a renamed flag: sets what the new one sets, and notes the
    rename for :func:`warn_renamed`. Hidden from ``--help``."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        seen = list(getattr(namespace, "renamed_flags", ()))
        if option_string not in seen:
            seen.append(option_string)
        namespace.renamed_flags = seen


def add_flag(g: argparse._ActionsContainer, name: str, **kwargs: Any) -> None:
    """``g.add_argument(name, **kwargs)``, and the flag's old spelling when it was
    renamed (``RENAMED_FLAGS``), which takes the same value."""
    g.add_argument(name, **kwargs)
    old = _NEW_TO_OLD.get(name)
    if old is not None:
        same_type = {"type": kwargs["type"]} if "type" in kwargs else {}
        g.add_argument(
            old,
            dest=kwargs["dest"],
            action=_Renamed,
            default=argparse.SUPPRESS,
            help=argparse.SUPPRESS,
            **same_type,
        )


def warn_renamed(args: argparse.Namespace) -> None:
    """One warning per old flag spelling the command line used."""
    for old in getattr(args, "renamed_flags", ()):
        log.warning(
            "flag %s is deprecated and will be removed in the next release: use %s",
            old,
            RENAMED_FLAGS[old],
        )


def _bounded(convert: Callable[[str], float], least: float, strict: bool) -> Callable[[str], Any]:
    """An argparse type: a number (``convert``) at least ``least`` (above it: strict)."""
    what = "whole number" if convert is int else "number"

    def parse(text: str) -> Any:
        try:
            v = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a {what}: {text!r}") from None
        if v < least or (strict and v == least):
            raise argparse.ArgumentTypeError(f"must be {'>' if strict else '>='} {least:g}")
        return v

    return parse


positive_float = _bounded(float, 0, strict=True)
positive_int = _bounded(int, 1, strict=False)
non_negative_float = _bounded(float, 0, strict=False)


def add_config_argument(p: argparse._ActionsContainer, what: str = "") -> None:
    add_flag(
        p,
        "--config.file",
        dest="config",
        default=None,
        metavar="YAML",
        help=what
        or "threshold overrides (see docs/configuration.md); defaults ship in the package",
    )


def add_node_arguments(p: argparse.ArgumentParser) -> None:
    """Flags shared by ``run`` and ``diagnose``: where to read, how often, identity,
    thresholds and the scheduler probe."""
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
    add_flag(
        g,
        "--sampler.interval",
        dest="sample_interval",
        type=positive_float,
        default=5.0,
        metavar="SECONDS",
        help="seconds between sampler passes over every cgroup (default: %(default)s)",
    )
    add_flag(
        g,
        "--metadata.file",
        dest="metadata_file",
        metavar="YAML",
        help="requests, limits and names for cgroups on a host without Kubernetes "
        "(see docs/host-mode.md); re-read when it changes",
    )
    add_config_argument(g)
    add_log_arguments(g)
    _add_probe_arguments(p)
    _add_kube_arguments(p)


def _add_probe_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("scheduler probe (blame)")
    g.add_argument(
        "--no-probe",
        dest="probe",
        action="store_false",
        help="do not load the eBPF scheduler probe: usage and stall layers only, no culprits",
    )
    g.add_argument(
        "--probe.loader",
        dest="probe_loader",
        choices=list(LOADER_CHOICES),
        default="auto",
        help="how to load the probe: the precompiled CO-RE object through libbpf (needs "
        "the kernel's BTF, no compiler, no headers), BCC (compiles on the node against "
        "kernel headers), or auto: CO-RE, else BCC (default: %(default)s)",
    )
    g.add_argument(
        "--probe.btf",
        dest="probe_btf",
        default=DEFAULT_BTF,
        metavar="FILE",
        help="the kernel BTF the CO-RE probe is relocated against, e.g. a BTFHub file "
        "for a kernel built without /sys/kernel/btf (default: %(default)s)",
    )
    g.add_argument(
        "--probe.attribution",
        dest="probe_attribution",
        choices=list(ATTRIBUTIONS),
        default="occupancy",
        help="how a wait is split among culprits: over the run slices it overlapped "
        "(occupancy), or all on whoever ran last before the victim (default: %(default)s)",
    )
    g.add_argument(
        "--probe.min-wait-us",
        dest="probe_min_wait_us",
        type=non_negative_float,
        default=50.0,
        metavar="US",
        help="waits shorter than this stay out of the blame matrix (still in the "
        "histogram) (default: %(default)s)",
    )
    g.add_argument(
        "--probe.kernel-source",
        dest="probe_kernel_source",
        default=None,
        metavar="DIR",
        help="kernel headers for the BCC loader (default: the first of "
        f"{KERNEL_SOURCE_ORDER} that exists)",
    )
    g.add_argument(
        "--probe.top-k",
        dest="probe_top_k",
        type=positive_int,
        default=DEFAULT_TOP_K,
        metavar="K",
        help="culprits exported per victim, and judged by the findings: its K largest, "
        f"single culprits ({BLAME_RATIO.name}) and workloads ({WORKLOAD_BLAME_RATIO.name}) "
        "together (default: %(default)s)",
    )
    g.add_argument(
        "--probe.antagonists",
        dest="probe_antagonist_top_k",
        type=positive_int,
        default=DEFAULT_ANTAGONIST_TOP_K,
        metavar="K",
        help=f"culprits exported per node in {ANTAGONIST_WAIT_SECONDS.name}: the K "
        "that caused the most run-queue wait to other containers over the window "
        "(default: %(default)s)",
    )


def _add_kube_arguments(p: argparse.ArgumentParser) -> None:
    """The Kubernetes flags. Default: off (host mode, no API access at all)."""
    g = p.add_argument_group("kubernetes")
    g.add_argument(
        "--kubernetes",
        action="store_true",
        help="name cgroups after pods (namespace/pod/container, requests, QoS, opt-out) "
        "by watching this node's pods in the Kubernetes API",
    )
    add_flag(
        g,
        "--kubernetes.kubeconfig",
        dest="kubeconfig",
        metavar="FILE",
        default=None,
        help="kubeconfig to use (default: in-cluster service account when running in a "
        "pod, else $KUBECONFIG or ~/.kube/config)",
    )
    add_flag(
        g,
        "--kubernetes.node-name",
        dest="node_name",
        metavar="NAME",
        default=os.environ.get(NODE_NAME_ENV, ""),
        help="this node's name as the API knows it; only its pods are watched "
        "(default: $NODE_NAME, set from the downward API in the DaemonSet)",
    )
    g.add_argument(
        "--kubernetes.deleted-grace",
        dest="kube_deleted_grace",
        type=non_negative_float,
        default=300.0,
        metavar="SECONDS",
        help="keep naming a deleted pod's cgroups for this long while they linger "
        "(default: %(default)s)",
    )


def add_generate_arguments(p: argparse.ArgumentParser) -> None:
    """What ``rules generate`` and ``dashboards generate`` both take."""
    add_config_argument(p)
    add_flag(
        p,
        "--output.dir",
        dest="out_dir",
        default=".",
        metavar="DIR",
        help="repository root (default: .)",
    )
    p.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if any file is stale"
    )


def add_render_argument(p: argparse._ActionsContainer) -> None:
    p.add_argument(
        "--web.render",
        dest="render",
        choices=list(RENDER_MODES),
        default="pass",
        help="when /metrics is rendered: with every sampler pass, for the formats "
        "scrapes ask for, so a scrape only sends bytes (pass), or on the first scrape "
        "after each pass (scrape); see bench/README.md (default: %(default)s)",
    )


def add_collector_arguments(p: argparse.ArgumentParser) -> None:
    """``--collector.<name>`` / ``--no-collector.<name>`` for the optional families."""
    g = p.add_argument_group(
        "collectors",
        "Per-container families that cAdvisor or kube-state-metrics already export and "
        "that no alert rule, dashboard or finding reads: off by default, to keep "
        "series per container low (docs/metrics.md, 'Cardinality').",
    )
    for name, what in OPTIONAL_COLLECTORS.items():
        g.add_argument(
            f"--collector.{name}",
            dest=f"collector_{name}",
            action=argparse.BooleanOptionalAction,
            default=False,
            help=f"{what} (default: off)",
        )


def agent_config(args: argparse.Namespace, render: str = "pass") -> AgentConfig:
    """The typed settings of ``run`` and ``diagnose`` (raises ValueError on bad ones)."""
    return AgentConfig(
        sysfs=args.sysfs,
        procfs=args.procfs,
        sample_interval=args.sample_interval,
        metadata_file=args.metadata_file,
        probe=ProbeConfig(
            enabled=args.probe,
            attribution=args.probe_attribution,
            min_wait_us=args.probe_min_wait_us,
            kernel_source=args.probe_kernel_source,
            top_k=args.probe_top_k,
            antagonist_top_k=args.probe_antagonist_top_k,
            loader=args.probe_loader,
            btf_path=args.probe_btf,
        ),
        kube=KubeConfig(
            enabled=args.kubernetes,
            kubeconfig=args.kubeconfig,
            node_name=args.node_name,
            deleted_grace_s=args.kube_deleted_grace,
        ),
        render=render,
        collectors=frozenset(
            name for name in OPTIONAL_COLLECTORS if getattr(args, f"collector_{name}", False)
        ),
        thresholds_file=args.config,
        # --web.disable-exporter-metrics (run only)
        process_metrics=not getattr(args, "disable_exporter_metrics", False),
    )


def thresholds_or_exit(path: str | None) -> Thresholds | None:
    """The thresholds, or None after printing why they cannot be read (exit 2)."""
    try:
        return load_thresholds(path)
    except ThresholdsError as e:
        sys.stderr.write(f"error: {e}\n")
        return None
