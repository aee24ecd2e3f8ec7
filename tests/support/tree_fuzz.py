"""Whole-tree fuzzing: the real agent (sampler, window, findings, exposition) over
mutated copies of the fixture trees, three passes each.

Each tree is a fixture node with a few mutations of the kinds that cost passes,
scrapes, startups or cgroups before: FIFOs, sockets-like devices (a link to
``/dev/zero``), files replaced by directories, files over 1 MiB, numbers that are
negative, above 2**64 or thousands of digits long, ``nan`` PSI averages, unreadable
files and directories (real permissions: run without ``CAP_DAC_OVERRIDE``, see
:func:`unprivileged_command`), cgroups nested 1,200 deep, cgroups that vanish between
passes or in the middle of one, transient counter regressions, new cgroups.

What is checked for every pass, against an independent walk of the tree (made with
full permissions before the pass):

* **aborted pass**: the pass raised (``try_pass`` returned None), or the agent could
  not start on the tree, or rendering ``/metrics`` failed or gave text Prometheus
  cannot parse;
* **uncounted lost cgroup**: a tracked cgroup of the tree that was neither sampled nor
  in the pass's ``lost`` list (nor below a directory reported as unreadable), or
  ``contention_sampler_skipped_cgroups_total`` not moving by exactly the losses, or
  ``contention_collector_success{collector="cgroups"}`` saying 1 despite them;
* **hang**: a pass or a render that did not end within :data:`HANG_S` seconds;
* **implausible exported value**: a sample in ``/metrics`` that is negative, not finite
  or above 2**64, or a window minute with more CPU than the node has or a stall above
  the minute, or a node minute with more steal than the node's CPUs or a stall above
  the minute (transient regressions include ``/proc/stat``'s steal column).

    python -m tests.support.tree_fuzz --trees 500 --seed 16

prints the figures; ``tests/fuzz/test_tree_fuzz.py`` runs it (without
``CAP_DAC_OVERRIDE`` when it is root) and asserts zeros.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
from prometheus_client.parser import text_string_to_metric_families

from exporter.agent import Agent, AgentConfig
from exporter.cgroupfs.discovery import TRACKED_KINDS, CgroupKind, classify
from exporter.findings import load_thresholds
from exporter.probe import ProbeConfig
from tests.support.parser_fuzz import kinds_line, scratch_dir, value_key

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BASES = ("v2-systemd", "v2-cgroupfs", "hybrid", "no-quota", "malformed")
HANG_S = 20.0
PASS_EVERY_S = 5.0
_NUMBER = re.compile(rb"\d+")
BIG = (b"-100000000", b"-1", str(2**64).encode(), b"9" * 400, b"9" * 4300, b"nan", b"1e400")


class _Hang(Exception):
    pass


@contextlib.contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """Raise :class:`_Hang` in this thread if the block takes longer than ``seconds``
    (a blocking ``open()`` of a FIFO is interrupted by the signal too)."""

    def fire(signum: int, frame: FrameType | None) -> None:
        raise _Hang()

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def can_deny() -> bool:
    """Whether permission bits bind this process (not root with CAP_DAC_OVERRIDE)."""
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0)
        try:
            os.listdir(d)
        except PermissionError:
            return True
        finally:
            os.chmod(d, 0o700)
    return False


def unprivileged_command(argv: list[str]) -> list[str]:
    """``argv`` run so that permission bits bind it: as root, without
    CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (util-linux ``setpriv``)."""
    if os.geteuid() != 0:
        return argv
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}", *argv]


# -- the tree ---------------------------------------------------------------------------


def _walk(root: Path) -> tuple[list[Path], list[Path], list[str]]:
    """(directories outside the deep chains, other entries, every directory) under
    ``root``, parents first, without recursion (trees here are deeper than Python's
    recursion limit; so is os.walk's)."""
    dirs: list[str] = []
    others: list[str] = []
    stack = [str(root)]
    while stack:
        d = stack.pop()
        dirs.append(d)
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            (stack if e.is_dir(follow_symlinks=False) else others).append(e.path)
    return [Path(d) for d in dirs if "/deep/" not in d], [Path(f) for f in others], dirs


def _rmtree(root: Path) -> None:
    """shutil.rmtree without recursion."""
    _, others, dirs = _walk(root)
    for f in others:
        with contextlib.suppress(OSError):
            f.unlink()
    for d in reversed(dirs):
        with contextlib.suppress(OSError):
            os.rmdir(d)


class Tree:
    """A mutable copy of a fixture node."""

    def __init__(self, base: str, where: Path) -> None:
        self.root = where
        shutil.copytree(FIXTURES / base, where, symlinks=True)
        self.sys = where / "sys"
        self.proc = where / "proc"
        cg = self.sys / "fs/cgroup"
        self.v2 = cg / "unified" if (cg / "unified/cgroup.controllers").exists() else cg
        self.denied: list[Path] = []  # chmod 000 by a mutation
        self.gone: list[str] = []  # cgroup paths removed by the harness during a pass
        self.restore: list[tuple[Path, bytes]] = []  # transient edits undone next pass
        self.note: Callable[[str], object] = lambda kind: None  # a value a mutation used

    def files(self) -> list[Path]:
        _, others, _ = _walk(self.root)
        return sorted(f for f in others if f.is_file() and not f.is_symlink())

    def cgroup_dirs(self) -> list[Path]:
        dirs, _, _ = _walk(self.v2)
        return sorted(d for d in dirs if d != self.v2 and d.name != "deep")

    def rel(self, d: Path) -> str:
        return "/" + str(d.relative_to(self.v2))

    @contextlib.contextmanager
    def open_up(self) -> Iterator[None]:
        """Undo the denials for a moment (the oracle's walk, the cleanup)."""
        # Parents first: a denied directory hides the entries below it.
        order = sorted(self.denied, key=lambda p: len(p.parts))
        for d in order:
            with contextlib.suppress(OSError):
                os.chmod(d, 0o755 if d.is_dir() else 0o644)
        try:
            yield
        finally:
            for d in reversed(order):
                with contextlib.suppress(OSError):
                    os.chmod(d, 0)

    def expected(self) -> set[str]:
        """Tracked cgroups, by an independent walk (os.scandir, full permissions)."""
        out: set[str] = set()
        top = str(self.v2)
        with self.open_up():
            stack = [top]
            while stack:
                d = stack.pop()
                try:
                    subs = [e.path for e in os.scandir(d) if e.is_dir(follow_symlinks=False)]
                except OSError:
                    continue
                for sub in subs:
                    path = sub[len(top) :]
                    kind, k8s = classify(path)
                    tracked = kind in TRACKED_KINDS
                    pod_level = k8s is not None and k8s.container_id is None
                    if kind is CgroupKind.OTHER and not pod_level:
                        tracked = not any(e.is_dir(follow_symlinks=False) for e in os.scandir(sub))
                    if tracked:
                        out.add(path)
                    else:
                        stack.append(sub)
        return out

    def cleanup(self) -> None:
        # open_up() would deny them again on exit: lift the denials for good
        for d in sorted(self.denied, key=lambda p: len(p.parts)):
            with contextlib.suppress(OSError):
                os.chmod(d, 0o755 if d.is_dir() else 0o644)
        self.denied = []
        _rmtree(self.root)


# -- mutations --------------------------------------------------------------------------


def _has_entries(d: Path) -> bool:
    try:
        return any(os.scandir(d))
    except OSError:
        return False


def _mutate(
    m: Callable[[random.Random, Tree], str], rng: random.Random, t: Tree, fig: Figures
) -> str:
    """Apply one mutation with the denials lifted; the harness itself never fails."""
    fig.count(m.__name__)
    with t.open_up():
        try:
            return m(rng, t)
        except OSError as e:
            return f"{m.__name__} not applied: {e}"


def _pick(rng: random.Random, items: list[Path]) -> Path | None:
    return rng.choice(items) if items else None


def m_fifo(rng: random.Random, t: Tree) -> str:
    f = _pick(rng, t.files())
    if f is None:
        return "fifo: nothing"
    f.unlink()
    os.mkfifo(f)
    return f"fifo {f.relative_to(t.root)}"


def m_device(rng: random.Random, t: Tree) -> str:
    f = _pick(rng, t.files())
    if f is None:
        return "device: nothing"
    f.unlink()
    f.symlink_to("/dev/zero")
    return f"device {f.relative_to(t.root)}"


def m_dir_for_file(rng: random.Random, t: Tree) -> str:
    f = _pick(rng, t.files())
    if f is None:
        return "dir: nothing"
    f.unlink()
    f.mkdir()
    return f"directory {f.relative_to(t.root)}"


def m_number(rng: random.Random, t: Tree) -> str:
    f = _pick(rng, t.files())
    if f is None:
        return "number: nothing"
    data = f.read_bytes()
    spots = list(_NUMBER.finditer(data))
    if not spots:
        return "number: none"
    m = rng.choice(spots)
    big = rng.choice(BIG)
    t.note(value_key(big))
    f.write_bytes(data[: m.start()] + big + data[m.end() :])
    return f"number {f.relative_to(t.root)}"


def m_huge_file(rng: random.Random, t: Tree) -> str:
    f = _pick(rng, t.files())
    if f is None:
        return "huge: nothing"
    f.write_bytes(f.read_bytes() + b"x" * (1 << 20))
    return f"huge {f.relative_to(t.root)}"


def m_bytes(rng: random.Random, t: Tree) -> str:
    f = _pick(rng, t.files())
    if f is None:
        return "bytes: nothing"
    data = bytearray(f.read_bytes())
    for _ in range(rng.randint(1, 8)):
        pos = rng.randrange(len(data) + 1)
        data[pos:pos] = bytes([rng.randrange(256)])
    f.write_bytes(bytes(data))
    return f"bytes {f.relative_to(t.root)}"


def m_delete_file(rng: random.Random, t: Tree) -> str:
    f = _pick(rng, t.files())
    if f is None:
        return "delete: nothing"
    f.unlink()
    return f"deleted {f.relative_to(t.root)}"


def m_deny_file(rng: random.Random, t: Tree) -> str:
    f = _pick(rng, [x for x in t.files() if t.v2 in x.parents])
    if f is None:
        return "deny file: nothing"
    os.chmod(f, 0)
    t.denied.append(f)
    return f"unreadable {f.relative_to(t.root)}"


def m_deny_dir(rng: random.Random, t: Tree) -> str:
    d = _pick(rng, t.cgroup_dirs())
    if d is None:
        return "deny dir: nothing"
    os.chmod(d, 0)
    t.denied.append(d)
    return f"unlistable {d.relative_to(t.root)}"


def m_deep(rng: random.Random, t: Tree) -> str:
    d = _pick(rng, [x for x in t.cgroup_dirs() if x.name.endswith(".slice")]) or t.v2
    path = str(d / "deep")
    os.mkdir(path)
    for _ in range(1100):  # deeper than Python's recursion limit (1000)
        path += "/d"
        os.mkdir(path)
    return f"deep {d.relative_to(t.root)}"


def m_new_cgroup(rng: random.Random, t: Tree) -> str:
    d = _pick(rng, [x for x in t.cgroup_dirs() if _has_entries(x)])
    if d is None:
        return "new: nothing"
    new = d.with_name(f"fuzz-{rng.randrange(10**6)}.service")
    with contextlib.suppress(OSError, shutil.Error):
        # not the 1,100-deep chain of m_deep: copytree recurses
        shutil.copytree(d, new, symlinks=True, ignore=shutil.ignore_patterns("deep"))
    return f"new {new.relative_to(t.root)}"


def m_vanish(rng: random.Random, t: Tree) -> str:
    d = _pick(rng, t.cgroup_dirs())
    if d is None:
        return "vanish: nothing"
    with t.open_up():
        _rmtree(d)
    t.denied = [x for x in t.denied if d not in x.parents and x != d]
    return f"vanished {d.relative_to(t.root)}"


def m_regress(rng: random.Random, t: Tree) -> str:
    """A transient bad read: a smaller (or much larger) counter, undone next pass. In
    ``/proc/stat`` it is the node's steal column (the 8th CPU time of the ``cpu`` line)."""
    stat = t.proc / "stat"
    names = ("cpu.stat", "cpu.pressure")
    f = _pick(rng, [x for x in t.files() if x.name in names or x == stat])
    if f is None:
        return "regress: nothing"
    data = f.read_bytes()
    spots = list(_NUMBER.finditer(data))
    if f == stat:
        first = data.split(b"\n", 1)[0]
        if not first.startswith(b"cpu ") or len(_NUMBER.findall(first)) < 8:
            return "regress: no steal column"
        spots = spots[7:8]
    t.restore.append((f, data))
    m = rng.choice(spots)
    value = int(m.group())
    new = str(value // 7 if rng.random() < 0.5 else value * 1000 + 10**12).encode()
    f.write_bytes(data[: m.start()] + new + data[m.end() :])
    return f"regress {f.relative_to(t.root)}"


STATIC: tuple[Callable[[random.Random, Tree], str], ...] = (
    m_fifo, m_device, m_dir_for_file, m_number, m_number, m_huge_file, m_bytes,
    m_delete_file, m_deny_file, m_deny_dir, m_deny_dir, m_new_cgroup,
)  # fmt: skip
DEEP_EVERY = 25  # one tree in 25 also gets a 1,100-deep chain (costly to walk)
BETWEEN: tuple[Callable[[random.Random, Tree], str], ...] = (
    m_vanish, m_vanish, m_regress, m_regress, m_new_cgroup, m_fifo, m_number, m_deny_dir,
)  # fmt: skip
MID_PASS_VANISH = "mid-pass vanish"
# Every kind of mutation a run makes, as the figures count them: each mutation (by its
# function's name), a cgroup removed in the middle of a pass, each number m_number uses.
MUTATION_KINDS: tuple[str, ...] = (
    *sorted({m.__name__ for m in (*STATIC, *BETWEEN, m_deep)}),
    MID_PASS_VANISH,
    *(value_key(v) for v in BIG),
)


# -- the run ----------------------------------------------------------------------------


@dataclass
class Figures:
    trees: int = 0
    passes: int = 0
    startups_refused: int = 0
    aborted_passes: int = 0
    failed_scrapes: int = 0
    hangs: int = 0
    uncounted_lost: int = 0
    miscounted_passes: int = 0  # skip counters or collector success disagree with losses
    phantoms: int = 0  # sampled but not a tracked cgroup of the tree
    implausible_exported: int = 0
    lost_counted: dict[str, int] = field(default_factory=dict)
    mutations: dict[str, int] = field(default_factory=dict)
    denials_tested: bool = False
    seconds: float = 0.0
    examples: list[str] = field(default_factory=list)

    def bad(self, kind: str, detail: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        if len(self.examples) < 12:
            self.examples.append(f"{kind}: {detail}"[:400])

    def count(self, kind: str) -> None:
        self.mutations[kind] = self.mutations.get(kind, 0) + 1

    @property
    def ok(self) -> bool:
        return not (
            self.startups_refused
            or self.aborted_passes
            or self.failed_scrapes
            or self.hangs
            or self.uncounted_lost
            or self.miscounted_passes
            or self.phantoms
            or self.implausible_exported
        )


def _below(path: str, top: str) -> bool:
    return top == "/" or path.startswith(top + "/")


def _check_exposition(text: str, om: bool, fig: Figures, where: str) -> None:
    parse = om_parse if om else text_string_to_metric_families
    for fam in parse(text):
        for s in fam.samples:
            v = float(s.value)
            if not math.isfinite(v) or v < 0 or v > 2.0**64:
                fig.bad("implausible_exported", f"{where}: {s.name}{s.labels} = {v}")


def _check_window(agent: Agent, fig: Figures, where: str) -> None:
    w = agent.sampler.window()
    cores = w.node_cpu_cores
    for cw in w.containers.values():
        for f in [*cw.folds, *agent.sampler.folds.current().values()]:
            span = f.seconds * 1.5 + 2.0
            if f.cpu_usage_s > cores * span:
                fig.bad("implausible_exported", f"{where}: {f.cpu_usage_s} s CPU in {f.seconds}")
            for stall in (f.cpu_some_s, f.cpu_full_s, f.mem_some_s, f.mem_full_s):
                if stall is not None and stall > span:
                    fig.bad("implausible_exported", f"{where}: stall {stall} in {f.seconds}")
    current = agent.sampler.folds._node_current
    for n in [*w.node, *([current] if current is not None else [])]:
        span = n.seconds * 1.5 + 2.0
        if n.steal_s is not None and not 0 <= n.steal_s <= cores * span:
            fig.bad("implausible_exported", f"{where}: node steal {n.steal_s} s in {n.seconds}")
        for stall in (n.cpu_some_s, n.cpu_full_s, n.mem_some_s, n.mem_full_s, n.io_some_s):
            if stall is not None and not 0 <= stall <= span:
                fig.bad("implausible_exported", f"{where}: node stall {stall} in {n.seconds}")


def _one_pass(agent: Agent, tree: Tree, now: float, fig: Figures, where: str) -> None:
    expected = tree.expected()
    before = dict(agent.sampler._skipped)
    try:
        with watchdog(HANG_S):
            snap = agent.sampler.try_pass(now)
    except _Hang:
        fig.bad("hangs", f"{where}: pass")
        return
    fig.passes += 1
    if snap is None:
        fig.bad("aborted_passes", f"{where}: {agent.sampler.last_failure}")
        return
    try:
        with watchdog(HANG_S):
            pub = agent.publish(snap)
            for om in (False, True):
                body = pub.metrics(om, False).body.decode()
                _check_exposition(body, om, fig, where)
    except _Hang:
        fig.bad("hangs", f"{where}: render")
        return
    except Exception as e:
        fig.bad("failed_scrapes", f"{where}: {type(e).__name__}: {e}")
        return
    sampled = {c.identity.cgroup for c in snap.containers}
    lost = {x.path: x for x in snap.lost}
    unlisted = [x.path for x in snap.lost if x.reason == "unreadable"]
    for x in snap.lost:
        fig.lost_counted[x.reason] = fig.lost_counted.get(x.reason, 0) + 1
    for want in sorted(expected):
        if want in sampled or want in lost or any(_below(want, u) for u in unlisted):
            continue
        if any(_below(want, g) or want == g for g in tree.gone):
            continue  # removed by the harness during this pass, before it was listed
        fig.bad("uncounted_lost", f"{where}: {want}")
    for s in sampled - expected:
        fig.bad("phantoms", f"{where}: {s}")
    moved = sum(snap.skipped_total[r] - before.get(r, 0) for r in snap.skipped_total)
    ok = snap.collectors["cgroups"].success
    failing = any(x.reason != "vanished" for x in snap.lost)
    if moved != len(snap.lost) or ok == failing:
        fig.bad("miscounted_passes", f"{where}: moved {moved}, lost {len(snap.lost)}, ok {ok}")
    _check_window(agent, fig, where)


def _mid_pass_vanish(rng: random.Random, agent: Agent, tree: Tree) -> None:
    """Remove one cgroup directory right after the walk has listed it."""
    dirs = tree.cgroup_dirs()
    if not dirs:
        return
    victim = tree.rel(rng.choice(dirs))
    real = agent.sampler._classify

    def classify_then_remove(path: str) -> Any:
        hit = real(path)
        if path == victim:
            with tree.open_up():
                _rmtree(tree.v2 / path.lstrip("/"))
            tree.gone.append(path)
        return hit

    agent.sampler._classify = classify_then_remove  # type: ignore[method-assign]


def fuzz_tree(n: int, rng: random.Random, workdir: Path, passes: int, fig: Figures) -> None:
    base = BASES[n % len(BASES)]
    tree = Tree(base, workdir / f"tree-{n}")
    tree.note = fig.count
    where = f"tree {n} ({base})"
    static = [m for m in STATIC if fig.denials_tested or m not in (m_deny_dir, m_deny_file)]
    between = [m for m in BETWEEN if fig.denials_tested or m is not m_deny_dir]
    try:
        chosen = [rng.choice(static) for _ in range(rng.randint(1, 4))]
        if n % DEEP_EVERY == DEEP_EVERY - 1:
            chosen.append(m_deep)
        for m in chosen:
            where += f"; {_mutate(m, rng, tree, fig)}"
        cfg = AgentConfig(
            sysfs=str(tree.sys),
            procfs=str(tree.proc),
            probe=ProbeConfig(enabled=False),
            render="scrape",
            process_metrics=False,
        )
        try:
            with watchdog(HANG_S):
                agent = Agent(cfg, THRESHOLDS)
        except _Hang:
            fig.bad("hangs", f"{where}: start")
            return
        except Exception as e:
            fig.bad("startups_refused", f"{where}: {type(e).__name__}: {e}")
            return
        try:
            now = 1_700_000_000.0
            for i in range(passes):
                if i:
                    for f, data in tree.restore:
                        with contextlib.suppress(OSError):
                            f.write_bytes(data)
                    tree.restore = []
                    m = rng.choice(between)
                    where += f"; pass {i}: {_mutate(m, rng, tree, fig)}"
                tree.gone = []
                agent.sampler._classify = agent.sampler.__class__._classify.__get__(agent.sampler)  # type: ignore[method-assign]
                if rng.random() < 0.3:
                    _mid_pass_vanish(rng, agent, tree)
                    fig.count(MID_PASS_VANISH)
                    where += "; mid-pass vanish"
                now += PASS_EVERY_S
                _one_pass(agent, tree, now, fig, where)
        finally:
            agent.close()
    finally:
        fig.trees += 1
        tree.cleanup()


THRESHOLDS = load_thresholds()


def run(trees: int, seed: int, passes: int = 3) -> Figures:
    rng = random.Random(seed)
    fig = Figures(denials_tested=can_deny())
    started = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="contention-treefuzz-", dir=scratch_dir()))
    os.chmod(workdir, 0o755)
    try:
        for n in range(trees):
            fuzz_tree(n, rng, workdir, passes, fig)
    finally:
        _rmtree(workdir)
    fig.seconds = time.perf_counter() - started
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", type=int, default=500)
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    import logging

    logging.disable(logging.WARNING)  # thousands of "skipping cgroup" lines, by design
    fig = run(args.trees, args.seed, args.passes)
    d = dict(fig.__dict__)
    d["seconds"] = round(fig.seconds, 1)
    if args.json:
        print(json.dumps(d))
    else:
        print(f"tree fuzz: {fig.trees} mutated trees x {args.passes} passes, seed {args.seed}")
        for k in (
            "passes", "startups_refused", "aborted_passes", "failed_scrapes", "hangs",
            "uncounted_lost", "miscounted_passes", "phantoms", "implausible_exported",
        ):  # fmt: skip
            print(f"  {k:22} {d[k]}")
        print(f"  lost cgroups, counted  {fig.lost_counted}")
        print(f"  unreadable files/dirs  {'tested' if fig.denials_tested else 'NOT tested (root)'}")
        print(f"  mutations              {fig.mutations}")
        print(f"  {kinds_line(fig.mutations, MUTATION_KINDS)}")
        print(f"  {fig.seconds:.1f} s")
        for line in fig.examples:
            print("  " + line)
    return 0 if fig.ok else 1


if __name__ == "__main__":
    sys.exit(main())
