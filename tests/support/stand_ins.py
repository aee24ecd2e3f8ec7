"""Stand-ins for what unit tests cannot run: the BPF scheduler probe (tested on the real
kernel in tests/integration) and the evaluator, when a test needs findings that say
which pass they were evaluated for."""

from __future__ import annotations

from exporter.findings.model import CULPRIT_POD, Culprit, Finding, Kind, Severity, Victim
from exporter.findings.thresholds import Thresholds
from exporter.probe import DEFAULT_TOP_K, ProbeDelta, ProbeStatus, ProbeTotals, RunqHistogram
from exporter.probe.status import REASON_NOT_LOADED
from exporter.window.model import Window


class FakeProbe:
    """Stands in for the BPF probe: hands the sampler prepared deltas so the folding
    logic can be checked exactly. Loaded by ``core`` until closed, like the real one."""

    loaded = True

    def __init__(self) -> None:
        self.status = ProbeStatus(True, "", "", "occupancy", loader="core")
        self._totals = ProbeTotals()
        self.tracked: set[int] = set()
        self.deltas: list[ProbeDelta] = []
        self.pruned: list[set[int]] = []

    def set_tracked(self, ids: set[int]) -> None:
        self.tracked = set(ids)

    def poll(self) -> ProbeDelta:
        return self.deltas.pop(0) if self.deltas else ProbeDelta(interval_s=1.0)

    def prune(self, live_ids: set[int]) -> int:
        self.pruned.append(set(live_ids))
        return 0

    def totals(self) -> ProbeTotals:
        return self._totals

    def runq_totals(self) -> dict[int, RunqHistogram]:
        return {}

    def close(self) -> None:
        self.loaded = False
        self.status = ProbeStatus(False, REASON_NOT_LOADED, "closed", "occupancy")


def culprit_ref(now: float, i: int) -> str:
    """The ``culprit`` label of :func:`pass_findings`' ``i``-th finding at ``now``."""
    return f"pass-at-{now:.0f}/{i}"


def findings_per_pass(now: float) -> int:
    """How many findings :func:`pass_findings` returns at ``now``: 1 to 3, so the rows
    change from pass to pass (``now`` in whole seconds)."""
    return 1 + int(now) % 3


def pass_findings(
    window: Window, th: Thresholds, now: float, top_k: int = DEFAULT_TOP_K
) -> list[Finding]:
    """An evaluator (``exporter.findings.evaluate``'s signature) whose findings say which
    pass they were evaluated for: :func:`findings_per_pass` noisy-neighbor findings about
    the window's first container, each blaming a culprit named :func:`culprit_ref`.
    The evidence says whether the probe was loaded, as the real evaluator's does."""
    if not window.containers:
        return []
    victim_id, cw = min(window.containers.items())
    victim = Victim(victim_id, cw.identity)
    return [
        Finding(
            kind=Kind.NOISY_NEIGHBOR,
            severity=Severity.WARNING,
            victim=victim,
            culprit=Culprit(
                kind=CULPRIT_POD,
                ref=culprit_ref(now, i),
                cgroup_id=victim_id + 1 + i,
                identity=cw.identity,
                blame_share=0.9,
                cpu_usage_cores=1.0,
                cpu_request_cores=None,
            ),
            evidence={"probe_loaded": window.probe_loaded},
            first_seen=now - 120,
            last_seen=now,
            message=f"stand-in finding {i} of the pass at {now:.0f}",
        )
        for i in range(findings_per_pass(now))
    ]
