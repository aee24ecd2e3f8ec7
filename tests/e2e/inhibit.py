"""kube-prometheus-stack's CPUThrottlingHigh meets the shipped inhibit rule, on the
real Alertmanager of the chain.

``CPUThrottlingHigh`` needs cAdvisor's series, which this machine has not; it is sent
to Alertmanager's API the way the stack's Prometheus would send it (its labels:
namespace, pod, container, severity info). Everything else is real: the
``ContentionCPUThrottled`` source comes from Prometheus evaluating the generated rules
(in the throttled lab) or is sent alongside, and Alertmanager applies
``rules/alertmanager.inhibit.yaml`` as generated.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

from exporter.rules.inhibit import GENERIC_THROTTLING
from tests.e2e.chain import Chain, wait_until


def _iso(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def posted_alert(labels: Mapping[str, str], minutes: float = 10.0) -> dict[str, Any]:
    now = dt.datetime.now(dt.UTC)
    return {
        "labels": dict(labels),
        "annotations": {"summary": "posted by the end-to-end test"},
        "startsAt": _iso(now),
        "endsAt": _iso(now + dt.timedelta(minutes=minutes)),
    }


def throttling_high(namespace: str, pod: str, container: str) -> dict[str, str]:
    """The labels kube-prometheus-stack's CPUThrottlingHigh carries for a container."""
    return {
        "alertname": GENERIC_THROTTLING,
        "severity": "info",
        "namespace": namespace,
        "pod": pod,
        "container": container,
        "service": "kube-prometheus-stack-kubelet",
    }


def check_inhibition(
    chain: Chain, victim: Mapping[str, str], decoy: Mapping[str, str], timeout: float = 30.0
) -> dict[str, Any]:
    """While ContentionCPUThrottled fires for ``victim`` (namespace/pod/container),
    CPUThrottlingHigh for it is inhibited, and CPUThrottlingHigh for ``decoy`` (another
    container) is delivered. Both are resolved again before returning."""
    target = throttling_high(victim["namespace"], victim["pod"], victim["container"])
    other = throttling_high(decoy["namespace"], decoy["pod"], decoy["container"])
    sent_at = dt.datetime.now(dt.UTC).timestamp()
    chain.post_alerts([posted_alert(target), posted_alert(other)])
    hook = chain.webhook

    def delivered(labels: Mapping[str, str]) -> bool:
        return any(
            n.status == "firing"
            and n.received >= sent_at
            and all(n.labels.get(k) == v for k, v in labels.items())
            for n in hook.snapshot()
        )

    def inhibited() -> list[dict[str, Any]]:
        return [
            a
            for a in chain.am_alerts(alertname=GENERIC_THROTTLING, pod=victim["pod"])
            if a["status"]["state"] == "suppressed" and a["status"]["inhibitedBy"]
        ]

    try:
        wait_until(
            "Alertmanager to deliver the other container's CPUThrottlingHigh and to "
            "inhibit the throttled container's",
            lambda: delivered(other) and bool(inhibited()),
            timeout,
            detail=lambda: json.dumps(
                chain.am_alerts(alertname=GENERIC_THROTTLING), indent=1, default=str
            )[:4000],
        )
        # Delivery of the other one went through the same group_wait: the inhibited
        # one would have been sent by now.
        assert not delivered(target), "CPUThrottlingHigh for the throttled container was sent"
        return {"inhibited_by": inhibited()[0]["status"]["inhibitedBy"]}
    finally:
        chain.post_alerts([posted_alert(target, 0), posted_alert(other, 0)])
