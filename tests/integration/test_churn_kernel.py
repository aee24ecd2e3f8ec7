"""Culprits that come and go, on the real kernel: one scene, both probe loaders at once.

A busy job whose container is replaced every 15 s (a crash-looping Deployment, short
batch pods) starves a light victim pinned to the same CPU for one minute. Every
generation is a pod of the same Deployment (what ownerReferences say in Kubernetes; the
metadata file says it here) with no request, so its weight is the default, ten times the
victim's (request 100m). Two of the exporter's own agents sample the scene in the same
passes, one with the CO-RE probe and one with BCC, so each loader is judged on the same
kernel events. For each one:

* **departed names** (docs/probe.md, "Culprits that come and go"): every generation keeps
  its name in the victim's blame after its cgroup is gone, each with a real share of the
  wait, so that ``unknown`` stays at most 5 % of the victim's wait;
* **workload culprits** (docs/findings.md#workload-culprits): each generation alone
  causes well under ``blameShare`` of the wait, together nearly all of it, and the
  finding is ``noisy-neighbor`` naming the workload, with the
  ``contention_workload_blame_ratio`` family the dashboards draw it from.

A finding needs one complete sustain minute; the passes are given times shifted so the
run starts just after a minute boundary (the kernel's counters and the probe's waits are
real; only the minute they are folded into is chosen), so the test takes about 70 s,
not up to two minutes. Run under ``flock /tmp/contention-kernel.lock``; the scene is on
``lab_cpu()`` only (marker ``lab_cpu``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from exporter.agent import Agent, AgentConfig
from exporter.exposition.published import Published
from exporter.findings import Thresholds, load_thresholds
from exporter.findings.aggregates import Clock, culprit_shares, identities, window_blame
from exporter.findings.model import Kind
from exporter.probe import SchedProbe
from exporter.probe.blame import unknown_blame_ratio
from exporter.probe.culprit import CulpritKind, classify_culprit
from labs import LabCgroup, spawn_periodic
from labs.cgroups import PREFIX
from labs.scenarios import lab_cpu
from tests.support.churn import pin, replace_and_sample
from tests.support.probe_loaders import LOADERS, probe_loader

pytestmark = [pytest.mark.kernel, pytest.mark.probe]

MakeLab = Callable[..., LabCgroup]
REPLACE_EVERY_S = 15.0
GENERATIONS = 4  # one minute of a workload replacing its container every 15 s
WORKLOAD = "Deployment/churn"


@pytest.fixture
def both_probes() -> Iterator[dict[str, Callable[..., SchedProbe]]]:
    loaders = {name: probe_loader(name) for name in LOADERS}
    loads = {name: next(gen) for name, gen in loaders.items()}
    try:
        yield loads
    finally:
        for gen in loaders.values():
            for _ in gen:  # runs each loader's cleanup (closes its probe)
                pass


def _metadata(path: Path) -> None:
    meta = {
        f"/{PREFIX}churn-victim": {
            "namespace": "lab",
            "pod": "victim",
            "container": "app",
            "cpu_request": "100m",
        },
        **{
            f"/{PREFIX}churn-job-{i}": {
                "namespace": "lab",
                "pod": f"churn-5d8c7-{i}",
                "container": "job",
                "workload": WORKLOAD,
            }
            for i in range(GENERATIONS)
        },
    }
    path.write_text(yaml.safe_dump({"cgroups": meta}))


# Its scene (the victim and every generation) is pinned to lab_cpu(); the agents sample
# from the harness's CPUs: scripts/test.sh runs it beside the VM lane.
@pytest.mark.lab_cpu
def test_replaced_culprits_keep_their_names_and_are_named_as_their_workload(
    make_lab: MakeLab, both_probes: dict[str, Callable[..., SchedProbe]], tmp_path: Path
) -> None:
    meta_path = tmp_path / "metadata.yaml"
    _metadata(meta_path)
    th = replace(load_thresholds(), window_minutes=2, sustain_minutes=1)
    cfg = AgentConfig(sample_interval=1.0, process_metrics=False, metadata_file=str(meta_path))
    agents = {name: Agent(cfg, th, probe=load()) for name, load in both_probes.items()}
    cpu = lab_cpu()
    run_s = REPLACE_EVERY_S * GENERATIONS

    victim = make_lab("churn-victim", cpu_shares=102)
    w = spawn_periodic(victim, work_ms=5.0, period_ms=50.0, seconds=run_s + 8)
    pin([w.pid], cpu)
    # The passes' clock: real time shifted so that now is 0.5 s into a minute.
    t0 = time.time()
    shift = t0 % 60 - 0.5
    minute = (t0 - shift) - 0.5  # the one sustain minute the run covers
    published, jobs, job_ids = replace_and_sample(
        list(agents.values()),
        make_lab,
        "churn-job",
        cpu,
        REPLACE_EVERY_S,
        GENERATIONS,
        run_s + 1.5,
        clock=lambda: time.time() - shift,
    )
    now = time.time() - shift
    failures = []
    for (name, agent), last in zip(agents.items(), published, strict=True):
        try:
            _check(name, agent, last, th, victim, job_ids, now, minute)
        except AssertionError as e:
            failures.append(f"{name}: {e}")
    assert not failures, "\n".join(failures)
    assert len(jobs) == GENERATIONS


def _check(
    loader: str,
    agent: Agent,
    published: Published,
    th: Thresholds,
    victim: LabCgroup,
    job_ids: list[int],
    now: float,
    minute: float,
) -> None:
    assert published.result is not None
    result = published.result
    window = result.window
    assert window is not None
    clock = Clock.at(now, th, window)
    assert clock.latest == minute, "the run's minute is the one judged"

    # Departed names: the replaced generations are gone, and every one is still named.
    names = identities(window)
    departed = set(agent.sampler._departed.names())
    assert set(job_ids[:-1]) <= departed, (job_ids, departed)
    kinds = {classify_culprit(k, names).kind for k in job_ids}
    assert kinds == {CulpritKind.POD}, kinds
    blame = window_blame(window, victim.cgroup_id, now, th, clock)
    total = sum(blame.values())
    unknown = unknown_blame_ratio([blame], names)
    without_departed = unknown_blame_ratio(
        [blame], {k: v for k, v in names.items() if k not in departed}
    )
    per_job = {
        s.ref: round(s.share, 3)
        for s in culprit_shares(window, victim.cgroup_id, now, th, clock, names)
        if s.key in set(job_ids)
    }
    mine = [f for f in result.findings if f.victim.cgroup_id == victim.cgroup_id]
    print(
        f"[{loader}] victim wait {total:.2f}s in the minute; share per generation {per_job}; "
        f"unknown {unknown} (without departed names: {without_departed}); "
        f"findings {[(f.kind.value, f.culprit and f.culprit.ref) for f in mine]}"
    )
    assert total > 5.0, "the victim hardly waited: no contention on its CPU"
    assert len(per_job) == GENERATIONS, per_job  # every generation named, gone or not
    assert all(s > 0.1 for s in per_job.values()), per_job  # each a real part of the wait
    assert all(s < th.blame_share for s in per_job.values()), per_job  # none alone
    assert unknown is not None and unknown <= 0.05, (unknown, blame)

    # Workload culprit: together the generations are the noisy neighbour.
    (f,) = mine
    assert f.kind is Kind.NOISY_NEIGHBOR, f.message
    c = f.culprit
    assert c is not None and (c.kind, c.ref) == ("workload", f"lab/{WORKLOAD}"), f.message
    assert c.members == GENERATIONS and c.blame_share >= th.blame_share
    assert f"made of {GENERATIONS} containers" in f.message
    shares = [
        s
        for m in published.families()
        if m.name == "contention_workload_blame_ratio"
        for s in m.samples
        if s.labels.get("culprit_workload") == WORKLOAD
    ]
    assert shares and all(s.labels["culprit_kind"] == "workload" for s in shares), shares
    assert max(s.value for s in shares) >= th.blame_share, shares
