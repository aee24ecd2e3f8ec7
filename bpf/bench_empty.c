/* Benchmark floor: the cheapest possible sched_switch program (bench/probe_bench.py). */
TRACEPOINT_PROBE(sched, sched_switch)
{
	return 0;
}
