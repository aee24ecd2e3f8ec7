"""The probe without a kernel: preflight and BCC reasons, and poll/prune on stand-in maps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from exporter.probe import RUNQ_SLOTS, SchedProbe, core
from exporter.probe.burst import BURST_SLOTS
from exporter.probe.loader import STAT_NAMES, UNATTRIBUTED_KEY
from exporter.probe.status import (
    find_kernel_source,
    has_bpf_privilege,
    seccomp_filtered,
    tracefs_ok,
)
from exporter.window import CULPRIT_IDLE, CULPRIT_UNATTRIBUTED

ROOT_CAPS = "CapEff:\t000001ffffffffff\n"
NO_CAPS = "CapEff:\t0000000000000000\n"
BPF_CAPS = f"CapEff:\t{(1 << 39) | (1 << 38):016x}\n"


def fake_proc(tmp_path: Path, status: str) -> str:
    d = tmp_path / "proc" / "self"
    d.mkdir(parents=True)
    (d / "status").write_text(f"Name:\tpython\n{status}")
    return str(tmp_path / "proc")


def fake_tracefs(tmp_path: Path, events: tuple[str, ...]) -> str:
    root = tmp_path / "tracing"
    for e in events:
        d = root / "events" / "sched" / e
        d.mkdir(parents=True)
        (d / "format").write_text("name: x\n")
    return str(root)


ALL_TP = ("sched_switch", "sched_wakeup", "sched_wakeup_new", "sched_process_exit")


def test_privilege_from_capabilities(tmp_path: Path) -> None:
    assert has_bpf_privilege(fake_proc(tmp_path / "a", ROOT_CAPS))
    assert has_bpf_privilege(fake_proc(tmp_path / "b", BPF_CAPS))
    assert not has_bpf_privilege(fake_proc(tmp_path / "c", NO_CAPS))


def test_an_eperm_says_whether_caps_or_a_seccomp_filter_is_to_blame(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert seccomp_filtered(fake_proc(tmp_path / "f", BPF_CAPS + "Seccomp:\t2\n"))
    assert not seccomp_filtered(fake_proc(tmp_path / "n", BPF_CAPS + "Seccomp:\t0\n"))
    assert not seccomp_filtered(str(tmp_path / "nowhere"))
    monkeypatch.setattr(core, "has_bpf_privilege", lambda: False)
    assert core._denied_why() == "needs root, or CAP_BPF + CAP_PERFMON"
    monkeypatch.setattr(core, "has_bpf_privilege", lambda: True)
    monkeypatch.setattr(core, "seccomp_filtered", lambda: True)
    why = core._denied_why()
    assert "holds CAP_BPF + CAP_PERFMON" in why and "seccomp" in why
    monkeypatch.setattr(core, "seccomp_filtered", lambda: False)
    assert "seccomp" not in core._denied_why() and "LSM" in core._denied_why()


def test_tracefs_check(tmp_path: Path) -> None:
    ok, why = tracefs_ok(fake_tracefs(tmp_path, ALL_TP))
    assert ok and why == ""
    ok, why = tracefs_ok(fake_tracefs(tmp_path / "x", ("sched_switch",)))
    assert not ok and "sched_wakeup" in why and "mount -t tracefs" in why


def test_kernel_source_explicit(tmp_path: Path) -> None:
    (tmp_path / "k" / "include").mkdir(parents=True)
    path, _ = find_kernel_source(str(tmp_path / "k"))
    assert path == str((tmp_path / "k").resolve())
    path, why = find_kernel_source(str(tmp_path / "missing"))
    assert path is None and "no kernel headers" in why


def status_of(tmp_path: Path, **kw: Any) -> tuple[str, str]:
    st = SchedProbe(**kw).load()
    assert not st.loaded
    return st.reason, st.detail


def test_load_reasons_in_order(tmp_path: Path) -> None:
    """Preflight (both loaders), then the BCC loader's own checks in order."""
    root = fake_proc(tmp_path / "root", ROOT_CAPS)
    user = fake_proc(tmp_path / "user", NO_CAPS)
    tfs = fake_tracefs(tmp_path, ALL_TP)
    (tmp_path / "k" / "include").mkdir(parents=True)
    ksrc = str(tmp_path / "k")
    bcc = {"loader": "bcc", "procfs": root}
    assert status_of(tmp_path, enabled=False)[0] == "disabled"
    assert status_of(tmp_path, procfs=user, tracefs=tfs)[0] == "not-root"
    assert status_of(tmp_path, tracefs=str(tmp_path / "none"), **bcc)[0] == "no-tracefs"
    reason, detail = status_of(tmp_path, tracefs=tfs, kernel_source=str(tmp_path / "nok"), **bcc)
    assert reason == "no-headers" and "setup-probe.sh" in detail
    reason, detail = status_of(
        tmp_path, tracefs=tfs, kernel_source=ksrc, bpf_dir=str(tmp_path), **bcc
    )
    assert reason == "compile-error" and "sched_probe.c" in detail


def test_not_loaded_probe_is_inert() -> None:
    p = SchedProbe(enabled=False)
    assert p.status.reason == "not-loaded"
    p.set_tracked([5, 6])
    d = p.poll()
    assert d.runq == {} and d.blame == {} and d.context_switches == 0
    assert p.prune([]) == 0
    p.close()
    assert p.tracked == frozenset({5, 6})


def test_pid_capacity_counts_direct_and_hashed_slots() -> None:
    """Pid state: max_pids directly indexed slots plus a hash of max_pids (one entry
    per pid serves both the pid -> cgroup and the waiting-since maps)."""
    caps = SchedProbe(max_pids=32, max_cgroups=7, max_blame=9).capacities()
    assert caps == {
        "tracked": 7,
        "pid_cgroup": 64,
        "enqueued_at": 64,
        "runq": 7,
        "blame": 9,
    }


@pytest.mark.parametrize(
    "kw",
    [
        {"attribution": "random"},
        {"min_wait_us": -1},
        {"ring_slots": 12},
        {"max_cgroups": 0},
        {"max_blame": 0},
        {"ring_slots": 512},
        {"bounds_s": tuple(i / 1000 for i in range(1, 30))},
        {"loader": "ebpf"},
    ],
)
def test_bad_knobs(kw: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        SchedProbe(**kw)


# --- fake maps ------------------------------------------------------------------------
# The poll/diff/prune logic is loader-neutral (it sees a ProbeMaps). These stand-ins
# replace the kernel maps so that logic can be driven through exact sequences here;
# the real maps are exercised by tests/integration/test_probe_kernel.py.


class FakeMaps:
    loader = "core"
    detail = "fake"

    def __init__(self, ncpu: int = 2, tracked_cap: int = 1000) -> None:
        self.tracked: set[int] = set()
        self.tracked_cap = tracked_cap
        self.runq: dict[int, tuple[int, ...]] = {}
        self.blame: dict[tuple[int, int], tuple[int, ...]] = {}
        self.stats = [[0] * len(STAT_NAMES) for _ in range(ncpu)]
        self.closed = False

    def track(self, cgroup_id: int) -> None:
        if cgroup_id not in self.tracked and len(self.tracked) >= self.tracked_cap:
            raise OSError(7, "E2BIG")
        self.tracked.add(cgroup_id)

    def untrack(self, cgroup_id: int) -> None:
        self.tracked.discard(cgroup_id)

    def read_runq(self) -> dict[int, tuple[int, ...]]:
        return dict(self.runq)

    def read_blame(self) -> dict[tuple[int, int], tuple[int, ...]]:
        return dict(self.blame)

    def read_stats(self) -> tuple[int, ...]:
        return tuple(sum(col) for col in zip(*self.stats, strict=True))

    def delete_runq(self, victim: int) -> bool:
        return self.runq.pop(victim, None) is not None

    def delete_blame(self, victim: int, culprit: int) -> bool:
        return self.blame.pop((victim, culprit), None) is not None

    def program_fds(self) -> dict[str, int]:
        return {}

    def read_pid(self, pid: int) -> tuple[int, ...] | None:
        return None

    def close(self) -> None:
        self.closed = True

    def bump(self, name: str, n: int, cpu: int = 0) -> None:
        self.stats[cpu][STAT_NAMES.index(name)] += n


def hist(
    slot: int, n: int, sum_ns: int, burst: tuple[int, ...] = (0,) * BURST_SLOTS, b_sum: int = 0
) -> tuple[int, ...]:
    """A victim's values as the maps read them: wait buckets, sum_ns, burst, its sum."""
    v = [0] * (RUNQ_SLOTS + 1)
    v[slot] = n
    v[-1] = sum_ns
    return (*v, *burst, b_sum)


def loaded_probe(fake: FakeMaps) -> SchedProbe:
    p = SchedProbe()
    p._maps = fake  # what load() sets once a loader has loaded it
    return p


def test_poll_diffs_and_names_special_culprits() -> None:
    fake = FakeMaps()
    p = loaded_probe(fake)
    p.set_tracked([100, 200])
    assert fake.tracked == {100, 200}
    fake.runq[100] = hist(0, 5, 5_000)
    fake.blame[(100, 0)] = (1_000_000, 2)
    fake.blame[(100, UNATTRIBUTED_KEY)] = (500_000, 1)
    fake.blame[(100, 300)] = (2_000_000_000, 4)
    fake.bump("switches", 10)
    fake.bump("switches", 7, cpu=1)
    fake.bump("migrated", 2, cpu=1)
    d = p.poll()
    assert d.context_switches == 17
    assert d.migrated_waits == 2 and p.totals().migrated_waits == 2
    assert d.runq[100].counts[0] == 5 and d.runq[100].sum_s == pytest.approx(5e-6)
    row = d.blame[100]
    assert row[CULPRIT_IDLE].wait_s == pytest.approx(1e-3)
    assert row[CULPRIT_UNATTRIBUTED].events == 1
    assert row[300].wait_s == pytest.approx(2.0)
    assert d.map_entries["runq"] == 1 and d.map_entries["blame"] == 3
    assert d.map_entries["tracked"] == 2

    # Nothing new: empty delta. Then growth, then a reset (key re-created).
    assert p.poll().runq == {}
    fake.runq[100] = hist(0, 8, 9_000, (0, 0, 0, 4) + (0,) * (BURST_SLOTS - 5) + (1,), 50)
    fake.bump("switches", 3)
    d = p.poll()
    assert d.runq[100].counts[0] == 3 and d.context_switches == 3
    # burst demand: diffed like the wait buckets, after them
    assert d.burst_measured and d.runq[100].burst[3] == 4 and d.runq[100].burst[-1] == 1
    assert d.runq[100].burst_sum == 50 and p.runq_totals()[100].burst_sum == 50
    fake.runq[100] = hist(1, 2, 1_000)  # deleted and re-created
    d = p.poll()
    assert d.runq[100].counts[:2] == [0, 2]
    tot = p.runq_totals()[100]
    assert tot.counts[0] == 8 and tot.counts[1] == 2  # monotonic across the reset
    p.close()
    assert fake.closed and not p.loaded


def test_prune_removes_dead_victims_and_culprits() -> None:
    fake = FakeMaps()
    p = loaded_probe(fake)
    p.set_tracked([100, 200])
    fake.runq[100] = hist(0, 1, 1)
    fake.runq[200] = hist(0, 1, 1)
    fake.blame[(100, 200)] = (1, 1)
    fake.blame[(100, 999)] = (1, 1)  # culprit cgroup gone
    fake.blame[(100, 0)] = (1, 1)  # idle: never pruned
    fake.blame[(100, 1)] = (1, 1)  # root: never pruned
    fake.blame[(200, 100)] = (1, 1)
    p.poll()
    removed = p.prune([1, 100])  # 200 and 999 are gone
    assert removed == 4
    assert set(fake.runq) == {100}
    assert set(fake.blame) == {(100, 0), (100, 1)}
    assert fake.tracked == {100}
    assert 200 not in p.runq_totals()
    # 200 comes back as a new cgroup id reuse: a fresh baseline, not a negative delta.
    p.set_tracked([100, 200])
    fake.runq[200] = hist(2, 1, 7)
    assert p.poll().runq[200].counts[2] == 1


def test_tracked_map_full_is_counted_not_raised() -> None:
    fake = FakeMaps(tracked_cap=2)
    p = loaded_probe(fake)
    p.set_tracked([1, 2, 3, 4])
    assert len(fake.tracked) == 2
    d = p.poll()
    assert d.update_failures["tracked"] == 2
    assert p.totals().update_failures["tracked"] == 2
    p.set_tracked([1, 2, 3, 4])  # still full: counted again, still no exception
    assert p.poll().update_failures["tracked"] == 2


def test_kernel_failure_counters_are_reported_as_deltas() -> None:
    fake = FakeMaps()
    p = loaded_probe(fake)
    fake.bump("fail_blame", 4)
    fake.bump("pids_inserted", 10)
    fake.bump("pids_deleted", 3, cpu=1)
    d = p.poll()
    assert d.update_failures["blame"] == 4 and d.map_entries["pid_cgroup"] == 7
    fake.bump("fail_blame", 1)
    assert p.poll().update_failures["blame"] == 1
    assert p.totals().update_failures["blame"] == 5


def test_tracked_slots_assign_release_and_generation() -> None:
    """Victims get histogram slots; a released slot is reused for the next victim, whose
    histogram then belongs to it alone (``owned``); the generation never takes the
    kernel's 'invalid cache' value."""
    from exporter.probe.kernel_maps import TrackedSlots

    t = TrackedSlots(2)
    a, b = t.assign(100), t.assign(200)
    assert {a, b} == {0, 1} and t.assign(100) == a
    with pytest.raises(OSError):
        t.assign(300)
    t.release(100)
    assert t.assign(300) == a
    assert t.owned(a, 300) and not t.owned(a, 100) and not t.owned(a, 0)
    t.gen = TrackedSlots.MAX_GEN
    assert t.next_gen() == 1
