#!/usr/bin/env python3
"""Cardinality benchmark: series and bytes per container in /metrics, on the
1,000-container node of ``sampler_bench.py``, before and after, side by side.

The node is the synthetic pure-cgroup-v2 Kubernetes node that ``sampler_bench.py``
builds (same seed, same 1,000 containers), with every container named the way the
Kubernetes API names it (a metadata file: namespace, pod, container, CPU and memory
requests), and a stand-in for the scheduler probe that gives every container waits
in every run-queue bucket and more than three culprits, so each victim exports its
whole histogram and the top three blame shares: the worst case per container. (The
real probe cannot load against a synthetic tree; ``tests/integration`` tests it on the
real kernel.)

For each setting it runs the exporter's own agent for 1½ simulated minutes (a pass
every 5 s), renders /metrics as Prometheus asks for it (OpenMetrics) and as curl does
(text 0.0.4), and counts:

* series per container: samples whose labels name one tracked cgroup (``cgroup`` or
  ``pod``; culprit labels do not count), divided by the tracked cgroups (containers,
  system units, user slices), and the largest count of any one container;
* bytes per container: the whole exposition divided by the tracked cgroups, plain
  and gzipped (Prometheus asks for gzip).

``--compare-with REV`` measures ``REV`` (e.g. ``main`` or a release tag) the same way,
from its sources (``git archive``), on the same tree, and prints both side by side.

Usage: ``python bench/cardinality.py [--containers 1000] [--compare-with REV] [--json]``
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # sampler_bench, this directory's sibling

NAMESPACES = ("payments", "checkout", "search", "platform-ingress", "data-pipeline")
APPS = ("api", "worker", "frontend", "ledger-sync", "recommendation-engine", "cache")
CONTAINERS = ("app", "istio-proxy", "log-shipper")
# Labels of a sample that identify a tracked cgroup (not a culprit's: culprit_cgroup).
_OWN = re.compile(r'[{,](?:cgroup|pod)="[^"]')
_IDENT = re.compile(r'[{,]((?:cgroup|namespace|pod|container)="[^"]*")')


def write_metadata(tree: Any, path: Path, seed: int = 7) -> int:
    """Name every Kubernetes container like the API would; the pod sandbox is POD."""
    rng = random.Random(seed)
    lines = ["cgroups:"]
    pods: dict[str, tuple[str, str]] = {}
    seen: dict[str, int] = {}
    for cg in tree.containers:
        pod_dir = cg.rsplit("/", 1)[0]
        if pod_dir not in pods:
            app = rng.choice(APPS)
            suffix = f"{rng.getrandbits(40):010x}"
            pods[pod_dir] = (rng.choice(NAMESPACES), f"{app}-{suffix[:9]}-{suffix[5:10]}")
        n = seen[pod_dir] = seen.get(pod_dir, -1) + 1
        name = "POD" if n == 0 else CONTAINERS[(n - 1) % len(CONTAINERS)]  # sandbox first
        ns, pod = pods[pod_dir]
        lines.append(f"  {json.dumps(cg)}:")
        lines += [f"    namespace: {ns}", f"    pod: {pod}", f"    container: {name}"]
        lines += ["    cpu_request: 250m", "    memory_request: 256Mi"]
    path.write_text("\n".join(lines) + "\n")
    return len(pods)


class StandInProbe:
    """The scheduler probe's interface with made-up waits: every tracked cgroup waits
    in every bucket, behind four others, idle and unattributed time, every pass."""

    loaded = True

    def __init__(self) -> None:
        from exporter.probe import ProbeStatus, ProbeTotals

        self.status = ProbeStatus(True, "", "", "occupancy")
        self._totals = ProbeTotals()
        self.tracked: list[int] = []

    def set_tracked(self, ids: set[int]) -> None:
        self.tracked = sorted(ids)

    def poll(self) -> Any:
        from exporter.probe import RUNQ_SLOTS, BlameCell, ProbeDelta, RunqDelta
        from exporter.probe.burst import BURST_SLOTS
        from exporter.window import CULPRIT_IDLE, CULPRIT_UNATTRIBUTED

        ids = self.tracked
        delta = ProbeDelta(interval_s=5.0, burst_measured=True)
        for i, vid in enumerate(ids):
            delta.runq[vid] = RunqDelta([3] * RUNQ_SLOTS, 0.25, [2] * BURST_SLOTS, 40)
            row: dict[Any, Any] = {CULPRIT_IDLE: BlameCell(0.01, 1)}
            row[CULPRIT_UNATTRIBUTED] = BlameCell(0.005, 1)
            for k in range(1, 5):
                row[ids[(i + k) % len(ids)]] = BlameCell(0.05 * k, k)
            delta.blame[vid] = row
        return delta

    def prune(self, live_ids: set[int]) -> int:
        return 0

    def totals(self) -> Any:
        return self._totals

    def close(self) -> None:
        self.loaded = False


def series_per_cgroup(text: str) -> dict[str, int]:
    """Samples of a text exposition per tracked cgroup they name (its identity labels;
    culprit labels do not count)."""
    per: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("#") or not _OWN.search(line):
            continue
        key = ",".join(_IDENT.findall(line))  # whose series it is
        per[key] = per.get(key, 0) + 1
    return per


def _settings(collectors: list[str]) -> list[tuple[str, bool, frozenset[str] | None]]:
    """(name, probe, optional collectors: None where this revision has no such option)."""
    out: list[tuple[str, bool, frozenset[str] | None]] = [
        ("default, probe loaded", True, frozenset()),
        ("default, no probe", False, frozenset()),
    ]
    if collectors:
        out.append(("every --collector.*, probe loaded", True, frozenset(collectors)))
    return out


def measure(sysfs: str, procfs: str, metadata: str, passes: int) -> dict[str, Any]:
    """Every setting this revision has, on the tree (runs in the revision's checkout)."""
    import exporter
    from exporter.agent import Agent, AgentConfig
    from exporter.exposition.text import render
    from exporter.findings import load_thresholds
    from exporter.probe import ProbeConfig

    try:
        from exporter.catalog import OPTIONAL_COLLECTORS

        collectors = sorted(OPTIONAL_COLLECTORS)
    except ImportError:  # a revision before the --collector.* flags
        collectors = []
    th = load_thresholds()
    results: dict[str, Any] = {"_exporter": str(Path(exporter.__file__).parent)}
    for name, with_probe, chosen in _settings(collectors):
        kwargs: dict[str, Any] = {}
        if chosen is not None and collectors:
            kwargs["collectors"] = chosen
        cfg = AgentConfig(
            sysfs=sysfs,
            procfs=procfs,
            sample_interval=5.0,
            metadata_file=metadata,
            probe=ProbeConfig(enabled=False),
            **kwargs,
        )
        agent = Agent(cfg, th, probe=StandInProbe() if with_probe else None)
        now = 1_800_000_000.0
        pub = None
        for _ in range(passes):
            now += 5.0
            pub = agent.run_pass(now=now)
        assert pub is not None
        tracked = len(pub.result.snapshot.containers) if pub.result is not None else 0
        families = pub.families()
        om = render(families, openmetrics=True)
        text = render(families, openmetrics=False)
        agent.close()
        per = series_per_cgroup(text.decode())
        series = sum(per.values())
        results[name] = {
            "tracked_cgroups": tracked,
            "series_per_container": round(series / tracked, 2),
            "series_max_one_container": max(per.values()) if per else 0,
            "openmetrics_bytes_per_container": round(len(om) / tracked),
            "openmetrics_gzip_bytes_per_container": round(len(gzip.compress(om, 1)) / tracked),
            "text_bytes_per_container": round(len(text) / tracked),
            "series_total": sum(1 for x in text.splitlines() if x and not x.startswith(b"#")),
        }
    return results


def _measure_in(rev: str, tree: dict[str, str], passes: int) -> dict[str, Any]:
    """This script's ``measure`` run from ``rev``'s sources (``git archive``: no
    checkout, no change to the repository)."""
    root = subprocess.run(
        ["git", "-C", str(HERE), "rev-parse", "--show-toplevel"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="cardinality-") as src:
        archive = subprocess.run(
            ["git", "-C", root, "archive", "--format=tar", rev, "exporter"],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
        proc = subprocess.run(
            [
                sys.executable,
                __file__,
                "--measure-only",
                *("--root", src, "--passes", str(passes)),
                *("--tree-sysfs", tree["sysfs"], "--tree-procfs", tree["procfs"]),
                *("--metadata", tree["metadata"]),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise SystemExit(f"measuring {rev} failed:\n{proc.stderr[-3000:]}")
        out: dict[str, Any] = json.loads(proc.stdout)
        if not out["_exporter"].startswith(src):
            raise SystemExit(f"measuring {rev} imported {out['_exporter']}, not its sources")
        return out


def print_table(before: dict[str, Any] | None, after: dict[str, Any], rev: str) -> None:
    cols = [
        ("series_per_container", "series/container"),
        ("series_max_one_container", "max, one container"),
        ("openmetrics_bytes_per_container", "OpenMetrics B/container"),
        ("openmetrics_gzip_bytes_per_container", "gzip B/container"),
        ("text_bytes_per_container", "text B/container"),
    ]
    any_after = after["default, probe loaded"]
    print(
        f"cardinality benchmark: {any_after['tracked_cgroups']} tracked cgroups (the named "
        "containers, system units and a user slice), probe data for every container"
    )
    rows: list[tuple[str, ...]] = [("setting", *(c[1] for c in cols))]
    for label, res in ((f"before ({rev})", before), ("after (this checkout)", after)):
        if res is None:
            continue
        for name, r in res.items():
            if name.startswith("_"):
                continue
            rows.append((f"{label}: {name}", *(str(r[k]) for k, _ in cols)))
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(x.ljust(w[0]) if i == 0 else x.rjust(w[i]) for i, x in enumerate(r)))
    if before is not None:
        key = "default, probe loaded"
        b, a = before[key], after[key]
        print(
            f"\n{key}: series/container {b['series_per_container']} -> "
            f"{a['series_per_container']}; OpenMetrics bytes/container "
            f"{b['openmetrics_bytes_per_container']} -> {a['openmetrics_bytes_per_container']} "
            f"({a['openmetrics_bytes_per_container'] / b['openmetrics_bytes_per_container']:.2f}x)"
            f"; text {b['text_bytes_per_container']} -> {a['text_bytes_per_container']} "
            f"({a['text_bytes_per_container'] / b['text_bytes_per_container']:.2f}x)"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--containers", type=int, default=1000)
    ap.add_argument("--passes", type=int, default=18, help="passes, 5 s apart (default 18)")
    ap.add_argument("--compare-with", metavar="REV", help="also measure this git revision")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    # internal: measure a tree in another checkout
    ap.add_argument("--measure-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("--tree-sysfs", help=argparse.SUPPRESS)
    ap.add_argument("--tree-procfs", help=argparse.SUPPRESS)
    ap.add_argument("--metadata", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.measure_only:
        sys.path.insert(0, a.root)
        print(json.dumps(measure(a.tree_sysfs, a.tree_procfs, a.metadata, a.passes)))
        return 0
    sys.path.insert(0, str(HERE.parent))
    from sampler_bench import build_tree, tmpfs_dir

    with tmpfs_dir() as d:
        tree = build_tree(d, a.containers)
        meta = d / "metadata.yaml"
        write_metadata(tree, meta)
        paths = {"sysfs": str(tree.sysfs), "procfs": str(tree.procfs), "metadata": str(meta)}
        after = measure(paths["sysfs"], paths["procfs"], paths["metadata"], a.passes)
        before = _measure_in(a.compare_with, paths, a.passes) if a.compare_with else None
    if a.json:
        print(json.dumps({"before": before, "after": after, "rev": a.compare_with}, indent=1))
    else:
        print_table(before, after, a.compare_with or "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
