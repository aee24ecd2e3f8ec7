"""Go template helpers as Prometheus renders alert annotations (for the expected
annotations of the promtool tests)."""

from __future__ import annotations

import math


def go_g4(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return f"{v:.4g}"


def humanize_percentage(v: float) -> str:
    return go_g4(v * 100) + "%"


def humanize_duration(v: float) -> str:
    if math.isnan(v) or math.isinf(v):
        return go_g4(v)
    if v == 0:
        return f"{v:.4g}s"
    if abs(v) >= 1:
        sign = "-" if v < 0 else ""
        v = abs(v)
        secs = int(v) % 60
        mins = (int(v) // 60) % 60
        hours = (int(v) // 3600) % 24
        days = int(v) // 86400
        if days:
            return f"{sign}{days}d {hours}h {mins}m {secs}s"
        if hours:
            return f"{sign}{hours}h {mins}m {secs}s"
        if mins:
            return f"{sign}{mins}m {secs}s"
        return f"{sign}{v:.4g}s"
    return _below_one(v) + "s"


def _below_one(v: float) -> str:
    """``v`` (|v| < 1) with an SI prefix, as Go's humanize helpers write it."""
    prefix = ""
    for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
        if abs(v) >= 1:
            break
        prefix = p
        v *= 1000
    return f"{v:.4g}{prefix}"


def humanize(v: float) -> str:
    """Prometheus's ``humanize``: SI prefixes, 4 significant digits."""
    if v == 0 or math.isnan(v) or math.isinf(v):
        return f"{v:.4g}"
    if abs(v) >= 1:
        prefix = ""
        for p in ("k", "M", "G", "T", "P", "E", "Z", "Y"):
            if abs(v) < 1000:
                break
            prefix = p
            v /= 1000
        return f"{v:.4g}{prefix}"
    return _below_one(v)
