"""The tracefs reference for blame (tests/support/sched_trace.py), on hand-written
trace lines in the kernel's text format: the replay rules, not a kernel."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.sched_trace import IDLE, OTHER, SchedTrace, TraceError, replay

VICTIM = 100
HOG_A, HOG_B = 201, 202
OWNER = {HOG_A: "a", HOG_B: "b", VICTIM: "victim"}


def switch(cpu: int, t: float, prev: int, state: str, nxt: int) -> str:
    return (
        f"          python-{prev}    [{cpu:03d}] d..2. {t:.6f}: sched_switch: prev_comm=python "
        f"prev_pid={prev} prev_prio=120 prev_state={state} ==> next_comm=python "
        f"next_pid={nxt} next_prio=120"
    )


def wakeup(cpu: int, t: float, pid: int, target: int) -> str:
    return (
        f"          <idle>-0       [{cpu:03d}] dNh3. {t:.6f}: sched_wakeup: comm=python "
        f"pid={pid} prio=120 target_cpu={target:03d}"
    )


def migrate(cpu: int, t: float, pid: int, orig: int, dest: int) -> str:
    return (
        f"          python-{HOG_B}    [{cpu:03d}] dNs1. {t:.6f}: sched_migrate_task: "
        f"comm=python pid={pid} prio=120 orig_cpu={orig} dest_cpu={dest}"
    )


def mark(t: float, label: str) -> str:
    # The flags column is left out here: the parser must not depend on it.
    return f"          pytest-9     [000] {t:.6f}: tracing_mark_write: contention-window {label}"


def test_a_wait_goes_to_whoever_ran_on_its_cpu_for_as_long_as_they_overlapped() -> None:
    lines = [
        switch(0, 0.900, 0, "R", HOG_A),  # CPU 0: a from 0.900
        mark(1.000, "start"),
        wakeup(0, 1.010, VICTIM, 0),
        switch(0, 1.030, HOG_A, "R", HOG_B),  # b from 1.030
        switch(0, 1.060, HOG_B, "R", VICTIM),  # the victim after 50 ms: a 20, b 30
        switch(0, 1.061, VICTIM, "S", HOG_A),
        mark(2.000, "w0"),
    ]
    out = replay(lines, [VICTIM], OWNER)
    assert out.marks == ["contention-window w0"]
    row = out.windows[0][VICTIM]
    assert row == pytest.approx({"a": 0.020, "b": 0.030})
    assert out.waits == 1 and out.migrated_waits == 0


def test_a_migrated_wait_is_split_between_the_cpu_it_left_and_the_one_it_ran_on() -> None:
    lines = [
        switch(0, 0.5, 0, "R", HOG_A),
        switch(1, 0.5, 0, "R", HOG_B),
        mark(1.0, "start"),
        switch(0, 1.100, VICTIM, "R+", HOG_A),  # preempted on CPU 0: waits behind a
        migrate(1, 1.140, VICTIM, 0, 1),  # moved after 40 ms, behind b from here
        switch(1, 1.200, HOG_B, "R", VICTIM),  # 60 ms on CPU 1
        mark(2.0, "w0"),
    ]
    out = replay(lines, [VICTIM], OWNER)
    assert out.windows[0][VICTIM] == pytest.approx({"a": 0.040, "b": 0.060})
    assert out.migrated_waits == 1
    # Without following the move, the whole wait goes to the CPU it ended on.
    whole = replay(lines, [VICTIM], OWNER, follow_migrations=False)
    assert whole.windows[0][VICTIM] == pytest.approx({"b": 0.100})


def test_idle_other_short_waits_and_window_of_the_end() -> None:
    stranger = 777
    lines = [
        switch(0, 0.5, 0, "R", stranger),
        mark(1.0, "start"),
        wakeup(0, 1.10, VICTIM, 0),
        switch(0, 1.12, stranger, "S", 0),  # CPU idle for 10 ms while the victim waits
        switch(0, 1.13, 0, "R", VICTIM),
        switch(0, 1.14, VICTIM, "S", HOG_A),
        wakeup(0, 1.50, VICTIM, 0),
        switch(0, 1.50003, HOG_A, "R", VICTIM),  # 30 us: shorter than min_wait
        switch(0, 1.6, VICTIM, "S", HOG_A),
        wakeup(0, 1.9, VICTIM, 0),
        mark(2.0, "w0"),
        switch(0, 2.1, HOG_A, "R", VICTIM),  # ends in the second window
        mark(3.0, "w1"),
        wakeup(0, 3.1, VICTIM, 0),
        switch(0, 3.2, HOG_A, "R", VICTIM),  # after the last mark: dropped
    ]
    out = replay(lines, [VICTIM], OWNER)
    assert out.windows[0][VICTIM] == pytest.approx({OTHER: 0.02, IDLE: 0.01})
    assert out.windows[1][VICTIM] == pytest.approx({"a": 0.2})
    assert out.waits == 2


def test_a_switch_in_on_a_cpu_the_trace_did_not_move_it_to_is_counted() -> None:
    lines = [
        switch(1, 0.5, 0, "R", HOG_B),
        mark(1.0, "start"),
        wakeup(0, 1.1, VICTIM, 0),
        switch(1, 1.2, HOG_B, "R", VICTIM),
        mark(2.0, "w0"),
    ]
    out = replay(lines, [VICTIM], OWNER)
    assert out.unseen_moves == 1
    assert out.windows[0][VICTIM] == pytest.approx({"b": 0.1})


def test_no_tracefs_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="tracefs is not mounted"):
        SchedTrace("x", root=str(tmp_path)).__enter__()
