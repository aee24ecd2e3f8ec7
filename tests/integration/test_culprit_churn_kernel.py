"""A culprit that comes and goes, on the real kernel (docs/probe.md, "Culprits that
come and go"): a busy job whose container is replaced every 20 s starves a victim on
one CPU. The exporter's own agent (real sampler, real probe, 1 s passes) must name
every generation of the job in the victim's blame, departed ones included, so that
``unknown`` stays at most 5 % of the victim's wait.

Run under ``flock /tmp/contention-kernel.lock`` (timing-sensitive, ~50 s per loader).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from exporter.agent import Agent, AgentConfig
from exporter.findings import load_thresholds
from exporter.findings.aggregates import identities
from exporter.probe import SchedProbe
from exporter.probe.blame import unknown_blame_ratio
from exporter.probe.culprit import CulpritKind, classify_culprit
from labs import LabCgroup, spawn_periodic
from tests.support.churn import pin, replace_and_sample

pytestmark = [pytest.mark.kernel, pytest.mark.probe]

MakeLab = Callable[..., LabCgroup]
REPLACE_EVERY_S = 20.0
GENERATIONS = 3


def test_replaced_culprit_keeps_its_name(
    make_lab: MakeLab, load_probe: Callable[..., SchedProbe]
) -> None:
    probe = load_probe()
    cfg = AgentConfig(sample_interval=1.0, process_metrics=False)
    agent = Agent(cfg, load_thresholds(), probe=probe)
    cpu = max(os.sched_getaffinity(0))
    run_s = REPLACE_EVERY_S * GENERATIONS
    victim = make_lab("churn-victim", cpu_shares=128)
    w = spawn_periodic(victim, work_ms=1.0, period_ms=10.0, seconds=run_s + 8)
    pin([w.pid], cpu)
    agent.run_pass()
    published, jobs, ids = replace_and_sample(
        agent, make_lab, "churn-job", cpu, REPLACE_EVERY_S, GENERATIONS, run_s + 2.0
    )
    assert published is not None and published.result is not None
    result = published.result
    assert result.window is not None
    blame = result.blame[victim.cgroup_id]
    names = identities(result.window)
    total = sum(blame.values())
    by_job = {j.path: blame.get(i, 0.0) / total for j, i in zip(jobs, ids, strict=True)}
    unknown = unknown_blame_ratio([blame], names)
    departed = set(agent.sampler._departed.names())
    before = unknown_blame_ratio([blame], {k: v for k, v in names.items() if k not in departed})
    kinds = {str(classify_culprit(k, names).kind) for k in ids}
    print(
        f"victim wait {total:.2f}s over {run_s:.0f}s; share per job generation {by_job}; "
        f"unknown {unknown:.3f} (without departed names: {before:.3f})"
    )
    assert total > 5.0, "the victim hardly waited: no contention on its CPU"
    assert set(ids[:-1]) <= departed  # the replaced generations are gone...
    assert kinds == {str(CulpritKind.SYSTEM)}  # ...and every one is still named
    assert all(s > 0.1 for s in by_job.values()), by_job
    assert unknown is not None and unknown <= 0.05, (unknown, blame)
