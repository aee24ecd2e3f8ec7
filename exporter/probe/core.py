"""Load the CO-RE scheduler probe (``bpf/sched_probe.bpf.o``) through libbpf.

No compiler and no kernel headers: the object was compiled once (committed, shipped
in the wheel) and libbpf relocates it against the running kernel's BTF. Knobs go into
the object's read-only ``knobs`` global and map sizes before load, so one object
serves every configuration.
"""

from __future__ import annotations

import ctypes as ct
import errno
import os
from pathlib import Path

from .backend import ProbeKnobs, ProbeLoadError, find_bpf_file
from .decode import (
    BLAME_KEY,
    BLAME_VALUE,
    CPU_STATS,
    PID_STATE,
    RUNQ_VALUE,
    U32,
    U64,
    pack_knobs,
    split_per_cpu,
)
from .kernel_maps import KernelMaps
from .libbpf import (
    BpfObject,
    Libbpf,
    LibbpfError,
    LibbpfMissing,
    LibbpfTooOld,
    MapFd,
    btf_facts,
    capture_messages,
)
from .status import (
    REASON_ATTACH_ERROR,
    REASON_LIBBPF_MISSING,
    REASON_LIBBPF_TOO_OLD,
    REASON_LOAD_ERROR,
    REASON_NO_BTF,
    REASON_NO_OBJECT,
    REASON_NO_TRACEPOINT,
    REASON_NOT_ROOT,
    REASON_VERIFIER,
    has_bpf_privilege,
    seccomp_filtered,
)

OBJECT_FILE = "sched_probe.bpf.o"
DEFAULT_BTF = "/sys/kernel/btf/vmlinux"
KNOBS_SECTION = ".rodata.knobs"
# tracepoint -> program name in bpf/sched_probe.bpf.c
PROGRAMS = {
    "sched_switch": "handle_sched_switch",
    "sched_wakeup": "handle_sched_wakeup",
    "sched_wakeup_new": "handle_sched_wakeup_new",
    "sched_migrate_task": "handle_sched_migrate_task",
}


def find_object(bpf_dir: str | None = None) -> Path | None:
    """The compiled object: next to the package (``exporter/bpf``, in a wheel) or in
    the repository's ``bpf/``."""
    return find_bpf_file(OBJECT_FILE, bpf_dir)


def _verifier_summary(log: str, limit: int = 6) -> str:
    """The verifier's last words (where it says what it rejected)."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    return " | ".join(lines[-limit:])


def _libbpf_summary(msgs: list[str], limit: int = 4) -> str:
    keep = [m.strip() for m in msgs if "libbpf:" in m or "failed" in m or "error" in m.lower()]
    return " | ".join(keep[-limit:])


class CoreMaps(KernelMaps):
    """The loaded CO-RE probe: attached programs and its maps by file descriptor."""

    loader = "core"

    def __init__(self, obj: BpfObject, knobs: ProbeKnobs, detail: str) -> None:
        super().__init__(knobs, detail)
        self._obj = obj
        bpf = obj.bpf
        self._ncpu = bpf.possible_cpus()
        per_cpu = ((CPU_STATS.size + 7) & ~7) * self._ncpu  # one copy per possible CPU
        sizes = {
            "tracked": (U64.size, U32.size),
            "tracked_gen": (U32.size, U32.size),
            "runq": (U32.size, RUNQ_VALUE.size),
            "blame": (BLAME_KEY.size, BLAME_VALUE.size),
            "cpu_stats": (U32.size, per_cpu),
            "pid_direct": (U32.size, PID_STATE.size),
            "pid_hashed": (U32.size, PID_STATE.size),
        }
        self._maps = {n: MapFd(bpf, obj.map_fd(n), k, v) for n, (k, v) in sizes.items()}
        self._fds = {tp: obj.program_fd(prog) for tp, prog in PROGRAMS.items()}

    def _lookup(self, name: str, key: bytes) -> bytes | None:
        return self._maps[name].lookup(key)

    def _update(self, name: str, key: bytes, value: bytes) -> None:
        self._maps[name].update(key, value)

    def _delete(self, name: str, key: bytes) -> bool:
        return self._maps[name].delete(key)

    def _items(self, name: str) -> list[tuple[bytes, bytes]]:
        return self._maps[name].items()

    def _per_cpu_stats(self) -> list[bytes]:
        raw = self._lookup("cpu_stats", U32.pack(0))
        if raw is None:
            raise LibbpfError("cpu_stats lookup", errno.ENOENT)
        return split_per_cpu(raw, self._ncpu, CPU_STATS.size)

    def program_fds(self) -> dict[str, int]:
        return dict(self._fds)

    def close(self) -> None:
        self._obj.close()


def load_core(
    knobs: ProbeKnobs,
    *,
    btf_path: str = DEFAULT_BTF,
    libbpf_name: str | None = None,
    object_path: Path | None = None,
    use_ktime: bool = False,
) -> CoreMaps:
    """Open, configure, load and attach the CO-RE object; raises ProbeLoadError.

    Either everything is attached or nothing is: on any failure the programs attached
    so far are detached and the object closed before the error is raised.
    """
    if not os.path.isfile(btf_path):
        raise ProbeLoadError(
            REASON_NO_BTF,
            f"{btf_path} not found: this kernel was built without CONFIG_DEBUG_INFO_BTF "
            "(the CO-RE probe needs it; the BCC probe does not)",
        )
    try:
        bpf = Libbpf.open(libbpf_name) if libbpf_name else Libbpf.open()
    except LibbpfMissing as e:
        raise ProbeLoadError(
            REASON_LIBBPF_MISSING, f"{e}; install libbpf 1.x (Debian/Ubuntu: libbpf1)"
        ) from None
    except LibbpfTooOld as e:
        raise ProbeLoadError(REASON_LIBBPF_TOO_OLD, str(e)) from None
    path = object_path or find_object()
    if path is None or not path.is_file():
        raise ProbeLoadError(
            REASON_NO_OBJECT,
            f"{OBJECT_FILE} not found (exporter/bpf/ in the package; "
            "scripts/build-bpf.sh builds it)",
        )
    try:
        facts = btf_facts(bpf, btf_path, tuple(PROGRAMS))
    except OSError as e:
        raise ProbeLoadError(REASON_NO_BTF, f"cannot parse {btf_path}: {e}") from None
    missing = [tp for tp in PROGRAMS if tp not in facts.tracepoints]
    if missing:
        raise ProbeLoadError(
            REASON_NO_TRACEPOINT,
            f"the kernel's BTF has no BTF tracepoint for {', '.join(missing)} "
            "(tp_btf needs Linux 5.5+)",
        )
    with capture_messages() as msgs:
        try:
            obj = BpfObject(
                bpf,
                path.read_bytes(),
                "sched_probe",
                btf_custom_path=None if btf_path == DEFAULT_BTF else btf_path,
            )
        except OSError as e:
            raise ProbeLoadError(
                REASON_LOAD_ERROR, f"cannot open {path}: {e} {_libbpf_summary(msgs)}".strip()
            ) from None
        try:
            _configure(obj, knobs, facts.sched_switch_args >= 4, use_ktime)
            _load(obj, msgs)
            for tp, prog in PROGRAMS.items():
                try:
                    obj.attach(prog)
                except OSError as e:
                    raise ProbeLoadError(
                        REASON_ATTACH_ERROR,
                        f"{tp}: {e} {_libbpf_summary(msgs)}".strip() + " (nothing left attached)",
                    ) from None
            maps = CoreMaps(
                obj,
                knobs,
                f"CO-RE object {path.name} via {bpf.name} {bpf.version}, " f"BTF {btf_path}",
            )
        except BaseException:
            obj.close()  # detaches whatever was attached: never half a probe
            raise
    return maps


def _configure(obj: BpfObject, k: ProbeKnobs, switch_has_state: bool, use_ktime: bool) -> None:
    names = obj.map_names()
    rodata = next((n for n in names if n.endswith(KNOBS_SECTION)), None)
    if rodata is None:
        raise ProbeLoadError(REASON_NO_OBJECT, f"no {KNOBS_SECTION} in the object: stale build?")
    data = obj.section_data(rodata)
    packed = pack_knobs(
        k.bounds_ns,
        k.min_wait_ns,
        k.ring_slots,
        k.max_pids,
        k.occupancy,
        switch_has_state,
        use_ktime,
        k.burst,
    )
    if len(data) < len(packed):
        raise ProbeLoadError(REASON_NO_OBJECT, "the object's knobs are smaller than expected")
    ct.memmove(data, packed, len(packed))
    for name, n in (
        ("tracked", k.max_cgroups),
        ("pid_direct", k.max_pids),
        ("pid_hashed", k.max_pids),
        ("runq", k.max_cgroups),
        ("blame", k.max_blame),
        ("cpu_rings", obj.bpf.possible_cpus()),  # indexed by CPU
    ):
        obj.set_max_entries(name, n)


def _denied_why() -> str:
    """Why the kernel said EPERM: missing capabilities, or (holding them) a seccomp
    filter or an LSM in the way (docs/troubleshooting.md)."""
    if not has_bpf_privilege():
        return "needs root, or CAP_BPF + CAP_PERFMON"
    if seccomp_filtered():
        return (
            "denied although the process holds CAP_BPF + CAP_PERFMON, under a seccomp "
            "filter (Seccomp: 2 in /proc/self/status): the container runtime's seccomp "
            "profile denies bpf() (CRI-O's and podman's default allows it only with "
            "CAP_SYS_ADMIN; docs/kubernetes.md), else an LSM (SELinux, AppArmor)"
        )
    return "denied although the process holds CAP_BPF + CAP_PERFMON: an LSM (SELinux, AppArmor)?"


def _load(obj: BpfObject, msgs: list[str]) -> None:
    try:
        obj.load()
    except OSError as e:
        log = obj.verifier_log
        if e.errno in (errno.EPERM, errno.EACCES) and not log:
            raise ProbeLoadError(REASON_NOT_ROOT, f"{e}: {_denied_why()}") from None
        if log:
            raise ProbeLoadError(
                REASON_VERIFIER, f"the verifier rejected the program: {_verifier_summary(log)}"
            ) from None
        raise ProbeLoadError(REASON_LOAD_ERROR, f"{e} {_libbpf_summary(msgs)}".strip()) from None
