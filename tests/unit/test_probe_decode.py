"""The Python decoder matches what the compiler laid out: every size and offset in
``exporter/probe/decode.py`` is checked against the BTF of the committed CO-RE object
(which both programs' shared header produced), read through the real libbpf."""

from __future__ import annotations

import struct

import pytest

from exporter.probe import decode as d
from exporter.probe.core import find_object
from exporter.probe.libbpf import Libbpf, LibbpfMissing, LibbpfTooOld, struct_layout


@pytest.fixture(scope="module")
def layout() -> object:
    try:
        bpf = Libbpf.open()
    except (LibbpfMissing, LibbpfTooOld) as e:
        pytest.skip(f"libbpf unavailable: {e}")
    obj = find_object()
    assert obj is not None, "bpf/sched_probe.bpf.o is missing: run scripts/build-bpf.sh"
    return lambda name: struct_layout(bpf, str(obj), name)


def test_struct_sizes_and_offsets(layout) -> None:  # type: ignore[no-untyped-def]
    size, off = layout("runq_hist")
    assert size == d.RUNQ_VALUE.size
    after = 8 + d.RUNQ_MAX_SLOTS * 8
    assert off == {
        "owner": 0,
        "slots": 8,
        "sum_ns": after,
        "active": after + 8,
        "epoch": after + 16,
        "pad": after + 20,
        "burst": after + 24,
        "burst_sum": after + 24 + d.BURST_SLOTS * 8,
    }
    assert off["epoch"] == d.RUNQ_EPOCH_OFFSET
    size, off = layout("blame_key")
    assert size == d.BLAME_KEY.size and off == {"victim": 0, "culprit": 8}
    size, off = layout("blame_cell")
    assert size == d.BLAME_VALUE.size and off == {"wait_ns": 0, "events": 8}
    size, off = layout("pid_state")
    assert size == d.PID_STATE.size
    assert off == {
        "cgroup": 0,
        "since": 8,
        "victim": 16,
        "attr_since": 24,
        "victim_slot": 32,
        "slot": 36,
        "gen": 40,
        "counted": 44,
    }
    size, _ = layout("run_slice")
    assert size == d.RUN_SLICE.size
    size, off = layout("cpu_ring")
    assert size == d.CPU_RING_SIZE and off["ring"] == d.CPU_RING_SIZE - d.RING_MAX_SLOTS * 24
    size, off = layout("cpu_stats")
    assert size == d.CPU_STATS.size and off == {"stats": 0}
    size, off = layout("probe_knobs")
    assert size == d.KNOBS.size
    assert off["min_wait_ns"] == d.RUNQ_MAX_BOUNDS * 8
    assert list(off) == [
        "bounds_ns",
        "min_wait_ns",
        "nbounds",
        "ring_mask",
        "max_pids",
        "occupancy",
        "switch_has_state",
        "use_ktime",
        "burst",
        "pad",
    ]


def test_stat_names_mirror_the_header() -> None:
    """enum stat_index in bpf/sched_probe.h, in order."""
    from pathlib import Path

    header = (Path(d.__file__).resolve().parents[2] / "bpf" / "sched_probe.h").read_text()
    body = header[header.index("enum stat_index {") : header.index("STAT_COUNT")]
    names = [
        ln.strip().split()[0].rstrip(",").removeprefix("STAT_").lower()
        for ln in body.splitlines()[1:]
        if ln.strip().startswith("STAT_")
    ]
    assert tuple(names) == d.STAT_NAMES


def test_burst_bounds_mirror_the_header() -> None:
    """BURST_BOUNDS_LIST in bpf/sched_probe.h is exporter/probe/burst.py's BURST_BOUNDS."""
    from pathlib import Path

    from exporter.probe.burst import BURST_BOUNDS

    header = (Path(d.__file__).resolve().parents[2] / "bpf" / "sched_probe.h").read_text()
    line = next(ln for ln in header.splitlines() if ln.startswith("#define BURST_BOUNDS_LIST"))
    listed = tuple(int(x) for x in line.split(None, 2)[2].split(","))
    assert listed == BURST_BOUNDS
    assert f"#define BURST_NBOUNDS {len(BURST_BOUNDS)}" in header


def test_decoders() -> None:
    burst = tuple(range(100, 100 + d.BURST_SLOTS))
    raw = d.RUNQ_VALUE.pack(42, *range(1, d.RUNQ_MAX_SLOTS + 1), 999, 5, 77, 0, *burst, 4242)
    assert d.runq_value(raw, 3) == (42, (1, 2, 3, 999, *burst, 4242))
    zeros = (0,) * (d.BURST_SLOTS + 1)
    assert d.runq_value(d.runq_initial(7, 1), 2) == (7, (0, 0, 0, *zeros))
    initial = d.runq_initial(7, 0xFFFFFFFF)
    assert struct.unpack_from("<I", initial, d.RUNQ_EPOCH_OFFSET) == (0xFFFFFFFF,)
    for bad in (0, 1 << 32):
        with pytest.raises(ValueError, match="epoch"):
            d.runq_initial(7, bad)
    key, val = d.blame_item(d.BLAME_KEY.pack(5, d.UNATTRIBUTED_KEY), d.BLAME_VALUE.pack(7, 1))
    assert key == (5, d.UNATTRIBUTED_KEY) and val == (7, 1)
    cpu = d.CPU_STATS.pack(*range(len(d.STAT_NAMES)))
    per_cpu = d.split_per_cpu(cpu + cpu, 2, d.CPU_STATS.size)
    assert d.sum_stats(per_cpu) == tuple(2 * i for i in range(len(d.STAT_NAMES)))


def test_possible_cpus(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The size of the maps indexed by CPU: the highest possible CPU + 1, as libbpf
    counts them (holes included)."""
    from exporter.probe.backend import possible_cpus

    f = tmp_path / "possible"
    for text, n in (("0\n", 1), ("0-1\n", 2), ("0-3,6\n", 7), ("0,2-5\n", 6)):
        f.write_text(text)
        assert possible_cpus(str(f)) == n
