/* Everything the scheduler probe does the same way in both flavours, written once:
 * the CO-RE program (sched_probe.bpf.c, libbpf's bpf_helpers.h) and the BCC program
 * (sched_probe.c, compiled by BCC with its own map syntax) include it, so both keep
 * the same per-pid entries and attribute alike. What differs stays in each program:
 * how a hook learns a task's cgroup and the time, and the hooks themselves.
 *
 * The includer includes sched_probe_maps.h (the maps), then defines:
 *   MAP_LOOKUP(map, key)            a pointer to the value at *key, or NULL
 *   MAP_INSERT(map, key, value)     insert *value at *key if absent (0: inserted)
 *   MAP_DELETE(map, key)            delete *key (0: deleted)
 *   KNOB_MAX_PIDS       pids below this use the direct array
 *   KNOB_OCCUPANCY      1: occupancy attribution, 0: last runner
 *   KNOB_RING_MASK      ring slots in use - 1 (a power of two - 1, < RING_MAX_SLOTS)
 *   KNOB_RING_WALK      a compile-time bound on the slices walked (<= RING_MAX_SLOTS)
 *   RING_EARLY_EXIT     1: the walk stops at the first slice older than the wait
 *   KNOB_NBOUNDS        finite histogram bounds in use (<= RUNQ_MAX_BOUNDS)
 *   KNOB_BOUND(i)       the i-th bound in ns
 *   KNOB_MIN_WAIT       min_wait in ns: shorter waits stay out of the matrix
 *   KNOB_BURST          1: count each tracked cgroup's running + runnable tasks
 */
#ifndef CONTENTION_SCHED_PROBE_LOGIC_H
#define CONTENTION_SCHED_PROBE_LOGIC_H

#include "sched_probe_maps.h"

/* Cost notes (bench/probe_bench.py, docs/probe.md): per-CPU and plain array lookups
 * are inlined and nearly free; a hash lookup costs tens of ns, a hash update or an
 * insert + delete several hundred. So the per-wait path does no hash insert or
 * delete at all: a wait is two field writes in the pid's entry. */

static __always_inline struct cpu_stats *this_cpu(void)
{
	u32 zero = 0;
	return MAP_LOOKUP(cpu_stats, &zero);
}

static __always_inline struct cpu_ring *ring_of(u32 cpu)
{
	return MAP_LOOKUP(cpu_rings, &cpu); /* NULL past the possible CPUs */
}

/* The pid's entry, or NULL (a hashed pid without one). A direct slot is returned even
 * when empty (cgroup 0): callers check. */
static __always_inline struct pid_state *pid_find(u32 pid)
{
	if (pid < KNOB_MAX_PIDS)
		return MAP_LOOKUP(pid_direct, &pid);
	return MAP_LOOKUP(pid_hashed, &pid);
}

/* The tracked set's generation: what userspace last wrote, 0 before its first write. */
static __always_inline u32 current_gen(void)
{
	u32 zero = 0;
	u32 *gen = MAP_LOOKUP(tracked_gen, &zero);
	return gen ? *gen : 0;
}

/* A hashed pid's new entry (NULL: the hash part is full), for a task in `cgroup`
 * whose histogram slot is `slot`, cached for the current generation (NO_SLOT: not
 * looked up, nothing cached). */
static __always_inline struct pid_state *pid_insert(struct cpu_stats *cs, u32 pid, u64 cgroup,
						    u32 slot)
{
	if (pid < KNOB_MAX_PIDS) /* for the verifier: a direct lookup never fails */
		return NULL;
	struct pid_state fresh = {
		.cgroup = cgroup,
		.slot = slot,
		.gen = slot == NO_SLOT ? NO_GEN : current_gen(),
	};
	int err = MAP_INSERT(pid_hashed, &pid, &fresh);
	struct pid_state *ps = MAP_LOOKUP(pid_hashed, &pid);
	if (err == 0)
		cs->stats[STAT_PIDS_INSERTED]++;
	else if (!ps) /* not a lost race: the map is full */
		cs->stats[STAT_FAIL_PIDS]++;
	return ps;
}

/* Entry `ps` (NULL: none could be had) belongs to a task in `cgroup`. An entry that
 * held another cgroup, or none (an empty direct slot), takes this one, and its cached
 * slot, the old cgroup's, becomes invalid. Written only when it changed, so an
 * unchanged entry stays a clean line. */
static __always_inline void set_cgroup(struct cpu_stats *cs, struct pid_state *ps, u64 cgroup)
{
	if (!ps || ps->cgroup == cgroup)
		return;
	if (ps->cgroup == 0)
		cs->stats[STAT_PIDS_INSERTED]++;
	ps->cgroup = cgroup;
	ps->gen = NO_GEN;
}

/* Burst demand (struct runq_hist: active, burst). The level of a slot counts each task
 * at most once: a task adds itself when it is put on a run queue and is not counted
 * there yet, and takes itself off when it goes to sleep, exits, or is next queued in
 * another cgroup. A task is counted under one slot assignment (its epoch, kept in the
 * task's entry) and decrements only that one, so a slot reassigned meanwhile, even to
 * the same cgroup, starts from its own zero. Tasks running when the probe attached
 * count from their first switch-out. */
static const u64 burst_bounds[BURST_NBOUNDS] = {BURST_BOUNDS_LIST};

static __always_inline u32 burst_slot(u64 level)
{
	u32 slot = BURST_NBOUNDS;
#pragma clang loop unroll(full)
	for (u32 i = 0; i < BURST_NBOUNDS; i++) {
		if (level <= burst_bounds[i]) {
			slot = i;
			break;
		}
	}
	return slot;
}

/* The task of entry `ps` is no longer running or runnable in the slot it was counted in. */
static __always_inline void burst_leave(struct pid_state *ps)
{
	u32 epoch = ps->counted;
	if (epoch == 0)
		return;
	ps->counted = 0;
	u32 slot = ps->victim_slot;
	struct runq_hist *h = MAP_LOOKUP(runq, &slot);
	if (h && h->epoch == epoch)
		__sync_fetch_and_add(&h->active, -1);
}

/* The task of entry `ps`, in tracked `cgroup` whose histogram slot is `slot`, is put on
 * a run queue: counted there (once), and the level now is one observation. Called
 * before its entry's victim and victim_slot are set to `cgroup` and `slot`. */
static __always_inline void burst_enter(struct pid_state *ps, u64 cgroup, u32 slot)
{
	struct runq_hist *h = MAP_LOOKUP(runq, &slot);
	if (!h || h->owner != cgroup || h->epoch == 0) {
		burst_leave(ps);
		return;
	}
	u32 epoch = h->epoch;
	if (ps->counted != epoch || ps->victim_slot != slot) {
		burst_leave(ps);
		__sync_fetch_and_add(&h->active, 1);
		ps->counted = epoch;
	}
	s64 level = (s64)h->active; /* other CPUs' tasks come and go meanwhile: a sample */
	if (level < 1)
		level = 1; /* itself, at least */
	u32 b = burst_slot((u64)level);
	if (b >= BURST_SLOTS) /* for the verifier */
		return;
	/* Plain adds, not atomic ones (two per observation saved): an observation made on
	 * two CPUs for the same cgroup in the same few nanoseconds may be lost, which a
	 * sampled distribution can afford; the level above must never drift, so it stays
	 * atomic. */
	h->burst[b] += 1;
	h->burst_sum += (u64)level;
}

static __always_inline void forget_pid(struct cpu_stats *cs, u32 pid)
{
	struct pid_state *ps = pid_find(pid);
	if (!ps || ps->cgroup == 0)
		return;
	if (KNOB_BURST)
		burst_leave(ps);
	if (ps->since != 0)
		cs->stats[STAT_START_DELETED]++;
	if (pid < KNOB_MAX_PIDS) {
		ps->since = 0;
		ps->cgroup = 0;
		ps->gen = NO_GEN;
		cs->stats[STAT_PIDS_DELETED]++;
	} else if (MAP_DELETE(pid_hashed, &pid) == 0) {
		cs->stats[STAT_PIDS_DELETED]++;
	}
}

/* The histogram slot of `cgroup` (NO_SLOT: not tracked) for the task of entry `ps`,
 * which is in `cgroup` now: from the entry's cache when it is of `cgroup` and of the
 * current generation, else from the tracked hash, then kept in the entry (with the
 * cgroup). `ps` may be NULL (a hashed pid without an entry). */
static __always_inline u32 slot_of(struct cpu_stats *cs, struct pid_state *ps, u64 cgroup)
{
	u32 gen = current_gen();
	if (ps && ps->cgroup == cgroup && ps->gen == gen)
		return ps->slot;
	u32 *found = MAP_LOOKUP(tracked, &cgroup);
	u32 slot = found ? *found : NO_SLOT;
	if (ps) {
		set_cgroup(cs, ps, cgroup);
		ps->slot = slot;
		ps->gen = gen;
	}
	return slot;
}

/* Add `ns` of `victim`'s wait to `culprit`'s cell. */
static __always_inline void blame_add(struct cpu_stats *cs, u64 victim, u64 culprit, u64 ns)
{
	struct blame_key key = {.victim = victim, .culprit = culprit};
	struct blame_cell *cell = MAP_LOOKUP(blame, &key);
	if (!cell) {
		struct blame_cell zero = {};
		if (MAP_INSERT(blame, &key, &zero) != 0 && !MAP_LOOKUP(blame, &key)) {
			cs->stats[STAT_FAIL_BLAME]++;
			return;
		}
		cell = MAP_LOOKUP(blame, &key);
		if (!cell)
			return;
	}
	__sync_fetch_and_add(&cell->wait_ns, ns);
	__sync_fetch_and_add(&cell->events, 1);
}

/* The histogram slot of a wait: the first bound that holds it, else the overflow. */
static __always_inline u32 hist_slot(u64 delta)
{
	u32 slot = KNOB_NBOUNDS;
#pragma clang loop unroll(full)
	for (u32 i = 0; i < RUNQ_MAX_BOUNDS; i++) {
		if (i < KNOB_NBOUNDS && delta <= KNOB_BOUND(i)) {
			slot = i;
			break;
		}
	}
	return slot;
}

/* The task of entry `ps` (NULL: no entry could be had), in tracked `cgroup` whose
 * histogram slot is `slot`, became runnable at `now`. An entry left by a wakeup that
 * found the task still on its CPU (it never waited) is overwritten: the latest start
 * is the true one. */
static __always_inline void mark_waiting(struct cpu_stats *cs, struct pid_state *ps,
					 u64 cgroup, u32 slot, u64 now)
{
	if (!ps) {
		cs->stats[STAT_FAIL_START]++;
		return;
	}
	if (KNOB_BURST)
		burst_enter(ps, cgroup, slot);
	if (ps->since == 0)
		cs->stats[STAT_START_INSERTED]++;
	ps->since = now;
	ps->attr_since = now;
	ps->victim = cgroup;
	ps->victim_slot = slot;
	cs->stats[STAT_ENQUEUES]++;
}

/* The task that ran on this CPU over [st->last_switch, now] was `who`. */
static __always_inline void push_slice(struct cpu_ring *st, u64 who, u64 now)
{
	u64 start = st->last_switch;
	st->last_switch = now;
	if (start == 0 || now <= start)
		return;
	u32 head = st->head & KNOB_RING_MASK & (RING_MAX_SLOTS - 1);
	struct run_slice *s = &st->ring[head];
	if (st->used > 0 && s->cgroup == who && s->end == start) {
		s->end = now; /* same cgroup again: extend its slice */
		return;
	}
	head = (head + 1) & KNOB_RING_MASK & (RING_MAX_SLOTS - 1);
	st->head = head;
	s = &st->ring[head];
	s->cgroup = who;
	s->start = start;
	s->end = now;
	if (st->used <= KNOB_RING_MASK)
		st->used++;
}

/* Split a wait over [since, now] across the slices it overlapped, newest first. The
 * loop is fully unrolled (straight-line code, which every kernel's verifier checks
 * without bounded-loop support), up to KNOB_RING_WALK slices:
 *   - RING_EARLY_EXIT 1 (CO-RE): stop at the first slice that ended before the wait
 *     began (slices are in time order, so every older one did too): the cost follows
 *     the wait's length, not the ring's size; slots past the knob are dead code to
 *     the verifier, which treats the knob as a constant;
 *   - RING_EARLY_EXIT 0 (BCC): visit every slot. With the exits, BCC's build of this
 *     loop is rejected even at 32 slots ("sequence of 8193 jumps is too complex",
 *     Linux 6.18); without them it verifies at every size up to RING_MAX_SLOTS,
 *     each slot costing a few compares (docs/probe.md, Cost). */
static __always_inline void attribute_wait(struct cpu_ring *st, struct cpu_stats *cs,
					   u64 victim, u64 since, u64 now)
{
	u64 covered = 0;
	u32 head = st->head;
	u32 used = st->used;
#pragma clang loop unroll(full)
	for (u32 i = 0; i < KNOB_RING_WALK; i++) {
		struct run_slice *s = &st->ring[(head - i) & KNOB_RING_MASK & (RING_MAX_SLOTS - 1)];
		u64 end = s->end;
#if RING_EARLY_EXIT
		if (i > KNOB_RING_MASK || i >= used || end <= since)
			break; /* this slice and every older one ended before the wait began */
#else
		if (i >= used || end <= since)
			continue;
#endif
		u64 lo = s->start > since ? s->start : since;
		u64 hi = end < now ? end : now;
		if (hi > lo) {
			blame_add(cs, victim, s->cgroup, hi - lo);
			covered += hi - lo;
		}
	}
	u64 wait = now - since;
	if (wait > covered) {
		blame_add(cs, victim, CULPRIT_UNATTRIBUTED_KEY, wait - covered);
		cs->stats[STAT_RING_SHORT]++;
	}
}

/* Waiting task `ps` is migrated, at `now`, off the CPU whose ring is `st` and on which
 * `running` (a cgroup, CULPRIT_IDLE_KEY, or CULPRIT_UNATTRIBUTED_KEY: not known) runs
 * now. The caller holds that CPU's run-queue lock (the kernel does, for a queued task
 * it migrates: load balancing, affinity changes, RT/DL push and pull), which that
 * CPU's sched_switch also holds when it writes the ring: the ring cannot change while
 * it is read here, whichever CPU this runs on. The part of the wait not attributed
 * yet, [attr_since, now], is split over that CPU's slices, plus its slice in progress
 * [last_switch, now] for `running`; the rest of the wait will be split over the
 * slices of the CPU where the task finally runs. Only a wait already at least
 * min_wait long is split, so only waits that will enter the matrix do. */
static __always_inline void split_at_migration(struct cpu_ring *st, struct cpu_stats *cs,
					       struct pid_state *ps, u64 running, u64 now)
{
	u64 since = ps->attr_since;
	if (now <= since || now - ps->since < KNOB_MIN_WAIT)
		return; /* (clocks of two CPUs can be a little apart) */
	u64 victim = ps->victim;
	u64 cut = st->last_switch; /* the ring covers up to here */
	if (cut == 0 || cut > now)
		cut = now;
	if (cut > since)
		attribute_wait(st, cs, victim, since, cut);
	else
		cut = since;
	if (now > cut)
		blame_add(cs, victim, running, now - cut);
	ps->attr_since = now;
	cs->stats[STAT_MIGRATED]++;
}

/* Count a wait of `delta` ns in the victim's histogram. The slot belongs to the victim
 * unless userspace reassigned it since the wait began (then the wait is dropped). */
static __always_inline void record_histogram(struct cpu_stats *cs, u32 vslot, u64 victim,
					     u64 delta)
{
	u32 slot = hist_slot(delta);
	struct runq_hist *h = MAP_LOOKUP(runq, &vslot);
	if (!h || h->owner != victim)
		return;
	if (slot >= RUNQ_MAX_SLOTS) /* for the verifier */
		return;
#ifdef BENCH_PLAIN_ADDS /* bench/probe_bench.py --profile only: what the atomics cost */
	h->slots[slot] += 1;
	h->sum_ns += delta;
#else
	__sync_fetch_and_add(&h->slots[slot], 1);
	__sync_fetch_and_add(&h->sum_ns, delta);
#endif
	cs->stats[STAT_RUNQ_EVENTS]++;
}

/* The task of entry `ps` is switched in: no longer waiting. Returns when its wait
 * began (0: it was not waiting). */
static __always_inline u64 end_wait(struct cpu_stats *cs, struct pid_state *ps)
{
	u64 since = ps->since;
	if (since == 0)
		return 0;
	ps->since = 0;
	cs->stats[STAT_START_DELETED]++;
	return since;
}

/* The wait that entry `ps` just ended at `now` on the CPU whose ring is `ring`, after
 * `prev` (a cgroup or CULPRIT_IDLE_KEY) ran there, lasted `delta` ns: into the victim's
 * histogram and, if at least min_wait, into the matrix: split over the slices since
 * it began, or since it left the CPU it waited on (occupancy), or all of it to `prev`
 * (last runner). */
static __always_inline void record_wait(struct cpu_ring *ring, struct cpu_stats *cs,
					struct pid_state *ps, u64 prev, u64 delta, u64 now)
{
	u64 victim = ps->victim;
	record_histogram(cs, ps->victim_slot, victim, delta);
	if (delta < KNOB_MIN_WAIT)
		return;
	cs->stats[STAT_BLAME_EVENTS]++;
	u64 attr_since = ps->attr_since; /* since, or when it left the CPU it waited on */
	if (!KNOB_OCCUPANCY)
		blame_add(cs, victim, prev, delta);
	else if (now > attr_since)
		attribute_wait(ring, cs, victim, attr_since, now);
}

#endif /* CONTENTION_SCHED_PROBE_LOGIC_H */
