"""The whole-tree fuzz run (tests/support/tree_fuzz.py): 150 mutated fixture trees,
three passes each, through the real agent (the full run, 600 trees, is in
bench/README.md). Run as a separate process without CAP_DAC_OVERRIDE when the suite
runs as root, so unreadable files and directories are real (permission bits do not
bind root otherwise)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.sampler.loop import Sampler
from exporter.sampler.snapshot import LostCgroup
from tests.support import parser_fuzz, tree_fuzz

pytestmark = pytest.mark.fuzz

ROOT = Path(__file__).resolve().parents[2]
# About 10 s on tmpfs; every mutation kind is made at least 6 times at this size (the
# 1,100-deep chain, one tree in 25, the least), and every kind of loss is counted.
TREES = 150
SEED = 16
MIN_MADE = 3  # each kind of mutation, at least this many times
ZEROS = (
    "startups_refused",
    "aborted_passes",
    "failed_scrapes",
    "hangs",
    "uncounted_lost",
    "miscounted_passes",
    "phantoms",
    "implausible_exported",
)


@pytest.mark.timeout(1800)
def test_mutated_trees_lose_nothing_uncounted() -> None:
    argv = [sys.executable, "-m", "tests.support.tree_fuzz", "--trees", str(TREES)]
    cmd = tree_fuzz.unprivileged_command([*argv, "--seed", str(SEED), "--json"])
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1700, check=False)
    assert r.stdout.strip(), r.stderr[-3000:]
    fig = json.loads(r.stdout.strip().splitlines()[-1])
    assert fig["trees"] == TREES
    assert fig["passes"] == 3 * TREES
    assert fig["denials_tested"], "unreadable files and directories were not tested"
    assert {k: fig[k] for k in ZEROS} == dict.fromkeys(ZEROS, 0), fig["examples"]
    assert r.returncode == 0
    # the mutations reached every kind of loss
    for reason in ("malformed", "unreadable", "vanished", "implausible"):
        assert fig["lost_counted"].get(reason, 0) > 0, reason
    assert parser_fuzz.unexercised(fig["mutations"], tree_fuzz.MUTATION_KINDS, MIN_MADE) == {}


def test_the_harness_sees_an_uncounted_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not vacuous: a sampler that drops a cgroup without counting it is caught."""

    def forget(self: Sampler, lost: list[LostCgroup], path: str, reason: str, d: str) -> None:
        pass

    monkeypatch.setattr(Sampler, "_lose", forget)
    fig = tree_fuzz.run(trees=10, seed=SEED)
    assert fig.uncounted_lost > 0
