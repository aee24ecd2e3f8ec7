#!/usr/bin/env bash
# Set up everything the test suite needs on a fresh Debian host, then run all of it in
# lanes, each timed, and print a table of them at the end (docs/testing.md). What CI's
# .ci/run runs, as root, on a clean clone:
#
#   setup                 scripts/setup.sh --test
#   then, in the background at idle priority for the whole run (scripts/at-idle.sh:
#   SCHED_IDLE, they take only CPU nothing else wants), the lanes that time nothing, one
#   after the other, their output in "idle lanes.log":
#     lint+types          ruff check, ruff format --check, mypy
#     generated files     scripts/check-generated.sh
#     unit (untimed)      pytest tests/unit -m untimed (bounded only against hangs:
#                         promtool, helm, kubeconform and the CLI over the whole corpus,
#                         the property tests, the fixture-tree sweeps)
#   the VM lanes (scripts/vm-test.sh: the vm-marked tests in pure cgroup v2 guests,
#   qemu TCG, one host CPU each at most), two guests side by side in the background,
#   "VM lane (labs)" (--part labs, in vm-labs/) and "VM lane (agent)" (--part agent: the
#   probe, sampler and image tests, in vm/), each output in its vm.log, beside the
#   lanes that are not timing-sensitive:
#     image build (core)  scripts/build-image.sh --flavor core, once, for the guest (its
#                         image tests run last and wait for it) and the host's image
#                         tests (root only)
#     unit, fuzz          pytest tests/unit -m "not untimed", tests/fuzz
#     image build (bcc)   scripts/build-image.sh --flavor bcc, for the host's image tests
#                         (root only)
#     image               pytest tests/image, on the two images built
#   and once they are done, on a machine quiet but for the idle lanes, the real-kernel
#   lanes:
#     kernel              pytest tests/integration -m "not any_load and not lab_cpu"
#     e2e                 pytest tests/e2e -m "not any_load", in the background, its
#                         output in e2e.log; once its labs are done and it only waits
#                         for their alerts to resolve (2 CPUs or more):
#     kernel (lab CPU)    pytest tests/integration -m lab_cpu: real-kernel tests whose
#                         scenes run on the last CPU only, the e2e lane, the idle lanes
#                         and the harness confined to the others meanwhile, with
#     any load            pytest tests/integration tests/e2e -m any_load (real-kernel
#                         and end-to-end tests whose verdicts hold on a busy machine)
#                         beside it, on the other CPUs, its output in "any load.log"
#   (with one CPU: any load after unit, fuzz and image; kernel with the lab_cpu tests;
#   e2e after it)
#
# A lane that fails does not stop the others; the exit status is non-zero if any failed.
# pytest's "no tests collected" (5) is a failure in every lane. Results go to
# $CONTENTION_TEST_RESULTS (default build/test-results/, emptied first): each pytest
# lane's junit file, vm/ and vm-labs/ (each VM lane's lane.json, its guest's junit.xml,
# vm.log),
# lanes.tsv (each lane's start, end and status) and lanes.md (the table below, as
# markdown: python -m tests.support.lane_report DIR prints it again).
#
# Run as root: the kernel tests create cgroups and load BPF, the image is built with
# mmdebstrap (as another user they skip, saying why). With arguments it runs one host
# pytest with them instead of the host lanes (lane "pytest (selection)", e.g.
# ./scripts/test.sh -k throttl, or -m 'not kernel'), then the VM lane, one guest for
# all its tests. CONTENTION_VM_LANE=0 leaves the VM lanes out of a developer's run
# (never under CI).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1

RESULTS="${CONTENTION_TEST_RESULTS:-$ROOT/build/test-results}"
rm -rf "$RESULTS"
mkdir -p "$RESULTS" || exit 1
RESULTS="$(cd "$RESULTS" && pwd)"
LANES="$RESULTS/lanes.tsv"
VMDIR="$RESULTS/vm"
# The core image for the guest and the image tests: inside the checkout, which the
# guest sees at the same path (the results directory might be elsewhere).
IMAGE="$ROOT/build/test-image"
IMAGE_BCC="$ROOT/build/test-image-bcc"

now() { date +%s.%N; }
printf '#started\t%s\n' "$(now)" >"$LANES"
step() { printf '\n==> %s\n' "$*"; }
failed=0

# record NAME START END RC KIND PATH [idle]: one line of lanes.tsv (RC "-": left out, and
# PATH says why; "idle": the lane ran at idle priority)
record() {
  local line
  line="$(printf '%s\t' "$@")"
  printf '%s\n' "${line%$'\t'}" >>"$LANES"
  case "$4" in 0 | -) ;; *) failed=1 ;; esac
}

# lane NAME KIND PATH COMMAND...: run, time and record one lane (its status also in
# LAST_RC); never stops the script
LAST_RC=0
lane() {
  local name="$1" kind="$2" path="$3" start rc
  shift 3
  step "$name"
  start="$(now)"
  "$@"
  rc=$?
  finished "$name" "$start" "$(now)" "$rc" "$kind" "$path"
  LAST_RC="$rc"
}

# finished NAME START END RC KIND PATH [idle]: say how a lane ended and record it
finished() {
  if [ "$5" = pytest ] && [ "$4" -eq 5 ]; then
    echo "pytest collected no tests: that is a failure here" >&2
  fi
  [ "$4" -eq 0 ] || echo "==> lane $1 FAILED (exit $4)" >&2
  record "$@"
}

# background ENDFILE LOG COMMAND...: COMMAND in the background (its PID in $!), its
# output in LOG; once it ends, its exit status and end time go to ENDFILE (tab-separated).
# TERM and INT reach it.
background() {
  local endfile="$1" log="$2"
  shift 2
  (
    child=""
    trap '[ -n "$child" ] && kill -TERM "$child" 2>/dev/null; wait' TERM INT
    "$@" &
    child=$!
    wait "$child"
    rc=$?
    printf '%s\t%s\n' "$rc" "$(now)" >"$endfile"
    exit "$rc"
  ) >"$log" 2>&1 &
}

# left_out NAME WHY KIND: a lane not run, recorded with the reason
left_out() {
  step "$1: left out ($2)"
  local t
  t="$(now)"
  record "$1" "$t" "$t" - "$3" "$2"
}

# pytest_lane NAME DIR [ENV=VALUE...] [-- PYTEST ARGS...]: pytest on one directory,
# its junit file kept
pytest_lane() {
  local name="$1" dir="$2" envs=()
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    envs+=("$1")
    shift
  done
  [ $# -eq 0 ] || shift
  lane "$name" pytest "$name.xml" env "${envs[@]}" pytest "$dir" \
    --junitxml="$RESULTS/$name.xml" -o junit_suite_name="$name" "$@"
}

lint_types() {
  local rc=0
  at_idle ruff check . || rc=1
  at_idle ruff format --check . || rc=1
  at_idle mypy || rc=1
  return "$rc"
}

# at_idle COMMAND...: COMMAND at the lowest priority there is (scripts/at-idle.sh)
at_idle() { bash scripts/at-idle.sh "$@"; }

# The lanes that time nothing, one after the other at idle priority in the background
# from the start (idle_start): "lint+types", "generated files" and "unit (untimed)" (the
# unit tests bounded only against hangs: marker untimed). They use the CPU the
# guests and the real-kernel lanes leave idle instead of minutes of their own beside the
# guests. Their output goes to "idle lanes.log", shown once they end (idle_wait), each
# lane's record to .idle.tsv (recorded then: a failure here fails the run).
IDLE_PID=""
IDLE_START=""
idle_record() { # NAME START RC KIND PATH
  printf '%s\t%s\t%s\t%s\t%s\t%s\tidle\n' "$1" "$2" "$(now)" "$3" "$4" "$5" >>"$RESULTS/.idle.tsv"
}

idle_lanes() {
  local start
  start="$(now)"
  printf '\n==> lint+types\n'
  lint_types
  idle_record lint+types "$start" $? step -
  start="$(now)"
  printf '\n==> generated files\n'
  if [ -x scripts/check-generated.sh ]; then
    at_idle bash scripts/check-generated.sh
    idle_record "generated files" "$start" $? step -
  else
    idle_record "generated files" "$start" - step "no scripts/check-generated.sh"
  fi
  start="$(now)"
  printf '\n==> unit (untimed)\n'
  at_idle pytest tests/unit -m untimed -n auto --dist worksteal \
    --junitxml="$RESULTS/unit (untimed).xml" -o junit_suite_name="unit (untimed)"
  idle_record "unit (untimed)" "$start" $? pytest "unit (untimed).xml"
}

idle_start() {
  step "lint+types, generated files, unit (untimed): in the background at idle priority: $RESULTS/idle lanes.log"
  : >"$RESULTS/.idle.tsv"
  IDLE_START="$(now)"
  background "$RESULTS/.idle.end" "$RESULTS/idle lanes.log" idle_lanes
  IDLE_PID="$!"
}

idle_wait() {
  [ -n "$IDLE_PID" ] || return 0
  local name start end rc kind path idle
  step "waiting for the lanes at idle priority"
  wait "$IDLE_PID"
  IDLE_PID=""
  step "the lanes at idle priority: output ($RESULTS/idle lanes.log)"
  cat "$RESULTS/idle lanes.log"
  while IFS=$'\t' read -r name start end rc kind path idle; do
    if [ "$rc" = - ]; then
      record "$name" "$start" "$end" "$rc" "$kind" "$path" "$idle"
    else
      finished "$name" "$start" "$end" "$rc" "$kind" "$path" "$idle"
    fi
  done <"$RESULTS/.idle.tsv"
  if ! grep -q '^unit (untimed)' "$RESULTS/.idle.tsv"; then
    # the lanes ended before recording all three (killed): say so rather than lose them
    record "idle lanes" "$IDLE_START" "$(now)" 1 step "ended early: see idle lanes.log"
  fi
}

# descendants PID: every process below PID (ours: the VM lane's lane.py, vng, qemu)
descendants() {
  local child
  for child in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
    echo "$child"
    descendants "$child"
  done
}

# confine CPUS PID...: set the CPU affinity of every thread of each PID (gone ones skip)
confine() {
  local cpus="$1" pid
  shift
  for pid in "$@"; do taskset -a -p -c "$cpus" "$pid" >/dev/null 2>&1 || true; done
}

# beside_lab_cpu: every process the lab-CPU lane confines to the other CPUs: the VM
# lanes' (if still running), the idle lanes' and the end-to-end lane's (their own shells
# too: what they start next inherits their CPUs)
beside_lab_cpu() {
  local pid
  for pid in "${VM_PIDS[@]}"; do descendants "$pid"; done
  for pid in $IDLE_PID $E2E_PID; do
    echo "$pid"
    descendants "$pid"
  done
}

# The tests whose scenes run on the last CPU only (marker lab_cpu), with the "any load"
# lane beside them on the other CPUs: the processes beside them (beside_lab_cpu), this
# harness and the any-load lane are confined to the other CPUs, so the labs have the
# last one to themselves ($CONTENTION_LAB_CPU, labs.scenarios.lab_cpu); they get every
# CPU back after. The any-load tests' verdicts hold on a busy machine, and what they
# start inherits the confinement (lab_cpu() and the self-test pick from the CPUs they
# are allowed).
lab_cpu_and_any_load() {
  local all others last pids=()
  all="$(taskset -c -p $$ | sed 's/.*: //')"
  last="$(python3 -c 'import os; print(max(os.sched_getaffinity(0)))')"
  others="$(python3 -c 'import os; print(",".join(map(str, sorted(os.sched_getaffinity(0))[:-1])))')"
  mapfile -t pids < <(beside_lab_cpu)
  confine "$others" "${pids[@]}"
  beside_start "any load" env --default-signal=INT taskset -c "$others" \
    pytest tests/integration tests/e2e -m any_load \
    --junitxml="$RESULTS/any load.xml" -o junit_suite_name="any load"
  lane "kernel (lab CPU)" pytest "kernel (lab CPU).xml" \
    env CONTENTION_LAB_CPU="$last" taskset -c "$others" pytest tests/integration \
    --junitxml="$RESULTS/kernel (lab CPU).xml" -o junit_suite_name="kernel (lab CPU)" \
    -m "lab_cpu and not any_load"
  beside_wait
  mapfile -t pids < <(beside_lab_cpu)
  confine "$all" "${pids[@]}"
}

# The end-to-end lane with the lab-CPU and any-load lanes in its last minutes: once its
# real-kernel labs and self-test are done, all it does is wait for their alerts to
# resolve and delete the idle containers, which holds on a busy machine (the session
# writes $CONTENTION_E2E_LABS_DONE then: tests/e2e/conftest.py, announce_labs_done).
# It runs in the background, its output in e2e.log (shown once it ends); the lab-CPU
# and any-load lanes start when the file appears, or once it ended without it.
E2E_PID=""
e2e_then_lab_cpu_and_any_load() {
  local start end rc done_file="$RESULTS/.e2e-labs-done"
  rm -f "$done_file"
  step "e2e, in the background: $RESULTS/e2e.log (the lab-CPU and any-load lanes start beside its resolve wait)"
  start="$(now)"
  background "$RESULTS/.e2e.end" "$RESULTS/e2e.log" env --default-signal=INT \
    CONTENTION_E2E_OBSERVED="$RESULTS/e2e-observed.json" CONTENTION_E2E_LABS_DONE="$done_file" \
    pytest tests/e2e --junitxml="$RESULTS/e2e.xml" -o junit_suite_name=e2e -m "not any_load"
  E2E_PID="$!"
  while [ ! -e "$done_file" ] && kill -0 "$E2E_PID" 2>/dev/null; do sleep 1; done
  lab_cpu_and_any_load
  step "waiting for e2e"
  wait "$E2E_PID"
  rc=$?
  E2E_PID=""
  end="$(cut -f2 "$RESULTS/.e2e.end" 2>/dev/null || now)"
  step "e2e output ($RESULTS/e2e.log)"
  cat "$RESULTS/e2e.log"
  finished e2e "$start" "$end" "$rc" pytest e2e.xml
}

# beside_start NAME COMMAND...: one pytest lane in the background, its output in
# $RESULTS/NAME.log (shown once it ends); beside_wait waits for it and records it
BESIDE_PID=""
BESIDE_NAME=""
BESIDE_START=""
beside_start() {
  BESIDE_NAME="$1"
  shift
  step "$BESIDE_NAME, in the background: $RESULTS/$BESIDE_NAME.log"
  BESIDE_START="$(now)"
  background "$RESULTS/.$BESIDE_NAME.end" "$RESULTS/$BESIDE_NAME.log" "$@"
  BESIDE_PID="$!"
}

beside_wait() {
  [ -n "$BESIDE_PID" ] || return 0
  local rc end
  step "waiting for $BESIDE_NAME"
  wait "$BESIDE_PID"
  rc=$?
  end="$(cut -f2 "$RESULTS/.$BESIDE_NAME.end" 2>/dev/null || now)"
  step "$BESIDE_NAME output ($RESULTS/$BESIDE_NAME.log)"
  cat "$RESULTS/$BESIDE_NAME.log"
  finished "$BESIDE_NAME" "$BESIDE_START" "$end" "$rc" pytest "$BESIDE_NAME.xml"
  BESIDE_PID=""
}

# build_image_once FLAVOR DIR LOG
build_image_once() {
  rm -rf "$2"
  mkdir -p "$2" || return 1
  # stderr shown as it comes and kept (its tail is the reason handed on when it fails);
  # stdout (the image's reference) kept for the image tests
  bash scripts/build-image.sh --flavor "$1" --out "$2" 2>&1 >"$2/build-image.stdout" |
    tee "$3" >&2
  return "${PIPESTATUS[0]}"
}

# image_log FLAVOR: where its build's output is kept ($RESULTS/image-build.log for core,
# image-build-FLAVOR.log for the others)
image_log() {
  if [ "$1" = core ]; then echo "$RESULTS/image-build.log"; else echo "$RESULTS/image-build-$1.log"; fi
}

# build_image FLAVOR DIR: a download from Debian's archive that fails (seen: mmdebstrap's
# "apt download failed" in one clean-clone run, the mirror answering again a minute
# later) is retried once; any other failure is the build's own and is not.
build_image() {
  local log
  log="$(image_log "$1")"
  build_image_once "$1" "$2" "$log" && return 0
  local rc=$?
  if grep -qE 'apt download failed|Failed to fetch|Temporary failure resolving|Could not connect' \
    "$log"; then
    cp "$log" "${log%.log}.first-attempt.log"
    echo "test.sh: the $1 image build failed downloading from Debian's archive; retrying once" >&2
    sleep 10
    build_image_once "$1" "$2" "$log"
    return $?
  fi
  return "$rc"
}

# image_built FLAVOR DIR: after its build lane, the image tests' environment for it
# (CONTENTION_IMAGE_<FLAVOR>_DIR, or _ERROR with the reason) appended to image_tests,
# and DIR.status written (0, or the exit status then the reason) for the guest.
image_built() {
  local var why
  var="CONTENTION_IMAGE_$(printf '%s' "$1" | tr '[:lower:]' '[:upper:]')"
  if [ "$LAST_RC" -eq 0 ] && [ -f "$2/rootfs-$1.tar" ]; then
    image_tests+=("${var}_DIR=$2")
    printf '0\n' >"$2.status.tmp"
  else
    why="scripts/build-image.sh failed: $(tail -n 3 "$(image_log "$1")" | paste -sd '|' | sed 's/|/ | /g')"
    image_tests+=("${var}_ERROR=$why")
    printf '%s\n%s\n' "$([ "$LAST_RC" -ne 0 ] && echo "$LAST_RC" || echo 1)" "$why" >"$2.status.tmp"
  fi
  mv -f "$2.status.tmp" "$2.status"
}

ci="$(printf '%s' "${CI:-}" | tr '[:upper:]' '[:lower:]')"
vm_wanted() { [ "${CONTENTION_VM_LANE:-1}" != 0 ] || [[ "$ci" =~ ^(true|1|yes)$ ]]; }

# The VM lane in the background, as two guests side by side (tests/vm/lane.py --part):
# "VM lane (labs)" in vm-labs/, "VM lane (agent)" in vm/. Single-threaded TCG emulates a
# guest on one host CPU; the labs' guest mostly waits for whole minutes, the agent's is
# CPU-bound, so the two share the machine with the lanes beside them (docs/testing.md).
# Each keeps its output in its vm.log and its end time in .lane-end.
# As root the guests run ahead of the host lanes beside them (nice -5): a guest's clock
# keeps running while the host keeps its vCPU thread off a CPU, and the guest's kernel
# charges that time to the task it was running, which distorts the throttling and stall
# the guests measure. The host lanes beside them (image build, unit, fuzz, image) time
# nothing they check. The labs guest asks for more (nice -10, --boost-nice) while it
# judges throttling, from its CPU labs to its closed loop's verdict: a limit judged by
# the kernel's throttled ratio (docs/testing.md). (Each guest's session is its own
# autogroup: the lane gives it this nice value, tests/vm/guest.py keep_priority, Boost.)
VM_PRIO=()
VM_BOOST=()
[ "$(id -u)" -ne 0 ] || { VM_PRIO=(nice -n -5); VM_BOOST=(--boost-nice=-10); }
VM_PIDS=()
VM_NAMES=()
VM_DIRS=()
VM_STARTS=()
vm_start() {
  local name="$1" dir="$2"
  shift 2
  mkdir -p "$dir"
  VM_NAMES+=("$name")
  VM_DIRS+=("$dir")
  VM_STARTS+=("$(now)")
  step "$name: pure cgroup v2 guest (scripts/vm-test.sh $*), in the background: $dir/vm.log"
  background "$dir/.lane-end" "$dir/vm.log" "${VM_PRIO[@]}" bash scripts/vm-test.sh \
    --results "$dir" "$@"
  VM_PIDS+=("$!")
}

vm_wait() {
  local i rc end name dir
  for i in "${!VM_PIDS[@]}"; do
    name="${VM_NAMES[$i]}"
    dir="${VM_DIRS[$i]}"
    step "waiting for $name"
    wait "${VM_PIDS[$i]}"
    rc=$?
    end="$(cut -f2 "$dir/.lane-end" 2>/dev/null || now)"
    if [ "$rc" -eq 0 ]; then
      step "$name output ($dir/vm.log)"
      cat "$dir/vm.log"
    else
      step "$name FAILED (exit $rc); the end of its output (all of it: $dir/vm.log)"
      tail -n 300 "$dir/vm.log"
    fi
    record "$name" "${VM_STARTS[$i]}" "$end" "$rc" vm "$(basename "$dir")"
  done
  VM_PIDS=()
}

# A foreground VM lane (with arguments: after the selection, as before)
vm_foreground() {
  mkdir -p "$VMDIR"
  local start rc
  step "VM lane: pure cgroup v2 guest (scripts/vm-test.sh)"
  start="$(now)"
  bash scripts/vm-test.sh --results "$VMDIR" 2>&1 | tee "$VMDIR/vm.log"
  rc="${PIPESTATUS[0]}"
  record "VM lane" "$start" "$(now)" "$rc" vm vm
}

# The pytest lanes in the background get SIGINT, which they would otherwise ignore (bash
# starts a background command with SIGINT ignored; env --default-signal=INT restores
# it), so that their fixtures tear down: Prometheus, exporters, lab cgroups.
on_signal() {
  [ -z "$IDLE_PID" ] || kill -TERM "$IDLE_PID" 2>/dev/null
  local pid
  for pid in $E2E_PID $BESIDE_PID; do
    pkill -INT -P "$pid" 2>/dev/null
  done
  for pid in $E2E_PID $BESIDE_PID; do
    wait "$pid"
  done
  if [ "${#VM_PIDS[@]}" -gt 0 ]; then
    echo "test.sh: interrupted; stopping the VM lanes (pids ${VM_PIDS[*]})" >&2
    kill -TERM "${VM_PIDS[@]}" 2>/dev/null
    wait "${VM_PIDS[@]}"
  fi
  exit 130
}
trap on_signal INT TERM

lane setup step - bash scripts/setup.sh --test
VENV="${CONTENTION_VENV:-$ROOT/.venv}"
export PATH="$VENV/bin:$PATH"
if [ -e /var/cache/contention-exporter/kernel-source ]; then
  export BCC_KERNEL_SOURCE="${BCC_KERNEL_SOURCE:-/var/cache/contention-exporter/kernel-source}"
fi

if [ $# -gt 0 ]; then
  # A selection: one host pytest with the arguments given, then the VM lane.
  lane "pytest (selection)" pytest "selection.xml" \
    pytest --junitxml="$RESULTS/selection.xml" -o junit_suite_name=selection "$@"
  if vm_wanted; then vm_foreground; else left_out "VM lane" CONTENTION_VM_LANE=0 vm; fi
else
  idle_start
  image_tests=()
  if [ "$(id -u)" -ne 0 ]; then
    left_out "image build (core)" "not root: the image and VM lanes skip" step
    if vm_wanted; then
      vm_start "VM lane" "$VMDIR"
    else
      left_out "VM lane" CONTENTION_VM_LANE=0 vm
    fi
  else
    # The image is built beside the VM's boot: the guest runs its image tests last and
    # waits for $IMAGE.status (tests/vm/lane.py --image-pending).
    rm -f "$IMAGE.status"
    if vm_wanted; then
      vm_start "VM lane (labs)" "$RESULTS/vm-labs" --part labs "${VM_BOOST[@]}"
      vm_start "VM lane (agent)" "$VMDIR" --part agent --image-pending "$IMAGE"
    else
      left_out "VM lane" CONTENTION_VM_LANE=0 vm
    fi
    lane "image build (core)" step - build_image core "$IMAGE"
    image_built core "$IMAGE"
  fi

  # Over every CPU (pytest-xdist, as make check): beside the guests they get what the
  # guests leave, and once the guests are done both CPUs instead of one.
  pytest_lane unit tests/unit -- -n auto --dist worksteal -m "not untimed"
  pytest_lane fuzz tests/fuzz -- -n auto --dist worksteal
  if [ "$(id -u)" -eq 0 ]; then
    # The BCC flavour is only the host's image tests': built here, where they used to
    # build it themselves, so the build is a timed step and not a test's setup.
    lane "image build (bcc)" step - build_image bcc "$IMAGE_BCC"
    image_built bcc "$IMAGE_BCC"
  fi
  pytest_lane image tests/image "${image_tests[@]}"
  # The real-kernel and end-to-end tests whose verdicts hold on a busy machine (marker
  # any_load: cleanup, counters, leaks, scrape and routing): beside the lab-CPU lane,
  # in the end-to-end lane's resolve wait, where there are two CPUs.
  two_cpus=0
  [ "$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')" -lt 2 ] || two_cpus=1
  [ "$two_cpus" = 1 ] || pytest_lane "any load" tests/integration -- tests/e2e -m any_load

  [ "${#VM_PIDS[@]}" -eq 0 ] || vm_wait
  rm -rf "$IMAGE" "$IMAGE.status" "$IMAGE_BCC" "$IMAGE_BCC.status"
  # Real-kernel lanes last, alone but for the idle lanes: timing-sensitive, they need a
  # quiet machine.
  if [ "$two_cpus" = 1 ]; then
    pytest_lane kernel tests/integration \
      CONTENTION_CLOSED_LOOP_OBSERVED="$RESULTS/closed-loop.json" -- -m "not any_load and not lab_cpu"
    e2e_then_lab_cpu_and_any_load
  else
    pytest_lane kernel tests/integration \
      CONTENTION_CLOSED_LOOP_OBSERVED="$RESULTS/closed-loop.json" -- -m "not any_load"
    pytest_lane e2e tests/e2e CONTENTION_E2E_OBSERVED="$RESULTS/e2e-observed.json" \
      -- -m "not any_load"
  fi
  idle_wait
fi

step "lanes (results in $RESULTS)"
PY="$VENV/bin/python"
[ -x "$PY" ] || PY=python3
"$PY" -m tests.support.lane_report "$RESULTS" || {
  echo "test.sh: the lane report failed; the lanes as recorded:" >&2
  cat "$LANES"
}
exit "$failed"
