"""The workload lab: a Deployment whose container is replaced every few seconds starves a
light victim, and only the workload as a whole can be named (docs/findings.md,
"Workload culprits").

Each generation of the job is a pod of ``Deployment/churn`` (namespace ``lab``) with a
500m request running one busy loop, so it runs beyond its request; each lives
``every_s`` seconds, then its cgroup is removed and its pod deleted, and the next one
starts, as a crash-looping or constantly rolled Deployment does. Alone, a generation
causes a quarter of the victim's wait over a minute (under ``blameShare``); together
they cause nearly all of it. Victim and job share one CPU. Kubernetes mode only: the
pods go to a :class:`~labs.kube.PodSink` (the tests' API emulator), the cgroups are
kubelet-shaped (:mod:`labs.kube`).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

from .cgroups import LabCgroup, LabError, LabLayout, kubelet_shares
from .kube import LabPod, PodSink
from .workers import spawn_busy, spawn_periodic

NAME = "workload"
NAMESPACE = "lab"
WORKLOAD = "Deployment/churn"
VICTIM_POD = "workload-victim"
VICTIM_REQUEST = 0.1
JOB_REQUEST = 0.5


@dataclass
class WorkloadLab:
    pods: PodSink
    layout: LabLayout
    cpu: int
    seconds: float  # every worker's bound
    every_s: float = 15.0
    parent: LabCgroup | None = None
    victim: LabCgroup | None = None
    victim_pod: LabPod | None = None
    generations: list[tuple[LabPod, LabCgroup, list[LabCgroup]]] = field(default_factory=list)
    started_at: float | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    errors: list[str] = field(default_factory=list)
    removed: bool = False  # stop() has removed its cgroups and pods

    def start(self) -> WorkloadLab:
        ncpu = float(os.cpu_count() or 1)
        self.parent = LabCgroup.create(NAME, cpu_shares=kubelet_shares(ncpu), layout=self.layout)
        self.victim_pod = LabPod.of(NAMESPACE, VICTIM_POD, "app", VICTIM_REQUEST, None)
        self.victim, _ = self._pod_cgroup(self.victim_pod, "victim")
        w = spawn_periodic(self.victim, work_ms=5.0, period_ms=50.0, seconds=self.seconds)
        os.sched_setaffinity(w.pid, {self.cpu})
        self.started_at = time.time()
        self._replace()
        self._thread = threading.Thread(target=self._churn, name="workload-churn", daemon=True)
        self._thread.start()
        return self

    def _pod_cgroup(self, pod: LabPod, role: str) -> tuple[LabCgroup, list[LabCgroup]]:
        assert self.parent is not None
        self.pods.create(pod.api_object())
        shares = kubelet_shares(pod.cpu_request)
        chain = [LabCgroup.create(role, cpu_shares=shares, parent=self.parent)]
        for name in pod.cgroup_chain:
            chain.append(LabCgroup.create(name, cpu_shares=shares, parent=chain[-1]))
        return chain[-1], chain[:-1]

    def _replace(self) -> None:
        """Remove the current generation (cgroup, then pod) and start the next."""
        if self.generations:
            pod, cg, chain = self.generations[-1]
            cg.remove()
            for c in reversed(chain):
                c.remove()
            self.pods.delete(pod.namespace, pod.name)
        n = len(self.generations)
        pod = LabPod.of(NAMESPACE, f"churn-{n}", "job", JOB_REQUEST, None, workload=WORKLOAD)
        cg, chain = self._pod_cgroup(pod, f"job-{n}")
        hog = spawn_busy(cg, threads=1, seconds=min(self.every_s + 1.0, self.seconds))
        for pid in (hog.pid, *hog.children):
            os.sched_setaffinity(pid, {self.cpu})
        self.generations.append((pod, cg, chain))

    def _churn(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self._replace()
            except (LabError, OSError) as e:
                self.errors.append(str(e))
                return

    def stop_workloads(self) -> None:
        """Stop replacing; stop the victim's and the current job's workers (their
        cgroups and pods stay, idle, until :meth:`stop`)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10.0)
        for cg in [self.victim, *(g[1] for g in self.generations[-1:])]:
            if cg is not None:
                cg.stop_workers()

    def stop(self) -> None:
        """Stop the workloads, remove the cgroups and delete the pods; once (a second
        call does nothing)."""
        if self.removed:
            return
        self.stop_workloads()
        errors: list[str] = []
        done = [g for g in self.generations if not g[1].removed]
        victim = (
            []
            if self.victim is None or self.victim_pod is None
            else [(self.victim_pod, self.victim, self._victim_chain())]
        )
        for pod, cg, chain in [*done, *victim]:
            for c in [cg, *reversed(chain)]:
                try:
                    c.remove()
                except (LabError, OSError) as e:
                    errors.append(f"{c.path}: {e}")
            try:
                self.pods.delete(pod.namespace, pod.name)
            except OSError as e:
                errors.append(f"pod {pod.name}: {e}")
        if self.parent is not None:
            try:
                self.parent.remove()
            except (LabError, OSError) as e:
                errors.append(f"{self.parent.path}: {e}")
        self.removed = True
        if errors:
            raise LabError("workload lab cleanup failed: " + "; ".join(errors))

    def _victim_chain(self) -> list[LabCgroup]:
        chain: list[LabCgroup] = []
        cg = self.victim.parent if self.victim is not None else None
        while cg is not None and cg is not self.parent:
            chain.insert(0, cg)
            cg = cg.parent
        return chain
