"""A seeded mutation fuzzer for every cgroup and /proc parser.

Each input starts from a file in the kernel's exact format (the fixture trees) and
gets one to three mutations of the kinds that broke the parsers before: numbers out of
the kernel's range (negative, above 2**64 - 1, thousands of digits), numbers in forms
the kernel never writes (``1e400``, ``nan``, ``+5``, ``1_000``, non-ASCII digits),
truncated, duplicated, swapped or deleted lines, stray bytes (decoded as the reader
decodes them), NULs, odd line endings. Every input goes to its parser, which must
either return a plausible value (:func:`implausible` is the independent check) or
raise :class:`CgroupParseError`; anything else is an *escape*::

    python -m tests.support.parser_fuzz --inputs 100000 --seed 16

prints the figures (and exits 1 on any escape or implausible value);
``tests/fuzz/test_parser_fuzz.py`` runs the same function in the suite.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from exporter.cgroupfs import parsers as p
from exporter.cgroupfs.errors import CgroupParseError
from exporter.cgroupfs.model import CpuMax, CpuStat, CpuStatV1, PressureLine, ProcStat

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
U64 = 2**64 - 1

# Where the seeds come from: parser name -> (parser, fixture files in its format).
_V2 = "v2-systemd/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice"
_HY = "hybrid/sys/fs/cgroup"


def _cfs_quota(text: str, source: str) -> CpuMax:
    return p.parse_cfs_v1(text, "100000\n", source)


def _cfs_period(text: str, source: str) -> CpuMax:
    return p.parse_cfs_v1("20000\n", text, "quota", period_source=source)


PARSERS: dict[str, tuple[Callable[[str, str], Any], tuple[str, ...]]] = {
    "flat_keyed": (p.parse_flat_keyed, ("cpu.stat", "memory.stat", "memory.events")),
    "cpu_stat": (p.parse_cpu_stat, ("cpu.stat",)),
    "cpu_stat_v1": (p.parse_cpu_stat_v1, ("v1:cpu.stat",)),
    "cpu_max": (p.parse_cpu_max, ("cpu.max",)),
    "cfs_quota": (_cfs_quota, ("v1:cpu.cfs_quota_us",)),
    "cfs_period": (_cfs_period, ("v1:cpu.cfs_period_us",)),
    "single_int": (p.parse_single_int, ("memory.current",)),
    "cpu_weight": (p.parse_cpu_weight, ("cpu.weight",)),
    "cpu_shares": (p.parse_cpu_shares, ("v1:cpu.shares",)),
    "max_or_int": (p.parse_max_or_int, ("memory.max", "memory.high")),
    "pressure": (p.parse_pressure, ("cpu.pressure", "memory.pressure", "io.pressure")),
    "memory_stat": (p.parse_memory_stat, ("memory.stat",)),
    "memory_events": (p.parse_memory_events, ("memory.events",)),
    "proc_stat": (p.parse_proc_stat, ("proc:stat",)),
    "meminfo_total": (p.parse_meminfo_total, ("proc:meminfo",)),
    "memory_stat_v1": (p.parse_memory_stat_v1, ("mem1:memory.stat",)),
    "v1_limit_bytes": (p.parse_v1_limit_bytes, ("mem1:memory.limit_in_bytes",)),
}


def seeds() -> dict[str, list[str]]:
    """Every parser's seed texts: real files of the fixture trees, by name."""
    roots = {
        "": [FIXTURES / "v2-systemd/sys/fs/cgroup", FIXTURES / "v2-cgroupfs/sys/fs/cgroup"],
        "v1:": [FIXTURES / _HY / "cpu,cpuacct"],
        "mem1:": [FIXTURES / _HY / "memory"],
        "proc:": [FIXTURES / "v2-systemd/proc", FIXTURES / "hybrid/proc"],
    }
    out: dict[str, list[str]] = {}
    for name, (_, wanted) in PARSERS.items():
        texts: set[str] = set()
        for want in wanted:
            prefix, _, fname = want.rpartition(":")
            prefix = prefix + ":" if prefix else ""
            for root in roots[prefix]:
                pattern = fname if prefix == "proc:" else f"**/{fname}"
                texts.update(f.read_text() for f in root.glob(pattern) if f.is_file())
        if not texts:
            raise RuntimeError(f"no seed for {name} in {FIXTURES}")
        out[name] = sorted(texts)
    return out


# -- mutations ---------------------------------------------------------------------------

SPECIAL = (
    "-1", "-100000000", "0", "-0", str(U64), str(U64 + 1), str(2**64), str(2**70),
    "9" * 21, "9" * 400, "9" * 4300, "9" * 5000, "1e400", "1e5", "nan", "inf", "-inf",
    "1.5", "1_000", "+5", "\u0663", "\u00b2", "0x10", "", "00000000000000000000001",
    "100.01", "-1.00", "100.00", "0.00", "1.0e+400", "NaN", "12a", "max", "-2",
)  # fmt: skip
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


Note = Callable[[str], object]  # told the kind of each mutation made (the figures count them)


def no_note(_kind: str) -> None:
    pass


def value_key(v: object) -> str:
    """How a hostile value is named among the mutation kinds (short, and unique within
    each fuzzer's list: long values by their start and length)."""
    r = repr(v)
    return f"value {r}" if len(r) <= 24 else f"value {r[:10]}...({len(str(v))} chars)"


def _num(rng: random.Random, text: str, note: Note) -> str:
    spots = list(_NUMBER.finditer(text))
    if not spots:
        new = rng.choice(SPECIAL)
        note("number appended")
        note(value_key(new))
        return text + new
    m = rng.choice(spots)
    if rng.random() < 0.8:
        new = rng.choice(SPECIAL)
        note("number replaced")
        note(value_key(new))
    else:
        new = str(rng.randrange(-(2**70), 2**70))
        note("number replaced, random")
    return text[: m.start()] + new + text[m.end() :]


_LINE_OPS = ("line deleted", "line duplicated", "lines swapped", "line cut short")


def _lines(rng: random.Random, text: str, note: Note) -> str:
    lines = text.split("\n")
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    op = rng.randrange(4)
    note(_LINE_OPS[op])
    if op == 0:
        del lines[i]
    elif op == 1:
        lines.insert(i, lines[j])
    elif op == 2:
        lines[i], lines[j] = lines[j], lines[i]
    else:
        lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]
    return "\n".join(lines)


def _bytes(rng: random.Random, text: str, note: Note) -> str:
    """Stray bytes, decoded as the reader decodes a file (ASCII, others replaced)."""
    data = bytearray(text.encode("ascii", "replace"))
    for _ in range(rng.randint(1, 4)):
        pos = rng.randrange(len(data) + 1)
        if data and rng.random() < 0.5:
            data[min(pos, len(data) - 1)] ^= 1 << rng.randrange(8)
            note("bit flipped")
        else:
            data[pos:pos] = bytes([rng.randrange(256)])
            note("byte inserted")
    return bytes(data).decode("ascii", "replace")


JUNK = ("\x00", "=", " ", "\t", "\r", "\x0b", "\x0c", "\u2028", "-", ".", "_")


def _chars(rng: random.Random, text: str, note: Note) -> str:
    pos = rng.randrange(len(text) + 1)
    junk = rng.choice(JUNK)
    note(f"junk {junk!r}")
    return text[:pos] + junk * rng.randint(1, 3) + text[pos:]


_WHOLE_OPS = ("emptied", "truncated", "line ends changed", "'=' changed", "long line", "repeated")


def _whole(rng: random.Random, text: str, note: Note) -> str:
    op = rng.randrange(6)
    note(_WHOLE_OPS[op])
    if op == 0:
        return ""
    if op == 1:
        return text[: rng.randrange(len(text) + 1)]  # truncated
    if op == 2:
        return text.replace("\n", rng.choice(["\r\n", "\r", " ", "\n\n"]))
    if op == 3:
        return text.replace("=", rng.choice([" ", "==", ""]))
    if op == 4:
        return text + "x" * rng.choice([10, 1000, 100_000])  # a very long line
    return text * rng.randint(2, 3)


MUTATORS = (_num, _num, _num, _lines, _bytes, _chars, _whole)
# Every kind of mutation :func:`mutate` makes, as the figures count them: the operators,
# each special number and each junk character ("number appended" only happens to a text
# an earlier mutation left without a number).
MUTATION_KINDS: tuple[str, ...] = (
    "number replaced",
    "number replaced, random",
    "number appended",
    *_LINE_OPS,
    "bit flipped",
    "byte inserted",
    *_WHOLE_OPS,
    *(value_key(v) for v in SPECIAL),
    *(f"junk {j!r}" for j in JUNK),
)


def mutate(rng: random.Random, text: str, note: Note = no_note) -> str:
    for _ in range(rng.randint(1, 3)):
        text = rng.choice(MUTATORS)(rng, text, note)
    return text


def kinds_line(counts: dict[str, int], kinds: tuple[str, ...]) -> str:
    """One line of figures: how many of the mutation kinds were made, the least made."""
    made = sum(counts.get(k, 0) > 0 for k in kinds)
    least = min(kinds, key=lambda k: counts.get(k, 0))
    return (
        f"mutation kinds made: {made} of {len(kinds)}, the least made {least} "
        f"({counts.get(least, 0)} times)"
    )


def scratch_dir() -> str | None:
    """Where the fuzzers that write files make them: ``/dev/shm`` (tmpfs) when it is
    there and writable and ``$TMPDIR`` is not set, else the default temporary directory.
    On the test machines' disk, creating the tree run's files took half its time."""
    shm = "/dev/shm"
    if os.environ.get("TMPDIR") or not os.path.isdir(shm):
        return None
    return shm if os.access(shm, os.W_OK | os.X_OK) else None


def unexercised(counts: dict[str, int], kinds: tuple[str, ...], at_least: int) -> dict[str, int]:
    """The mutation kinds of ``kinds`` made fewer than ``at_least`` times in a run."""
    return {k: counts.get(k, 0) for k in kinds if counts.get(k, 0) < at_least}


# -- the oracle --------------------------------------------------------------------------


def _bad_int(v: object, lo: int = 0, hi: int = U64) -> bool:
    return isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi


def _show(v: object) -> str:
    """A value for a message, even a 5,000-digit one (str() refuses those)."""
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 128:
        return f"<{v.bit_length()}-bit integer>"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_show(x)}" for k, x in v.items()) + "}"
    return repr(v)[:80]


def _cpu_max(v: CpuMax) -> str | None:
    if v.quota_usec is not None and _bad_int(v.quota_usec, 1000, 2**44 - 1):
        return f"quota {_show(v.quota_usec)}"
    return f"period {_show(v.period_usec)}" if _bad_int(v.period_usec, 1000, 10**6) else None


def _psi(v: PressureLine) -> str | None:
    for a in (v.avg10, v.avg60, v.avg300):
        if not (isinstance(a, float) and math.isfinite(a) and 0.0 <= a <= 100.0):
            return f"PSI average {_show(a)}"
    return f"PSI total {_show(v.total_usec)}" if _bad_int(v.total_usec) else None


def _throttle(v: CpuStat | CpuStatV1) -> str | None:
    periods, throttled = v.nr_periods, v.nr_throttled
    if throttled is not None and (periods is None or throttled > periods):
        return f"nr_throttled {_show(throttled)} > nr_periods {_show(periods)}"
    return None


def _ticks(v: ProcStat) -> str | None:
    # steal None: no steal column (unknown, never 0); else part of the total
    steal = v.steal_ticks
    if (steal is not None and steal > v.total_ticks) or v.total_ticks > 8 * U64:
        return f"ticks {_show(v.steal_ticks)}/{_show(v.total_ticks)}"
    return None


_CHECKS: tuple[tuple[type, Callable[[Any], str | None]], ...] = (
    (CpuMax, _cpu_max),
    (PressureLine, _psi),
    (CpuStat, _throttle),
    (CpuStatV1, _throttle),
    (ProcStat, _ticks),
)


def implausible(value: object) -> str | None:
    """Why a parser's result is not something the kernel can have written (None: it
    can). Written from the kernel's ranges, independently of the parsers' code."""
    if value is None:
        return None
    if isinstance(value, int):
        return f"value {_show(value)}" if _bad_int(value) else None
    if isinstance(value, float):
        return None if math.isfinite(value) and value >= 0 else f"value {value}"
    if isinstance(value, dict):
        bad = {k: v for k, v in value.items() if _bad_int(v)}
        return f"values {_show(bad)}" if bad else None
    for kind, check in _CHECKS:
        why = check(value) if isinstance(value, kind) else None
        if why is not None:
            return why
    if not is_dataclass(value):
        return f"unexpected {type(value).__name__}"
    for f in fields(value):
        if isinstance(value, ProcStat) and f.name == "total_ticks":
            continue  # a sum of eight u64 counters (checked above)
        why = implausible(getattr(value, f.name))
        if why is not None:
            return f"{f.name}: {why}"
    return None


_RANGES: dict[str, tuple[int, int]] = {
    "cpu_weight": (p.WEIGHT_MIN, p.WEIGHT_MAX),
    "cpu_shares": (p.SHARES_MIN, p.SHARES_MAX),
    "meminfo_total": (1, U64),
}


@dataclass
class Figures:
    inputs: int = 0
    accepted: int = 0
    rejected: int = 0  # CgroupParseError: the declared error
    escapes: int = 0  # anything else raised
    implausible: int = 0
    slowest_s: float = 0.0
    seconds: float = 0.0
    per_parser: dict[str, list[int]] = field(default_factory=dict)  # [inputs, accepted]
    mutations: dict[str, int] = field(default_factory=dict)  # made, by kind (MUTATION_KINDS)
    examples: list[str] = field(default_factory=list)  # first escapes / implausible values

    def count(self, kind: str) -> None:
        self.mutations[kind] = self.mutations.get(kind, 0) + 1

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["slowest_s"] = round(self.slowest_s, 4)
        d["seconds"] = round(self.seconds, 1)
        return d


def run(inputs: int, seed: int) -> Figures:
    """Fuzz every parser, round robin, ``inputs`` inputs in all."""
    rng = random.Random(seed)
    corpus = seeds()
    names = sorted(PARSERS)
    fig = Figures(per_parser={n: [0, 0] for n in names})
    started = time.perf_counter()
    for i in range(inputs):
        name = names[i % len(names)]
        parser = PARSERS[name][0]
        text = mutate(rng, rng.choice(corpus[name]), fig.count)
        fig.inputs += 1
        fig.per_parser[name][0] += 1
        t = time.perf_counter()
        try:
            value = parser(text, "<fuzz>")
        except CgroupParseError:
            fig.rejected += 1
            continue
        except Exception as e:
            fig.escapes += 1
            if len(fig.examples) < 10:
                fig.examples.append(
                    f"escape {name}: {type(e).__name__}: {e!s:.120} <- {text!r:.200}"
                )
            continue
        finally:
            fig.slowest_s = max(fig.slowest_s, time.perf_counter() - t)
        fig.accepted += 1
        fig.per_parser[name][1] += 1
        why = implausible(value)
        lo_hi = _RANGES.get(name)
        if why is None and lo_hi is not None and _bad_int(value, *lo_hi):
            why = f"value {_show(value)} outside {lo_hi}"
        if why is not None:
            fig.implausible += 1
            if len(fig.examples) < 10:
                fig.examples.append(f"implausible {name}: {why} <- {text!r:.200}")
    fig.seconds = time.perf_counter() - started
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    fig = run(args.inputs, args.seed)
    if args.json:
        print(json.dumps(fig.as_dict()))
    else:
        print(f"parser fuzz: {fig.inputs} inputs over {len(PARSERS)} parsers, seed {args.seed}")
        print(f"  accepted {fig.accepted}, rejected with CgroupParseError {fig.rejected}")
        print(f"  escapes {fig.escapes}, implausible values accepted {fig.implausible}")
        print(f"  slowest input {fig.slowest_s * 1000:.1f} ms, {fig.seconds:.1f} s in all")
        print("  " + kinds_line(fig.mutations, MUTATION_KINDS))
        for line in fig.examples:
            print("  " + line)
    return 1 if fig.escapes or fig.implausible else 0


if __name__ == "__main__":
    sys.exit(main())
