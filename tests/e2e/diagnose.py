"""``contention-exporter diagnose`` on the real kernel, run beside the end-to-end
noisy-neighbour lab (the same lab cgroups, the same metadata file), so the lab's
minute of contention feeds this check too.

diagnose runs the exporter's own passes for a while and prints the findings of the last
one. Over the noisy-neighbour lab (a light victim and a greedy neighbour with no request
on one CPU, docs/labs.md) it must say the probe was loaded and name the neighbour, in
what an operator reads: the probe line, the table and the evidence. (It once closed the
probe before reading the window and said "probe not loaded (no blame)" next to a culprit
named from blame data.) diagnose starts a few seconds before the lab, so that its
passes see the lab's containers when the chain's exporter does, and its duration is
sized to the first minute it can decide on: a finding needs one complete sustain
minute watched from (nearly) its start (``WATCH_GRACE_S``).

Where the probe cannot load here it is skipped, but fails under CI, like every probe
test (tests/support/probe_loaders.py).
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass

from exporter.findings.aggregates import WATCH_GRACE_S
from exporter.findings.thresholds import Thresholds
from labs.exporter_proc import exporter_command
from tests.support.probe_loaders import cannot_load

START_S = 4.0  # diagnose's start-up (imports, probe load): the lab starts this much later
AFTER_S = 4.0  # passes after the decisive minute ends (1 s apart)


def decisive_minute_end(first_seen: float, th: Thresholds) -> float:
    """When the first finding about containers first seen at ``first_seen`` can be
    decided: the end of their first ``sustainMinutes`` that they were watched (nearly)
    from the start of."""
    first = math.ceil((first_seen - WATCH_GRACE_S) / 60.0) * 60.0
    return first + 60.0 * th.sustain_minutes


@dataclass
class DiagnoseRun:
    proc: subprocess.Popen[str]
    duration_s: float
    lab_starts_at: float  # time.time() the lab must start at (wait_for_lab_start)

    @classmethod
    def start(
        cls,
        config: str,
        th: Thresholds,
        *,
        kube_env: Mapping[str, str] | None = None,
        metadata: str | None = None,
    ) -> DiagnoseRun:
        """diagnose with the lab's thresholds ``config``, naming containers as the
        chain's exporter does: in Kubernetes mode with that exporter's environment
        (``kube_env``: its kubeconfig and node name), or from a metadata file."""
        now = time.time()
        lab_start = now + START_S
        duration = decisive_minute_end(lab_start + 1.0, th) + AFTER_S - now
        cmd = [
            *exporter_command(),
            "diagnose",
            "--duration",
            str(math.ceil(duration)),
            "--sampler.interval",
            "1",
            "--config.file",
            config,
            "--quiet",
        ]
        cmd += ["--kubernetes"] if kube_env is not None else []
        cmd += ["--metadata.file", metadata] if metadata is not None else []
        env = dict(os.environ) if kube_env is None else dict(kube_env)
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        return cls(proc, duration, lab_start)

    def wait_for_lab_start(self) -> None:
        time.sleep(max(0.0, self.lab_starts_at - time.time()))

    def finish(self, timeout: float = 90.0) -> tuple[int, str, str]:
        """Wait for it (bounded); its exit status, stdout and stderr."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            out, err = self.proc.communicate()
            err += f"\n(killed: still running {timeout:.0f} s after the lab agreed)"
        return self.proc.returncode, out, err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # our own child, by its Popen handle
            self.proc.wait(timeout=10)


def check_diagnose(
    status: int, out: str, err: str, *, victim: str, culprit: str, culprit_kind: str
) -> str:
    """diagnose's report over the noisy-neighbour lab: the probe loaded (by CO-RE where
    BTF exists), the greedy neighbour (``culprit``, shown as ``[culprit_kind]``) named
    as the victim's culprit with a request
    computed from its measured use, and every CPU finding's evidence saying the probe
    was loaded. Returns the remediation line."""
    assert status == 0, f"diagnose failed ({status}):\n{err[-3000:]}"
    first = out.splitlines()[0]
    off = re.search(r"scheduler probe off: ([a-z-]+): (.*): no blame data", first)
    if off:  # skipped where this machine cannot load it, failed under CI
        cannot_load("auto", off.group(1), off.group(2))
    assert "scheduler probe loaded" in first and "culprits can be named" in first, first
    if os.path.exists("/sys/kernel/btf/vmlinux"):  # the default loader where BTF exists
        assert "scheduler probe loaded by core" in first, first
    assert "no blame" not in out, out
    rows = [line.split() for line in out.splitlines()]
    named = [r for r in rows if r[1:3] == ["noisy-neighbor", victim] and len(r) >= 5]
    assert named and named[0][3:5] == [culprit, f"[{culprit_kind}]"], out
    fix = re.search(rf"fix: Give {re.escape(culprit)} a CPU request of at least (\d+)m", out)
    assert fix and int(fix.group(1)) > 0, out
    assert "probe_loaded: true" in out and "probe_loaded: false" not in out, out
    return fix.group(0)
