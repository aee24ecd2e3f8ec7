"""A seeded fuzzer for the two files an operator edits: the metadata file and the
thresholds file, at start and as live edits.

Each input is a good file with one to three mutations: a value replaced by one of the
kinds that broke the loaders before (quoted booleans, lists and mappings where a
quantity belongs, ``1e400``, ``"1e999999"``, negative, ``.nan``/``.inf``, thousands of
digits, an alias bomb, 20,000 nested brackets, a stray non-UTF-8 byte, duplicate and
unknown keys, ``windowMinutes: 1000000000``), lines deleted or duplicated, bytes
flipped. For every input:

* **at start** the file's parser (the one ``run`` calls) returns a value with every
  number bounded and every type strict, or raises the declared error with one line
  naming the file; anything else is a *traceback*;
* **as a live edit** of a watched file holding good contents, the watcher keeps the
  last good value when the edit is bad (and counts it), or takes the new value;
* the slowest input is reported (a bomb used to take minutes and gigabytes).

    python -m tests.support.config_fuzz --inputs 2000 --seed 16

prints the figures (exit 1 on any failure); ``tests/fuzz/test_config_fuzz.py`` runs it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from exporter.config_file import ConfigError, WatchedFile
from exporter.findings.thresholds import Thresholds, defaults_text, parse_thresholds
from exporter.metadata_file import parse_metadata_file
from tests.support.parser_fuzz import Note, kinds_line, no_note, scratch_dir, value_key

GOOD_METADATA = """\
cgroups:
  /system.slice/kubelet.service:
    namespace: kube-system
    pod: kubelet
    container: kubelet
    cpu_request: 250m
    cpu_limit: 2
    memory_request: 256Mi
    memory_limit: 1Gi
    opted_out: false
  /system.slice/postgres.service: {cpu_request: 0.5, memory_limit: 4e9, opted_out: true}
"""

BOMB = "[" + ",".join(["*a"] * 9) + "]"
HOSTILE = (
    '"false"', "'true'", "[1]", "{a: 1}", "1e400", '"1e400"', '"1e999999"', "-1", "-0.5",
    ".nan", ".inf", "-.inf", "", "~", "true", "9" * 400, "9" * 5000, "99Ei", "1Pi", "0x10",
    "1_000", "!!binary aGk=", "&a [1]", "*a", BOMB, "[" * 20000, "\udcff", "1000000000",
    "0", "60", "61", "0.0001", "1.5", "'2'", "12345678901234567890123456789012",
)  # fmt: skip


def _value_spots(text: str) -> list[tuple[int, int]]:
    """(start, end) of every scalar value after a ``key:`` in ``text``."""
    spots = []
    pos = 0
    for line in text.split("\n"):
        colon = line.find(": ")
        while colon != -1:
            start = colon + 2
            end = start
            while end < len(line) and line[end] not in ",}":
                end += 1
            spots.append((pos + start, pos + end))
            colon = line.find(": ", end)
        pos += len(line) + 1
    return spots


_OPS = ("hostile value", "line duplicated", "line deleted", "keys renamed", "bytes inserted")
# Every kind of mutation :func:`mutate` makes, as the figures count them: the operators
# (run() counts them per file: "metadata line deleted", ...) and each hostile value (over
# both files: they go through the same YAML loader, config_file.py).
MUTATION_KINDS: tuple[str, ...] = _OPS + tuple(value_key(v) for v in HOSTILE)


def mutate(rng: random.Random, text: str, note: Note = no_note) -> bytes:
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(7)
        if op <= 2:
            spots = _value_spots(text)
            if spots:
                a, b = rng.choice(spots)
                new = rng.choice(HOSTILE)
                note(_OPS[0])
                note(value_key(new))
                text = text[:a] + new + text[b:]
        elif op == 3:
            lines = text.split("\n")
            i = rng.randrange(len(lines))
            lines.insert(i, lines[rng.randrange(len(lines))])  # duplicate keys, odd indents
            text = "\n".join(lines)
            note(_OPS[1])
        elif op == 4:
            lines = text.split("\n")
            del lines[rng.randrange(len(lines))]
            text = "\n".join(lines)
            note(_OPS[2])
        elif op == 5:
            text = text.replace("cgroups:", rng.choice(["cgroup:", "cgroups: []", "- x"]), 1)
            text = text.replace("stallSome", rng.choice(["stall_some", "stallsome"]), 1)
            note(_OPS[3])
        else:
            data = bytearray(text.encode("utf-8", "surrogateescape"))
            for _ in range(rng.randint(1, 4)):
                data.insert(rng.randrange(len(data) + 1), rng.randrange(256))
            note(_OPS[4])
            return bytes(data)
    return text.encode("utf-8", "surrogateescape")


# -- what an accepted file may hold -------------------------------------------------------

_CORES = ("cpu_request_cores", "cpu_limit_cores")
_BYTES = ("memory_request_bytes", "memory_limit_bytes")
_STRINGS = ("namespace", "pod", "container")


def metadata_implausible(value: dict[str, dict[str, Any]]) -> str | None:
    for path, entry in value.items():
        if not isinstance(path, str) or not path.startswith("/"):
            return f"path {path!r:.60}"
        for k, v in entry.items():
            ok = (
                (k in _CORES and isinstance(v, float) and math.isfinite(v) and 0 <= v < 2**63)
                or (k in _BYTES and type(v) is int and 0 <= v <= 2**63)
                or (k in _STRINGS and isinstance(v, str))
                or (k == "opted_out" and isinstance(v, bool))
            )
            if not ok:
                return f"{path}.{k} = {v!r:.60}"
    return None


def thresholds_implausible(t: Thresholds) -> str | None:
    if not (1 <= t.window_minutes <= 60 and 1 <= t.sustain_minutes <= t.window_minutes):
        return f"windowMinutes {t.window_minutes}, sustainMinutes {t.sustain_minutes}"
    for f in fields(t):
        v = getattr(t, f.name)
        number = isinstance(v, float | int) and not isinstance(v, bool)
        if isinstance(v, bool) or (number and not (math.isfinite(v) and v >= 0)):
            return f"{f.name} = {v!r}"
    return None


@dataclass
class Kind:
    name: str
    good: str
    parse: Callable[[bytes, str], Any]
    check: Callable[[Any], str | None]


KINDS = (
    Kind("metadata", GOOD_METADATA, parse_metadata_file, metadata_implausible),
    Kind("thresholds", defaults_text(), parse_thresholds, thresholds_implausible),
)


def file_kinds() -> tuple[str, ...]:
    """The mutation kinds as :class:`Figures` counts them: each operator per file, each
    hostile value over both."""
    ops = tuple(f"{kind.name} {op}" for kind in KINDS for op in _OPS)
    return ops + tuple(k for k in MUTATION_KINDS if k not in _OPS)


def _counter(fig: Figures, file: str) -> Note:
    def note(kind: str) -> None:
        fig.count(kind if kind.startswith("value ") else f"{file} {kind}")

    return note


@dataclass
class Figures:
    inputs: dict[str, int] = field(default_factory=dict)
    accepted: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)
    tracebacks: int = 0
    bad_messages: int = 0  # not one line naming the file
    implausible_accepted: int = 0
    live_edits_lost_last_good: int = 0
    slowest_s: float = 0.0
    seconds: float = 0.0
    mutations: dict[str, int] = field(default_factory=dict)  # made, by file and kind
    examples: list[str] = field(default_factory=list)

    def bad(self, kind: str, detail: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        if len(self.examples) < 10:
            self.examples.append(f"{kind}: {detail}"[:300])

    def count(self, kind: str) -> None:
        self.mutations[kind] = self.mutations.get(kind, 0) + 1

    @property
    def ok(self) -> bool:
        return not (
            self.tracebacks
            or self.bad_messages
            or self.implausible_accepted
            or self.live_edits_lost_last_good
        )


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    st = path.stat()  # a new version even within the filesystem's mtime granularity
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def _one(kind: Kind, data: bytes, path: Path, watched: WatchedFile[Any], fig: Figures) -> None:
    fig.inputs[kind.name] = fig.inputs.get(kind.name, 0) + 1
    where = f"{kind.name} {data[:120]!r}"
    t = time.perf_counter()
    value: Any = None
    try:
        value = kind.parse(data, str(path))
    except ConfigError as e:
        fig.refused[kind.name] = fig.refused.get(kind.name, 0) + 1
        msg = str(e)
        # one line, bounded: the file, the key(s) and value, at most the known keys
        if "\n" in msg or not msg.startswith(str(path)) or len(msg) > 1000:
            fig.bad("bad_messages", f"{where}: {msg[:200]!r}")
    except Exception as e:
        fig.bad("tracebacks", f"{where}: {type(e).__name__}: {e!s:.120}")
        return
    finally:
        fig.slowest_s = max(fig.slowest_s, time.perf_counter() - t)
    if value is not None:
        fig.accepted[kind.name] = fig.accepted.get(kind.name, 0) + 1
        why = kind.check(value)
        if why is not None:
            fig.bad("implausible_accepted", f"{where}: {why}")
    # the same bytes as a live edit of a file that held good contents
    before = watched.value
    failures = watched.status().reload_failures_total
    _write(path, data)
    watched.poll()
    after = watched.status()
    if value is None:
        kept = watched.value is before and after.reload_failures_total == failures + 1
        if not kept or after.last_reload_ok:
            fig.bad("live_edits_lost_last_good", f"{where}: {after}")
        return  # the watched value is still the good contents the next edit replaces
    if watched.value != value:
        fig.bad("live_edits_lost_last_good", f"{where}: the good edit was not taken")
    _write(path, kind.good.encode())  # the next edit starts from the good contents again
    watched.poll()


def run(inputs: int, seed: int) -> Figures:
    rng = random.Random(seed)
    fig = Figures()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="contention-configfuzz-", dir=scratch_dir()) as d:
        for n, kind in enumerate(KINDS):
            path = Path(d) / f"{kind.name}.yaml"
            path.write_text(kind.good)
            watched = WatchedFile(str(path), kind.name, kind.parse)
            note = _counter(fig, kind.name)
            for _ in range(n, inputs, len(KINDS)):
                _one(kind, mutate(rng, kind.good, note), path, watched, fig)
    fig.seconds = time.perf_counter() - started
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    import logging

    logging.disable(logging.WARNING)  # one "not reloaded" line per bad edit, by design
    fig = run(args.inputs, args.seed)
    if args.json:
        d = dict(fig.__dict__)
        d["seconds"], d["slowest_s"] = round(fig.seconds, 1), round(fig.slowest_s, 3)
        print(json.dumps(d))
    else:
        print(f"config fuzz: {sum(fig.inputs.values())} files, seed {args.seed}")
        print(f"  inputs {fig.inputs}, accepted {fig.accepted}, refused {fig.refused}")
        print(f"  tracebacks {fig.tracebacks}, messages not one line {fig.bad_messages}")
        print(f"  implausible accepted {fig.implausible_accepted}")
        print(f"  live edits that lost the last good contents {fig.live_edits_lost_last_good}")
        print(f"  slowest file {fig.slowest_s * 1000:.0f} ms, {fig.seconds:.1f} s in all")
        print("  " + kinds_line(fig.mutations, file_kinds()))
        for line in fig.examples:
            print("  " + line)
    return 0 if fig.ok else 1


if __name__ == "__main__":
    sys.exit(main())
