/* Benchmark references for the CO-RE probe (bench/probe_bench.py compiles this with
 * clang at run time; it is not shipped): tp_btf/sched_switch programs that do nothing,
 * and that only read the clock. */
#include "sched_probe_kernel.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

SEC("tp_btf/sched_switch")
int bench_empty(u64 *ctx)
{
	return 0;
}

SEC("tp_btf/sched_switch")
int bench_ktime(u64 *ctx)
{
	return bpf_ktime_get_ns() == 0;
}
