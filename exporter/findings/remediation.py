"""Remediation with numbers: each finding's suggested setting, computed from the window.

docs/findings.md#remediation-with-numbers gives the method and its limits. Every value
is computed in the same arithmetic order as the generated rules' recording rules
(``exporter.rules``), which render the same sentence into the alert's ``remediation``
annotation, so the two agree to the bit on the scenario corpus. When a number cannot
be computed (no usage history, no throttled time, a culprit that is not sampled or
gone, no run-queue data) the suggestion says so and carries no value: never a guess.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

MILLI = 1000  # CPU suggestions are whole millicores, rounded up
MIB = 1048576  # memory suggestions are whole MiB, rounded up
PAGE_BYTES = 4096  # one refaulted page (the base page size on x86-64 and most arm64)
# Rounding up ignores this much (in millicores or MiB): a value that is a whole number
# in exact arithmetic can come out a hair above it in floating point (Prometheus
# extrapolates a young series' rates), and must not round up one more.
ROUNDING_SLACK = 1e-6

# The sentence of each finding kind, with a value and without one. ``{value}`` is the number
# (millicores or MiB), ``{culprit}`` the culprit's name, ``{w}`` the window in minutes.
# The rules generator fills the same placeholders with Go template snippets.
TEXT_WITH_VALUE = {
    "cpu-throttled": (
        "Set resources.limits.cpu to at least {value}m, its average use plus the CPU time "
        "it was throttled over the last {w}m, or remove the limit."
    ),
    "noisy-neighbor": (
        "Give {culprit} a CPU request of at least {value}m, its average use over the last "
        "{w}m, or lower its usage; or move one of the two to another node."
    ),
    "cpu-contended": (
        "The node is short about {value}m of CPU: that much runnable work of its "
        "containers waited for a CPU on average over the last {w}m. Add that capacity or "
        "move work to another node."
    ),
    "memory-pressure": (
        "Set the memory request of {culprit} to at least {value}Mi, its working set, or "
        "add memory to the node."
    ),
    "memory-limit-thrash": (
        "Set resources.limits.memory to at least {value}Mi, its working set plus the "
        "pages it read back in the latest minute."
    ),
}
TEXT_WITHOUT_VALUE = {
    "cpu-throttled": (
        "Raise or remove resources.limits.cpu; no limit could be computed from the window."
    ),
    "noisy-neighbor": (
        "Lower {culprit}'s usage or give it a request that reflects it (its use over the "
        "window is not known); or move one of the two to another node."
    ),
    "cpu-contended": (
        "Add capacity or spread the workload; how much CPU the node is short could not be "
        "computed from the window."
    ),
    "memory-pressure": (
        "Set or raise memory requests on the containers using most beyond their requests, "
        "or add memory to the node."
    ),
    "memory-limit-thrash": (
        "Raise resources.limits.memory; no limit could be computed from the window."
    ),
}

# cpu-throttled in the bursty case (docs/findings.md#cpu-throttled-in-bursts): its
# average demand fits its limit, and the limit is the fewest cores that as many of its
# threads as wanted a CPU at once in all but throttledRatioMax of the times one was
# queued would need ({threads}; {value} is that many cores in millicores, {max} the
# threshold in percent). Seed 001's lasting fix is the thread pools, hence the advice.
TEXT_BURST = (
    "Set resources.limits.cpu to at least {value}m: up to {threads} of its threads wanted "
    "a CPU at once in all but {max}% of the times one was queued over the last {w}m, more "
    "than its limit allows. Or size its thread pools and workers to its limit (GOMAXPROCS, "
    "-XX:ActiveProcessorCount), or remove the limit."
)

# noisy-neighbor naming a workload (docs/findings.md#workload-culprits): the value is
# what its running containers used together, so the requests to set are a total over
# them (one request per replica when one runs at a time; split among them otherwise).
TEXT_WORKLOAD_CULPRIT = (
    "Give the containers of {culprit} CPU requests that add up to at least {value}m, the "
    "summed average use of its running containers over the last {w}m, or lower their "
    "usage; or move one of the two to another node.",
    "Lower the usage of {culprit}'s containers or give them requests that reflect it "
    "(none of its running containers has a measured use over the window yet); or move one "
    "of the two to another node.",
)

# ... when none of its running containers has a measured use yet (a replica younger
# than two sampler passes, as in a crash-looping Deployment): sized from the use each of
# its containers was measured at over the window, gone ones included ({each}, rounded up
# like every value), for as many as run now ({running}, at least one); {value} is
# ceil(running x average use), not running x {each}.
TEXT_WORKLOAD_MEASURED = (
    "Give the containers of {culprit} CPU requests that add up to at least {value}m, "
    "{each}m each for {running} running at once: the average use of each of its "
    "containers over the last {w}m, gone ones included (none of those running now has a "
    "measured use yet); or lower their usage; or move one of the two to another node."
)

# noisy-neighbor whose culprit is named for an earlier minute boundary of the sustain
# (docs/findings.md#no-kind-flip-while-a-finding-decays): its use over the window has
# fallen to its request, so a request "matching its use" would change nothing.
TEXT_SLOWED = (
    "Lower {culprit}'s usage or give it a request that reflects it (its use over the last "
    "{w}m has fallen to its request: it has slowed down or stopped); or move one of the "
    "two to another node."
)
TEXT_WORKLOAD_SLOWED = (
    "Lower the usage of {culprit}'s containers or give them requests that reflect it "
    "(their use over the last {w}m has fallen to their requests: they have slowed down or "
    "stopped); or move one of the two to another node."
)

# cpu-contended while the node loses CPU to steal (docs/findings.md#cpu-steal): the
# missing CPU went to other guests on the host, so the sentence says so first and gives
# the shortfall after it.
STEAL_FIRST = (
    "The hypervisor is taking the node's CPU (see the cpu-steal finding, alert "
    "ContentionCPUSteal): move the node to another host or a larger instance type before "
    "spreading the workload"
)
TEXT_UNDER_STEAL = {
    "cpu-contended": (
        STEAL_FIRST + "; about {value}m of its containers' runnable work waited for a CPU "
        "on average over the last {w}m.",
        STEAL_FIRST + ".",
    ),
}

SETTINGS = {
    "cpu-throttled": ("victim", "cpu_limit", "millicores"),
    "noisy-neighbor": ("culprit", "cpu_request", "millicores"),
    "cpu-contended": ("node", "cpu_capacity", "millicores"),
    "memory-pressure": ("culprit", "memory_request", "mebibytes"),
    "memory-limit-thrash": ("victim", "memory_limit", "mebibytes"),
}


@dataclass(frozen=True, slots=True)
class Suggestion:
    """The number a finding's remediation suggests, or why there is none."""

    kind: str  # the finding's kind (a Kind value)
    value: int | None  # millicores or MiB (``unit``); None: could not be computed
    basis: dict[str, Any] = field(default_factory=dict)  # the numbers it comes from
    reason: str | None = None  # why ``value`` is None
    culprit: str = ""  # the culprit's name, for the sentence
    window_minutes: int = 5
    under_steal: bool = False  # the node's cpu-steal is sustained (TEXT_UNDER_STEAL)
    workload: bool = False  # the culprit is a workload (TEXT_WORKLOAD_CULPRIT)
    slowed: bool = False  # no value: the culprit's use fell to its request (TEXT_SLOWED)
    # a workload sized from its members' use, gone ones included (TEXT_WORKLOAD_MEASURED):
    # the millicores of one member's average use, and how many run now (at least one)
    workload_each: int | None = None
    workload_running: int = 1
    # cpu-throttled sized from its burst demand (TEXT_BURST): the thread count, and
    # throttledRatioMax in percent
    burst_threads: int | None = None
    burst_max_pct: str = ""

    @property
    def text(self) -> str:
        """The sentence, exactly as the alert's ``remediation`` annotation renders it."""
        if self.slowed and self.value is None:
            tmpl = TEXT_WORKLOAD_SLOWED if self.workload else TEXT_SLOWED
            return tmpl.format(culprit=self.culprit, w=self.window_minutes)
        if self.burst_threads is not None and self.value is not None:
            return TEXT_BURST.format(
                value=self.value,
                threads=self.burst_threads,
                max=self.burst_max_pct,
                w=self.window_minutes,
            )
        if self.workload and self.workload_each is not None and self.value is not None:
            return TEXT_WORKLOAD_MEASURED.format(
                value=self.value,
                culprit=self.culprit,
                each=self.workload_each,
                running=self.workload_running,
                w=self.window_minutes,
            )
        if self.workload:
            with_value, without = TEXT_WORKLOAD_CULPRIT
        elif self.under_steal and self.kind in TEXT_UNDER_STEAL:
            with_value, without = TEXT_UNDER_STEAL[self.kind]
        else:
            with_value, without = TEXT_WITH_VALUE[self.kind], TEXT_WITHOUT_VALUE[self.kind]
        tmpl = with_value if self.value is not None else without
        return tmpl.format(value=self.value, culprit=self.culprit, w=self.window_minutes)

    def to_dict(self) -> dict[str, Any]:
        target, setting, unit = SETTINGS[self.kind]
        return {
            "target": target,
            "setting": setting,
            "value": self.value,
            "unit": unit,
            "basis": dict(self.basis),
            "reason": self.reason,
        }


def millicores(cores: float) -> int:
    """Cores as whole millicores, rounded up (``ceil(x * 1000 - 1e-06)`` in the rules)."""
    return math.ceil(cores * MILLI - ROUNDING_SLACK)


def mebibytes(n_bytes: float) -> int:
    """Bytes as whole MiB, rounded up (``ceil(x / 1048576 - 1e-06)`` in the rules)."""
    return math.ceil(n_bytes / MIB - ROUNDING_SLACK)
