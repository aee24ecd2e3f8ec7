"""Stand-ins for what unit tests cannot run: the BPF scheduler probe (tested on the real
kernel in tests/integration)."""

from __future__ import annotations

from exporter.probe import ProbeDelta, ProbeStatus, ProbeTotals, RunqHistogram
from exporter.probe.status import REASON_NOT_LOADED


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
