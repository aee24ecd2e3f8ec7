"""A seeded byte-level fuzzer for the per-cgroup path: the reader and the sampler's
per-cgroup boundary (``Sampler._read_one``: read, parse, entitlements, fold).

Each input mutates one file of one tracked cgroup of a fixture node at the byte level
(bits flipped, bytes inserted or deleted, the file cut short, a number replaced by
one the kernel cannot write), samples that cgroup, then restores the file and samples
it again, so the fold sees the bad read between two good ones. Counted:

* **escape**: something other than the declared outcomes (a sample, or a loss counted
  as ``malformed``/``implausible``/``unreadable``/``vanished``) came out: an exception
  past ``_read_one``, or a loss that only its last-resort ``except Exception`` caught
  (reason ``error``, "unexpected ...": a bug that would have aborted the pass before);
* **implausible**: a sample with a value the kernel cannot write (the independent
  check of :mod:`tests.support.parser_fuzz`), or a minute fold with more CPU than the
  node has or a stall longer than the minute.

    python -m tests.support.reader_fuzz --inputs 40000 --seed 16

prints the figures (exit 1 on any escape or implausible value);
``tests/fuzz/test_reader_fuzz.py`` runs a shorter campaign in the suite.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from exporter.agent import Agent, AgentConfig
from exporter.cgroupfs.discovery import CgroupRef, walk
from exporter.cgroupfs.model import CgroupReading
from exporter.findings import load_thresholds
from exporter.probe import ProbeConfig
from exporter.sampler.loop import Sampler
from exporter.sampler.snapshot import ContainerSample, LostCgroup
from tests.support.parser_fuzz import (
    SPECIAL,
    Note,
    implausible,
    kinds_line,
    no_note,
    scratch_dir,
    value_key,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BASES = ("v2-systemd", "v2-cgroupfs", "hybrid", "no-quota")
STEP_S = 5.0


_OPS = (
    "bit flipped",
    "bytes inserted",
    "bytes deleted",
    "cut short",
    "number replaced",
    "bytes repeated",
)
# Every kind of mutation :func:`mutate_bytes` makes, as the figures count them: the
# operators and each special number (from the parser fuzzer's list).
MUTATION_KINDS: tuple[str, ...] = _OPS + tuple(value_key(v) for v in SPECIAL)


def mutate_bytes(rng: random.Random, data: bytes, note: Note = no_note) -> bytes:
    """One to four byte-level mutations."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        pos = rng.randrange(len(buf) + 1)
        if op == 0 and buf:
            buf[min(pos, len(buf) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1:
            buf[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 2:
            del buf[pos : pos + rng.randint(1, 16)]
        elif op == 3:
            del buf[pos:]
        elif op == 4:
            digits = [i for i, b in enumerate(buf) if 48 <= b <= 57]
            at = rng.choice(digits) if digits else pos
            end = at
            while end < len(buf) and 48 <= buf[end] <= 57:
                end += 1
            new = rng.choice(SPECIAL)
            note(value_key(new))
            buf[at:end] = new.encode()
        else:
            op = 5  # an empty file's bit flip repeats nothing instead
            buf[pos:pos] = bytes(buf[pos : pos + rng.randint(1, 64)])
        note(_OPS[op])
    return bytes(buf)


@dataclass
class Figures:
    inputs: int = 0
    sampled: int = 0
    lost: dict[str, int] = field(default_factory=dict)
    escapes: int = 0
    implausible: int = 0
    seconds: float = 0.0
    mutations: dict[str, int] = field(default_factory=dict)  # made, by kind (MUTATION_KINDS)
    examples: list[str] = field(default_factory=list)

    def bad(self, kind: str, detail: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        if len(self.examples) < 10:
            self.examples.append(f"{kind}: {detail}"[:300])

    def count(self, kind: str) -> None:
        self.mutations[kind] = self.mutations.get(kind, 0) + 1


def _reading_implausible(r: CgroupReading) -> str | None:
    for f in fields(r):
        if f.name in ("files_read", "missing"):
            continue
        why = implausible(getattr(r, f.name))
        if why is not None:
            return f"{f.name}: {why}"
    return None


class _Node:
    """A copy of a fixture node, its sampler, and each tracked cgroup's files."""

    def __init__(self, base: str, where: Path) -> None:
        shutil.copytree(FIXTURES / base, where, symlinks=True)
        cfg = AgentConfig(
            sysfs=str(where / "sys"),
            procfs=str(where / "proc"),
            probe=ProbeConfig(enabled=False),
            render="scrape",
            process_metrics=False,
        )
        self.agent = Agent(cfg, load_thresholds())
        self.sampler: Sampler = self.agent.sampler
        root = self.sampler.facts.v2_root
        assert root is not None
        refs = [r for r in walk(root, classifier=self.sampler._classify) if r.tracked]
        cg = where / "sys/fs/cgroup"
        every = [f for f in cg.rglob("*") if f.is_file() and not f.is_symlink()]
        self.cgroups: list[tuple[CgroupRef, Any, list[Path]]] = []
        for ref in refs:
            mine = [f for f in every if str(f.parent).endswith(ref.path)]
            if mine:
                self.cgroups.append((ref, self.sampler.resolver.resolve(ref), mine))
        self.now = 1_700_000_000.0

    def sample(self, ref: CgroupRef, ident: Any) -> tuple[ContainerSample | None, list[LostCgroup]]:
        self.now += STEP_S
        lost: list[LostCgroup] = []
        return self.sampler._read_one(ref, ident, self.now, lost), lost


def _check(node: _Node, fig: Figures, where: str, out: ContainerSample | None,
           lost: list[LostCgroup]) -> None:  # fmt: skip
    for x in lost:
        fig.lost[x.reason] = fig.lost.get(x.reason, 0) + 1
        if x.reason == "error":
            fig.bad("escapes", f"{where}: {x.detail}")
    if out is None:
        return
    fig.sampled += 1
    why = _reading_implausible(out.reading)
    if why is not None:
        fig.bad("implausible", f"{where}: {why}")
    cores = node.sampler.cpu_cores
    f = node.sampler.folds.current().get(out.cgroup_id)
    if f is not None:
        span = f.seconds * 1.5 + 2.0
        if f.cpu_usage_s > cores * span:
            fig.bad("implausible", f"{where}: {f.cpu_usage_s} s CPU in {f.seconds} s")
        for stall in (f.cpu_some_s, f.cpu_full_s, f.mem_some_s, f.mem_full_s):
            if stall is not None and stall > span:
                fig.bad("implausible", f"{where}: stall {stall} s in {f.seconds} s")


def run(inputs: int, seed: int) -> Figures:
    rng = random.Random(seed)
    fig = Figures()
    started = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="contention-readerfuzz-", dir=scratch_dir()))
    try:
        nodes = [_Node(b, workdir / b) for b in BASES]
        for i in range(inputs):
            node = nodes[i % len(nodes)]
            ref, ident, files = rng.choice(node.cgroups)
            f = rng.choice(files)
            good = f.read_bytes()
            f.write_bytes(mutate_bytes(rng, good, fig.count))
            where = f"{f.relative_to(workdir)}"
            fig.inputs += 1
            try:
                _check(node, fig, where, *node.sample(ref, ident))
                f.write_bytes(good)
                _check(node, fig, where + " (restored)", *node.sample(ref, ident))
            except Exception as e:  # past the boundary: would abort the pass
                fig.bad("escapes", f"{where}: {type(e).__name__}: {e}")
                f.write_bytes(good)
        for node in nodes:
            node.agent.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    fig.seconds = time.perf_counter() - started
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=40_000)
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    import logging

    logging.disable(logging.WARNING)  # a "skipping cgroup" line per bad read, by design
    fig = run(args.inputs, args.seed)
    if args.json:
        d = dict(fig.__dict__)
        d["seconds"] = round(fig.seconds, 1)
        print(json.dumps(d))
    else:
        print(f"reader fuzz: {fig.inputs} byte-level mutations, seed {args.seed}")
        print(f"  samples {fig.sampled}, losses counted {fig.lost}")
        print(f"  escapes {fig.escapes}, implausible values {fig.implausible}")
        print(f"  {fig.seconds:.1f} s")
        print("  " + kinds_line(fig.mutations, MUTATION_KINDS))
        for line in fig.examples:
            print("  " + line)
    return 1 if fig.escapes or fig.implausible else 0


if __name__ == "__main__":
    sys.exit(main())
