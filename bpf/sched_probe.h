/* Shared definitions of the contention scheduler probe: the map layouts and counters
 * that both programs write and the one Python decoder reads
 * (exporter/probe/decode.py), whichever loader built them:
 *   - bpf/sched_probe.bpf.c: CO-RE, compiled once (bpf/sched_probe.bpf.o), loaded by
 *     libbpf; knobs are read-only globals set before load;
 *   - bpf/sched_probe.c: BCC, compiled on the node; knobs are -D cflags.
 *
 * Layouts have fixed maximum sizes (histogram slots, ring slots) so both programs
 * share them byte for byte; the number actually used is a knob.
 *
 * Keys are cgroup v2 ids (the inode of the cgroup's directory in the unified
 * hierarchy; bpf_get_current_cgroup_id() returns the same number).
 *
 * The includer provides u32/u64 (kernel headers for BCC, sched_probe_kernel.h for
 * CO-RE).
 */
#ifndef CONTENTION_SCHED_PROBE_H
#define CONTENTION_SCHED_PROBE_H

/* Histogram: up to RUNQ_MAX_BOUNDS finite upper bounds (ns, ascending), plus one
 * overflow slot that never gets a finite bound. */
#define RUNQ_MAX_BOUNDS 23
#define RUNQ_MAX_SLOTS (RUNQ_MAX_BOUNDS + 1)

/* Burst demand: buckets of "threads of the cgroup running or runnable at once", the
 * finite upper bounds (mirrored by exporter/probe/burst.py: BURST_BOUNDS, checked by
 * tests/unit/test_probe_decode.py), plus one overflow slot. */
#define BURST_BOUNDS_LIST 1, 2, 3, 4, 6, 8, 12, 16, 24, 32
#define BURST_NBOUNDS 10
#define BURST_SLOTS (BURST_NBOUNDS + 1)

/* Run slices remembered per CPU (occupancy mode): a power of two up to this. */
#define RING_MAX_SLOTS 256

/* Special culprit keys. Real cgroup v2 ids are >= 1 (1 is the root cgroup, where
 * kernel threads live), so 0 and ~0 never collide with one. */
#define CULPRIT_IDLE_KEY 0ULL
#define CULPRIT_UNATTRIBUTED_KEY 0xffffffffffffffffULL

/* Counters, one array per CPU (cpu_stats, summed in userspace). Order is mirrored
 * by exporter/probe/decode.py:STAT_NAMES. */
enum stat_index {
	STAT_SWITCHES = 0,     /* sched_switch events seen */
	STAT_ENQUEUES,         /* tracked tasks that started waiting */
	STAT_RUNQ_EVENTS,      /* waits recorded in a histogram */
	STAT_BLAME_EVENTS,     /* waits that entered the matrix (>= the minimum wait) */
	STAT_FAIL_PIDS,        /* pid state insert failed (hash part full) */
	STAT_FAIL_START,       /* a wait not recorded: no pid state (hash part full) */
	STAT_FAIL_RUNQ,        /* histogram insert failed (map full) */
	STAT_FAIL_BLAME,       /* matrix insert failed (map full) */
	STAT_PIDS_INSERTED,    /* pids with a known cgroup = inserted - deleted */
	STAT_PIDS_DELETED,
	STAT_START_INSERTED,   /* waiting tracked pids = inserted - deleted */
	STAT_START_DELETED,
	STAT_UNKNOWN_PID,      /* wakeup of a pid whose cgroup is not known yet (BCC) */
	STAT_RING_SHORT,       /* waits the slice ring did not fully cover */
	STAT_MIGRATED,         /* waits split by a migration (counted per migration) */
	STAT_COUNT
};

struct run_slice {
	u64 cgroup; /* who ran: a cgroup id, or CULPRIT_IDLE_KEY */
	u64 start;  /* ns, the probe's clock */
	u64 end;
};

/* One CPU's recent run slices (occupancy mode), in an array indexed by CPU
 * (cpu_rings), not a per-CPU map: when a waiting task is migrated, the hook reads the
 * ring of the CPU it leaves, which may not be the CPU it runs on. A CPU's ring is
 * written only by that CPU's sched_switch, under its run-queue lock; the migration
 * hook reads it under the same lock. */
struct cpu_ring {
	u64 last_switch; /* when the task now on this CPU was switched in (0: unknown) */
	u64 running;     /* that task's cgroup (BCC only: CO-RE reads rq->curr instead) */
	u32 head;        /* ring index of the newest slice */
	u32 used;        /* valid slices in the ring */
	struct run_slice ring[RING_MAX_SLOTS];
};

/* A CPU's counters (cpu_stats, a per-CPU array: the hot path shares no line). */
struct cpu_stats {
	u64 stats[STAT_COUNT];
};

/* Everything the probe knows about one pid, in one place, so the hot path touches one
 * entry (no insert/delete per wait): pids below the max_pids knob live in a directly
 * indexed array (slot = pid, no hashing, never full), the others in a hash of
 * max_pids entries. An array slot with cgroup 0 is empty (real cgroup ids are >= 1).
 *
 * It also caches whether the pid's cgroup is tracked, and its histogram slot, for the
 * tracked-set generation it was looked up in: a hash lookup costs as much as the rest
 * of a wakeup, so it is done once per task and tracked-set change, not per event. */
struct pid_state {
	u64 cgroup;      /* the task's cgroup, as last seen (0: unknown) */
	u64 since;       /* when it became runnable, if it is a waiting tracked task (0: not) */
	u64 victim;      /* its (tracked) cgroup at that time */
	u64 attr_since;  /* the wait is attributed up to here (since, or its last migration) */
	u32 victim_slot; /* and that cgroup's histogram slot */
	u32 slot;        /* cached: the histogram slot of `cgroup`, NO_SLOT if untracked */
	u32 gen;         /* the tracked-set generation the cache was filled in, or NO_GEN */
	u32 counted;     /* burst: the epoch of the histogram slot (victim_slot) whose
			  * `active` counts this task (0: counted nowhere) */
};

#define NO_SLOT 0xffffffffU

/* The one invalid-generation marker: an entry whose cache is not valid for any
 * generation (its cgroup changed, or the pid was forgotten) has gen = NO_GEN. The
 * cache is used when gen equals current_gen(), and that returns 0 until userspace
 * first writes tracked_gen (nothing tracked yet, or the lookup failed), while
 * userspace's generations run from 1 to 0xfffffffe and wrap to 1
 * (exporter/probe/kernel_maps.py: TrackedSlots): 0xffffffff is the one value
 * current_gen() never returns. 0 would match before the first write: a task of an
 * untracked cgroup would be taken for a tracked one, at whatever slot its entry held
 * (tests/integration/test_probe_kernel.py: test_nothing_waits_before_anything_is_tracked). */
#define NO_GEN 0xffffffffU

/* Victim histograms live in an array indexed by a slot userspace assigns to each
 * tracked cgroup (tracked: cgroup -> slot), so recording a wait is an array access,
 * not a hash lookup. `owner` is the cgroup the slot belongs to: userspace writes it
 * (with zero counts) when it assigns the slot, and the kernel adds to a slot only for
 * its owner, so a wait that began before a slot was reassigned is dropped instead of
 * landing in the new owner's histogram. */
struct runq_hist {
	u64 owner;                 /* victim cgroup id (0: slot unassigned) */
	u64 slots[RUNQ_MAX_SLOTS]; /* events per bucket (not cumulative); unused slots 0 */
	u64 sum_ns;                /* total wait */
	/* Burst demand (the burst knob): `active` is a level, the owner's tasks running or
	 * runnable now, each counted once (pid_state.counted); every time one of them is
	 * put on a run queue (woken, new, or switched out still runnable) the level then,
	 * itself included, is one observation in `burst`. `epoch` is unique to each
	 * assignment of the slot (userspace), so a task counted under a former
	 * assignment never decrements the new one's level. */
	u64 active;
	u32 epoch;
	u32 pad;
	u64 burst[BURST_SLOTS];    /* observations per bucket (not cumulative) */
	u64 burst_sum;             /* sum of the observed levels */
};

struct blame_key {
	u64 victim;
	u64 culprit; /* a cgroup id, CULPRIT_IDLE_KEY or CULPRIT_UNATTRIBUTED_KEY */
};

struct blame_cell {
	u64 wait_ns;
	u64 events;
};

/* The CO-RE program's knobs: one read-only global (section .rodata.knobs) that the
 * loader fills before load, so nothing is recompiled to change them. The verifier
 * sees them as constants: branches they rule out are never verified nor run. */
struct probe_knobs {
	u64 bounds_ns[RUNQ_MAX_BOUNDS]; /* histogram bounds, ascending */
	u64 min_wait_ns;                /* shorter waits stay out of the matrix */
	u32 nbounds;                    /* bounds in use */
	u32 ring_mask;                  /* ring slots in use - 1 */
	u32 max_pids;                   /* pids below this use the direct array */
	u32 occupancy;                  /* 1: occupancy, 0: last runner */
	u32 switch_has_state;           /* sched_switch passes prev_state (Linux 5.18+) */
	u32 use_ktime;                  /* 1: bpf_ktime_get_ns() instead of the rq clock */
	u32 burst;                      /* 1: count running + runnable tasks (burst demand) */
	u32 pad;
};

#endif /* CONTENTION_SCHED_PROBE_H */
