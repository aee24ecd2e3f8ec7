"""Findings: docs/findings.md's verdicts over the window. Pure: no I/O but the
threshold file, no exposition.

``thresholds`` reads the one threshold config; ``signals`` computes per-minute values,
``aggregates`` the window's (Clock, throttling, usage, culprit shares, memory
overages); ``beyond_request`` the usage side of the culprit test; ``evaluate``
decides; ``messages`` explains; ``model`` is what a finding is and the ``/findings``
document.
"""

from __future__ import annotations

from .aggregates import Clock, CulpritShare, culprit_shares, memory_overages
from .evaluate import evaluate
from .model import Culprit, Finding, Kind, Severity, Victim, findings_document
from .thresholds import Thresholds, ThresholdsError, load_thresholds

__all__ = [
    "Clock",
    "Culprit",
    "CulpritShare",
    "Finding",
    "Kind",
    "Severity",
    "Thresholds",
    "ThresholdsError",
    "Victim",
    "culprit_shares",
    "evaluate",
    "findings_document",
    "load_thresholds",
    "memory_overages",
]
