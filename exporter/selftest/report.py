"""What a self-test found: the report, its verdict, its one-screen summary and JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .hosting import EXIT_FAIL, EXIT_PASS

BLAME_TOLERANCE = 0.10  # the blame share must be within 10 points of the kernel's truth


@dataclass
class Check:
    """One expectation of the self-test and what came of it."""

    name: str
    expected: str
    ok: bool | None = None  # None: not checked on this node (``skipped`` says why)
    seen: str = "not seen"
    seconds: float | None = None  # from the load's start to the pass that showed it
    skipped: str | None = None


@dataclass
class Report:
    node: dict[str, Any] = field(default_factory=dict)
    probe_loaded: bool = False
    probe: str = ""  # loader and attribution, or why it is off
    checks: list[Check] = field(default_factory=list)
    blame_share: float | None = None
    truth_share: float | None = None
    time_to_first_finding_s: float | None = None
    probe_ns_per_switch: float | None = None
    bpf_stats: str = ""
    duration_s: float = 0.0
    mode: str = "local"  # "local" or "exporter" (the running exporter ran it)
    placement: str = ""  # where its cgroups went, and why there (cgroups.place)
    problems: list[str] = field(default_factory=list)
    left_behind: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems and all(c.ok is not False for c in self.checks)

    @property
    def exit_code(self) -> int:
        return EXIT_PASS if self.passed else EXIT_FAIL

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["passed"] = self.passed
        d["exit_code"] = self.exit_code
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Report:
        checks = [Check(**c) for c in d.get("checks") or []]
        keep = {k: v for k, v in d.items() if k in cls.__dataclass_fields__ and k != "checks"}
        return cls(checks=checks, **keep)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.0f}%"


def summary(r: Report) -> str:
    """The report in one screen."""
    verdict = "PASS" if r.passed else "FAIL"
    node = ", ".join(f"{k} {v}" for k, v in r.node.items())
    lines = [
        f"contention-exporter selftest: {verdict} in {r.duration_s:.0f} s ({r.mode}; {node})",
        f"  scheduler probe: {'loaded, ' if r.probe_loaded else 'NOT loaded: '}{r.probe}",
    ]
    if r.placement:
        lines.append(f"  cgroups: {r.placement}")
    for c in r.checks:
        mark = "skip" if c.ok is None else "ok" if c.ok else "FAIL"
        when = "" if c.seconds is None else f" after {c.seconds:.0f} s"
        lines.append(f"  [{mark:>4}] {c.name}: expected {c.expected}")
        lines.append(f"         {c.skipped if c.skipped else c.seen + when}")
    diff = (
        None
        if r.blame_share is None or r.truth_share is None
        else abs(r.blame_share - r.truth_share)
    )
    lines.append(
        f"  blame share {_pct(r.blame_share)} vs the kernel's CPU accounting "
        f"{_pct(r.truth_share)}"
        + ("" if diff is None else f" ({diff * 100:.1f} points apart, at most 10 allowed)")
    )
    first = "-" if r.time_to_first_finding_s is None else f"{r.time_to_first_finding_s:.0f} s"
    cost = "-" if r.probe_ns_per_switch is None else f"{r.probe_ns_per_switch:.0f} ns"
    lines.append(f"  time to first finding: {first}; probe cost per context switch: {cost}")
    lines.append(f"  BPF statistics: {r.bpf_stats}")
    for p in r.problems:
        lines.append(f"  problem: {p}")
    for x in r.left_behind:
        lines.append(f"  LEFT BEHIND: {x}")
    return "\n".join(lines) + "\n"
