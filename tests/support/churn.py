"""A culprit that is replaced every few seconds beside a victim on one CPU, sampled by
the exporter's own agents once a second (one per probe loader, in the same passes): the
loop of the real-kernel churn lab (tests/integration/test_churn_kernel.py)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

from exporter.agent import Agent
from exporter.exposition.published import Published
from labs import LabCgroup, spawn_busy


def pin(pids: list[int], cpu: int) -> None:
    for pid in pids:
        os.sched_setaffinity(pid, {cpu})


def replace_and_sample(
    agents: Sequence[Agent],
    make_lab: Callable[..., LabCgroup],
    name: str,
    cpu: int,
    every_s: float,
    generations: int,
    seconds: float,
    clock: Callable[[], float] = time.time,
) -> tuple[list[Published], list[LabCgroup], list[int]]:
    """For ``seconds``, run a pass a second (at ``clock()``) of every agent while a busy
    one-thread job ``<name>-<n>`` pinned to ``cpu`` is replaced every ``every_s`` (the
    old cgroup removed for good), ``generations`` times. Returns each agent's last pass,
    the jobs and their cgroup ids (taken while each job exists: a removed cgroup has
    none to read)."""
    jobs: list[LabCgroup] = []
    ids: list[int] = []
    published: list[Published] = []
    start = time.monotonic()
    while (elapsed := time.monotonic() - start) < seconds:
        if len(jobs) < generations and elapsed >= every_s * len(jobs):
            if jobs:
                jobs[-1].remove()  # replaced: the old container is gone for good
            job = make_lab(f"{name}-{len(jobs)}")
            hog = spawn_busy(job, threads=1, seconds=every_s + 1)
            pin([hog.pid, *hog.children], cpu)
            jobs.append(job)
            ids.append(job.cgroup_id)
        now = clock()
        published = [agent.run_pass(now=now) for agent in agents]
        time.sleep(max(0.0, 1.0 - (time.monotonic() - start - elapsed)))
    return published, jobs, ids
