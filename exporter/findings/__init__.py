"""Findings: seed 000's verdicts over the window, and where they appear.

Wiring (see the module docs): ``evaluate(window, thresholds, now)`` returns findings;
``Finding.to_dict()`` is the ``/findings`` JSON; ``finding_families`` builds the
``contention_finding`` gauge; ``load_thresholds`` reads the one threshold config;
``register_subcommands`` adds the ``findings``, ``diagnose`` and ``rules`` commands.
"""

from __future__ import annotations

from typing import Any

from ..window import Window
from .evaluator import BlameShare, blame_shares, evaluate, memory_overages
from .metrics import finding_families
from .model import Culprit, Finding, Kind, Severity, Victim
from .thresholds import Thresholds, ThresholdsError, load_thresholds


def register_subcommands(subparsers: object) -> None:
    """Add ``findings``, ``diagnose`` and ``rules`` to the CLI's subparsers."""
    from .cli import register_subcommands as _register

    _register(subparsers)


def findings_document(
    findings: list[Finding],
    now: float,
    window: Window | None = None,
    thresholds: Thresholds | None = None,
) -> dict[str, Any]:
    """The ``/findings`` response body (see exporter/data/finding.schema.json)."""
    from .cli import findings_document as _doc

    return _doc(findings, now, window, thresholds)


__all__ = [
    "BlameShare",
    "Culprit",
    "Finding",
    "Kind",
    "Severity",
    "Thresholds",
    "ThresholdsError",
    "Victim",
    "blame_shares",
    "evaluate",
    "finding_families",
    "findings_document",
    "load_thresholds",
    "memory_overages",
    "register_subcommands",
]
