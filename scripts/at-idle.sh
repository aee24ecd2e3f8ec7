#!/usr/bin/env bash
# Usage: scripts/at-idle.sh COMMAND [ARGS...]
# Run COMMAND at the lowest priority Linux has, for work that times nothing
# (scripts/test.sh's lint+types and generated files, docs/testing.md):
#   * SCHED_IDLE: the kernel runs it only on a CPU nothing else wants and preempts it
#     at any wakeup of another task;
#   * in a session of its own whose autogroup weighs as nice 19: with autogroup
#     scheduling (/proc/sys/kernel/sched_autogroup_enabled) a session is weighed as one
#     nice-0 task whatever its tasks' policy, so beside a busy container it would take
#     half of that CPU. Without autogroup the write fails, harmlessly.
# Its exit status is COMMAND's.
set -u
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }
exec setsid -w bash -c 'echo 19 >/proc/self/autogroup 2>/dev/null; exec chrt --idle 0 "$@"' \
  at-idle "$@"
