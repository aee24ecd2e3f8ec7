/* The map-free parts of the scheduler probe, shared by the CO-RE program
 * (sched_probe.bpf.c) and the BCC program (sched_probe.c) so both attribute alike.
 *
 * The includer defines, before including this file:
 *   KNOB_RING_MASK      ring slots in use - 1 (a power of two - 1, < RING_MAX_SLOTS)
 *   KNOB_RING_WALK      a compile-time bound on the slices walked (<= RING_MAX_SLOTS)
 *   RING_EARLY_EXIT     1: the walk stops at the first slice older than the wait
 *   KNOB_NBOUNDS        finite histogram bounds in use (<= RUNQ_MAX_BOUNDS)
 *   KNOB_BOUND(i)       the i-th bound in ns
 *   KNOB_MIN_WAIT       min_wait in ns: shorter waits stay out of the matrix
 *   blame_add(cs, victim, culprit, ns)   adds ns to a matrix cell (its map, its way)
 *   runq_slot(slot)     the histogram at `slot` (an array lookup), or NULL
 */
#ifndef CONTENTION_SCHED_PROBE_LOGIC_H
#define CONTENTION_SCHED_PROBE_LOGIC_H

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
	struct runq_hist *h = runq_slot(vslot);
	if (!h || h->owner != victim)
		return;
	if (slot >= RUNQ_MAX_SLOTS) /* for the verifier */
		return;
	__sync_fetch_and_add(&h->slots[slot], 1);
	__sync_fetch_and_add(&h->sum_ns, delta);
	cs->stats[STAT_RUNQ_EVENTS]++;
}

#endif /* CONTENTION_SCHED_PROBE_LOGIC_H */
