"""The Kubernetes resolver's per-event costs, side by side at growing sizes.

    python bench/kube_bench.py [--json]

* **index update per watch event**: ``PodIndex.put`` of one MODIFIED pod (a restart:
  a new container ID) on a node index of 500, 5,000 and 50,000 pods. Incremental
  updates cost the pod, not the node: the three medians should be about equal (the
  index used to be rebuilt on every event: 2.6 ms at 5,000 pods).
* **line splitter**: ``split_lines`` over one chunk of 2 MB and one of 20 MB of watch
  lines (a server or proxy may hand over a large buffer at once). Linear: the 20 MB
  case should take about ten times the 2 MB one (it used to take 4.2 s, quadratic).

No kernel, no API server: the resolver's own data structures, timed in this process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from exporter.kube.index import PodIndex
from exporter.kube.pods import PodMeta
from exporter.kube.watch import split_lines


def _pod(i: int, restart: int = 0) -> PodMeta:
    ids = {f"{i:032x}{r:032x}": f"c{i % 3}" for r in range(restart + 1)}
    return PodMeta(
        uid=f"uid-{i}",
        namespace="ns",
        name=f"pod-{i}",
        node="n",
        qos="burstable",
        opted_out=False,
        resource_version=str(i),
        container_ids=ids,
    )


def index_update_us(pods: int, events: int = 2000) -> float:
    """Median microseconds of one put() of a restarted pod into an index of ``pods``."""
    idx = PodIndex(grace_s=300)
    for i in range(pods):
        idx.put(_pod(i))
    times = []
    for e in range(events):
        p = _pod((e * 7919) % pods, restart=1 + e % 5)
        t = time.perf_counter()
        idx.put(p)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def split_s(megabytes: int) -> float:
    line = b'{"type":"MODIFIED","object":{"metadata":{"name":"p","uid":"u"},"x":"' + b"y" * 100
    data = (line + b'"}}\n') * (megabytes * 1_000_000 // (len(line) + 4))
    t = time.perf_counter()
    n = sum(1 for _ in split_lines([data], max_line=16 << 20))
    elapsed = time.perf_counter() - t
    assert n == data.count(b"\n")
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sizes = (500, 5_000, 50_000)
    updates = {n: index_update_us(n) for n in sizes}
    splits = {mb: split_s(mb) for mb in (2, 20)}
    result = {
        "index_update_us": updates,
        "index_update_ratio_50000_to_500": updates[50_000] / updates[500],
        "split_seconds": splits,
        "split_ratio_20MB_to_2MB": splits[20] / splits[2],
    }
    if args.json:
        print(json.dumps(result))
        return 0
    print("kube resolver: per-event costs (medians)")
    for n, us in updates.items():
        print(f"  index update, one pod, {n:>6} pods on the node   {us:8.1f} us")
    ratio = result["index_update_ratio_50000_to_500"]
    print(f"  ratio 50,000 / 500 pods                         {ratio:8.2f}x")
    for mb, sec in splits.items():
        print(f"  split_lines, one {mb:>2} MB chunk                  {sec * 1000:8.1f} ms")
    ratio = result["split_ratio_20MB_to_2MB"]
    print(f"  ratio 20 MB / 2 MB                              {ratio:8.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
