"""Cgroup churn soak on the real kernel: is the exporter's memory flat while cgroups
come and go, and do the series of removed cgroups go with them?

    flock /tmp/contention-kernel.lock .venv/bin/python bench/churn_soak.py --minutes 10

Starts the real exporter (this checkout's, ``--sampler.interval 1``, probe off unless
``--probe``) and, for the whole run, keeps ``--alive`` lab cgroups in existence while
creating and removing ``--rate`` of them a second (oldest first): lab cgroups are made
and removed by ``labs.cgroups`` (the ``contention-test-`` prefix, ownership records,
cleanup of leftovers; on a hybrid node a directory in the cgroup2 hierarchy and in the
v1 ``cpu`` hierarchy, never the v1 ``memory`` one). Every second it reads the
exporter's RSS from ``/proc/<pid>/status``; at the end it removes every churn cgroup,
waits two passes and counts the series that still name one.

Reports the RSS slope after warm-up (least squares over the samples after the first
``--warmup`` share of the run, in KiB per minute) and the leaked series. Needs root.
``tests/integration/test_churn_soak.py`` runs a one-minute version in the suite.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # labs/ is imported from the checkout

from labs import LabCgroup, cleanup_stale, detect_layout, unavailable_reason  # noqa: E402
from labs.exporter_proc import ExporterProcess  # noqa: E402

CHURN = "contention-test-churn-"


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def slope_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, KiB) points, in KiB per minute."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    cov = sum((t - mx) * (v - my) for t, v in points)
    return 60.0 * cov / var if var else 0.0


def soak(seconds: float, alive: int, rate: float, warmup: float, probe: bool) -> dict[str, object]:
    reason = unavailable_reason()
    if reason is not None:
        raise SystemExit(f"churn soak: {reason}")
    layout = detect_layout()
    cleanup_stale(layout=layout)
    tag = f"{CHURN}{os.getpid()}-"
    labs: deque[LabCgroup] = deque()
    created = removed = 0
    samples: list[tuple[float, float]] = []
    unhealthy = 0
    exp = ExporterProcess(sample_interval=1.0, probe=probe)
    exp.start(timeout=60.0)
    try:
        start = time.monotonic()
        next_sample = start
        next_op = start
        while (now := time.monotonic()) - start < seconds:
            if now >= next_op:
                labs.append(LabCgroup.create(f"{tag}{created}", layout=layout))
                created += 1
                if len(labs) > alive:
                    labs.popleft().remove()
                    removed += 1
                next_op += 1.0 / rate
            if now >= next_sample:
                samples.append((now - start, float(rss_kib(exp.pid))))
                if exp.get("/healthz", timeout=5.0)[0] != 200:
                    unhealthy += 1
                next_sample += 1.0
            time.sleep(max(0.0, min(next_op, next_sample) - time.monotonic()))
        while labs:
            labs.popleft().remove()
            removed += 1
        time.sleep(3.0)  # two passes and a bit: the removed cgroups' series must be gone
        scrape = exp.scrape()
        leaked = sorted(c for c in scrape.cgroups() if CHURN in c)
        leaked_series = sum(1 for s in scrape.samples if CHURN in s.labels.get("cgroup", ""))
        passes = scrape.value("contention_sampler_passes_total") or 0.0
        skipped = {
            s.labels["reason"]: s.value
            for s in scrape.select("contention_sampler_skipped_cgroups_total")
        }
    finally:
        for lab in labs:
            lab.remove()
        exp.close()
        cleanup_stale(layout=layout)
    after = [p for p in samples if p[0] >= warmup * seconds]
    return {
        "seconds": round(seconds),
        "cgroups_created": created,
        "cgroups_removed": removed,
        "alive": alive,
        "passes": int(passes),
        "rss_start_kib": samples[0][1] if samples else None,
        "rss_after_warmup_kib": after[0][1] if after else None,
        "rss_end_kib": samples[-1][1] if samples else None,
        "rss_slope_after_warmup_kib_per_min": round(slope_per_min(after), 1),
        "leaked_cgroups": len(leaked),
        "leaked_series": leaked_series,
        "healthz_not_ok": unhealthy,
        "skipped_total": skipped,
        "probe": probe,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--alive", type=int, default=20, help="churn cgroups alive at once")
    ap.add_argument("--rate", type=float, default=10.0, help="cgroups created per second")
    ap.add_argument("--warmup", type=float, default=0.3, help="share of the run before the slope")
    ap.add_argument("--probe", action="store_true", help="with the scheduler probe loaded")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    result = soak(args.minutes * 60, args.alive, args.rate, args.warmup, args.probe)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"churn soak: {args.minutes:g} min, {args.alive} alive, {args.rate:g} cgroups/s")
    for k, v in result.items():
        print(f"  {k:36} {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
