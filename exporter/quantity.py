"""Kubernetes resource quantities ("500m", "1.5", "256Mi", "1G") as numbers."""

from __future__ import annotations

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


def parse_quantity(value: str | int | float) -> Decimal:
    """Parse a quantity; raises ValueError with the offending text."""
    if isinstance(value, int | float):
        return Decimal(str(value))
    text = value.strip()
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if text.endswith(suffix) and text[: -len(suffix)]:
            number, mult = text[: -len(suffix)], _SUFFIX[suffix]
            break
    else:
        number, mult = text, Decimal(1)
    try:
        result = Decimal(number) * mult
    except InvalidOperation:
        raise ValueError(f"not a Kubernetes quantity: {value!r}") from None
    if result < 0 or not result.is_finite():
        raise ValueError(f"quantity must be a finite non-negative number: {value!r}")
    return result


def cpu_cores(value: str | int | float) -> float:
    return float(parse_quantity(value))


def memory_bytes(value: str | int | float) -> int:
    return int(parse_quantity(value))
