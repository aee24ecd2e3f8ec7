"""scripts/at-idle.sh, which scripts/test.sh runs its lanes that time nothing under
(docs/testing.md): the command runs SCHED_IDLE, in a session of its own whose autogroup
weighs as nice 19, and its exit status is the command's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AT_IDLE = ROOT / "scripts" / "at-idle.sh"

PROBE = """
import json, os
try:
    with open("/proc/self/autogroup") as f:
        autogroup = f.read().strip()
except OSError:
    autogroup = None
print(json.dumps({
    "policy": os.sched_getscheduler(0),
    "session_leader": os.getsid(0) == os.getpid(),
    "session": os.getsid(0),
    "autogroup": autogroup,
}))
"""


def _autogroup_enabled() -> bool:
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return False


def test_the_command_runs_sched_idle_in_a_nice_19_autogroup_of_its_own() -> None:
    out = subprocess.run(
        ["bash", str(AT_IDLE), sys.executable, "-c", PROBE],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    seen = json.loads(out.stdout)
    assert seen["policy"] == os.SCHED_IDLE, seen
    assert seen["session_leader"] and seen["session"] != os.getsid(0), seen
    if _autogroup_enabled():
        assert seen["autogroup"] is not None and seen["autogroup"].endswith("nice 19"), seen


def test_the_exit_status_is_the_commands() -> None:
    for code in (0, 1, 7):
        rc = subprocess.run(
            ["bash", str(AT_IDLE), sys.executable, "-c", f"raise SystemExit({code})"], timeout=60
        ).returncode
        assert rc == code


def test_without_a_command_it_says_how_to_use_it() -> None:
    out = subprocess.run(["bash", str(AT_IDLE)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "usage:" in out.stderr
