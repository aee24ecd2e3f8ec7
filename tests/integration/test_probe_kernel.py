"""The scheduler probe on the real kernel (root; CO-RE: BTF + libbpf; BCC: tracefs +
kernel headers). Every behaviour test runs once per loader (``loader`` parameter):
the two programs must agree on the same semantics.

Every test creates its own lab cgroups (``contention-test-*``, in the cgroup2 and the
v1 cpu hierarchy) through the ``make_lab`` fixture, which removes them and kills the
workers it started, pass or fail. Workers end by themselves after a few seconds.

Timing-sensitive: run under ``flock /tmp/contention-kernel.lock`` when other
real-kernel suites share the machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from exporter.probe import ProbeDelta, SchedProbe
from exporter.window import CULPRIT_IDLE, CULPRIT_UNATTRIBUTED
from labs import LabCgroup, Worker, spawn_busy, spawn_periodic
from labs.scenarios import lab_cpu
from tests.support.probe_loaders import SKIP_REASONS, cannot_load

pytestmark = [pytest.mark.kernel, pytest.mark.probe]

MakeLab = Callable[..., LabCgroup]
UNIFIED = "/sys/fs/cgroup/unified"


def pin(workers: list[Worker], cpu: int) -> None:
    """Pin our own workers (and their busy children) to one CPU."""
    for w in workers:
        for pid in (w.pid, *w.children):
            os.sched_setaffinity(pid, {cpu})


def live_cgroup_ids() -> set[int]:
    out = set()
    for dirpath, _dirs, _files in os.walk(UNIFIED):
        try:
            out.add(os.stat(dirpath).st_ino)
        except OSError:
            continue
    return out


def merged(*deltas: ProbeDelta) -> ProbeDelta:
    """Sum several polls (blame and runq) into one delta."""
    out = ProbeDelta(interval_s=0.0)
    for d in deltas:
        out.interval_s += d.interval_s
        out.context_switches += d.context_switches
        for v, r in d.runq.items():
            acc = out.runq.setdefault(v, type(r)([0] * len(r.counts), 0.0))
            acc.counts = [a + b for a, b in zip(acc.counts, r.counts, strict=True)]
            acc.sum_s += r.sum_s
        for v, row in d.blame.items():
            dst = out.blame.setdefault(v, {})
            for k, c in row.items():
                if k in dst:
                    dst[k].wait_s += c.wait_s
                    dst[k].events += c.events
                else:
                    dst[k] = type(c)(c.wait_s, c.events)
    return out


@pytest.mark.lab_cpu
def test_loads_and_yields_sane_numbers(
    make_lab: MakeLab, load_probe: Callable[..., SchedProbe], loader: str
) -> None:
    probe = load_probe()
    assert probe.status.attribution == "occupancy"
    assert probe.status.loader == loader
    lab = make_lab("probe-sane")
    probe.set_tracked([lab.cgroup_id])
    probe.poll()
    pin([spawn_periodic(lab, work_ms=1.0, period_ms=10.0, seconds=3.0)], lab_cpu())
    time.sleep(2.5)
    d = probe.poll()
    r = d.runq.get(lab.cgroup_id)
    assert r is not None, "no histogram for the tracked lab"
    # ~100 ticks/s for ~2.5 s: each tick is one wakeup -> one run-queue wait.
    assert 100 <= r.events <= 5000, r.events
    assert all(c >= 0 for c in r.counts)
    assert 0 < r.sum_s < r.events * 5.0
    assert d.context_switches > r.events
    assert d.runq_events >= r.events
    assert d.map_entries["tracked"] == 1
    assert d.map_entries["runq"] >= 1 and d.map_entries["pid_cgroup"] > 0
    assert all(n == 0 for n in d.update_failures.values()), d.update_failures
    if loader == "core":  # reads the cgroup from the task: never an unknown pid
        assert d.unknown_pid_wakeups == 0
    # Only tracked victims are recorded.
    assert set(d.runq) <= {lab.cgroup_id}
    assert set(d.blame) <= {lab.cgroup_id}
    # Blame never exceeds the waits it splits (waits >= min_wait only).
    blame_s = sum(c.wait_s for c in d.blame.get(lab.cgroup_id, {}).values())
    assert blame_s <= r.sum_s + 1e-6


@pytest.mark.lab_cpu
def test_attribution_accuracy_occupancy_vs_last_runner(
    make_lab: MakeLab,
    load_probe: Callable[..., SchedProbe],
    record_property: Callable[[str, object], None],
) -> None:
    """A light victim shares one CPU with two hogs weighted 1:3 (v1 cpu.shares).

    Ground truth is the hogs' measured CPU time. Everything runs pinned to one CPU:
    with two CPUs the load balancer tends to separate the hogs, and the victim's
    waits would sample the CPUs unevenly (the global 1:3 split does not hold per CPU).
    The victim has the weight of a 125m request (cpu.shares 128), so it waits for
    its turn behind the hogs' slices rather than preempting them on wakeup.
    """
    occupancy = load_probe(attribution="occupancy")
    last = load_probe(attribution="last-runner")
    victim = make_lab("probe-victim", cpu_shares=128)
    hog1 = make_lab("probe-hog1", cpu_shares=512)
    hog2 = make_lab("probe-hog2", cpu_shares=1536)
    for p in (occupancy, last):
        p.set_tracked([victim.cgroup_id])
    secs = 8.0
    cpu = lab_cpu()
    workers = [
        spawn_busy(hog1, threads=1, seconds=secs + 3),
        spawn_busy(hog2, threads=1, seconds=secs + 3),
        spawn_periodic(victim, work_ms=1.0, period_ms=10.0, seconds=secs + 3),
    ]
    pin(workers, cpu)
    time.sleep(1.0)
    occupancy.poll()
    last.poll()
    u1, u2 = hog1.cpu_usage_usec(), hog2.cpu_usage_usec()
    time.sleep(secs)
    c1, c2 = hog1.cpu_usage_usec() - u1, hog2.cpu_usage_usec() - u2
    d_occ, d_last = occupancy.poll(), last.poll()

    truth = {hog1.cgroup_id: c1 / (c1 + c2), hog2.cgroup_id: c2 / (c1 + c2)}
    report: dict[str, dict[str, float]] = {}
    for mode, d in (("occupancy", d_occ), ("last-runner", d_last)):
        row = d.blame.get(victim.cgroup_id, {})
        total = sum(c.wait_s for c in row.values())
        assert total > 0.5, f"{mode}: victim hardly waited ({total:.3f}s)"
        hogs = sum(row[h].wait_s for h in truth if h in row)
        got = {h: (row[h].wait_s if h in row else 0.0) for h in truth}
        report[mode] = {
            "hogs_share_of_wait": hogs / total,
            "hog1_share_of_wait": got[hog1.cgroup_id] / total,
            "hog2_share_of_wait": got[hog2.cgroup_id] / total,
            "hog1_error_pp": 100 * (got[hog1.cgroup_id] / hogs - truth[hog1.cgroup_id]),
            "hog2_error_pp": 100 * (got[hog2.cgroup_id] / hogs - truth[hog2.cgroup_id]),
        }
    report["truth"] = {
        "hog1_cpu_share": truth[hog1.cgroup_id],
        "hog2_cpu_share": truth[hog2.cgroup_id],
    }
    record_property("attribution", report)
    print("attribution accuracy:", report)

    occ = report["occupancy"]
    assert occ["hogs_share_of_wait"] >= 0.6, occ  # the hogs are what the victim waited on
    assert abs(occ["hog1_error_pp"]) <= 10.0, report
    assert abs(occ["hog2_error_pp"]) <= 10.0, report
    # Same run, the simple rule: reported, and expected to be no better.
    assert abs(report["last-runner"]["hog1_error_pp"]) >= abs(occ["hog1_error_pp"]) - 5.0


def schedstat(pid: int) -> tuple[int, int]:
    """(run_delay ns, switch-ins) of one task: fields 2 and 3 of its schedstat. The
    kernel adds to run_delay when a wait ends: at the switch-in, or when the task is
    dequeued to be migrated (the part waited on the CPU it leaves)."""
    with open(f"/proc/{pid}/schedstat") as f:
        _run, delay, pcount = f.read().split()[:3]
    return int(delay), int(pcount)


def await_switch_in(pid: int, pcount: int, timeout: float = 3.0) -> bool:
    """Wait until the task has been switched in again (its switch-in count moved)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if schedstat(pid)[1] != pcount:
            return True
        time.sleep(0.0005)
    return False


def test_a_wait_migrated_while_queued_is_split_across_both_cpus(
    make_lab: MakeLab, load_probe: Callable[..., SchedProbe], loader: str
) -> None:
    """A starved victim waits on CPU a behind hog A; while it is queued there its
    affinity moves it to CPU b, where hog B runs, and it waits again until it runs.
    The part of that one wait spent on CPU a is A's, the rest B's: the kernel's own
    run_delay says how much was which (it accounts the part on CPU a when the task is
    dequeued for the migration). Neither hog may be blamed for more than the victim
    waited on its CPU, and A for at least a fifth of it. Without the
    sched_migrate_task hook the whole wait was split over CPU b's history, so A got
    almost nothing (docs/probe.md, "Attribution")."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    cpu_a, cpu_b = cpus[:2]
    probe = load_probe()
    victim = make_lab("probe-mig-victim", cpu_shares=16)  # waits ~64 hog slices
    hog_a = make_lab("probe-mig-a", cpu_shares=1024)
    hog_b = make_lab("probe-mig-b", cpu_shares=1024)
    parents = make_lab("probe-mig-parents")  # untracked: the worker's waiting parent
    probe.set_tracked([victim.cgroup_id])
    secs = 25.0
    wa, wb = spawn_busy(hog_a, seconds=secs), spawn_busy(hog_b, seconds=secs)
    wv = spawn_busy(victim, seconds=secs)
    pin([wa], cpu_a)
    pin([wb], cpu_b)
    parents.add_pid(wv.pid)  # only the busy loop stays in the victim's cgroup
    v = wv.children[0]
    time.sleep(1.0)

    # Up to five trials from up to sixteen attempts: an attempt is dropped whenever the
    # victim ran before it could be moved or a second wait ended before the poll, which
    # on a slower or busier machine can be most of them.
    trials: list[dict[str, float]] = []
    for _ in range(16):
        if len(trials) == 5 or wv.remaining() < 4.0:
            break
        os.sched_setaffinity(v, {cpu_a})
        if not await_switch_in(v, schedstat(v)[1]):
            continue
        time.sleep(0.05)  # it ran its slice on CPU a and waits there since
        before = schedstat(v)[1]
        probe.poll()
        r0, n0 = schedstat(v)
        if n0 != before:
            continue  # a wait ended between the poll and the kernel's reading
        os.sched_setaffinity(v, {cpu_b})  # returns once the task has moved
        r1, n1 = schedstat(v)
        if n1 != n0 or not await_switch_in(v, n1):
            continue  # it ran before it could be moved: not a queued migration
        d = probe.poll()
        r2, n2 = schedstat(v)
        if n2 != n1 + 1 or victim.cgroup_id not in d.runq:
            continue  # a second wait ended before the poll: not one wait
        row = d.blame.get(victim.cgroup_id, {})
        got_a = row[hog_a.cgroup_id].wait_s if hog_a.cgroup_id in row else 0.0
        got_b = row[hog_b.cgroup_id].wait_s if hog_b.cgroup_id in row else 0.0
        trials.append(
            {
                "on_a_s": (r1 - r0) / 1e9,  # the kernel's: waited on CPU a
                "wait_s": (r2 - r0) / 1e9,  # the whole wait
                "probe_wait_s": d.runq[victim.cgroup_id].sum_s,
                "blame_a_s": got_a,
                "blame_b_s": got_b,
                "migrated": d.migrated_waits,
                "others_s": sum(c.wait_s for c in row.values()) - got_a - got_b,
            }
        )
    for t in trials:
        print(
            f"{loader}: waited {1e3 * t['wait_s']:.1f} ms ({1e3 * t['on_a_s']:.1f} on CPU a; "
            f"probe {1e3 * t['probe_wait_s']:.1f}); blamed A {1e3 * t['blame_a_s']:.1f} ms, "
            f"B {1e3 * t['blame_b_s']:.1f} ms, others {1e3 * t['others_s']:.1f} ms; "
            f"migrated waits {t['migrated']:.0f}"
        )
    assert len(trials) >= 3, f"only {len(trials)} waits were moved while queued: {trials}"
    on_a = sum(t["on_a_s"] for t in trials)
    wait = sum(t["wait_s"] for t in trials)
    blamed_a = sum(t["blame_a_s"] for t in trials)
    blamed = blamed_a + sum(t["blame_b_s"] for t in trials)
    truth, share = on_a / max(wait, 1e-9), blamed_a / max(blamed, 1e-9)
    print(f"{loader}: A's share of the hogs' blame {share:.3f}, of the wait (kernel) {truth:.3f}")
    seen = f"on CPU a {on_a:.4f} s of {wait:.4f} s waited, blamed A {blamed_a:.4f} s; {trials}"
    # A wait on CPU a is one or more of hog A's slices: 13-65 ms seen here; below 10 ms
    # on average the 5 ms a trial of slack below would make the per-CPU bounds empty.
    assert on_a >= 0.01 * len(trials), f"the victim hardly waited on CPU a: {seen}"
    # The histogram still records each wait whole (not only its part on CPU b).
    probe_wait = sum(t["probe_wait_s"] for t in trials)
    assert 0.85 * wait <= probe_wait <= 1.2 * wait, f"probe {probe_wait:.4f} s: {seen}"
    # The hogs are among what it waited behind (on this shared machine, other jobs too).
    assert blamed >= 0.15 * wait, f"the hogs were blamed {blamed:.4f} s: {seen}"
    # Per CPU: A ran only on CPU a, B only on CPU b, so neither may be blamed for more
    # than the victim waited on its CPU (5 % and 5 ms a move for the clocks); other
    # jobs on this shared machine take part of each CPU, so A's blame is only required
    # to be a fifth of the wait on CPU a (it was 0 before the hook: all on CPU b).
    slack = 0.005 * len(trials)
    assert blamed_a <= 1.05 * on_a + slack, f"A blamed beyond its CPU: {seen}"
    assert blamed - blamed_a <= 1.05 * (wait - on_a) + slack, f"B blamed beyond its CPU: {seen}"
    assert blamed_a >= 0.2 * on_a, f"A's share {share:.3f}, the kernel's {truth:.3f}: {seen}"
    assert all(t["migrated"] >= 1 for t in trials), f"a move the probe did not see: {seen}"


def cpu_jiffies(cpu: int) -> tuple[int, int, int]:
    """(idle incl. iowait, total, the rest) jiffies of one CPU from /proc/stat. The
    total is the scheduler's view, tasks or idle (user, nice, system, idle, iowait):
    the rest, irq, softirq and steal, is time no task was given (interrupts run in the
    context of whatever was current, the idle task included; steal is the
    hypervisor's), which the probe cannot name and the victim's usage leaves out."""
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith(f"cpu{cpu} "):
                vals = [int(x) for x in line.split()[1:]]
                return vals[3] + vals[4], sum(vals[:5]), sum(vals[5:8])
    raise AssertionError(f"cpu{cpu} not in /proc/stat")


@pytest.mark.lab_cpu
def test_throttling_is_not_contention(
    make_lab: MakeLab, load_probe: Callable[..., SchedProbe]
) -> None:
    """A busy loop limited to 20 % of a CPU by its own quota waits ~80 % of the time,
    and while it waits its CPU runs idle: the idle/own-quota key dominates.

    On a shared machine other work may use the CPU in the meantime, and the probe is
    right to name it. So the test measures how idle the victim's CPU really was
    (``/proc/stat``), requires the idle share of the victim's wait to match that
    within 15 points, and requires domination when the CPU was otherwise idle.
    """
    probe = load_probe()
    victim = make_lab("probe-throttled", cpu_quota_cores=0.2)
    probe.set_tracked([victim.cgroup_id])
    cpu = lab_cpu()
    w = spawn_busy(victim, threads=1, seconds=6.0)
    pin([w], cpu)
    time.sleep(1.0)
    probe.poll()
    idle0, total0, rest0 = cpu_jiffies(cpu)
    used0 = victim.cpu_usage_usec()
    time.sleep(4.0)
    d = probe.poll()
    idle1, total1, rest1 = cpu_jiffies(cpu)
    used_s = (victim.cpu_usage_usec() - used0) / 1e6
    hz = os.sysconf("SC_CLK_TCK")
    idle_s, total_s = (idle1 - idle0) / hz, (total1 - total0) / hz
    # While the victim is off the CPU (throttled), the CPU is idle or runs others.
    expected_idle = min(1.0, idle_s / max(1e-9, total_s - used_s))

    row = d.blame.get(victim.cgroup_id, {})
    total = sum(c.wait_s for c in row.values())
    assert total > 1.0, f"a 20%-quota busy loop should wait ~3 s in 4 s, got {total:.2f}"
    shares = {k: c.wait_s / total for k, c in row.items()}
    idle_share = shares.get(CULPRIT_IDLE, 0.0)
    print(
        f"throttled victim: used {used_s:.2f}s of {total_s:.2f}s (irq, softirq and "
        f"steal {(rest1 - rest0) / hz:.2f}s besides); cpu idle otherwise "
        f"{expected_idle:.2f}; blame shares {shares}"
    )
    assert abs(idle_share - expected_idle) <= 0.15, (idle_share, expected_idle, shares)
    if expected_idle >= 0.8:  # the node was otherwise idle
        assert idle_share >= 0.6, shares
        others = {k: s for k, s in shares.items() if isinstance(k, int)}
        assert all(s < 0.25 for s in others.values()), others
    # The waits are long (quota refill): they sit in the > 20 ms buckets.
    r = d.runq[victim.cgroup_id]
    from exporter.probe import RUNQ_BOUNDS_S

    i20 = RUNQ_BOUNDS_S.index(0.02)
    assert sum(r.counts[i20 + 1 :]) >= 20, r.counts


@pytest.mark.lab_cpu
def test_no_phantom_victims(make_lab: MakeLab, load_probe: Callable[..., SchedProbe]) -> None:
    """An idle sidecar (one short tick a second) produces a handful of events: far
    below the 50 events/minute the noisy-neighbour finding requires."""
    probe = load_probe()
    sidecar = make_lab("probe-sidecar")
    probe.set_tracked([sidecar.cgroup_id])
    pin([spawn_periodic(sidecar, work_ms=0.2, period_ms=1000.0, seconds=7.0)], lab_cpu())
    time.sleep(1.0)  # worker start-up (imports, joining) is not the steady state
    probe.poll()
    time.sleep(5.0)
    d = probe.poll()
    r = d.runq.get(sidecar.cgroup_id)
    events = r.events if r else 0
    print("idle sidecar run-queue events in 5 s:", events)
    assert events <= 30, events
    assert events * 60 / 5 < 50 * 6  # per minute, well under the finding's floor x 6


@pytest.mark.any_load
def test_nothing_waits_before_anything_is_tracked(
    make_lab: MakeLab, load_probe: Callable[..., SchedProbe]
) -> None:
    """Until userspace first tracks a cgroup the kernel reads tracked-set generation 0.
    A pid entry whose cached slot is invalid (its cgroup just changed) is marked NO_GEN
    (bpf/sched_probe.h), never 0: marked 0, such a task would be taken for a tracked
    one, at whatever slot its entry held, and start waiting (BCC, which notes a task's
    cgroup before it looks its slot up: a build marking 0 counted ~6,000 enqueues in
    this test). Busy loops preempted on both CPUs switch out runnable all over."""
    probe = load_probe(min_wait_us=0)
    lab = make_lab("probe-untracked")
    probe.poll()
    busy = spawn_busy(lab, threads=4, seconds=1.5)
    assert busy.wait(10.0) is not None
    d = probe.poll()
    assert d.context_switches > 100, d.context_switches  # it did run
    assert (d.enqueues, d.runq_events, d.blame_events) == (0, 0, 0)
    assert not d.runq and not d.blame


@pytest.mark.any_load
def test_pid_churn_removed_cgroup_and_prune(
    make_lab: MakeLab, load_probe: Callable[..., SchedProbe]
) -> None:
    """Many short-lived processes (pids exit and get reused), then the tracked cgroup
    is removed: no crash, the pid map does not leak, pruning drops the dead keys."""
    probe = load_probe()
    lab = make_lab("probe-churn")
    probe.set_tracked([lab.cgroup_id])
    probe.poll()
    pids: list[int] = []
    for _ in range(3):
        w = spawn_busy(lab, threads=24, seconds=0.5)
        pids += [w.pid, *w.children]
        assert w.wait(10.0) is not None
    time.sleep(0.3)
    d = probe.poll()
    assert d.runq.get(lab.cgroup_id) is not None
    assert all(n == 0 for n in d.update_failures.values()), d.update_failures
    # 3 x 25 processes came and went: their pid entries are gone (or, for a pid the
    # kernel already gave to another task, no longer the lab's). The node-wide entry
    # count is not compared: other work on the machine starts tasks meanwhile.
    assert probe._maps is not None
    left = {pid: e for pid in pids if (e := probe._maps.read_pid(pid)) and e[0] == lab.cgroup_id}
    assert len(pids) == 75 and not left, left

    gone = lab.cgroup_id
    lab.remove()
    time.sleep(0.2)
    probe.poll()
    live = live_cgroup_ids()
    assert gone not in live
    removed = probe.prune(live)
    assert removed >= 1
    assert gone not in probe.tracked
    assert gone not in probe.runq_totals()
    d = probe.poll()
    assert gone not in d.runq
    assert d.map_entries["runq"] == 0


@pytest.mark.any_load
def test_map_full_is_counted_not_fatal(
    make_lab: MakeLab, load_probe: Callable[..., SchedProbe]
) -> None:
    """Tiny maps: inserts fail, the failures are counted per map, nothing crashes and
    what fits is still measured."""
    probe = load_probe(max_cgroups=1, max_pids=32, max_blame=2, min_wait_us=0)
    labs = [make_lab(f"probe-full{i}") for i in range(3)]
    # labs[0] gets the one slot (the CO-RE probe inserts hashed pid entries only for
    # tracked tasks; BCC for every task): its 48 busy loops overflow the 32 hashed
    # pid slots.
    probe.set_tracked([labs[0].cgroup_id])
    probe.set_tracked([lab.cgroup_id for lab in labs])
    for lab in labs:
        spawn_periodic(lab, work_ms=0.5, period_ms=5.0, seconds=3.0)
    spawn_busy(labs[0], threads=48, seconds=1.5)  # 48 live pids > 32 pid slots
    time.sleep(2.5)
    d = probe.poll()
    assert d.update_failures["tracked"] == 2
    assert d.update_failures["pid_cgroup"] > 0  # more than 32 tasks with pid >= 32
    assert d.map_entries["tracked"] == 1
    # 32 direct slots (pids < 32) + 32 hashed: never more entries than that.
    assert d.map_entries["pid_cgroup"] <= 64 and d.map_entries["runq"] <= 1
    assert d.map_entries["blame"] <= 2
    assert len(d.runq) <= 1
    totals = probe.totals()
    assert totals.update_failures["tracked"] == 2
    assert probe.poll() is not None  # still alive


@pytest.mark.any_load
def test_special_keys_are_mapped(load_probe: Callable[..., SchedProbe]) -> None:
    """Track the root cgroup for a moment: idle waits come back as CULPRIT_IDLE and
    nothing ever carries the kernel's raw special values."""
    probe = load_probe(min_wait_us=0)
    probe.set_tracked([os.stat(UNIFIED).st_ino])
    probe.poll()
    time.sleep(1.5)
    d = probe.poll()
    keys = {k for row in d.blame.values() for k in row}
    assert 0 not in keys and (1 << 64) - 1 not in keys
    assert all(isinstance(k, int) or k in (CULPRIT_IDLE, CULPRIT_UNATTRIBUTED) for k in keys)
    assert d.runq, "the root cgroup always has wakeups"


# --- CO-RE specifics: its clock, and loading that fails half-way ----------------------


@pytest.mark.lab_cpu
def test_waits_agree_with_the_kernels_accounting(make_lab: MakeLab) -> None:
    """A periodic victim waits behind a hog on one CPU. Three probes watch it at once:
    CO-RE on the scheduler's clocks, CO-RE on bpf_ktime_get_ns(), BCC. Each one's
    total wait must match the kernel's run_delay for the victim's process (the
    accounting behind /proc/<pid>/schedstat and delay accounting): within 1 % above the
    run_delay read around its own polls, and at most 3 % below it: the kernel also
    counts waits that begin with no wakeup event (a re-enqueue of a task that never
    left the run queue) or end at a dequeue, which the probe cannot see; traced under
    foreign load they made the probe 2.1 % low (docs/probe.md)."""
    probes = {
        "core": SchedProbe(loader="core"),
        "core-ktime": SchedProbe(loader="core", use_ktime=True),
        "bcc": SchedProbe(loader="bcc"),
    }
    try:
        for name, p in probes.items():
            st = p.load()
            if not st.loaded:
                cannot_load(name.split("-")[0], st.reason, st.detail)
        victim = make_lab("probe-acct", cpu_shares=128)
        hog = make_lab("probe-acct-hog")
        for p in probes.values():
            p.set_tracked([victim.cgroup_id])
        cpu = lab_cpu()
        workers = [
            spawn_busy(hog, threads=1, seconds=7.0),
            spawn_periodic(victim, work_ms=1.0, period_ms=10.0, seconds=7.0),
        ]
        pin(workers, cpu)
        time.sleep(1.0)
        victim_proc = workers[1]
        # Both sides count a wait when it ends (the probe at the switch-in, the kernel
        # in the same switch), so the kernel's run_delay read just before and just
        # after each probe's poll brackets what that probe can have recorded.
        start: dict[str, tuple[int, int]] = {}
        for name, p in probes.items():
            before = victim_proc.run_delay_ns()
            p.poll()
            start[name] = (before, victim_proc.run_delay_ns())
        time.sleep(4.0)
        got: dict[str, float] = {}
        bounds: dict[str, tuple[float, float]] = {}
        for name, p in probes.items():
            before = victim_proc.run_delay_ns()
            d = p.poll()
            after = victim_proc.run_delay_ns()
            got[name] = d.runq[victim.cgroup_id].sum_s if victim.cgroup_id in d.runq else 0.0
            lo = (before - start[name][1]) / 1e9
            hi = (after - start[name][0]) / 1e9
            bounds[name] = (lo, hi)
        print(f"victim wait in 4 s: kernel run_delay bounds {bounds}; probes {got}")
        for name, s in got.items():
            lo, hi = bounds[name]
            assert lo > 0.2, "the victim hardly waited: no contention on its CPU"
            assert 0.97 * lo <= s <= 1.01 * hi, (name, s, lo, hi)
    finally:
        for p in probes.values():
            p.close()


def bpf_links() -> int:
    """BPF links this process holds (attached programs), from /proc/self/fdinfo."""
    n = 0
    for fd in os.listdir("/proc/self/fdinfo"):
        try:
            with open(f"/proc/self/fdinfo/{fd}") as f:
                n += "link_type:" in f.read()
        except OSError:
            continue
    return n


@pytest.mark.any_load
def test_attach_failure_leaves_nothing_attached(monkeypatch: pytest.MonkeyPatch) -> None:
    """The second tracepoint fails to attach: the probe is not loaded (attach-error)
    and the first one is detached again. (An attach that fails after a successful load
    cannot be provoked on this kernel, so the failure is injected into the binding's
    attach call; everything else is real.)"""
    from exporter.probe import libbpf

    real = libbpf.BpfObject.attach
    calls: list[str] = []

    def flaky(self: libbpf.BpfObject, prog: str) -> None:
        calls.append(prog)
        if len(calls) == 2:
            raise libbpf.LibbpfError(f"attach {prog}", 16)  # EBUSY
        real(self, prog)

    monkeypatch.setattr(libbpf.BpfObject, "attach", flaky)
    before = bpf_links()
    p = SchedProbe(loader="core")
    st = p.load()
    if not st.loaded and st.reason in SKIP_REASONS["core"] and not calls:
        cannot_load("core", st.reason, st.detail)
    assert not st.loaded and st.reason == "attach-error", st
    assert len(calls) == 2 and "nothing left attached" in st.detail
    assert bpf_links() == before
    assert p.poll().context_switches == 0


@pytest.mark.any_load
def test_verifier_rejection_falls_back_to_bcc(tmp_path: Path) -> None:
    """A CO-RE object the verifier rejects (the real program plus one that reads past
    the tracepoint's arguments, built here with clang) is not loaded; auto falls back
    to BCC, which loads, and says why: reason="verifier"."""
    clang = shutil.which("clang")
    if clang is None:
        cannot_load("core", "no-clang", "clang is needed to build the rejected object")
    bpf = Path(__file__).resolve().parents[2] / "bpf"
    src = tmp_path / "rejected.bpf.c"
    src.write_text(
        f'#include "{bpf / "sched_probe.bpf.c"}"\n'
        'SEC("tp_btf/sched_switch")\n'
        "int rejected(u64 *ctx) { return ctx[9] != 0; }\n"
    )
    obj = tmp_path / "rejected.bpf.o"
    subprocess.run(
        [clang, "-target", "bpfel", "-g", "-O2", f"-I{bpf}", "-c", str(src), "-o", str(obj)],
        check=True,
    )
    core_only = SchedProbe(loader="core", object_path=str(obj))
    st = core_only.load()
    if st.reason in SKIP_REASONS["core"]:
        cannot_load("core", st.reason, st.detail)
    assert not st.loaded and st.reason == "verifier", st
    assert "rejected" in st.detail or "invalid" in st.detail.lower(), st.detail

    auto = SchedProbe(loader="auto", object_path=str(obj))
    try:
        st = auto.load()
        if not st.loaded:
            cannot_load("bcc", st.reason, st.detail)
        assert (st.loader, st.reason) == ("bcc", "verifier"), st
        assert "CO-RE: verifier" in st.detail
    finally:
        auto.close()
