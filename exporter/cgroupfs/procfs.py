"""Read the node's own files under procfs: ``stat``, ``pressure/*`` and ``meminfo``.

Like the cgroup reader, it is given its root (``--path.procfs``), never a global path,
and parses with the pure parsers. A file that does not exist is "no data" (PSI off:
the node facts say why); one that cannot be read or parsed is reported in
``problems`` (one line each, for the sampler to log once) and costs only itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from . import parsers
from .errors import CgroupParseError
from .files import read_text
from .model import Pressure, ProcStat

# Clock ticks per second of /proc/stat's CPU times (steal).
USER_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True, slots=True)
class NodeReading:
    proc_stat: ProcStat | None
    cpu_pressure: Pressure | None
    memory_pressure: Pressure | None
    io_pressure: Pressure | None
    memory_total_bytes: int | None  # MemTotal (None: not asked for, or unreadable)
    problems: tuple[str, ...] = ()  # stat/pressure files unreadable or malformed
    meminfo_problem: str = ""  # MemTotal only sizes entitlements: not a failed pass

    @property
    def ok(self) -> bool:
        return not self.problems


def read_node(procfs: str, *, meminfo: bool = True) -> NodeReading:
    """One pass over the node's files. ``meminfo``: also read MemTotal (it does not
    change while the node runs, so callers read it once)."""
    problems: list[str] = []
    proc_stat = None
    stat_path = os.path.join(procfs, "stat")
    try:
        text = read_text(stat_path)
        if text is not None:
            proc_stat = parsers.parse_proc_stat(text, stat_path)
    except (OSError, CgroupParseError) as e:
        problems.append(f"cannot read {stat_path}: {e}")
    pressures: dict[str, Pressure | None] = {}
    for res in ("cpu", "memory", "io"):
        path = os.path.join(procfs, "pressure", res)
        try:
            text = read_text(path)
            pressures[res] = parsers.parse_pressure(text, path) if text is not None else None
        except CgroupParseError as e:
            problems.append(str(e))
            pressures[res] = None
        except OSError:
            pressures[res] = None  # PSI disabled (EOPNOTSUPP): reported in node facts
    memory_total, meminfo_problem = None, ""
    if meminfo:
        path = os.path.join(procfs, "meminfo")
        try:
            text = read_text(path)
            if text is not None:
                memory_total = parsers.parse_meminfo_total(text, path)
        except (OSError, CgroupParseError) as e:
            meminfo_problem = f"cannot read {path}: {e}"
    return NodeReading(
        proc_stat=proc_stat,
        cpu_pressure=pressures["cpu"],
        memory_pressure=pressures["memory"],
        io_pressure=pressures["io"],
        memory_total_bytes=memory_total,
        problems=tuple(problems),
        meminfo_problem=meminfo_problem,
    )
