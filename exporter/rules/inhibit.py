"""The Alertmanager inhibit rule shipped next to the rule pack (docs/kube-prometheus-stack.md).

kube-prometheus-stack (kubernetes-mixin) fires ``CPUThrottlingHigh`` when a container
is throttled in more than 25 % of its CFS periods over 5 minutes; the pack's
``ContentionCPUThrottled`` fires for the same condition, from the same kernel
counters, with a severity and the evidence. While the precise finding fires for a
container, this rule mutes the generic alert for the *same* container (same
namespace, pod and container, and cluster when ``clusterLabel`` is set); any other
container's ``CPUThrottlingHigh``, and the generic alert where the exporter does not
run or has resolved, still notify.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..findings.model import Kind
from ..findings.thresholds import Thresholds

GENERIC_THROTTLING = "CPUThrottlingHigh"
INHIBIT_FILE = Path("rules/alertmanager.inhibit.yaml")
# The container labels both alerts carry (kubernetes-mixin keeps them on its alert).
CONTAINER_LABELS = ("namespace", "pod", "container")


def inhibit_rules(th: Thresholds, throttled_alert: str) -> list[dict[str, Any]]:
    """Alertmanager ``inhibit_rules`` (none when the pack's throttled alert is off)."""
    if not th.alert_enabled(throttled_alert):
        return []
    cluster = [th.cluster_label] if th.cluster_label else []
    return [
        {
            "source_matchers": [
                f'alertname="{throttled_alert}"',
                f'finding="{Kind.CPU_THROTTLED.value}"',
            ],
            "target_matchers": [f'alertname="{GENERIC_THROTTLING}"'],
            "equal": [*cluster, *CONTAINER_LABELS],
        }
    ]


INHIBIT_HEADER = (
    "# Alertmanager: while ContentionCPUThrottled fires for a container, mute\n"
    "# kube-prometheus-stack's CPUThrottlingHigh for the same container. Add these\n"
    "# inhibit_rules to your Alertmanager configuration (kube-prometheus-stack:\n"
    "# alertmanager.config.inhibit_rules); docs/kube-prometheus-stack.md.\n"
)
