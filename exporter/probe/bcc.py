"""Load the BCC scheduler probe (``bpf/sched_probe.c``): the fallback for kernels
without BTF. BCC compiles the C on the node (LLVM, about a second and 135 MiB) against
kernel headers; the knobs are ``-D`` cflags. Map contents go through the same decoder
as the CO-RE probe's (``decode.py``).
"""

from __future__ import annotations

import contextlib
import ctypes as ct
import logging
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .backend import ProbeKnobs, ProbeLoadError, find_bpf_file, possible_cpus
from .kernel_maps import KernelMaps
from .status import (
    REASON_ATTACH_ERROR,
    REASON_COMPILE_ERROR,
    REASON_NO_BCC,
    REASON_NO_HEADERS,
    REASON_NO_TRACEFS,
    find_kernel_source,
    tracefs_ok,
)

log = logging.getLogger(__name__)

SOURCE_FILE = "sched_probe.c"
PROGRAMS = {
    "sched_switch": b"tracepoint__sched__sched_switch",
    "sched_wakeup": b"tracepoint__sched__sched_wakeup",
    "sched_wakeup_new": b"tracepoint__sched__sched_wakeup_new",
    "sched_process_exit": b"tracepoint__sched__sched_process_exit",
    "sched_migrate_task": b"tracepoint__sched__sched_migrate_task",
}


def find_bpf_dir(bpf_dir: str | None = None) -> Path | None:
    """The directory holding ``sched_probe.c``: packaged (``exporter/bpf``) or the repo's."""
    src = find_bpf_file(SOURCE_FILE, bpf_dir)
    return src.parent if src is not None else None


def cflags(knobs: ProbeKnobs, bpf_dir: Path) -> list[str]:
    """The ``-D`` knobs for the C code (the only place they are set for BCC)."""
    return [
        "-w",  # kernel-header warnings are noise here; errors still show
        f"-I{bpf_dir}",
        f"-DRUNQ_NBOUNDS={len(knobs.bounds_ns)}",
        "-DRUNQ_BOUNDS_NS=" + ",".join(f"{b}ULL" for b in knobs.bounds_ns),
        f"-DATTR_OCCUPANCY={1 if knobs.occupancy else 0}",
        f"-DMIN_WAIT_NS={knobs.min_wait_ns}ULL",
        f"-DRING_SLOTS={knobs.ring_slots}",
        f"-DBURST={1 if knobs.burst else 0}",
        f"-DMAX_CGROUPS={knobs.max_cgroups}",
        f"-DMAX_PIDS={knobs.max_pids}",
        f"-DMAX_BLAME={knobs.max_blame}",
        f"-DMAX_CPUS={possible_cpus()}",  # cpu_rings, indexed by CPU
    ]


@contextlib.contextmanager
def _captured_stderr() -> Iterator[list[str]]:
    """Capture fd 2 (where clang and the verifier write) into a list of lines."""
    out: list[str] = []
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        saved = os.dup(2)
        try:
            os.dup2(tmp.fileno(), 2)
            yield out
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            out.extend(tmp.read().decode(errors="replace").splitlines())


def _error_lines(lines: list[str], limit: int = 6) -> str:
    keep = [
        ln.strip()
        for ln in lines
        if "error" in ln.lower() or "invalid" in ln.lower() or "too complex" in ln.lower()
    ]
    return " | ".join(keep[-limit:])


def _raw(ctype: Any, x: Any) -> bytes:
    """A BCC key or leaf as the bytes the kernel holds (batch lookups hand scalars back
    as Python ints: ``ctype`` is the table's Key or Leaf type)."""
    return bytes(ctype(x)) if isinstance(x, int) else bytes(x)


class BccMaps(KernelMaps):
    """The loaded BCC probe (a ``bcc.BPF``): its maps through BCC's tables."""

    loader = "bcc"

    def __init__(self, bpf: Any, knobs: ProbeKnobs, detail: str) -> None:
        super().__init__(knobs, detail)
        self._bpf = bpf
        self.batch_ok = True

    def _table(self, name: str) -> Any:
        return self._bpf[name.encode()]

    def _lookup(self, name: str, key: bytes) -> bytes | None:
        t = self._table(name)
        try:
            return _raw(t.Leaf, t[t.Key.from_buffer_copy(key)])
        except KeyError:
            return None

    def _update(self, name: str, key: bytes, value: bytes) -> None:
        t = self._table(name)
        try:
            t[t.Key.from_buffer_copy(key)] = t.Leaf.from_buffer_copy(value)
        except Exception as e:  # BCC raises a bare Exception when the map is full
            raise OSError(f"{name}: {e}") from None

    def _delete(self, name: str, key: bytes) -> bool:
        t = self._table(name)
        try:
            del t[t.Key.from_buffer_copy(key)]
        except KeyError:
            return False
        return True

    def _items(self, name: str) -> list[tuple[bytes, bytes]]:
        t = self._table(name)
        items: Iterable[tuple[Any, Any]] | None = None
        if self.batch_ok:
            try:
                items = list(t.items_lookup_batch())
            except Exception as e:
                log.info("batch map lookup unavailable (%s); iterating keys", e)
                self.batch_ok = False
        if items is None:
            items = list(t.items())
        return [(_raw(t.Key, k), _raw(t.Leaf, v)) for k, v in items]

    def _per_cpu_stats(self) -> list[bytes]:
        return [bytes(cpu) for cpu in self._table("cpu_stats")[ct.c_int(0)]]

    def program_fds(self) -> dict[str, int]:
        funcs = getattr(self._bpf, "funcs", {})
        return {tp: funcs[f].fd for tp, f in PROGRAMS.items() if f in funcs}

    def close(self) -> None:
        self._bpf.cleanup()


def _prerequisites(
    kernel_source: str | None, tracefs: str, bpf_dir: str | None
) -> tuple[Path, str | None]:
    """What BCC needs before it compiles, in the order to fix them: tracefs, the C
    source, kernel headers. Returns (source directory, headers or None for BCC's own
    search); raises ProbeLoadError."""
    ok, why = tracefs_ok(tracefs)
    if not ok:
        raise ProbeLoadError(REASON_NO_TRACEFS, why)
    src_dir = find_bpf_dir(bpf_dir)
    if src_dir is None:
        raise ProbeLoadError(REASON_COMPILE_ERROR, f"{SOURCE_FILE} not found (bpf/ directory)")
    ksrc, why = find_kernel_source(kernel_source)
    if ksrc is None and why:
        raise ProbeLoadError(REASON_NO_HEADERS, why)
    return src_dir, ksrc


def _whole_bpf() -> Any:
    """BCC's ``BPF`` class, made all-or-nothing at attach; raises ProbeLoadError when
    bcc does not import."""
    try:
        from bcc import BPF
    except Exception as e:
        raise ProbeLoadError(
            REASON_NO_BCC, f"cannot import bcc ({e}); install python3-bpfcc and link it"
        ) from None

    class _WholeBPF(BPF):  # type: ignore[misc]
        """BCC attaches the TRACEPOINT_PROBEs as it constructs the object and keeps
        it alive (atexit) if one attach fails: detach the others then, so a failed
        load never leaves half a probe running."""

        def _trace_autoload(self) -> None:
            try:
                super()._trace_autoload()
            except Exception:
                self.cleanup()
                raise

    return _WholeBPF


def _load_error(msg: str, lines: list[str]) -> ProbeLoadError:
    """BCC's exception and the compiler/verifier output as the reason to report."""
    detail = _error_lines(lines)
    if "attach" in msg.lower():
        return ProbeLoadError(REASON_ATTACH_ERROR, f"{msg} {detail}".strip())
    if "failed to load" in msg.lower():
        msg = f"verifier rejected the program: {msg}"
    return ProbeLoadError(REASON_COMPILE_ERROR, f"{msg} {detail}".strip())


def load_bcc(
    knobs: ProbeKnobs,
    *,
    kernel_source: str | None = None,
    tracefs: str = "/sys/kernel/tracing",
    bpf_dir: str | None = None,
) -> BccMaps:
    """Compile, load and attach with BCC; raises ProbeLoadError.

    While clang runs, file descriptor 2 is redirected to capture compiler and verifier
    messages (logged at debug level, summarised in the error): call it at start-up,
    before other threads write to stderr.
    """
    src_dir, ksrc = _prerequisites(kernel_source, tracefs, bpf_dir)
    whole_bpf = _whole_bpf()
    if ksrc is not None:
        os.environ["BCC_KERNEL_SOURCE"] = ksrc
    src = str((src_dir / SOURCE_FILE).resolve())  # absolute: BCC resolves against cwd
    lines: list[str] = []
    try:
        with _captured_stderr() as lines:
            bpf = whole_bpf(src_file=src.encode(), cflags=cflags(knobs, src_dir))
    except Exception as e:
        for ln in lines:
            log.debug("bcc: %s", ln)
        raise _load_error(str(e), lines) from None
    for ln in lines:
        log.debug("bcc: %s", ln)
    return BccMaps(bpf, knobs, f"BCC, headers: {ksrc or 'bcc default'}")
