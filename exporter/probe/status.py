"""Whether the scheduler probe can load here, and why not.

The exporter runs fine without the probe (usage and stall layers keep working); the
loader that loaded it and the reason are exported as
``contention_probe_loaded{loader, reason}`` (docs/troubleshooting.md lists them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# Machine-friendly reasons (label values). Empty when loaded.
REASON_DISABLED = "disabled"  # switched off by configuration
REASON_NOT_ROOT = "not-root"  # lacks CAP_BPF+CAP_PERFMON (or CAP_SYS_ADMIN)
REASON_NO_TRACEFS = "no-tracefs"  # sched tracepoint formats not found
REASON_NO_HEADERS = "no-headers"  # no kernel headers for BCC to compile against
REASON_NO_BCC = "no-bcc"  # the bcc Python module does not import
REASON_COMPILE_ERROR = "compile-error"  # clang failed, or the verifier rejected it
REASON_ATTACH_ERROR = "attach-error"  # loaded but could not attach to a tracepoint
REASON_NOT_LOADED = "not-loaded"  # load() not called yet
# CO-RE loader
REASON_NO_BTF = "no-btf"  # no /sys/kernel/btf/vmlinux (kernel without CONFIG_DEBUG_INFO_BTF)
REASON_LIBBPF_MISSING = "libbpf-missing"  # libbpf.so.1 does not load
REASON_LIBBPF_TOO_OLD = "libbpf-too-old"  # it lacks a function the loader needs
REASON_NO_OBJECT = "no-object"  # the compiled object is missing from the package
REASON_NO_TRACEPOINT = "no-tracepoint"  # a sched tracepoint is missing from the BTF
REASON_VERIFIER = "verifier"  # the kernel's verifier rejected the object
REASON_LOAD_ERROR = "load-error"  # libbpf could not prepare it (e.g. a CO-RE relocation)
REASONS = (
    REASON_DISABLED,
    REASON_NOT_ROOT,
    REASON_NO_TRACEFS,
    REASON_NO_HEADERS,
    REASON_NO_BCC,
    REASON_COMPILE_ERROR,
    REASON_ATTACH_ERROR,
    REASON_NOT_LOADED,
    REASON_NO_BTF,
    REASON_LIBBPF_MISSING,
    REASON_LIBBPF_TOO_OLD,
    REASON_NO_OBJECT,
    REASON_NO_TRACEPOINT,
    REASON_VERIFIER,
    REASON_LOAD_ERROR,
)
LOADERS = ("core", "bcc")

# What scripts/setup-probe.sh prepares: the running kernel's headers, or the nearest ones.
DEFAULT_KERNEL_SOURCE = "/var/cache/contention-exporter/kernel-source"
TRACEPOINTS = ("sched_switch", "sched_wakeup", "sched_wakeup_new", "sched_process_exit")

_CAP_SYS_ADMIN = 21
_CAP_PERFMON = 38
_CAP_BPF = 39


@dataclass(frozen=True, slots=True)
class ProbeStatus:
    loaded: bool
    # Not loaded: why (one of REASONS). Loaded by the fallback (BCC) while CO-RE was
    # wanted: why CO-RE did not load. Loaded as asked: "".
    reason: str
    detail: str  # for humans: what loaded, or what exactly is missing or failed
    attribution: str  # "occupancy" or "last-runner"
    loader: str = ""  # "core" or "bcc" when loaded


def _self_status(field: str, procfs: str) -> str | None:
    """One field of this process's ``/proc/self/status`` (None when unreadable)."""
    try:
        with open(os.path.join(procfs, "self", "status")) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key == field:
                    return value.strip()
    except OSError:
        return None
    return None


def effective_caps(procfs: str = "/proc") -> int | None:
    """CapEff of this process (None when unreadable)."""
    value = _self_status("CapEff", procfs)
    try:
        return None if value is None else int(value, 16)
    except ValueError:
        return None


def seccomp_filtered(procfs: str = "/proc") -> bool:
    """This process runs under a seccomp filter (``Seccomp: 2``), as a container under
    its runtime's profile (Kubernetes' RuntimeDefault) does."""
    return _self_status("Seccomp", procfs) == "2"


def has_bpf_privilege(procfs: str = "/proc") -> bool:
    caps = effective_caps(procfs)
    if caps is None:
        return os.geteuid() == 0
    if caps & (1 << _CAP_SYS_ADMIN):
        return True
    need = (1 << _CAP_BPF) | (1 << _CAP_PERFMON)
    return caps & need == need


def tracefs_ok(tracefs: str) -> tuple[bool, str]:
    missing = [
        tp
        for tp in TRACEPOINTS
        if not os.path.exists(os.path.join(tracefs, "events", "sched", tp, "format"))
    ]
    if missing:
        return False, (
            f"no sched tracepoint formats under {tracefs} ({', '.join(missing)}); "
            f"mount it: mount -t tracefs tracefs {tracefs}"
        )
    return True, ""


def kernel_source_candidates(
    explicit: str | None, release: str | None = None
) -> list[tuple[str, str]]:
    """Where BCC's kernel headers are looked for, in order: ``(what, directory)``.

    The explicit choice (``--probe.kernel-source``), ``$BCC_KERNEL_SOURCE``, the
    running kernel's own headers (an exact match), then the nearest headers
    ``scripts/setup-probe.sh`` prepared when the distribution has none for this kernel.
    """
    release = release or os.uname().release
    out = [
        ("argument", explicit or ""),
        ("BCC_KERNEL_SOURCE", os.environ.get("BCC_KERNEL_SOURCE", "")),
        ("running kernel", f"/lib/modules/{release}/build"),
        ("prepared cache", DEFAULT_KERNEL_SOURCE),
    ]
    return [(what, path) for what, path in out if path]


KERNEL_SOURCE_ORDER = (
    "$BCC_KERNEL_SOURCE, /lib/modules/$(uname -r)/build, then "
    f"{DEFAULT_KERNEL_SOURCE} (prepared by scripts/setup-probe.sh)"
)


def find_kernel_source(explicit: str | None, release: str | None = None) -> tuple[str | None, str]:
    """Where BCC finds kernel headers: (directory or None for BCC's own search, detail).

    Tries :func:`kernel_source_candidates` in order (a directory with an ``include/``
    subdirectory wins), then ``/sys/kernel/kheaders.tar.xz`` (BCC unpacks it itself).
    Raises nothing: returns ``(None, why)`` when there is none (``why`` is empty if BCC
    can cope). An explicit choice that is wrong is an error, not a fallback.
    """
    tried = []
    for what, path in kernel_source_candidates(explicit, release):
        if os.path.isdir(os.path.join(path, "include")):
            return os.path.realpath(path), f"{what}: {path}"
        tried.append(path)
        if what == "argument":
            break
    if explicit is None and os.path.exists("/sys/kernel/kheaders.tar.xz"):
        return None, ""
    return None, (
        f"no kernel headers (tried {', '.join(tried)}); run scripts/setup-probe.sh as root"
    )
