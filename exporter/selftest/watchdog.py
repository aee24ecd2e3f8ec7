"""The self-test's watchdog: removes the self-test's cgroups when the self-test dies.

Started (``python -I -m exporter.selftest.watchdog --fd N DIR...``) before any cgroup is
made, in a session of its own, holding the read end of a pipe whose write end only the
self-test holds. When the pipe reads end-of-file, the self-test has finished or died
(SIGKILL included: the kernel closes its descriptors): the watchdog ends whatever is
still in the directories (only the self-test's own load processes, which also die by
``PR_SET_PDEATHSIG``) and removes them. It never touches anything else.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from .cgroups import remove_tree

OURS = "contention-"  # contention-selftest-* (contention-test-selftest-* in the tests)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="contention-selftest-watchdog")
    ap.add_argument("--fd", type=int, required=True)
    ap.add_argument("dirs", nargs="+")
    a = ap.parse_args(argv)
    for d in a.dirs:
        if not os.path.basename(d.rstrip("/")).startswith(OURS):
            ap.error(f"{d}: not a self-test cgroup ({OURS}*)")
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # only the pipe says when to act
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        try:
            if not os.read(a.fd, 64):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    left = [x for d in a.dirs for x in remove_tree(d, timeout=10.0)]
    for x in left:
        sys.stderr.write(f"contention-selftest-watchdog: could not remove {x}\n")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
