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
 * Knobs are -D cflags set by the loader (exporter/probe/bcc.py); map layouts and the
 * attribution logic are shared with the CO-RE program (sched_probe.h,
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

BPF_HASH(tracked, u64, u32, MAX_CGROUPS);   /* victim -> histogram slot (userspace) */
BPF_ARRAY(tracked_gen, u32, 1);             /* bumped by userspace when `tracked` changes */
BPF_ARRAY(pid_direct, struct pid_state, MAX_PIDS);            /* pid < MAX_PIDS: slot = pid */
BPF_HASH(pid_hashed, u32, struct pid_state, MAX_PIDS);        /* pid >= MAX_PIDS */
BPF_ARRAY(runq, struct runq_hist, MAX_CGROUPS); /* histogram slot -> histogram + owner */
BPF_HASH(blame, struct blame_key, struct blame_cell, MAX_BLAME);
BPF_ARRAY(cpu_rings, struct cpu_ring, MAX_CPUS); /* CPU -> its run slices (sched_probe.h) */
BPF_PERCPU_ARRAY(cpu_stats, struct cpu_stats, 1);

/* Cost notes (bench/probe_bench.py, docs/probe.md): per-CPU and plain array lookups
 * are inlined and nearly free; a hash lookup costs tens of ns, a hash update or an
 * insert + delete several hundred. So the per-wait path below does no hash insert or
 * delete at all: a wait is two field writes in the pid's entry. */

static __always_inline struct cpu_stats *this_cpu(void)
{
	int zero = 0;
	return cpu_stats.lookup(&zero);
}

static __always_inline struct cpu_ring *ring_of(u32 cpu)
{
	return cpu_rings.lookup(&cpu); /* NULL past MAX_CPUS */
}

/* The pid's state entry, or NULL. A direct slot is returned even when empty
 * (cgroup 0): callers check. */
static __always_inline struct pid_state *pid_find(u32 pid)
{
	if (pid < MAX_PIDS)
		return pid_direct.lookup(&pid);
	return pid_hashed.lookup(&pid);
}

/* Remember that `pid` runs in `cgroup`; returns its entry (NULL: the hash part is
 * full). Written only when it changed, so an unchanged entry stays a clean line. */
static __always_inline struct pid_state *remember_cgroup(struct cpu_stats *st, u32 pid,
							 u64 cgroup)
{
	struct pid_state *ps = pid_find(pid);
	if (ps) {
		if (ps->cgroup != cgroup) {
			if (ps->cgroup == 0) /* an empty direct slot */
				st->stats[STAT_PIDS_INSERTED]++;
			ps->cgroup = cgroup;
			ps->gen = NO_SLOT; /* the cached slot was the old cgroup's */
		}
		return ps;
	}
	if (pid < MAX_PIDS) /* for the verifier: a direct lookup never fails */
		return NULL;
	struct pid_state fresh = {.cgroup = cgroup, .gen = NO_SLOT};
	int err = pid_hashed.insert(&pid, &fresh);
	ps = pid_hashed.lookup(&pid);
	if (err == 0)
		st->stats[STAT_PIDS_INSERTED]++;
	else if (!ps) /* not a lost race: the map is full */
		st->stats[STAT_FAIL_PIDS]++;
	else if (ps->cgroup != cgroup) {
		ps->cgroup = cgroup;
		ps->gen = NO_SLOT;
	}
	return ps;
}

static __always_inline void forget_pid(struct cpu_stats *st, u32 pid)
{
	struct pid_state *ps = pid_find(pid);
	if (!ps || ps->cgroup == 0)
		return;
	if (ps->since != 0)
		st->stats[STAT_START_DELETED]++;
	if (pid < MAX_PIDS) {
		ps->since = 0;
		ps->cgroup = 0;
		ps->gen = NO_SLOT;
		st->stats[STAT_PIDS_DELETED]++;
	} else if (pid_hashed.delete(&pid) == 0) {
		st->stats[STAT_PIDS_DELETED]++;
	}
}

static __always_inline u32 current_gen(void)
{
	int zero = 0;
	u32 *gen = tracked_gen.lookup(&zero);
	return gen ? *gen : 0;
}

/* The histogram slot of `cgroup` (NO_SLOT: not tracked): from the pid's entry when its
 * cache is current, else from the tracked hash (then cached). */
static __always_inline u32 slot_of(struct pid_state *ps, u64 cgroup)
{
	u32 gen = current_gen();
	if (ps && ps->cgroup == cgroup && ps->gen == gen)
		return ps->slot;
	u32 *found = tracked.lookup(&cgroup);
	u32 slot = found ? *found : NO_SLOT;
	if (ps && ps->cgroup == cgroup) {
		ps->slot = slot;
		ps->gen = gen;
	}
	return slot;
}


/* Add `ns` of `victim`'s wait to `culprit`'s cell. */
static __always_inline void blame_add(struct cpu_stats *st, u64 victim, u64 culprit, u64 ns)
{
	struct blame_key key = {.victim = victim, .culprit = culprit};
	struct blame_cell *cell = blame.lookup(&key);
	if (!cell) {
		struct blame_cell zero = {};
		if (blame.insert(&key, &zero) != 0 && !blame.lookup(&key)) {
			st->stats[STAT_FAIL_BLAME]++;
			return;
		}
		cell = blame.lookup(&key);
		if (!cell)
			return;
	}
	__sync_fetch_and_add(&cell->wait_ns, ns);
	__sync_fetch_and_add(&cell->events, 1);
}

#define KNOB_RING_MASK (RING_SLOTS - 1)
#define KNOB_RING_WALK RING_SLOTS
#ifndef RING_EARLY_EXIT
#define RING_EARLY_EXIT 0
#endif
#define KNOB_NBOUNDS RUNQ_NBOUNDS
#define KNOB_BOUND(i) runq_bounds[i]
#define KNOB_MIN_WAIT MIN_WAIT_NS
static const u64 runq_bounds[RUNQ_MAX_BOUNDS] = {RUNQ_BOUNDS_NS};

static __always_inline struct runq_hist *runq_slot(u32 slot)
{
	return runq.lookup(&slot);
}

#include "sched_probe_logic.h"

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
				u32 slot = slot_of(ps, prev_cgroup);
				if (slot != NO_SLOT) {
#if !ATTR_OCCUPANCY
					now = bpf_ktime_get_ns();
#endif
					mark_waiting(st, ps, prev_cgroup, slot, now);
				}
			} else if (ps && ps->since != 0) {
				/* Going to sleep, so not waiting: a wakeup that found it
				 * still running left this (the migration hook must not
				 * take it for a wait). */
				ps->since = 0;
				st->stats[STAT_START_DELETED]++;
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
	u64 since = ps->since;
	if (since == 0)
		return 0;
	u64 victim = ps->victim;
	u32 vslot = ps->victim_slot;
	ps->since = 0;
	st->stats[STAT_START_DELETED]++;
#if !ATTR_OCCUPANCY
	if (now == 0)
		now = bpf_ktime_get_ns();
#endif
	if (now <= since)
		return 0;
	u64 delta = now - since;
	record_histogram(st, vslot, victim, delta);
	if (delta < MIN_WAIT_NS)
		return 0;
	st->stats[STAT_BLAME_EVENTS]++;
#if ATTR_OCCUPANCY
	u64 attr_since = ps->attr_since; /* since, or when it left the CPU it waited on */
	if (now > attr_since)
		attribute_wait(ring, st, victim, attr_since, now);
#else
	blame_add(st, victim, prev_cgroup, delta);
#endif
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
	u32 slot = slot_of(ps, cgroup);
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
	u32 slot = slot_of(ps, cgroup);
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
