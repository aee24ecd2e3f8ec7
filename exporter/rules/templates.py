"""Go template fragments the findings alerts' annotations share (Prometheus alert
templating, docs/runbook.md): who the victim and the memory culprit are, and the
current value of a recording rule for the alert's victim or node."""

from __future__ import annotations

from ..findings.thresholds import Thresholds
from ..identity import IDENTITY_LABELS

VICTIM_T = (
    "{{ if $labels.pod }}{{ $labels.namespace }}/{{ $labels.pod }}/{{ $labels.container }}"
    "{{ else }}{{ $labels.cgroup }}{{ end }}"
)
MEM_CULPRIT_T = (
    "{{ if $labels.culprit_pod }}{{ $labels.culprit_namespace }}/{{ $labels.culprit_pod }}/"
    "{{ $labels.culprit_container }}{{ else }}{{ $labels.culprit_cgroup }}{{ end }}"
)


def victim_with_t(th: Thresholds, record: str, then: str, otherwise: str) -> str:
    """``then`` when the alert's victim has a series of ``record`` (inside it, ``.`` is
    the query result), else ``otherwise``."""
    sel = ",".join(f"{lab}=%q" for lab in (*th.join_labels, *IDENTITY_LABELS))
    args = " ".join(f"$labels.{lab}" for lab in (*th.join_labels, *IDENTITY_LABELS))
    return (
        f'{{{{ with printf "{record}{{{sel}}}" {args} | query }}}}'
        f"{then}{{{{ else }}}}{otherwise}{{{{ end }}}}"
    )


def victim_query_t(th: Thresholds, record: str, fmt: str) -> str:
    """The victim's value of a recording rule, or n/a."""
    return victim_with_t(th, record, f"{{{{ . | first | value | {fmt} }}}}", "n/a")


def node_with_t(th: Thresholds, record: str, then: str, otherwise: str = "") -> str:
    """``then`` when the node has a series of ``record`` (inside it, ``.`` is the query
    result), else ``otherwise``."""
    sel = ",".join(f"{lab}=%q" for lab in th.join_labels)
    args = " ".join(f"$labels.{lab}" for lab in th.join_labels)
    tail = f"{{{{ else }}}}{otherwise}" if otherwise else ""
    return f'{{{{ with printf "{record}{{{sel}}}" {args} | query }}}}{then}{tail}{{{{ end }}}}'


def node_query_t(th: Thresholds, record: str, fmt: str) -> str:
    """The node's value of a recording rule, or n/a."""
    return node_with_t(th, record, f"{{{{ . | first | value | {fmt} }}}}", "n/a")
