/* contention-exporter scheduler probe, CO-RE flavour (the primary one).
 *
 * Compiled once (scripts/build-bpf.sh -> bpf/sched_probe.bpf.o, committed) and loaded
 * by libbpf, which relocates every task_struct access against the running kernel's
 * BTF: no headers and no compiler on the node. Same maps, counters and semantics as
 * the BCC program (sched_probe.c): layouts, maps, pid entries and the attribution
 * logic are shared (sched_probe.h, sched_probe_logic.h); docs/probe.md explains both.
 *
 * BTF-enabled tracepoints hand the programs the task_structs themselves, so:
 *   - a task's cgroup is read from the task (task->cgroups->dfl_cgrp->kn->id) when it
 *     is woken: no pid -> cgroup cache, no "unknown pid" wakeups;
 *   - the clock is the scheduler's own: the run queue clock the kernel has just
 *     updated for this switch (rq->clock), and at wakeup the enqueue time the kernel
 *     stamped on the task (sched_info.last_queued, same clock). No clock read at all;
 *     these are the timestamps behind the kernel's own run-delay accounting
 *     (/proc/<pid>/schedstat), which the real-kernel tests compare against. Kernels
 *     without those members (CONFIG_SCHED_INFO or CONFIG_FAIR_GROUP_SCHED off) fall
 *     back to bpf_ktime_get_ns(), as does the use_ktime knob.
 *
 * Kernel differences handled here: prev_state became a sched_switch argument in 5.18
 * (before, it is read from the task: `__state` since 5.14, `state` before).
 * Counters are never reset here: userspace diffs successive reads.
 */
#include "sched_probe_kernel.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "sched_probe.h"

/* Tracing helpers need a GPL-compatible license string (BCC declares the same). */
char LICENSE[] SEC("license") = "GPL";

/* Defaults only; the loader (exporter/probe/core.py) always writes every field. */
const volatile struct probe_knobs knobs SEC(".rodata.knobs") = {
	.bounds_ns = {20000000ULL, 200000000ULL},
	.nbounds = 2,
	.min_wait_ns = 50000ULL,
	.ring_mask = 255,
	.max_pids = 65536,
	.occupancy = 1,
	.switch_has_state = 1,
	.burst = 1,
};

/* The maps (sched_probe_maps.h) and their access, the libbpf way. Sizes are
 * placeholders: the loader sets each before load (bpf_map__set_max_entries). */
#define MAP(kind, name, key_type, value_type, size)                                        \
	struct {                                                                           \
		__uint(type, kind);                                                        \
		__uint(max_entries, size);                                                 \
		__type(key, key_type);                                                     \
		__type(value, value_type);                                                 \
	} name SEC(".maps")
#define MAP_HASH(name, key, value, size) MAP(BPF_MAP_TYPE_HASH, name, key, value, size)
#define MAP_ARRAY(name, value, size) MAP(BPF_MAP_TYPE_ARRAY, name, u32, value, size)
#define MAP_PERCPU_ARRAY(name, value, size) MAP(BPF_MAP_TYPE_PERCPU_ARRAY, name, u32, value, size)
#define MAP_LOOKUP(map, key) bpf_map_lookup_elem(&map, key)
#define MAP_INSERT(map, key, value) bpf_map_update_elem(&map, key, value, BPF_NOEXIST)
#define MAP_DELETE(map, key) bpf_map_delete_elem(&map, key)
#define MAX_CGROUPS 4096
#define MAX_PIDS 65536
#define MAX_BLAME 32768
#define MAX_CPUS 1 /* the loader sets: possible CPUs */

#define KNOB_MAX_PIDS knobs.max_pids
#define KNOB_OCCUPANCY knobs.occupancy
#define KNOB_RING_MASK knobs.ring_mask
#define KNOB_RING_WALK RING_MAX_SLOTS
#define RING_EARLY_EXIT 1 /* sched_probe_logic.h: attribute_wait */
#define KNOB_NBOUNDS knobs.nbounds
#define KNOB_BOUND(i) knobs.bounds_ns[i]
#define KNOB_MIN_WAIT knobs.min_wait_ns
#define KNOB_BURST knobs.burst

#include "sched_probe_logic.h"

#define EXIT_ZOMBIE_OR_DEAD 0x30 /* task->exit_state at its last switch-out */

static __always_inline bool rq_clock_usable(void)
{
	return bpf_core_field_exists(struct sched_info, last_queued) &&
	       bpf_core_field_exists(struct sched_entity, cfs_rq) &&
	       bpf_core_field_exists(struct cfs_rq, rq) && !knobs.use_ktime;
}

/* Now, at a switch: the clock the scheduler updated for this very switch. prev is
 * the task on this CPU, so its entity's run queue is this CPU's. */
static __always_inline u64 switch_clock(struct task_struct *prev)
{
	if (rq_clock_usable())
		return prev->se.cfs_rq->rq->clock;
	return bpf_ktime_get_ns();
}

/* When a woken task was queued (0: it is not on a run queue, so not waiting). */
static __always_inline u64 queued_at(struct task_struct *p)
{
	if (rq_clock_usable())
		return p->sched_info.last_queued;
	return bpf_ktime_get_ns();
}

static __always_inline u64 task_cgroup(struct task_struct *p)
{
	return p->cgroups->dfl_cgrp->kn->id;
}

/* task_cpu(p): in thread_info since 5.16, in the task before. */
static __always_inline u32 task_cpu(struct task_struct *p)
{
	if (bpf_core_field_exists(p->thread_info.cpu))
		return p->thread_info.cpu;
	return ((struct task_struct___pre516 *)p)->cpu;
}

/* Still runnable at switch-out: preempted, or its state is TASK_RUNNING. */
static __always_inline bool prev_runnable(u64 *ctx, struct task_struct *prev)
{
	if (ctx[0]) /* preempt */
		return true;
	if (knobs.switch_has_state)
		return (u32)ctx[3] == 0;
	if (bpf_core_field_exists(prev->__state))
		return prev->__state == 0;
	return ((struct task_struct___pre514 *)prev)->state == 0;
}

/* Task `pid` of `cgroup` is runnable since `since`: it starts waiting if tracked. */
static __always_inline void became_runnable(struct cpu_stats *st, u32 pid, u64 cgroup,
					    u64 since)
{
	struct pid_state *ps = pid_find(pid);
	u32 slot = slot_of(st, ps, cgroup);
	if (slot == NO_SLOT) {
		if (knobs.burst && ps) /* moved out of a tracked cgroup while counted */
			burst_leave(ps);
		return;
	}
	if (!ps) /* only tracked tasks get a hashed entry: pids below max_pids need none */
		ps = pid_insert(st, pid, cgroup, slot);
	mark_waiting(st, ps, cgroup, slot, since);
}

/* Task `pid` switched out asleep: no longer running or runnable (burst demand). */
static __always_inline void went_to_sleep(u32 pid)
{
	struct pid_state *ps = pid_find(pid);
	if (ps)
		burst_leave(ps);
}

/* sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next
 *              [, unsigned int prev_state since 5.18]) */
SEC("tp_btf/sched_switch")
int handle_sched_switch(u64 *ctx)
{
	struct task_struct *prev = (struct task_struct *)ctx[1];
	struct task_struct *next = (struct task_struct *)ctx[2];
	struct cpu_stats *st = this_cpu();
	struct cpu_ring *ring = ring_of(bpf_get_smp_processor_id());
	if (!st || !ring)
		return 0;
	st->stats[STAT_SWITCHES]++;
	u64 now = switch_clock(prev);

	u32 prev_pid = prev->pid;
	u64 prev_cgroup = CULPRIT_IDLE_KEY;
	if (prev_pid != 0) {
#ifdef BENCH_NO_PREV_CGROUP /* bench/probe_bench.py --profile only: what the read costs */
		prev_cgroup = 1;
#else
		prev_cgroup = task_cgroup(prev);
#endif
		if (prev_runnable(ctx, prev))
			became_runnable(st, prev_pid, prev_cgroup, now);
		else if (prev->exit_state & EXIT_ZOMBIE_OR_DEAD)
			forget_pid(st, prev_pid);
		else if (knobs.burst)
			went_to_sleep(prev_pid);
	}
#ifndef BENCH_NO_RING /* bench/probe_bench.py --profile only: what the ring costs */
	if (knobs.occupancy)
		push_slice(ring, prev_cgroup, now);
#endif

	/* next: did a tracked task just finish waiting? */
	u32 next_pid = next->pid;
	if (next_pid == 0)
		return 0;
	struct pid_state *ps = pid_find(next_pid);
	if (!ps)
		return 0;
	u64 since = end_wait(st, ps);
	if (since == 0)
		return 0;
	/* The rq clock is not re-read when a wakeup asked the scheduler to skip the update
	 * (wakeup preemption), so a wait can read 0; and clocks of two CPUs can be a
	 * little apart after a migration. Both are recorded as a wait of 0 ns, as the
	 * kernel's own run-delay accounting does. */
	record_wait(ring, st, ps, prev_cgroup, now > since ? now - since : 0, now);
	return 0;
}

/* A woken (or new) task that is now queued starts waiting if its cgroup is tracked. */
static __always_inline int on_wakeup(struct task_struct *p)
{
	u64 since = queued_at(p);
	if (since == 0)
		return 0;
	struct cpu_stats *st = this_cpu();
	if (!st)
		return 0;
	became_runnable(st, p->pid, task_cgroup(p), since);
	return 0;
}

/* sched_wakeup(struct task_struct *p) */
SEC("tp_btf/sched_wakeup")
int handle_sched_wakeup(u64 *ctx)
{
	return on_wakeup((struct task_struct *)ctx[0]);
}

/* sched_wakeup_new(struct task_struct *p): the new task is already in its cgroup. */
SEC("tp_btf/sched_wakeup_new")
int handle_sched_wakeup_new(u64 *ctx)
{
	return on_wakeup((struct task_struct *)ctx[0]);
}

/* sched_migrate_task(struct task_struct *p, int dest_cpu), from set_task_cpu() before
 * the task changes CPU: task_cpu(p) and p's run queue are still the source's. A
 * queued task (on_rq set: the kernel dequeued it to move it) that was waiting has the
 * part of its wait spent there split over the source CPU's slices
 * (sched_probe_logic.h: split_at_migration, which says why reading that ring is
 * safe from here). A waking task being placed (on_rq 0) was not waiting: nothing to
 * split. */
SEC("tp_btf/sched_migrate_task")
int handle_sched_migrate_task(u64 *ctx)
{
	struct task_struct *p = (struct task_struct *)ctx[0];
	if (!knobs.occupancy || !p->on_rq)
		return 0;
	struct pid_state *ps = pid_find(p->pid);
	if (!ps || ps->since == 0)
		return 0;
	struct cpu_stats *st = this_cpu();
	struct cpu_ring *ring = ring_of(task_cpu(p));
	if (!st || !ring)
		return 0;
	u64 running = CULPRIT_UNATTRIBUTED_KEY; /* who runs on the source CPU now */
	if (bpf_core_field_exists(struct sched_entity, cfs_rq) &&
	    bpf_core_field_exists(struct cfs_rq, rq)) {
		struct task_struct *curr = p->se.cfs_rq->rq->curr; /* the source's, locked */
		if (curr)
			running = curr->pid == 0 ? CULPRIT_IDLE_KEY : task_cgroup(curr);
	}
	u64 now = rq_clock_usable() ? p->se.cfs_rq->rq->clock : bpf_ktime_get_ns();
	split_at_migration(ring, st, ps, running, now);
	return 0;
}
