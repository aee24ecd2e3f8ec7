"""Kubernetes resource quantities ("500m", "1.5", "256Mi", "1G") as numbers.

Strict and bounded: the API server's grammar (a non-negative decimal number with an
optional binary or decimal SI suffix or an exponent), at most 64 characters, at most
2**63 (what a Kubernetes quantity can hold). Anything else raises ``ValueError`` naming
the value, fast: ``"1e999999"`` is refused before it is turned into a 1,000,000-digit
integer.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_SUFFIX = {
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_GRAMMAR = re.compile(
    r"\+?(?P<number>[0-9]+\.?[0-9]*|\.[0-9]+)"
    r"(?P<suffix>[eE][-+]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?"
)
MAX_CHARS = 64
MAX_QUANTITY = Decimal(2**63)


def parse_quantity(value: str | int | float) -> Decimal:
    """Parse a quantity; raises ValueError with the offending text."""
    if isinstance(value, bool):  # a bool is an int in Python, not a quantity
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"quantity must be a finite number: {value!r}")
        if abs(value) >= MAX_QUANTITY:
            raise ValueError(f"quantity too large (above 2^63): {_short(str(value))}")
        result = Decimal(value) if isinstance(value, int) else Decimal(repr(value))
    elif isinstance(value, str):
        result = _parse_text(value)
    else:
        raise ValueError(f"not a Kubernetes quantity: {type(value).__name__}")
    if result < 0:
        raise ValueError(f"quantity must be a finite non-negative number: {value!r}")
    return result


def _parse_text(value: str) -> Decimal:
    text = value.strip()
    m = _GRAMMAR.fullmatch(text) if len(text) <= MAX_CHARS else None
    if m is None:
        raise ValueError(f"not a Kubernetes quantity: {_short(value)}")
    number, suffix = m.group("number"), m.group("suffix") or ""
    try:
        base = Decimal(number)
        exp = int(suffix[1:]) if suffix and suffix not in _SUFFIX else 0
    except (InvalidOperation, ValueError):  # pragma: no cover - the grammar rules it out
        raise ValueError(f"not a Kubernetes quantity: {_short(value)}") from None
    # Bound the magnitude before any arithmetic: 1e999999 must not become an integer.
    if base and base.adjusted() + exp > 19:
        raise ValueError(f"quantity too large (above 2^63): {_short(value)}")
    if exp < -30:
        return Decimal(0)
    mult = Decimal(10) ** exp if exp else _SUFFIX.get(suffix, Decimal(1))
    result = base * mult
    if result > MAX_QUANTITY:
        raise ValueError(f"quantity too large (above 2^63): {_short(value)}")
    return result


def _short(text: str) -> str:
    return repr(text) if len(text) <= 40 else f"{text[:20]!r}... ({len(text)} characters)"


def cpu_cores(value: str | int | float) -> float:
    return float(parse_quantity(value))


def memory_bytes(value: str | int | float) -> int:
    return int(parse_quantity(value))
