"""Scenario files: one description of a node's minutes that drives both the Python
evaluator (as :class:`~exporter.window.Window`s) and ``promtool test rules`` (as
``input_series``), so the two can be compared at every evaluation time. The corpus is
``tests/scenarios/`` (test machinery: not part of the shipped package).

A scenario (YAML)::

    name: noisy-neighbor-basic
    description: what it shows
    minutes: 10                      # minutes of data (samples at 0, 1m, ... 10m)
    node: {mem_some_s: 0, steal_s: 0} # per-minute node values (steal: CPU seconds, all CPUs)
    node_cores: 4                    # the node's CPUs (contention_node_cpu_cores)
    node_memory: 17179869184         # the node's memory in bytes (default 16 GiB)
    containers:                      # tracked containers (they get metrics)
      - name: api                    # handle used in blame keys and expectations
        cgroup: /kubepods/burstable/pod.../abc   (default /scenario/<name>)
        kind: container              # CgroupKind value (default container)
        namespace: shop              # pod, container, pod_uid likewise
        cpu_request: 0.5             # cores; cpu_limit, memory_request, memory_limit
        start: 0                     # minute the exporter first sees it (default 0):
                                     # no series before, its values for earlier minutes unused
        end: 7                       # minute it is gone by (default: never): it runs
                                     # through minute 6, its series go stale at 7m and
                                     # its name stays known (a departed culprit); no
                                     # victim may blame it from minute 7 on
        workload: Deployment/batch   # what owns it (contention_cgroup_info's workload);
                                     # once gone, the evaluator keeps its minutes
                                     # (Window.departed) through minute 5 (with end: 7):
                                     # its last sample, at 6m, holds its use through
                                     # minute 5, so both sides measure it over the same
                                     # minutes (minute 6's use is in no scraped sample)
        series:                      # per-minute values (see below)
          cpu_usage_s: 30
          cpu_some_s: {0: 0, 4: 15}
          runq: {events: 100, over_20ms: 5}
          wait_s: 12                 # run-queue wait (contention_runqueue_latency_seconds_sum)
          blame: {batch: 20, idle: 1, unknown: 3}
          threads: {1: 500, 4: {0: 0, 3: 200}}  # burst demand: observations per
                                     # bucket bound (exporter.probe.burst.BURST_BOUNDS,
                                     # or "more" above the largest) per minute
    others:                          # named but not tracked (system units, kernel, opted out)
      - {name: kernel, kind: root, cgroup: /}
    expect:                          # checked against the evaluator (hand-written truth)
      - at: 7                        # minute (eval time 7m)
        findings: [[noisy-neighbor, api, batch, warning]]
        values: [[noisy-neighbor, api, 1834]]   # optional: suggested values (null: withheld)

The input series are what a default install exports (no ``--collector.*``): a
member's limits reach the rules only as ``contention_*_entitlement_*{basis="limit"}``,
exactly as the exporter's entitlement policy (``exporter.sampler.entitlement``) gives
them, and ``tests/unit/test_default_families.py`` fails when a rule reads a family
that is off by default.

Per-minute values are a scalar (every minute), a list (one per minute) or a mapping
``{from_minute: value}`` (piecewise constant). Values must be multiples of 1/1024 so
every sum and difference is exact in binary floating point: then Python's sums over
minutes and PromQL's differences of cumulative counters are the same doubles.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from exporter.catalog.probe import RUNNABLE_THREADS
from exporter.cgroupfs.discovery import CgroupKind
from exporter.findings.aggregates import identities, window_blame
from exporter.findings.model import CULPRIT_UNKNOWN
from exporter.findings.thresholds import Thresholds
from exporter.identity import Identity
from exporter.probe.blame import DEFAULT_TOP_K as BLAME_TOP_K
from exporter.probe.blame import top_culprits
from exporter.probe.burst import BURST_BOUNDS, BURST_SLOTS
from exporter.probe.histogram import RUNQ_BOUNDS_S, le_label
from exporter.sampler.entitlement import cpu_entitlement, memory_entitlement
from exporter.window import (
    CULPRIT_IDLE,
    CULPRIT_UNATTRIBUTED,
    ContainerWindow,
    MinuteFold,
    NodeFold,
    Window,
)

INSTANCE = "node-a:10366"
JOB = "contention-exporter"
# The target labels Prometheus adds to every series of the scenario's exporter (tests
# of the rule pack's options add e.g. a cluster label, or scrape under another job).
TARGET = {"instance": INSTANCE, "job": JOB}
UNKNOWN_ID = 999_999  # a cgroup id nobody can classify
NODE_MEMORY = 16 * 2**30  # the node's memory (MemTotal): the memory entitlement of last resort
SLOT_FAST = RUNQ_BOUNDS_S.index(0.005)
SLOT_20_200 = RUNQ_BOUNDS_S.index(0.05)
SLOT_200_TOP = RUNQ_BOUNDS_S.index(1.0)

_SERIES_KEYS = {
    "cpu_usage_s",
    "periods",
    "throttled_periods",
    "throttled_s",
    "cpu_some_s",
    "cpu_full_s",
    "mem_some_s",
    "mem_full_s",
    "refaults",
    "mem_high",
    "mem_max",
    "working_set_bytes",
    "runq",
    "wait_s",
    "blame",
    "threads",
}
_RUNQ_KEYS = {"events", "over_20ms", "over_200ms", "overflow"}


class ScenarioError(ValueError):
    pass


def _expand(spec: Any, n: int, what: str) -> list[float]:
    if isinstance(spec, bool):
        raise ScenarioError(f"{what}: not a number")
    if isinstance(spec, int | float):
        vals = [float(spec)] * n
    elif isinstance(spec, list):
        if len(spec) != n:
            raise ScenarioError(f"{what}: list has {len(spec)} values, expected {n}")
        vals = [float(v) for v in spec]
    elif isinstance(spec, dict):
        if 0 not in spec:
            raise ScenarioError(f"{what}: piecewise mapping needs a value from minute 0")
        vals, cur = [], 0.0
        for m in range(n):
            cur = float(spec.get(m, cur))
            vals.append(cur)
    else:
        raise ScenarioError(f"{what}: expected a number, list or {{minute: value}}")
    for v in vals:
        if v < 0 or (v * 1024) != int(v * 1024):
            raise ScenarioError(f"{what}: {v} must be >= 0 and a multiple of 1/1024")
    return vals


@dataclass
class Member:
    name: str
    cgroup_id: int
    identity: Identity
    tracked: bool
    series: dict[str, Any] = field(default_factory=dict)
    start: int = 0  # minute of its first sample (a young container when > 0)
    end: int | None = None  # minute it is gone by (None: never)


@dataclass
class Scenario:
    name: str
    description: str
    minutes: int
    members: dict[str, Member]
    node: dict[str, list[float]]
    per_minute: dict[str, dict[str, list[float]]]  # member -> key -> values
    runq: dict[str, list[list[int]]]  # member -> per-minute bucket slots
    blame: dict[str, list[dict[int | str, float]]]  # member -> per-minute blame
    threads: dict[str, list[list[int]]]  # member -> per-minute burst bucket counts
    expect: list[dict[str, Any]]
    unit: bool  # also rendered into rules/tests (with annotations)
    path: str = ""
    node_cores: float = 4.0
    node_memory: int = NODE_MEMORY

    # -- the Python side --------------------------------------------------------------

    def window_at(self, t: int, th: Thresholds) -> Window:
        """The sampler's window at eval time ``t`` (seconds): minutes ending by ``t``."""
        done = [m for m in range(self.minutes) if (m + 1) * 60 <= t]
        keep = done[-th.window_minutes :]
        w = Window(minutes=th.window_minutes, probe_loaded=bool(self.runq or self.blame))
        w.node_cpu_cores = self.node_cores
        w.node_memory_bytes = self.node_memory
        for name, mem in self.members.items():
            if not mem.tracked:
                w.others[mem.cgroup_id] = mem.identity
                continue
            if t < mem.start * 60:
                continue  # not seen yet
            cw = ContainerWindow(
                identity=mem.identity,
                cgroup_id=mem.cgroup_id,
                cpu_limit_cores=mem.identity.cpu_limit_cores,
                memory_limit_bytes=mem.identity.memory_limit_bytes,
                folds=tuple(
                    self._fold(name, m)
                    for m in keep
                    if m >= mem.start and (mem.end is None or m < mem.end)
                ),
                first_seen=float(mem.start * 60),
            )
            if mem.end is not None and t >= mem.end * 60:
                w.others[mem.cgroup_id] = mem.identity  # gone: named while blamed
                if mem.identity.workload:  # found gone by the pass at its end
                    cw.gone_at = float(mem.end * 60)
                    # what Prometheus scraped of it: its series' last sample (end - 1)
                    # holds its use through minute end - 2; the pass that found it gone
                    # folded nothing more (module docstring)
                    last = (mem.end - 1) * 60
                    cw.folds = tuple(f for f in cw.folds if f.minute < last)
                    w.departed[mem.cgroup_id] = cw
                continue
            w.containers[mem.cgroup_id] = cw
        for m in keep:
            w.node.append(
                NodeFold(
                    minute=m * 60,
                    seconds=60.0,
                    mem_some_s=self._node_val("mem_some_s", m),
                    steal_s=self._node_val("steal_s", m),
                )
            )
        return w

    def _node_val(self, key: str, m: int) -> float | None:
        v = self.node.get(key)
        return None if v is None else v[m]

    def _fold(self, name: str, m: int) -> MinuteFold:
        pm = self.per_minute[name]

        def get(key: str) -> float | None:
            v = pm.get(key)
            return None if v is None else v[m]

        def geti(key: str) -> int | None:
            v = get(key)
            return None if v is None else int(v)

        ws = geti("working_set_bytes")
        events = {}
        for ev in ("high", "max"):
            if f"mem_{ev}" in pm:
                events[ev] = int(pm[f"mem_{ev}"][m])
        return MinuteFold(
            minute=m * 60,
            seconds=60.0,
            cpu_usage_s=get("cpu_usage_s") or 0.0,
            periods=geti("periods"),
            throttled_periods=geti("throttled_periods"),
            throttled_s=get("throttled_s"),
            cpu_some_s=get("cpu_some_s"),
            cpu_full_s=get("cpu_full_s"),
            mem_some_s=get("mem_some_s"),
            mem_full_s=get("mem_full_s"),
            refaults=geti("refaults") or 0,
            mem_events=events,
            memory_bytes=ws,
            working_set_bytes=ws,
            runq_buckets=list(self.runq[name][m]) if name in self.runq else None,
            runq_sum_s=get("wait_s"),
            blame_s=dict(self.blame[name][m]) if name in self.blame else None,
            burst_buckets=list(self.threads[name][m]) if name in self.threads else None,
        )

    def eval_times(self, th: Thresholds) -> list[int]:
        """Times compared with promtool: every minute once a full window exists."""
        return [m * 60 for m in range(th.window_minutes, self.minutes + 1)]

    # -- the Prometheus side ------------------------------------------------------------

    def input_series(  # noqa: C901 - a branch per series kind
        self, th: Thresholds, target: Mapping[str, str] = TARGET
    ) -> list[dict[str, str]]:
        """promtool ``input_series`` with samples every minute from 0 to ``minutes``,
        with the ``target`` labels on every series."""
        out: list[dict[str, str]] = []
        n = self.minutes
        target_pairs = sorted(target.items())

        def labels(ident: Identity, **extra: str) -> str:
            # the identity labels the exporter gives the series (names, else the path)
            pairs = [*ident.series_labels().items(), *target_pairs, *extra.items()]
            body = ",".join(f'{k}="{v}"' for k, v in pairs if v)
            return "{" + body + "}"

        start = 0  # the member being written: no samples before this minute
        end: int | None = None  # ... and none after this one (a stale marker at it)

        def gone(vals: list[str]) -> list[str]:
            if end is None:
                return vals
            return vals[:end] + ["stale"] + ["_"] * (len(vals) - end - 1)

        def counter(metric: str, lab: str, deltas: list[float]) -> None:
            cum, vals = 0.0, ["_"] * start + ["0"]
            for d in deltas[start:]:
                cum += d
                vals.append(_fmt(cum))
            out.append({"series": metric + lab, "values": " ".join(gone(vals))})

        def gauge(metric: str, lab: str, values: list[float | None]) -> None:
            # A gauge sampled at minute k holds minute k-1's value: none until the
            # member's first minute is complete (the evaluator has no fold before).
            vals = [
                "_" if v is None or (start > 0 and k <= start) else _fmt(v)
                for k, v in enumerate(values)
            ]
            out.append({"series": metric + lab, "values": " ".join(gone(vals))})

        for name, mem in self.members.items():
            if not mem.tracked:
                continue
            start, end = mem.start, mem.end
            ident, pm = mem.identity, self.per_minute[name]
            lab = labels(ident)
            if ident.workload:  # the info series the rules read the workload from
                vals = ["_"] * start + ["1"] * (n + 1 - start)
                out.append(
                    {
                        "series": "contention_cgroup_info" + labels(ident, workload=ident.workload),
                        "values": " ".join(gone(vals)),
                    }
                )
            counter("contention_sampled_seconds_total", lab, [60.0] * n)
            counter("contention_cpu_usage_seconds_total", lab, pm["cpu_usage_s"])
            for key, metric in (
                ("periods", "contention_cpu_cfs_periods_total"),
                ("throttled_periods", "contention_cpu_cfs_throttled_periods_total"),
                ("throttled_s", "contention_cpu_cfs_throttled_seconds_total"),
                ("cpu_some_s", "contention_pressure_cpu_waiting_seconds_total"),
                ("cpu_full_s", "contention_pressure_cpu_stalled_seconds_total"),
                ("mem_some_s", "contention_pressure_memory_waiting_seconds_total"),
                ("mem_full_s", "contention_pressure_memory_stalled_seconds_total"),
            ):
                if key in pm:
                    counter(metric, lab, pm[key])
            if "refaults" in pm:
                counter(
                    "contention_memory_workingset_refaults_total",
                    labels(ident, type="file"),
                    pm["refaults"],
                )
                counter(
                    "contention_memory_workingset_refaults_total",
                    labels(ident, type="anon"),
                    [0.0] * n,
                )
            for ev in ("high", "max"):
                if f"mem_{ev}" in pm:
                    counter(
                        "contention_memory_events_total", labels(ident, event=ev), pm[f"mem_{ev}"]
                    )
            if "working_set_bytes" in pm:
                ws = pm["working_set_bytes"]
                gauge("contention_memory_working_set_bytes", lab, [ws[0], *ws])
            for value, metric in (
                (ident.cpu_request_cores, "contention_cpu_request_cores"),
                (ident.memory_request_bytes, "contention_memory_request_bytes"),
            ):
                if value is not None:
                    gauge(metric, lab, [float(value)] * (n + 1))
            # The limits as a default install exports them: the entitlement's basis
            # (the *_limit_* families are optional collectors, off by default).
            for ent, metric in (
                (
                    cpu_entitlement(ident.cpu_limit_cores, ident, self.node_cores),
                    "contention_cpu_entitlement_cores",
                ),
                (
                    memory_entitlement(ident.memory_limit_bytes, ident, self.node_memory),
                    "contention_memory_entitlement_bytes",
                ),
            ):
                gauge(metric, labels(ident, basis=ent.basis), [ent.value] * (n + 1))
            if name in self.runq:
                slots = self.runq[name][start:]
                running = [0] * len(slots[0])
                cums: list[list[int]] = [list(running)]
                for s in slots:
                    running = [a + b for a, b in zip(running, s, strict=True)]
                    cums.append(list(running))
                for i, bound in enumerate((*RUNQ_BOUNDS_S, float("inf"))):
                    le = "+Inf" if i == len(RUNQ_BOUNDS_S) else le_label(bound)
                    vals = ["_"] * start + [str(sum(c[: i + 1])) for c in cums]
                    out.append(
                        {
                            "series": "contention_runqueue_latency_seconds_bucket"
                            + labels(ident, le=le),
                            "values": " ".join(vals),
                        }
                    )
                out.append(
                    {
                        "series": "contention_runqueue_latency_seconds_count" + lab,
                        "values": " ".join(["_"] * start + [str(sum(c)) for c in cums]),
                    }
                )
            if "wait_s" in pm:  # the histogram's _sum: its total wait
                counter("contention_runqueue_latency_seconds_sum", lab, pm["wait_s"])
            if name in self.threads:
                out.extend(_burst_series(self.threads[name], start, lab, labels, ident))
            if name in self.blame:
                out.extend(self._blame_series(mem, th, labels))
        start, end = 0, None  # the node's series exist from the first minute
        node_lab = "{" + ",".join(f'{k}="{v}"' for k, v in target_pairs) + "}"
        if "mem_some_s" in self.node:
            counter(
                "contention_node_pressure_memory_waiting_seconds_total",
                node_lab,
                self.node["mem_some_s"],
            )
        if "steal_s" in self.node:
            counter("contention_node_cpu_steal_seconds_total", node_lab, self.node["steal_s"])
        # exported on every node, as the exporter does (the burst limit's cap reads it)
        gauge("contention_node_cpu_cores", node_lab, [self.node_cores] * (n + 1))
        return out

    def _blame_series(self, mem: Member, th: Thresholds, labels: Any) -> list[dict[str, str]]:
        """contention_blame_ratio and contention_workload_blame_ratio exactly as the
        probe's collector exports them: the victim's top K culprits (top_culprits)."""
        per_t: list[dict[tuple[str, tuple[tuple[str, str], ...]], float]] = []
        keys: dict[tuple[str, tuple[tuple[str, str], ...]], None] = {}
        for k in range(self.minutes + 1):
            t = k * 60
            w = self.window_at(t, th)
            sums = window_blame(w, mem.cgroup_id, t, th)
            top = top_culprits(sums, identities(w), mem.cgroup_id, BLAME_TOP_K)
            row = {
                ("contention_blame_ratio", tuple(b.culprit.labels().items())): b.share
                for b in top.containers
            }
            row.update(
                {
                    ("contention_workload_blame_ratio", tuple(ws.labels().items())): ws.share
                    for ws in top.workloads
                }
            )
            keys.update(dict.fromkeys(row))
            per_t.append(row)
        # Out of the top K: the exporter stops exporting it; 0 decides the same.
        return [
            {
                "series": name + labels(mem.identity, **dict(lab)),
                "values": " ".join(
                    "_" if k <= mem.start else _fmt(row.get((name, lab), 0.0))
                    for k, row in enumerate(per_t)
                ),
            }
            # the blame shares first, as the exposition lists its families
            for name, lab in sorted(keys, key=lambda nk: nk[0] != "contention_blame_ratio")
        ]


def _burst_series(
    rows: list[list[int]], start: int, lab: str, labels: Any, ident: Identity
) -> list[dict[str, str]]:
    """The burst histogram (catalog probe.RUNNABLE_THREADS) as the probe's collector
    exports it: cumulative bucket, count and sum series (an observation in the
    overflow bucket adds the largest bound plus one to the sum)."""
    running = [0] * BURST_SLOTS
    cums: list[list[int]] = [list(running)]
    total, sums = 0, [0]
    for row in rows[start:]:
        running = [a + b for a, b in zip(running, row, strict=True)]
        cums.append(list(running))
        total += sum(n * b for n, b in zip(row, (*BURST_BOUNDS, BURST_BOUNDS[-1] + 1), strict=True))
        sums.append(total)
    name = RUNNABLE_THREADS.name
    pad = ["_"] * start
    out = []
    for i, bound in enumerate((*BURST_BOUNDS, float("inf"))):
        le = "+Inf" if i == len(BURST_BOUNDS) else le_label(float(bound))
        vals = pad + [str(sum(c[: i + 1])) for c in cums]
        out.append({"series": f"{name}_bucket" + labels(ident, le=le), "values": " ".join(vals)})
    out.append(
        {"series": f"{name}_count" + lab, "values": " ".join(pad + [str(sum(c)) for c in cums])}
    )
    out.append({"series": f"{name}_sum" + lab, "values": " ".join(pad + [str(x) for x in sums])})
    return out


def _threads(name: str, spec: Any, n: int) -> list[list[int]]:
    """A member's ``threads`` series: per-minute counts per burst bucket."""
    slots = {str(b): i for i, b in enumerate(BURST_BOUNDS)} | {"more": len(BURST_BOUNDS)}
    rows = [[0] * BURST_SLOTS for _ in range(n)]
    for key, per_minute in (spec or {}).items():
        if str(key) not in slots:
            raise ScenarioError(
                f"{name}.threads: {key!r} is not a bucket bound {BURST_BOUNDS} or 'more'"
            )
        for m, v in enumerate(_expand(per_minute, n, f"{name}.threads.{key}")):
            if not float(v).is_integer():
                raise ScenarioError(f"{name}.threads.{key}: counts must be whole numbers")
            rows[m][slots[str(key)]] = int(v)
    return rows


def _fmt(v: float) -> str:
    if float(v).is_integer():
        return str(int(v))
    return repr(float(v))


_IDENT_KEYS = {
    "name",
    "cgroup",
    "kind",
    "namespace",
    "pod",
    "container",
    "pod_uid",
    "cpu_request",
    "cpu_limit",
    "memory_request",
    "memory_limit",
    "opted_out",
    "series",
    "id",
    "start",
    "end",
    "workload",
}


def _member(d: dict[str, Any], tracked: bool, next_id: int) -> Member:
    unknown = set(d) - _IDENT_KEYS
    if unknown:
        raise ScenarioError(f"member {d.get('name')}: unknown keys {sorted(unknown)}")
    name = str(d["name"])
    kind = CgroupKind(d.get("kind", "container"))
    cgroup = d.get("cgroup") or ("/" if kind is CgroupKind.ROOT else f"/scenario/{name}")
    mem_req = d.get("memory_request")
    mem_lim = d.get("memory_limit")
    ident = Identity(
        cgroup=cgroup,
        kind=kind,
        namespace=d.get("namespace", ""),
        pod=d.get("pod", ""),
        container=d.get("container", ""),
        pod_uid=d.get("pod_uid", "") or ("uid-" + name if d.get("pod") else ""),
        cpu_request_cores=d.get("cpu_request"),
        cpu_limit_cores=d.get("cpu_limit"),
        memory_request_bytes=int(mem_req) if mem_req is not None else None,
        memory_limit_bytes=int(mem_lim) if mem_lim is not None else None,
        opted_out=bool(d.get("opted_out", False)),
        workload=str(d.get("workload", "")),
    )
    start = int(d.get("start", 0))
    if start < 0 or (start and not tracked):
        raise ScenarioError(f"member {name}: start must be >= 0 and only on a tracked container")
    end = d.get("end")
    if end is not None and (not tracked or int(end) <= start):
        raise ScenarioError(f"member {name}: end must be after start, on a tracked container")
    series = dict(d.get("series") or {})
    if end is not None and ("blame" in series or "runq" in series):
        raise ScenarioError(f"member {name}: a container that ends is a culprit only")
    return Member(
        name,
        int(d.get("id", next_id)),
        ident,
        tracked,
        series,
        start,
        int(end) if end is not None else None,
    )


def load_scenario(path: str | Path) -> Scenario:
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text("utf-8"))
        return parse_scenario(doc, str(p))
    except (KeyError, TypeError, ValueError) as e:
        raise ScenarioError(f"{p}: {e}") from e


def parse_scenario(doc: dict[str, Any], source: str = "scenario") -> Scenario:  # noqa: C901 - one check per key
    n = int(doc["minutes"])
    members: dict[str, Member] = {}
    next_id = 1000
    for d in doc.get("containers") or []:
        member = _member(d, True, next_id)
        next_id += 1
        members[member.name] = member
    for d in doc.get("others") or []:
        member = _member(d, False, 1 if d.get("kind") == "root" else next_id)
        next_id += 1
        members[member.name] = member
    per_minute: dict[str, dict[str, list[float]]] = {}
    runq: dict[str, list[list[int]]] = {}
    blame: dict[str, list[dict[int | str, float]]] = {}
    threads: dict[str, list[list[int]]] = {}
    for name, mem in members.items():
        if not mem.tracked:
            continue
        s = mem.series
        bad = set(s) - _SERIES_KEYS
        if bad:
            raise ScenarioError(f"{name}: unknown series {sorted(bad)}")
        pm = {
            k: _expand(v, n, f"{name}.{k}")
            for k, v in s.items()
            if k not in ("runq", "blame", "threads")
        }
        if "threads" in s:
            threads[name] = _threads(name, s["threads"], n)
        pm.setdefault("cpu_usage_s", [0.0] * n)
        per_minute[name] = pm
        if "runq" in s:
            rq = s["runq"]
            if set(rq) - _RUNQ_KEYS:
                raise ScenarioError(f"{name}.runq: unknown keys {sorted(set(rq) - _RUNQ_KEYS)}")
            cols = {k: _expand(rq.get(k, 0), n, f"{name}.runq.{k}") for k in _RUNQ_KEYS}
            rows = []
            for m in range(n):
                ev, o20, o200, ovf = (
                    int(cols["events"][m]),
                    int(cols["over_20ms"][m]),
                    int(cols["over_200ms"][m]),
                    int(cols["overflow"][m]),
                )
                if not ev >= o20 >= o200 >= ovf:
                    raise ScenarioError(
                        f"{name}.runq minute {m}: need events>=20ms>=200ms>=overflow"
                    )
                slots = [0] * (len(RUNQ_BOUNDS_S) + 1)
                slots[SLOT_FAST] = ev - o20
                slots[SLOT_20_200] = o20 - o200
                slots[SLOT_200_TOP] = o200 - ovf
                slots[-1] = ovf
                rows.append(slots)
            runq[name] = rows
        if "blame" in s:
            cols_b: dict[int | str, list[float]] = {}
            for key, spec in (s["blame"] or {}).items():
                ck: int | str
                if key == "idle":
                    ck = CULPRIT_IDLE
                elif key == "unattributed":
                    ck = CULPRIT_UNATTRIBUTED
                elif key == CULPRIT_UNKNOWN:
                    ck = UNKNOWN_ID
                elif key in members:
                    ck = members[key].cgroup_id
                else:
                    raise ScenarioError(f"{name}.blame: unknown culprit {key!r}")
                cols_b[ck] = _expand(spec, n, f"{name}.blame.{key}")
            blame[name] = [{k: v[m] for k, v in cols_b.items()} for m in range(n)]
    for name, mem in members.items():
        if mem.start >= n:
            raise ScenarioError(f"{name}: start {mem.start} is not before minute {n}")
        if mem.end is not None and mem.end > n:
            raise ScenarioError(f"{name}: end {mem.end} is after minute {n}")
        for victim, brows in blame.items():
            early = [m for m in range(mem.start) if brows[m].get(mem.cgroup_id)]
            if early:
                raise ScenarioError(
                    f"{victim}.blame: {name} blamed at minute {early[0]}, "
                    f"before it starts (minute {mem.start})"
                )
            late = [m for m in range(mem.end or n, n) if brows[m].get(mem.cgroup_id)]
            if late:
                raise ScenarioError(
                    f"{victim}.blame: {name} blamed at minute {late[0]}, "
                    f"after it is gone (minute {mem.end})"
                )
    node = {k: _expand(v, n, f"node.{k}") for k, v in (doc.get("node") or {}).items()}
    return Scenario(
        name=str(doc["name"]),
        description=str(doc.get("description", "")),
        minutes=n,
        members=members,
        node=node,
        per_minute=per_minute,
        runq=runq,
        blame=blame,
        threads=threads,
        expect=list(doc.get("expect") or []),
        unit=bool(doc.get("unit", False)),
        path=source,
        node_cores=float(doc.get("node_cores", 4)),
        node_memory=int(doc.get("node_memory", NODE_MEMORY)),
    )


def load_corpus(directory: str | Path) -> list[Scenario]:
    files = sorted(Path(directory).glob("*.yaml"))
    return [load_scenario(f) for f in files]


def cgroup_of(scn: Scenario, ref: str) -> str:
    """A member handle (or a cgroup path) as a cgroup path, for expectations."""
    if ref in scn.members:
        return scn.members[ref].identity.cgroup
    return ref
