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
    # Its families are a function of the pass alone (no live source, no clock): built
    # again, they are the same, so a pass may release them once rendered.
    of_pass: bool = False


def register(name: str, build: Build, *, of_pass: bool = False) -> Registered:
    collector(name)  # a KeyError here: add the collector to exporter/catalog/collectors.py
    return Registered(name, build, of_pass)


REGISTRY: tuple[Registered, ...] = (
    register("build_info", node.build_info, of_pass=True),
    register("node", node.node, of_pass=True),
    # memory_oom: event values in it
    register("containers", containers.containers, of_pass=True),
    register("cpu_spec", containers.cpu_spec, of_pass=True),
    register("memory_usage", containers.memory_usage, of_pass=True),
    register("memory_spec", containers.memory_spec, of_pass=True),
    register("io_pressure", containers.io_pressure, of_pass=True),
    register("probe", probe.probe, of_pass=True),
    register("findings", findings.findings, of_pass=True),
    register("process", process.process),
    register("kube", kube.kube),
    register("config", config.config),
    register("http", http.http),
    register("selftest", selftest.selftest),
    register("status", status.status),  # last: it says how the ones before it went
)


def pass_families(result: PassResult, sources: Sources) -> list[Metric]:
    """Every family of one pass, in exposition order, from the enabled collectors."""
    return PassFamilies(result, sources).families()


class PassFamilies:
    """One pass's families, collector by collector. Each collector runs once, in
    registry order (``status``, last, says how the ones before it went); the families
    of an ``of_pass`` collector can be released after a render (:meth:`release`: at
    1,000 containers they are ~17,000 samples, ~4 MB) and are built again, the same,
    if asked for again; the others (live sources, timings) are kept as built."""

    def __init__(self, result: PassResult, sources: Sources) -> None:
        started = time.perf_counter()
        ambiguous = ambiguous_names(c.identity for c in result.snapshot.containers)
        self._ctx = Context(result, sources, enabled(result.collectors), ambiguous, started)
        self._built: list[tuple[Registered, list[Metric] | None]] = [
            (c, _build(c, self._ctx)) for c in REGISTRY if c.name in self._ctx.enabled
        ]

    def families(self) -> list[Metric]:
        out: list[Metric] = []
        for i, (c, fams) in enumerate(self._built):
            if fams is None:
                fams = _build(c, self._ctx)
                self._built[i] = (c, fams)
            out.extend(fams)
        return out

    def release(self) -> None:
        """Forget the families of the ``of_pass`` collectors until asked for again."""
        self._built = [(c, None if c.of_pass else fams) for c, fams in self._built]


def _build(c: Registered, ctx: Context) -> list[Metric]:
    try:
        return list(c.build(ctx))
    except Exception as e:  # one broken collector must not cost the others
        ctx.failed.append(c.name)
        log.error("building metric families failed (collector %s): %s", c.name, e)
        return []
