/* Benchmark reference: a runqlat-like histogram-only probe (bench/probe_bench.py).
 *
 * One global log2 histogram of run-queue latency; pid -> enqueue time. No cgroup
 * keys, no attribution: what the full probe's extra work is compared against.
 * Reads only tracepoint fields, like the real probe.
 */
BPF_HASH(start, u32, u64, 65536);
BPF_HISTOGRAM(dist, int, 64);

static __always_inline void enqueue(u32 pid)
{
	u64 ts = bpf_ktime_get_ns();
	start.update(&pid, &ts);
}

TRACEPOINT_PROBE(sched, sched_wakeup)
{
	enqueue(args->pid);
	return 0;
}

TRACEPOINT_PROBE(sched, sched_wakeup_new)
{
	enqueue(args->pid);
	return 0;
}

TRACEPOINT_PROBE(sched, sched_switch)
{
	long state = args->prev_state;
	u32 prev = args->prev_pid;
	if (prev != 0 && (state == 0 || (state & 0x100)))
		enqueue(prev);
	u32 next = args->next_pid;
	if (next == 0)
		return 0;
	u64 *tsp = start.lookup(&next);
	if (!tsp)
		return 0;
	u64 now = bpf_ktime_get_ns();
	u64 delta = now > *tsp ? (now - *tsp) / 1000 : 0;
	start.delete(&next);
	dist.increment(bpf_log2l(delta));
	return 0;
}
