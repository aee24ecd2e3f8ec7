/* Benchmark reference: a sched_switch program that only reads the clock
 * (bpf_ktime_get_ns). Every run-queue latency probe pays at least this per switch;
 * on some VMs the clock read dominates (bench/probe_bench.py). */
TRACEPOINT_PROBE(sched, sched_switch)
{
	u64 now = bpf_ktime_get_ns();
	return now == 0;
}
