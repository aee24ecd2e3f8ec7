#!/bin/bash
# First thing run inside a VM-lane guest (as root, by virtme-ng), before the command.
# Usage: guest_init.sh RESULTS_DIR   (RESULTS_DIR is shared read-write with the host)
#
# It makes the guest look like a Kubernetes node's cgroup v2 setup and runs
# RESULTS_DIR/command.sh with RESULTS_DIR/guest.env, writing everything the command
# prints to RESULTS_DIR/output.log (the host shows it live) and its exit status to
# RESULTS_DIR/exit-status. See tests/vm/guest.py for the host side.
set -u
RESULTS="$1"
exec >>"$RESULTS/output.log" 2>&1
# shellcheck source=/dev/null
. "$RESULTS/guest.env"
say() { echo "[guest] $*"; }
finish() {
  echo "$1" >"$RESULTS/exit-status.tmp" && mv "$RESULTS/exit-status.tmp" "$RESULTS/exit-status"
  sync
  exit 0
}

# Shares the host exported read-only for this run (the project, its venv, the Python
# it was made with) are remounted with the page cache on: Python imports thousands of
# small files, and uncached 9p is ~40x slower than the rest of a TCG guest.
cd /
for dir in $VM_LOOSE_DIRS; do
  tag="$(awk -v d="$dir" '$2 == d && $3 == "9p" {print $1}' /proc/mounts)"
  if [ -z "$tag" ]; then say "no 9p share at $dir"; finish 125; fi
  umount "$dir" && mount -t 9p -o "ro,trans=virtio,version=9p2000.L,access=any,msize=512000,cache=loose" \
    "$tag" "$dir" || { say "cannot remount $dir with cache=loose"; finish 125; }
done

# A pure unified hierarchy with the controllers a kubelet's node has delegated to its
# children: the guest root's subtree_control (systemd does this on a real node).
if [ ! -e /sys/fs/cgroup/cgroup.controllers ]; then
  say "no cgroup2 at /sys/fs/cgroup: not a pure unified hierarchy"; finish 125
fi
for c in cpuset cpu io memory pids; do
  if grep -qw "$c" /sys/fs/cgroup/cgroup.controllers; then
    echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control || { say "cannot enable $c"; finish 125; }
  fi
done
mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null || true

# A blank disk (if the host attached one) becomes an ext4 scratch filesystem: a real
# block device, so file pages are cached, reclaimed and refaulted as on a node's disk.
if [ "${VM_SCRATCH:-0}" = 1 ]; then
  modprobe virtio_blk || say "modprobe virtio_blk failed"
  for _ in $(seq 50); do [ -b /dev/vda ] && break; sleep 0.1; done
  if [ ! -b /dev/vda ]; then
    say "scratch disk /dev/vda did not appear: $(ls /dev | grep -E '^(vd|sd)' | tr '\n' ' ')"
    dmesg | tail -5; ls /lib/modules/*/kernel/drivers/block/ | head; lsmod | head
    finish 125
  fi
  mkdir -p /run/contention-vm/scratch
  mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 /dev/vda \
    && mount /dev/vda /run/contention-vm/scratch || { say "cannot make the scratch disk"; finish 125; }
  export CONTENTION_VM_SCRATCH=/run/contention-vm/scratch
fi

say "kernel $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) MiB," \
  "cgroup2 controllers: $(cat /sys/fs/cgroup/cgroup.subtree_control)," \
  "up $(cut -d' ' -f1 /proc/uptime) s"
echo "$(cut -d' ' -f1 /proc/uptime)" >"$RESULTS/command-started"
cd "$VM_WORKDIR" || finish 125
timeout -k 10 "$VM_COMMAND_TIMEOUT" bash "$RESULTS/command.sh"
rc=$?
[ "$rc" -eq 124 ] && say "command timed out after ${VM_COMMAND_TIMEOUT}s"
finish "$rc"
