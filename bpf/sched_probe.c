/* contention-exporter scheduler probe, BCC flavour (the fallback for kernels without
 * BTF; the primary program is the CO-RE one in sched_probe.bpf.c).
 *
 * Builds, in the kernel, per tracked (victim) cgroup:
 *   - a run-queue latency histogram (time from "runnable" to "on CPU");
 *   - a victim -> culprit matrix of that wait time: who ran on the CPU while the
 *     victim waited. Occupancy mode splits each wait over the run slices it
 *     overlapped (a short per-CPU ring); last-runner mode gives it all to the task
 *     that ran just before the victim.
 *
 * Reads only tracepoint fields and bpf_get_current_cgroup_id(): never task_struct
 * members, whose offsets depend on kernel headers that may not match the running
 * kernel. Tracepoint layouts come from tracefs, so they are always right.
 *
 * Knobs are -D cflags set by the loader (exporter/probe/bcc.py); the maps, the pid
 * entries and the attribution logic are shared with the CO-RE program (sched_probe.h,
 * sched_probe_logic.h). Counters are never reset here: userspace diffs reads.
 */
#include "sched_probe.h"

/* Defaults only so the file compiles by hand; the loader always passes all of them. */
#ifndef RUNQ_NBOUNDS
#define RUNQ_NBOUNDS 2
#endif
#ifndef RUNQ_BOUNDS_NS
#define RUNQ_BOUNDS_NS 20000000ULL, 200000000ULL
#endif
#ifndef ATTR_OCCUPANCY
#define ATTR_OCCUPANCY 1
#endif
#ifndef MIN_WAIT_NS
#define MIN_WAIT_NS 50000ULL
#endif
#ifndef RING_SLOTS
#define RING_SLOTS 256
#endif
#ifndef BURST
#define BURST 1
#endif
#ifndef MAX_CGROUPS
#define MAX_CGROUPS 4096
#endif
#ifndef MAX_PIDS
#define MAX_PIDS 65536
#endif
#ifndef MAX_BLAME
#define MAX_BLAME 32768
#endif
#ifndef MAX_CPUS
#define MAX_CPUS 64 /* the loader passes the possible CPUs */
#endif

/* sched_switch prev_state bits, as the tracepoint format reports them. */
#define PREV_STATE_PREEMPTED 0x100 /* TASK_REPORT_MAX: preempted while runnable */
#define PREV_STATE_EXITING 0x30    /* EXIT_DEAD | EXIT_ZOMBIE: its last switch-out */

/* The maps, declared BCC's way. */
#define MAP_HASH(name, key, value, size) BPF_HASH(name, key, value, size)
#define MAP_ARRAY(name, value, size) BPF_ARRAY(name, value, size)
#define MAP_PERCPU_ARRAY(name, value, size) BPF_PERCPU_ARRAY(name, value, size)
#include "sched_probe_maps.h"

/* Their access for sched_probe_logic.h. BCC rewrites a map call (map.lookup(...))
 * only where it is written, never inside a macro ("cannot use map function inside a
 * macro"): one function for each map and operation the shared code uses. */
#define MAP_LOOKUP(map, key) map##_lookup(key)
#define MAP_INSERT(map, key, value) map##_insert(key, value)
#define MAP_DELETE(map, key) map##_delete(key)
static __always_inline void *cpu_stats_lookup(void *key) { return cpu_stats.lookup(key); }
static __always_inline void *cpu_rings_lookup(void *key) { return cpu_rings.lookup(key); }
static __always_inline void *pid_direct_lookup(void *key) { return pid_direct.lookup(key); }
static __always_inline void *pid_hashed_lookup(void *key) { return pid_hashed.lookup(key); }
static __always_inline int pid_hashed_insert(void *key, void *value)
{
	return pid_hashed.insert(key, value);
}
static __always_inline int pid_hashed_delete(void *key) { return pid_hashed.delete(key); }
static __always_inline void *tracked_gen_lookup(void *key) { return tracked_gen.lookup(key); }
static __always_inline void *tracked_lookup(void *key) { return tracked.lookup(key); }
static __always_inline void *runq_lookup(void *key) { return runq.lookup(key); }
static __always_inline void *blame_lookup(void *key) { return blame.lookup(key); }
static __always_inline int blame_insert(void *key, void *value) { return blame.insert(key, value); }

#define KNOB_MAX_PIDS MAX_PIDS
#define KNOB_OCCUPANCY ATTR_OCCUPANCY
#define KNOB_RING_MASK (RING_SLOTS - 1)
#define KNOB_RING_WALK RING_SLOTS
#ifndef RING_EARLY_EXIT
#define RING_EARLY_EXIT 0
#endif
#define KNOB_NBOUNDS RUNQ_NBOUNDS
#define KNOB_BOUND(i) runq_bounds[i]
#define KNOB_MIN_WAIT MIN_WAIT_NS
#define KNOB_BURST BURST
static const u64 runq_bounds[RUNQ_MAX_BOUNDS] = {RUNQ_BOUNDS_NS};

#include "sched_probe_logic.h"

/* Remember that `pid` runs in `cgroup`; returns its entry (NULL: the hash part is
 * full). BCC sees a task's cgroup only while it is current, so every task that
 * switches out gets an entry. */
static __always_inline struct pid_state *remember_cgroup(struct cpu_stats *st, u32 pid,
							 u64 cgroup)
{
	struct pid_state *ps = pid_find(pid);
	if (!ps)
		ps = pid_insert(st, pid, cgroup, NO_SLOT);
	set_cgroup(st, ps, cgroup);
	return ps;
}

TRACEPOINT_PROBE(sched, sched_switch)
{
	struct cpu_stats *st = this_cpu();
	struct cpu_ring *ring = ring_of(bpf_get_smp_processor_id());
	if (!st || !ring)
		return 0;
	st->stats[STAT_SWITCHES]++;
	/* One clock read per switch. Occupancy needs it for every slice; last runner
	 * only when a wait starts or ends here. */
#if ATTR_OCCUPANCY
	u64 now = bpf_ktime_get_ns();
#else
	u64 now = 0;
#endif

	/* prev: the current task, so the current cgroup is prev's. */
	u32 prev_pid = args->prev_pid;
	u64 prev_cgroup = CULPRIT_IDLE_KEY;
	if (prev_pid != 0) {
		long state = args->prev_state;
		prev_cgroup = bpf_get_current_cgroup_id();
		if (state & PREV_STATE_EXITING) {
			forget_pid(st, prev_pid);
		} else {
			struct pid_state *ps = remember_cgroup(st, prev_pid, prev_cgroup);
			if (state == 0 || (state & PREV_STATE_PREEMPTED)) {
				u32 slot = slot_of(st, ps, prev_cgroup);
				if (slot != NO_SLOT) {
#if !ATTR_OCCUPANCY
					now = bpf_ktime_get_ns();
#endif
					mark_waiting(st, ps, prev_cgroup, slot, now);
				} else if (BURST && ps) {
					burst_leave(ps); /* moved out of a tracked cgroup */
				}
			} else if (ps) {
				if (BURST)
					burst_leave(ps); /* asleep: not running nor runnable */
				if (ps->since != 0) {
					/* Going to sleep, so not waiting: a wakeup that found
					 * it still running left this (the migration hook must
					 * not take it for a wait). */
					ps->since = 0;
					st->stats[STAT_START_DELETED]++;
				}
			}
		}
	}
#if ATTR_OCCUPANCY
	push_slice(ring, prev_cgroup, now);
#endif

	/* next: did a tracked task just finish waiting? */
	u32 next_pid = args->next_pid;
	if (next_pid == 0) {
#if ATTR_OCCUPANCY
		ring->running = CULPRIT_IDLE_KEY;
#endif
		return 0;
	}
	struct pid_state *ps = pid_find(next_pid);
#if ATTR_OCCUPANCY
	/* Who runs now, for a migration before the next switch (0: not known yet). */
	u64 next_cgroup = ps ? ps->cgroup : 0;
	ring->running = next_cgroup ? next_cgroup : CULPRIT_UNATTRIBUTED_KEY;
#endif
	if (!ps)
		return 0;
	u64 since = end_wait(st, ps);
	if (since == 0)
		return 0;
#if !ATTR_OCCUPANCY
	if (now == 0)
		now = bpf_ktime_get_ns();
#endif
	if (now <= since)
		return 0;
	record_wait(ring, st, ps, prev_cgroup, now - since, now);
	return 0;
}

TRACEPOINT_PROBE(sched, sched_wakeup)
{
	struct cpu_stats *st = this_cpu();
	if (!st)
		return 0;
	u32 pid = args->pid;
	struct pid_state *ps = pid_find(pid);
	u64 cgroup = ps ? ps->cgroup : 0;
	if (cgroup == 0) {
		st->stats[STAT_UNKNOWN_PID]++;
		return 0;
	}
	u32 slot = slot_of(st, ps, cgroup);
	if (slot != NO_SLOT)
		mark_waiting(st, ps, cgroup, slot, bpf_ktime_get_ns());
	return 0;
}

TRACEPOINT_PROBE(sched, sched_wakeup_new)
{
	/* A new task starts in its parent's cgroup, and the parent is current. */
	struct cpu_stats *st = this_cpu();
	if (!st)
		return 0;
	u32 pid = args->pid;
	u64 cgroup = bpf_get_current_cgroup_id();
	struct pid_state *ps = remember_cgroup(st, pid, cgroup);
	u32 slot = slot_of(st, ps, cgroup);
	if (slot != NO_SLOT)
		mark_waiting(st, ps, cgroup, slot, bpf_ktime_get_ns());
	return 0;
}

TRACEPOINT_PROBE(sched, sched_process_exit)
{
	struct cpu_stats *st = this_cpu();
	if (!st)
		return 0;
	forget_pid(st, args->pid);
	return 0;
}

/* A task changes CPU (set_task_cpu(), before it does). A tracked task that was
 * waiting is queued (a waking task is placed before sched_wakeup marks it, and a task
 * switched out asleep has no wait left: see sched_switch), so the part of its wait
 * spent on orig_cpu is split over that CPU's slices (sched_probe_logic.h:
 * split_at_migration, which says why reading that ring is safe from here). */
TRACEPOINT_PROBE(sched, sched_migrate_task)
{
#if ATTR_OCCUPANCY
	u32 pid = args->pid;
	struct pid_state *ps = pid_find(pid);
	if (!ps || ps->since == 0)
		return 0;
	struct cpu_stats *st = this_cpu();
	struct cpu_ring *ring = ring_of(args->orig_cpu);
	if (!st || !ring)
		return 0;
	split_at_migration(ring, st, ps, ring->running, bpf_ktime_get_ns());
#endif
	return 0;
}
