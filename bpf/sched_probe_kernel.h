/* The kernel types the CO-RE scheduler probe reads, declared by hand.
 *
 * Not a bpftool-generated vmlinux.h on purpose: that file is a dump of one kernel's
 * BTF (megabytes, different on every kernel), so the committed object could not be
 * rebuilt byte for byte on another machine. Here each struct lists only the members
 * the probe touches; preserve_access_index makes every access a CO-RE relocation that
 * libbpf resolves against the running kernel's BTF at load time (by member name,
 * wherever the member sits in that kernel's layout). A member a kernel lacks fails
 * the load with a clear libbpf message, unless the program tests for it first with
 * bpf_core_field_exists().
 *
 * Also the few base types and constants bpf_helpers.h expects (normally from
 * vmlinux.h), so the build needs no kernel or libc headers at all.
 */
#ifndef CONTENTION_SCHED_PROBE_KERNEL_H
#define CONTENTION_SCHED_PROBE_KERNEL_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __u64 u64;
typedef __s64 s64;
typedef _Bool bool;
#define true 1
#define false 0

/* include/uapi/linux/bpf.h: stable ABI numbers. */
enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
};
#define BPF_ANY 0
#define BPF_NOEXIST 1

/* The cgroup v2 id of a task: task->cgroups->dfl_cgrp->kn->id (what
 * bpf_get_current_cgroup_id() returns for current; kernfs_node.id is a u64 since 5.5). */
struct kernfs_node {
	u64 id;
} __attribute__((preserve_access_index));

struct cgroup {
	struct kernfs_node *kn;
} __attribute__((preserve_access_index));

struct css_set {
	struct cgroup *dfl_cgrp;
} __attribute__((preserve_access_index));

/* CONFIG_SCHED_INFO (on with TASK_DELAY_ACCT or SCHEDSTATS, as on distribution
 * kernels): when the task was queued on a run queue, in the run queue's clock. */
struct sched_info {
	unsigned long long last_queued;
} __attribute__((preserve_access_index));

struct task_struct;

/* The run queue's clock, updated by the scheduler at every switch, and the task on
 * its CPU (in an anonymous union with `donor` since 6.13; CO-RE finds it there). */
struct rq {
	u64 clock;
	struct task_struct *curr;
} __attribute__((preserve_access_index));

/* CONFIG_FAIR_GROUP_SCHED: the CFS run queue a task's entity is on, and its CPU's rq
 * (set for every task, whatever its class, when it is placed on a CPU). */
struct cfs_rq {
	struct rq *rq;
} __attribute__((preserve_access_index));

struct sched_entity {
	struct cfs_rq *cfs_rq;
} __attribute__((preserve_access_index));

/* task_cpu(): thread_info.cpu since 5.16 (task_struct.cpu before). */
struct thread_info {
	u32 cpu;
} __attribute__((preserve_access_index));

struct task_struct {
	struct thread_info thread_info;
	unsigned int __state; /* Linux 5.14+ */
	int on_rq;            /* 0: not on a run queue (a waking task) */
	int exit_state;
	int pid;
	struct css_set *cgroups;
	struct sched_info sched_info;
	struct sched_entity se;
} __attribute__((preserve_access_index));

/* Before 5.14 the state member was `long state`. */
struct task_struct___pre514 {
	long state;
} __attribute__((preserve_access_index));

/* Before 5.16 the CPU was a member of the task. */
struct task_struct___pre516 {
	unsigned int cpu;
} __attribute__((preserve_access_index));

#endif /* CONTENTION_SCHED_PROBE_KERNEL_H */
