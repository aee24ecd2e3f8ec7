"""The one-line explanations findings carry (``message``), from their numbers."""

from __future__ import annotations

from typing import Any

from ..identity import Identity
from .model import CULPRIT_WORKLOAD, Culprit
from .signals import CpuMinute
from .thresholds import Thresholds


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.0f}%"


def ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 1000:.0f} ms"


def throttled(
    victim: str, ratio: float, throttle: dict[str, Any], limit: float | None, th: Thresholds
) -> str:
    return (
        f"{victim} was throttled in {pct(ratio)} of its CFS periods over "
        f"{th.window_minutes}m ({throttle['throttled_seconds']:.1f} s throttled)"
        f"; its own CPU limit ({limit or 'n/a'} cores) is the cause"
    )


def cpu_stall(latest: CpuMinute) -> str:
    """What the latest minute's stall looked like."""
    p99 = latest.runq.p99_s if latest.runq else None
    return f"cpu some {pct(latest.some)}, run-queue p99 {ms(p99)}"


def steal_note(steal: float | None) -> str:
    """What a stalled container's message adds on a node losing CPU to steal."""
    if steal is None:
        return ""
    return (
        f"; the hypervisor also took {pct(steal)} of the node's CPU time (steal) in the "
        "latest minute: part of the wait is the host's, not this node's"
    )


def noisy_neighbor(
    victim: str, stall: str, c: Culprit, th: Thresholds, steal: float | None = None
) -> str:
    usage = c.cpu_usage_cores
    request = c.cpu_request_cores
    use_txt = "n/a (not sampled)" if usage is None else f"{usage:.2f} cores"
    req_txt = "no request" if request is None else f"a request of {request:g} cores"
    if c.kind == CULPRIT_WORKLOAD:
        use_txt = "n/a (none running now has a measured use yet)" if usage is None else use_txt
        return (
            f"{victim} is stalled ({stall}); workload {c.ref}, made of {c.members} "
            f"containers (running or gone), together caused {pct(c.blame_share)} of its "
            f"run-queue wait over {th.window_minutes}m though no single one passes the "
            f"culprit test; its running containers use {use_txt} against "
            f"{'no request' if request is None else f'requests of {request:g} cores'}"
            f"{_slowed_note(usage, request, 'them')}{steal_note(steal)}"
        )
    return (
        f"{victim} is stalled ({stall}); {c.ref} ({c.kind}) caused "
        f"{pct(c.blame_share)} of its run-queue wait over {th.window_minutes}m, "
        f"using {use_txt} against {req_txt}{_slowed_note(usage, request)}{steal_note(steal)}"
    )


def _slowed_note(usage: float | None, request: float | None, it: str = "it") -> str:
    """A culprit named for an earlier minute boundary of the sustain: its use over the
    whole window has already fallen to its request
    (docs/findings.md#no-kind-flip-while-a-finding-decays)."""
    if usage is None or not request or usage > request:
        return ""
    return f" (beyond {it} up to an earlier minute of the stall: it has slowed down or stopped)"


def cpu_contended(
    victim: str,
    stall: str,
    have_blame: bool,
    steal: float | None = None,
    unattributed: float | None = None,
    window_minutes: int = 5,
) -> str:
    """``unattributed``: the share of its wait the probe could not attribute, when it is
    at least blameShare (a culprit could be hidden in it)."""
    if steal is not None:  # the missing CPU went to other guests: not oversubscribed
        why = (
            f"the hypervisor took {pct(steal)} of the node's CPU time (steal) in the latest "
            "minute: the CPU it misses went to other guests on the host, not to this node's "
            "workloads"
            + ("" if have_blame else " (no scheduler probe data, so no culprit can be named)")
        )
    elif unattributed is not None:
        why = (
            f"{pct(unattributed)} of its run-queue wait over "
            f"{window_minutes}m could not be attributed (unknown): the "
            "scheduler probe's attribution is broken or partial on this node, so a "
            "neighbour may be hidden in it; this is not evidence that the node is "
            "oversubscribed"
        )
    elif have_blame:
        why = "no single neighbour passes the culprit test: the node is oversubscribed"
    else:
        why = "no scheduler probe data, so no culprit can be named"
    return f"{victim} is stalled waiting for CPU ({stall}); {why}"


def cpu_steal(steal: float, victims: list[str], th: Thresholds) -> str:
    shown = ", ".join(victims[:3]) + (f" and {len(victims) - 3} more" if len(victims) > 3 else "")
    return (
        f"the hypervisor took {pct(steal)} of the node's CPU time (steal) in the latest "
        f"minute, at least {pct(th.cpu_steal_ratio)} in each of the last "
        f"{th.sustain_minutes} minutes, while {len(victims)} container(s) were stalled waiting for "
        f"CPU ({shown}): the host is running other guests on this node's CPUs"
    )


def memory_pressure(
    victim: Identity, ev: dict[str, Any], culprit: Culprit | None, th: Thresholds
) -> str:
    """``ev["memory_culprit_basis"]``: why the culprit is named (growth or overage);
    ``ev["memory_overage_top"]``: the node's containers by growth, largest first."""
    w, x = th.window_minutes, pct(th.mem_culprit_share)
    if culprit is None:
        who = (
            f"no container grew by {x} of the node's memory beyond requests over {w}m, "
            f"nor holds {x} of it"
        )
    elif ev.get("memory_culprit_basis") == "growth":
        grew = ev["memory_overage_top"][0]["growth_bytes"] / 2**20
        who = (
            f"heuristic culprit: {culprit.ref}, which grew most beyond its memory request "
            f"over {w}m ({grew:.0f} MiB) and holds {pct(culprit.blame_share)} of the "
            "node's memory beyond requests"
        )
    else:
        who = (
            f"heuristic culprit: {culprit.ref}, {pct(culprit.blame_share)} of the node's "
            f"memory beyond requests (no container grew by {x} of it over {w}m)"
        )
    return (
        f"{victim.name} is stalled on memory (some "
        f"{pct(ev['memory_pressure_some'][-1])}, {ev['refaults_per_minute'][-1]:.0f} "
        f"refaults/min) while the node is under memory pressure "
        f"({pct(ev['node_memory_pressure_beyond_self'][-1])} beyond its own stall); {who}"
    )


def memory_limit_thrash(victim: str, ev: dict[str, Any]) -> str:
    return (
        f"{victim} is stalled on memory (some "
        f"{pct(ev['memory_pressure_some'][-1])}, "
        f"{ev['refaults_per_minute'][-1]:.0f} refaults/min) while hitting "
        f"its own memory limit ({ev['limit_hits'][-1]} high+max events "
        "in the latest minute); the node is not under memory pressure beyond its own stall"
    )
