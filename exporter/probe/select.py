"""Which loader loads the probe on this node, and why the others did not.

Order (``--probe.loader=auto``): the CO-RE object through libbpf when the kernel has
BTF, else BCC when it can compile against kernel headers, else no probe. Any CO-RE
failure (no BTF, no libbpf, a verifier rejection, ...) falls back to BCC. The facts
the choice depends on (the BTF path, the libbpf library, the object, the headers) are
arguments, so tests can put a node in any of these situations without a fake libbpf.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .backend import ProbeKnobs, ProbeLoadError, ProbeMaps
from .core import DEFAULT_BTF

log = logging.getLogger(__name__)

LOADER_CHOICES = ("auto", "core", "bcc")
LOADER_NAMES = {"core": "CO-RE", "bcc": "BCC"}


@dataclass(frozen=True, slots=True)
class LoaderInputs:
    """Where each loader looks for what it needs, and CO-RE's clock choice (defaults:
    the real node)."""

    btf_path: str = DEFAULT_BTF
    libbpf_name: str | None = None  # None: libbpf.so.1
    object_path: Path | None = None  # None: the packaged bpf/sched_probe.bpf.o
    kernel_source: str | None = None  # BCC's headers (None: the usual search)
    tracefs: str = "/sys/kernel/tracing"
    bpf_dir: str | None = None  # where BCC finds sched_probe.c
    use_ktime: bool = False  # CO-RE: bpf_ktime_get_ns() instead of the rq clock


@dataclass(frozen=True, slots=True)
class Attempt:
    loader: str  # "core" or "bcc"
    reason: str  # "" when it loaded
    detail: str


@dataclass(slots=True)
class Outcome:
    maps: ProbeMaps | None
    attempts: list[Attempt] = field(default_factory=list)
    wanted: str = "auto"

    @property
    def reason(self) -> str:
        """The ``contention_probe_loaded`` reason: loaded as asked -> ""; loaded by
        the fallback -> why CO-RE did not load; nothing loaded -> what stands in the
        way of the loader meant for this node (CO-RE, or BCC where there is no BTF)."""
        failed = [a for a in self.attempts if a.reason]
        if not failed:
            return ""
        first = failed[0]
        if self.maps is None and first.reason == "no-btf" and len(failed) > 1:
            return failed[1].reason
        return first.reason

    def summary(self) -> str:
        parts = [
            f"{LOADER_NAMES[a.loader]}: {a.reason + ': ' if a.reason else ''}{a.detail}"
            for a in self.attempts
        ]
        return "; ".join(parts)


Loader = Callable[[ProbeKnobs, LoaderInputs], ProbeMaps]


def _core(knobs: ProbeKnobs, inputs: LoaderInputs) -> ProbeMaps:
    from .core import load_core

    return load_core(
        knobs,
        btf_path=inputs.btf_path,
        libbpf_name=inputs.libbpf_name,
        object_path=inputs.object_path,
        use_ktime=inputs.use_ktime,
    )


def _bcc(knobs: ProbeKnobs, inputs: LoaderInputs) -> ProbeMaps:
    from .bcc import load_bcc

    return load_bcc(
        knobs, kernel_source=inputs.kernel_source, tracefs=inputs.tracefs, bpf_dir=inputs.bpf_dir
    )


LOADERS: dict[str, Loader] = {"core": _core, "bcc": _bcc}


def load_maps(
    knobs: ProbeKnobs,
    wanted: str = "auto",
    inputs: LoaderInputs | None = None,
    loaders: dict[str, Loader] | None = None,
) -> Outcome:
    """Try the loaders in order; the first that loads wins. Never raises for a node
    that cannot run the probe: the outcome says why."""
    if wanted not in LOADER_CHOICES:
        raise ValueError(f"loader must be one of {LOADER_CHOICES}, not {wanted!r}")
    inputs = inputs or LoaderInputs()
    table = loaders or LOADERS
    order = ["core", "bcc"] if wanted == "auto" else [wanted]
    out = Outcome(None, wanted=wanted)
    for name in order:
        try:
            maps = table[name](knobs, inputs)
        except ProbeLoadError as e:
            out.attempts.append(Attempt(name, e.reason, e.detail))
            continue
        except Exception as e:  # a probe must never take the exporter down
            out.attempts.append(Attempt(name, "load-error", f"unexpected: {e!r}"))
            continue
        out.maps = maps
        out.attempts.append(Attempt(name, "", maps.detail))
        break
    return out
