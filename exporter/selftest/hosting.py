"""Whether this node can host the self-test, and the exit code that says why not.

Each reason a node cannot host it has its own exit code (docs/troubleshooting.md lists
them), so a fleet's runs can be counted by cause without parsing messages.
"""

from __future__ import annotations

import errno
import os

from ..cgroupfs.mode import CgroupMode, NodeLayout

EXIT_PASS = 0
EXIT_FAIL = 1  # it ran; a result was not what it should be
EXIT_USAGE = 2  # bad arguments (argparse's own code)
EXIT_NO_PERMISSION = 3  # may not create cgroups (not root, no CAP_SYS_ADMIN, an LSM)
EXIT_CGROUP_V1 = 4  # no cgroup2 hierarchy: cgroup v1 only
EXIT_READ_ONLY = 5  # the cgroup filesystem is mounted read-only here
EXIT_UNSUPPORTED = 6  # something else the self-test needs is missing (PSI)
EXIT_EXPORTER = 7  # --selftest.url: the exporter did not answer or cannot run it
EXIT_INTERRUPTED = 130  # stopped by SIGINT/SIGTERM (cleaned up first)


class CannotHost(RuntimeError):
    """This node (or this process's privileges) cannot host the self-test."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def check_layout(layout: NodeLayout) -> None:
    """Raise :class:`CannotHost` for a layout the self-test cannot use."""
    if layout.mode is CgroupMode.NONE:
        raise CannotHost(EXIT_CGROUP_V1, f"no cgroup filesystem found: {layout.reason}")
    if layout.mode is CgroupMode.V1 or layout.v2_root is None:
        raise CannotHost(
            EXIT_CGROUP_V1,
            "this node has cgroup v1 only (no cgroup2 hierarchy): the exporter names "
            "containers and reads PSI from cgroup2, so there is nothing to test here",
        )
    if not layout.psi:
        raise CannotHost(EXIT_UNSUPPORTED, f"no pressure stall information: {layout.psi_reason}")


def check_mkdir_error(e: OSError, where: str) -> None:
    """Raise the :class:`CannotHost` an error from making the self-test's cgroups means
    (nothing: the caller re-raises the error as it is)."""
    if e.errno == errno.EROFS:
        raise CannotHost(
            EXIT_READ_ONLY,
            f"the cgroup filesystem at {os.path.dirname(where)} is mounted read-only in "
            "this container: the self-test needs it writable to make its own cgroups "
            "(the chart's selftest.enabled mounts it so; docs/troubleshooting.md)",
        ) from e
    if e.errno in (errno.EACCES, errno.EPERM):
        who = "root" if os.geteuid() == 0 else f"uid {os.geteuid()}"
        raise CannotHost(
            EXIT_NO_PERMISSION,
            f"no permission to create a cgroup in {os.path.dirname(where)} (running as "
            f"{who}: {e.strerror}); the self-test needs root, or CAP_SYS_ADMIN and write "
            "access to the cgroup filesystem",
        ) from e
