"""The two probe programs share what they do alike (bpf/sched_probe_logic.h) instead of
each writing it: a function written in both is a copy that can drift, as the
invalid-generation marker once did (one flavour reset a forgotten pid's ``gen`` to
``NO_SLOT``, the other to 0). The kernel-side behaviour itself is tested on the real
kernel for both loaders (tests/integration/test_probe_kernel.py)."""

from __future__ import annotations

import re
from pathlib import Path

from exporter.probe import decode
from exporter.probe.kernel_maps import TrackedSlots

BPF = Path(__file__).resolve().parents[2] / "bpf"
FLAVOURS = ("sched_probe.bpf.c", "sched_probe.c")  # CO-RE, BCC
SHARED = ("sched_probe.h", "sched_probe_maps.h", "sched_probe_logic.h")
FUNCTION = re.compile(r"^static __always_inline [\w\s\*]+?\b(\w+)\(", re.MULTILINE)
GEN_WRITE = re.compile(r"(?:\.|->)gen\s*=\s*([^;,\n]+)")


def source(name: str) -> str:
    return (BPF / name).read_text()


def test_no_function_is_written_in_both_flavours() -> None:
    core, bcc = (set(FUNCTION.findall(source(f))) for f in FLAVOURS)
    assert "prev_runnable" in core and "remember_cgroup" in bcc  # the parser finds them
    assert core & bcc == set(), "write these once in bpf/sched_probe_logic.h"
    shared = set(FUNCTION.findall(source("sched_probe_logic.h")))
    assert {"forget_pid", "slot_of", "pid_find", "blame_add"} <= shared
    assert (core | bcc) & shared == set(), "defined in a flavour and in the shared header"


def test_one_invalid_generation_marker() -> None:
    """A pid entry's ``gen`` is only ever set to the current generation or to NO_GEN,
    defined once, never to a number: 0 is what the kernel reads before userspace's
    first write, so it would make an invalidated cache valid (sched_probe.h says why)."""
    writes = [w.strip() for name in (*FLAVOURS, *SHARED) for w in GEN_WRITE.findall(source(name))]
    assert writes, "the parser found no write of gen"
    numbers = [w for w in writes if re.search(r"(?<![\w])\d", w)]
    assert numbers == [], numbers
    assert all("NO_GEN" in w or "gen" in w.replace("NO_GEN", "") for w in writes), writes
    defined = [
        (name, m.group(1))
        for name in (*FLAVOURS, *SHARED)
        for m in re.finditer(r"#define NO_GEN (\S+)", source(name))
    ]
    assert defined == [("sched_probe.h", "0xffffffffU")]
    assert decode.NO_GEN == 0xFFFFFFFF


def test_userspace_never_writes_the_marker_nor_zero() -> None:
    t = TrackedSlots(1)
    seen = {t.next_gen() for _ in range(3)}
    t.gen = TrackedSlots.MAX_GEN - 1
    seen |= {t.next_gen() for _ in range(3)}  # through the wrap
    assert TrackedSlots.MAX_GEN in seen and 1 in seen
    assert decode.NO_GEN not in seen and 0 not in seen
