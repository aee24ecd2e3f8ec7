"""Errors raised by the cgroup readers."""

from __future__ import annotations


class CgroupParseError(ValueError):
    """A cgroup or proc file did not have the kernel's format.

    ``source`` names the file (or ``<text>`` for a bare parser call), so the sampler's
    log line says which cgroup file was bad and why.
    """

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason


class CgroupVanishedError(OSError):
    """The cgroup directory disappeared while it was being read (container exited)."""
