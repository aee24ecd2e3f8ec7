/* Shared definitions of the contention scheduler probe (bpf/sched_probe.c).
 *
 * Every knob comes from a -D cflag set by the loader (exporter/probe/loader.py), so
 * the C code and the Python code never hold two copies of a number. The defaults
 * below only exist so the file can be compiled by hand; the loader always passes
 * all of them.
 *
 * Keys are cgroup v2 ids (the inode of the cgroup's directory in the unified
 * hierarchy; bpf_get_current_cgroup_id() returns the same number).
 */
#ifndef CONTENTION_SCHED_PROBE_H
#define CONTENTION_SCHED_PROBE_H

/* Histogram: finite upper bounds in nanoseconds, ascending, comma-separated, plus
 * one overflow slot that never gets a finite bound. */
#ifndef RUNQ_NBOUNDS
#define RUNQ_NBOUNDS 2
#endif
#ifndef RUNQ_BOUNDS_NS
#define RUNQ_BOUNDS_NS 20000000ULL, 200000000ULL
#endif
#define RUNQ_NSLOTS (RUNQ_NBOUNDS + 1)

/* 1: split each wait over the per-CPU ring of run slices it overlapped (occupancy);
 * 0: give the whole wait to the task that ran last before the victim (last runner). */
#ifndef ATTR_OCCUPANCY
#define ATTR_OCCUPANCY 1
#endif
/* Waits shorter than this do not enter the victim->culprit matrix (they still count
 * in the histogram). */
#ifndef MIN_WAIT_NS
#define MIN_WAIT_NS 50000ULL
#endif
/* Run slices remembered per CPU (power of two). */
#ifndef RING_SLOTS
#define RING_SLOTS 32
#endif
#ifndef MAX_CGROUPS /* tracked victims, and histogram entries */
#define MAX_CGROUPS 4096
#endif
#ifndef MAX_PIDS /* pid state: pids below this are direct-mapped, the others hashed */
#define MAX_PIDS 65536
#endif
#ifndef MAX_BLAME /* victim x culprit cells */
#define MAX_BLAME 32768
#endif

/* Special culprit keys. Real cgroup v2 ids are >= 1 (1 is the root cgroup, where
 * kernel threads live), so 0 and ~0 never collide with one. */
#define CULPRIT_IDLE_KEY 0ULL
#define CULPRIT_UNATTRIBUTED_KEY 0xffffffffffffffffULL

/* sched_switch prev_state bits (as the tracepoint reports them). */
#define PREV_STATE_PREEMPTED 0x100 /* TASK_REPORT_MAX: preempted while runnable */
#define PREV_STATE_EXITING 0x30    /* EXIT_DEAD | EXIT_ZOMBIE: its last switch-out */

/* Counters, one array per CPU (summed in userspace). Order is mirrored by
 * exporter/probe/loader.py:STAT_NAMES. */
enum stat_index {
	STAT_SWITCHES = 0,     /* sched_switch events seen */
	STAT_ENQUEUES,         /* tracked tasks that started waiting */
	STAT_RUNQ_EVENTS,      /* waits recorded in a histogram */
	STAT_BLAME_EVENTS,     /* waits that entered the matrix (>= MIN_WAIT_NS) */
	STAT_FAIL_PIDS,        /* pid state insert failed (hash part full) */
	STAT_FAIL_START,       /* a wait not recorded: no pid state (hash part full) */
	STAT_FAIL_RUNQ,        /* histogram insert failed (map full) */
	STAT_FAIL_BLAME,       /* matrix insert failed (map full) */
	STAT_PIDS_INSERTED,    /* pids with a known cgroup = inserted - deleted */
	STAT_PIDS_DELETED,
	STAT_START_INSERTED,   /* waiting tracked pids = inserted - deleted */
	STAT_START_DELETED,
	STAT_UNKNOWN_PID,      /* wakeup of a pid whose cgroup is not known yet */
	STAT_RING_SHORT,       /* waits the slice ring did not fully cover */
	STAT_COUNT
};

struct run_slice {
	u64 cgroup; /* who ran: a cgroup id, or CULPRIT_IDLE_KEY */
	u64 start;  /* ns, bpf_ktime_get_ns() */
	u64 end;
};

struct cpu_state {
	u64 last_switch; /* when the task now on this CPU was switched in (0: unknown) */
	u32 head;        /* ring index of the newest slice */
	u32 used;        /* valid slices in the ring */
	struct run_slice ring[RING_SLOTS];
	u64 stats[STAT_COUNT];
};

/* Everything the probe knows about one pid, in one place, so the hot path touches one
 * entry (no insert/delete per wait): pids below MAX_PIDS live in a directly indexed
 * array (slot = pid, no hashing, never full), the others in a hash of MAX_PIDS
 * entries. An array slot with cgroup 0 is empty (real cgroup ids are >= 1). */
struct pid_state {
	u64 cgroup; /* the task's cgroup, as of its last switch-out (0: unknown) */
	u64 since;  /* when it became runnable, if it is a waiting tracked task (0: not) */
	u64 victim; /* its (tracked) cgroup at that time */
};

struct runq_hist {
	u64 slots[RUNQ_NSLOTS]; /* events per bucket (not cumulative) */
	u64 sum_ns;             /* total wait */
};

struct blame_key {
	u64 victim;
	u64 culprit; /* a cgroup id, CULPRIT_IDLE_KEY or CULPRIT_UNATTRIBUTED_KEY */
};

struct blame_cell {
	u64 wait_ns;
	u64 events;
};

#endif /* CONTENTION_SCHED_PROBE_H */
