"""Every collector, in exposition order: node_exporter's ``registerCollector``, as one
table.

An entry names a collector of the catalog (``exporter.catalog.collectors``: on or off
by default, what it exports) and the function that builds its families from one
:class:`~.inputs.Context` (one pass and the live sources). Each family it builds is a
catalog entry (``exporter.catalog``) made with ``series.new``; the function's module
says where each value comes from. A collector that raises loses only its own families
and says so in ``contention_collector_success{collector="exposition"}``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client.core import Metric

from ..catalog import collector, enabled
from ..identity import ambiguous_names
from . import (
    config,
    containers,
    findings,
    http,
    kube,
    node,
    probe,
    process,
    selftest,
    status,
)
from .inputs import Context, PassResult, Sources

log = logging.getLogger(__name__)

Build = Callable[[Context], Iterable[Metric]]


@dataclass(frozen=True, slots=True)
class Registered:
    name: str  # the catalog's collector
    build: Build


def register(name: str, build: Build) -> Registered:
    collector(name)  # a KeyError here: add the collector to exporter/catalog/collectors.py
    return Registered(name, build)


REGISTRY: tuple[Registered, ...] = (
    register("build_info", node.build_info),
    register("node", node.node),
    register("containers", containers.containers),  # memory_oom: event values in it
    register("cpu_spec", containers.cpu_spec),
    register("memory_usage", containers.memory_usage),
    register("memory_spec", containers.memory_spec),
    register("io_pressure", containers.io_pressure),
    register("probe", probe.probe),
    register("findings", findings.findings),
    register("process", process.process),
    register("kube", kube.kube),
    register("config", config.config),
    register("http", http.http),
    register("selftest", selftest.selftest),
    register("status", status.status),  # last: it says how the ones before it went
)


def pass_families(result: PassResult, sources: Sources) -> list[Metric]:
    """Every family of one pass, in exposition order, from the enabled collectors."""
    started = time.perf_counter()
    snap = result.snapshot
    ambiguous = ambiguous_names(c.identity for c in snap.containers)
    ctx = Context(result, sources, enabled(result.collectors), ambiguous, started)
    out: list[Metric] = []
    for c in REGISTRY:
        if c.name not in ctx.enabled:
            continue
        try:
            out.extend(c.build(ctx))
        except Exception as e:  # one broken collector must not cost the others
            ctx.failed.append(c.name)
            log.error("building metric families failed (collector %s): %s", c.name, e)
    return out
