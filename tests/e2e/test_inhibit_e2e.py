"""The shipped inhibit rule on the chain's real Alertmanager, without the kernel labs:
ContentionCPUThrottled (sent as Prometheus sends it) mutes CPUThrottlingHigh for the
same container only. The throttled lab (test_labs_e2e.py) checks it again with the
ContentionCPUThrottled that Prometheus fires from the real kernel's throttling."""

from __future__ import annotations

import pytest

from exporter.findings.model import Kind
from exporter.rules.finding_alerts import ALERT_NAMES
from tests.e2e.conftest import E2E
from tests.e2e.inhibit import check_inhibition, posted_alert

pytestmark = [pytest.mark.e2e]

NAMESPACE = "inhibit-e2e"  # no lab uses it


@pytest.mark.timeout(120)
def test_throttled_finding_inhibits_cpu_throttling_high_for_its_container(e2e: E2E) -> None:
    victim = {"namespace": NAMESPACE, "pod": "api-0", "container": "app"}
    source = {
        "alertname": ALERT_NAMES[Kind.CPU_THROTTLED],
        "finding": Kind.CPU_THROTTLED.value,
        "severity": "critical",
        "instance": e2e.node_instance,
        "job": "node",
        **victim,
    }
    e2e.chain.post_alerts([posted_alert(source)])
    try:
        # same pod, another container: not the throttled one, so not inhibited
        decoy = {**victim, "container": "sidecar"}
        got = check_inhibition(e2e.chain, victim, decoy)
        assert got["inhibited_by"]
    finally:
        e2e.chain.post_alerts([posted_alert(source, 0)])
