"""The findings alerts' ``remediation`` annotations: what to change, with the value the
remediation recording rules computed over the window (docs/findings.md#remediation-with-numbers),
or the sentence without a value when the rule has none for this alert."""

from __future__ import annotations

from ..findings.model import REMEDIATION, Kind
from ..findings.remediation import (
    TEXT_BURST,
    TEXT_SLOWED,
    TEXT_UNDER_STEAL,
    TEXT_WITH_VALUE,
    TEXT_WITHOUT_VALUE,
    TEXT_WORKLOAD_CULPRIT,
    TEXT_WORKLOAD_MEASURED,
    TEXT_WORKLOAD_SLOWED,
)
from ..findings.thresholds import Thresholds
from ..identity import IDENTITY_LABELS
from ..promql import WORKLOAD_CULPRIT_LABELS
from .records import (
    R_FIX_CPU_LIMIT,
    R_FIX_CPU_LIMIT_BURST,
    R_FIX_CPU_REQUEST,
    R_FIX_MEM_LIMIT,
    R_FIX_MEM_REQUEST,
    R_FIX_NODE_CPU,
    R_FIX_WL_EACH,
    R_FIX_WL_REQUEST,
    R_STEAL_SUSTAINED,
    R_WITHIN_REQ,
    R_WL_RUNNING,
    R_WL_WITHIN,
)
from .templates import MEM_CULPRIT_T, node_with_t

VALUE_T = '{{ . | first | value | printf "%.0f" }}'


def _remediation_t(
    th: Thresholds,
    kind: Kind,
    record: str,
    whose: str | None,
    culprit_t: str = "",
    texts: tuple[str, str] | None = None,
    match: tuple[tuple[str, str], ...] | None = None,
    slowed: tuple[str, str] | None = None,
    rendered: tuple[str, str] | None = None,
) -> str:
    """The remediation sentence of ``kind`` with the recording rule's value for this
    alert: the victim's (``whose=""``), the culprit's (``"culprit_"``: its identity
    labels, prefixed) or the node's (None); or the sentence without a value.
    ``texts``: the (with value, without) sentences, by default the kind's.
    ``match``: (the record's label, the alert's label) pairs that pick the record's
    row instead of ``whose``'s identity labels. ``slowed``: (a record, its sentence):
    without a value, that sentence where the record has the alert's row. ``rendered``:
    the (with value, without) sentences as finished templates (``texts`` are formatted)."""
    if match is None:
        own = IDENTITY_LABELS if whose is not None else ()
        match = tuple((lab, f"{whose}{lab}") for lab in own)
    pairs = (*((lab, lab) for lab in th.join_labels), *match)
    sel = ",".join(f"{rec}=%q" for rec, _ in pairs)
    args = " ".join(f"$labels.{alert}" for _, alert in pairs)
    w = th.window_minutes
    with_text, without_text = texts or (TEXT_WITH_VALUE[kind], TEXT_WITHOUT_VALUE[kind])
    with_value = with_text.format(value=VALUE_T, culprit=culprit_t, w=w)
    without = without_text.format(culprit=culprit_t, w=w)
    if rendered is not None:
        with_value, without = rendered
    if slowed is not None:
        without = (
            f'{{{{ with printf "{slowed[0]}{{{sel}}}" {args} | query }}}}'
            f"{slowed[1].format(culprit=culprit_t, w=w)}{{{{ else }}}}{without}{{{{ end }}}}"
        )
    return (
        f'{{{{ with printf "{record}{{{sel}}}" {args} | query }}}}'
        f"{with_value}{{{{ else }}}}{without}{{{{ end }}}}"
    )


def _cpu_limit_t(th: Thresholds) -> str:
    """cpu-throttled: the limit from its average demand, else (the bursty case) from
    its burst demand, whose record's value is the thread count (the limit in cores,
    so ``{value}`` is that count followed by 000: whole millicores)."""
    w = f"{th.window_minutes}m"
    kind = Kind.CPU_THROTTLED
    burst = TEXT_BURST.format(
        value=VALUE_T + "000",
        threads=VALUE_T,
        max=f"{th.throttled_ratio_max * 100:g}",
        w=th.window_minutes,
    )
    without = TEXT_WITHOUT_VALUE[kind]
    bursty = _remediation_t(
        th, kind, R_FIX_CPU_LIMIT_BURST.format(w=w), "", rendered=(burst, without)
    )
    with_value = TEXT_WITH_VALUE[kind].format(value=VALUE_T, w=th.window_minutes)
    return _remediation_t(th, kind, R_FIX_CPU_LIMIT.format(w=w), "", rendered=(with_value, bursty))


def _workload_t(th: Thresholds, record: str, then: str, otherwise: str = "") -> str:
    """``then`` when the alert's workload culprit has a series of ``record`` (inside
    it, ``.`` is the query result), else ``otherwise``."""
    labels = (*th.join_labels, *WORKLOAD_CULPRIT_LABELS)
    sel = ",".join(f"{lab}=%q" for lab in labels)
    args = " ".join(f"$labels.{lab}" for lab in labels)
    tail = f"{{{{ else }}}}{otherwise}" if otherwise else ""
    return f'{{{{ with printf "{record}{{{sel}}}" {args} | query }}}}{then}{tail}{{{{ end }}}}'


def _workload_request_t(th: Thresholds) -> str:
    """noisy-neighbor naming a workload: requests adding up to its running containers'
    summed use; while none of them has a measured use, sized from its members' use,
    gone ones included (``R_FIX_WL_EACH`` has a row only then, and only where that use
    is above their requests: one member's use; ``R_WL_RUNNING`` how many run now, none
    counting as one)."""
    w = f"{th.window_minutes}m"
    kind = Kind.NOISY_NEIGHBOR
    measured = TEXT_WORKLOAD_MEASURED.format(
        value=_workload_t(th, R_FIX_WL_REQUEST.format(w=w), VALUE_T),
        culprit="{{ $labels.culprit }}",
        each=VALUE_T,
        running=_workload_t(th, R_WL_RUNNING, VALUE_T, "1"),
        w=th.window_minutes,
    )
    summed = _remediation_t(
        th,
        kind,
        R_FIX_WL_REQUEST.format(w=w),
        "culprit_",
        "{{ $labels.culprit }}",
        TEXT_WORKLOAD_CULPRIT,
        tuple((lab, lab) for lab in WORKLOAD_CULPRIT_LABELS),
        (R_WL_WITHIN.format(w=w), TEXT_WORKLOAD_SLOWED),
    )
    return _workload_t(th, R_FIX_WL_EACH.format(w=w), measured, summed)


def remediations(th: Thresholds) -> dict[Kind, str]:
    """Each finding's remediation, by kind."""
    w = f"{th.window_minutes}m"
    mem = _remediation_t(th, Kind.MEMORY_PRESSURE, R_FIX_MEM_REQUEST, "culprit_", MEM_CULPRIT_T)
    node_short = R_FIX_NODE_CPU.format(w=w)
    contended = Kind.CPU_CONTENDED
    return {
        Kind.CPU_THROTTLED: _cpu_limit_t(th),
        # a workload culprit's alert carries culprit_workload, a container's never does
        Kind.NOISY_NEIGHBOR: (
            "{{ if $labels.culprit_workload }}"
            + _workload_request_t(th)
            + "{{ else }}"
            + _remediation_t(
                th,
                Kind.NOISY_NEIGHBOR,
                R_FIX_CPU_REQUEST.format(w=w),
                "culprit_",
                "{{ $labels.culprit }}",
                slowed=(R_WITHIN_REQ.format(w=w), TEXT_SLOWED),
            )
            + "{{ end }}"
        ),
        # under sustained steal the sentence points at the VM's host first
        Kind.CPU_CONTENDED: node_with_t(
            th,
            R_STEAL_SUSTAINED,
            _remediation_t(th, contended, node_short, None, texts=TEXT_UNDER_STEAL[contended]),
            _remediation_t(th, contended, node_short, None),
        ),
        Kind.MEMORY_PRESSURE: (
            "{{ if or $labels.culprit_pod $labels.culprit_cgroup }}"
            f"{mem}{{{{ else }}}}{TEXT_WITHOUT_VALUE[Kind.MEMORY_PRESSURE]}{{{{ end }}}}"
        ),
        Kind.MEMORY_LIMIT_THRASH: _remediation_t(th, Kind.MEMORY_LIMIT_THRASH, R_FIX_MEM_LIMIT, ""),
        # no number: the fix is another host, which the node's figures cannot size
        Kind.CPU_STEAL: REMEDIATION[Kind.CPU_STEAL],
    }
