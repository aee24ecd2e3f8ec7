/* The scheduler probe's maps, declared once for both flavours (docs/probe.md, "Maps,
 * limits, counters"); their value layouts are in sched_probe.h.
 *
 * The includer defines, before including this file:
 *   MAP_HASH(name, key type, value type, size), MAP_ARRAY(name, value type, size),
 *   MAP_PERCPU_ARRAY(name, value type, size)    declare a map (an array's key is a
 *                                               32-bit index)
 *   MAX_CGROUPS, MAX_PIDS, MAX_BLAME, MAX_CPUS   the sizes (BCC: -D cflags; CO-RE:
 *                                               placeholders the loader overrides)
 */
#ifndef CONTENTION_SCHED_PROBE_MAPS_H
#define CONTENTION_SCHED_PROBE_MAPS_H

#include "sched_probe.h"

MAP_HASH(tracked, u64, u32, MAX_CGROUPS);   /* victim -> histogram slot (userspace) */
MAP_ARRAY(tracked_gen, u32, 1);             /* bumped by userspace when `tracked` changes */
MAP_ARRAY(pid_direct, struct pid_state, MAX_PIDS);     /* pid < max_pids: slot = pid */
MAP_HASH(pid_hashed, u32, struct pid_state, MAX_PIDS); /* pid >= max_pids */
MAP_ARRAY(runq, struct runq_hist, MAX_CGROUPS); /* histogram slot -> histogram + owner */
MAP_HASH(blame, struct blame_key, struct blame_cell, MAX_BLAME);
MAP_ARRAY(cpu_rings, struct cpu_ring, MAX_CPUS); /* CPU -> its run slices (sched_probe.h) */
MAP_PERCPU_ARRAY(cpu_stats, struct cpu_stats, 1);

#endif /* CONTENTION_SCHED_PROBE_MAPS_H */
