"""One alerting rule as the pack writes it, whichever group it is in.

Every alert gets the same treatment from the config (docs/configuration.md, "The rule
pack"): ``severity`` first (a finding kind's from ``alertSeverity``), then its own
labels, then ``alertLabels``; a static ``summary``, a templated ``description`` (a
finding's alert: and its ``level``), and the runbook reference — ``runbook_url``
when ``runbookUrl`` is set, else a ``runbook`` annotation naming the section of
docs/runbook.md shipped with the release (no link to a site that does not exist).
``disabledAlerts`` drops an alert from the pack. A finding's alert also carries its
``remediation``: what to change, with the value computed from the window.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..findings.thresholds import Thresholds, ThresholdsError

RUNBOOK_DOC = "docs/runbook.md"


def runbook_anchor(alert: str) -> str:
    """The alert's section in docs/runbook.md (a heading named after the alert)."""
    return alert.lower()


def runbook_annotations(th: Thresholds, alert: str) -> dict[str, str]:
    anchor = runbook_anchor(alert)
    if th.runbook_url:
        return {"runbook_url": f"{th.runbook_url}#{anchor}"}
    return {"runbook": f"{RUNBOOK_DOC}#{anchor} in the contention-exporter release"}


def alerting_rule(
    th: Thresholds,
    name: str,
    expr: str,
    severity: str,
    *,
    summary: str,
    description: str,
    level: str | None = None,
    remediation: str | None = None,
    labels: Mapping[str, str] | None = None,
    for_: str | None = None,
) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_:
        rule["for"] = for_
    rule["labels"] = {"severity": severity, **(labels or {}), **dict(th.alert_labels)}
    rule["annotations"] = {
        "summary": summary,
        "description": description,
        **({"level": level} if level else {}),
        **({"remediation": remediation} if remediation else {}),
        **runbook_annotations(th, name),
    }
    return rule


def enabled(th: Thresholds, rules: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rules`` without the alerts the config disables."""
    return [r for r in rules if "alert" not in r or th.alert_enabled(r["alert"])]


def check_disabled(th: Thresholds, known: Iterable[str]) -> None:
    """Every name in ``disabledAlerts`` is an alert of the pack (a typo would silently
    keep the alert on)."""
    names = set(known)
    unknown = sorted(set(th.disabled_alerts) - names)
    if unknown:
        raise ThresholdsError(
            f"disabledAlerts: no alert named {', '.join(unknown)}; the pack's alerts: "
            + ", ".join(sorted(names))
        )
