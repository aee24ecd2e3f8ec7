"""The VM lane: the ``vm``-marked tests, run by pytest inside a pure cgroup v2 guest.

    python -m tests.vm.lane [--part all|labs|agent] [--memory 1G] [--cpus 2]
                            [--timeout 1200] [-- PYTEST ARGS]

(``scripts/vm-test.sh`` is the same with the project's venv.) Builds the container
image on the host first (``scripts/build-image.sh``, core flavour; the guest has no
network) for the guest's container test, then boots the guest of :mod:`tests.vm.guest`
with a scratch disk, runs ``pytest -m vm tests/vm`` there (plus any pytest arguments
given; ``--part`` runs one of the two halves :data:`PARTS` names, which
``scripts/test.sh`` runs in two guests at once), shows the guest's output live, and
exits with the guest pytest's status.
pytest's "no tests collected" (5) is a failure here. ``--no-image`` skips the build (the
container test then skips, saying so); a build that fails is reported to that test,
which skips with the reason, or fails under CI. ``--image DIR`` uses an image already
built there (``scripts/test.sh`` builds it once for the host's image tests and this
lane), and ``--image-error TEXT`` says why that build failed (the same report). A
directory given to ``--image`` or ``--results`` is never deleted.

``--results DIR`` keeps the guest's results (``junit.xml``, ``output.log``, ...) and
the lane's figures (``lane.json``: set-up, image, boot and guest seconds, status) in
``DIR``, also when the lane is skipped. The guest writes to a directory of its own
outside the trees it shares read-only (the checkout, the venv), which it remounts; a
``DIR`` inside them gets a copy when the guest is done.

Where the VM cannot start (not root, no qemu, no kernel image), a developer's run says
why and exits 0 with the lane skipped; under CI (``CI=true``) it exits 1: the lane must
never stop running silently.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path

from tests.support import host_load
from tests.vm import guest

SELECTION = ["-m", "vm"]
# The guest's tests, whole or in two parts that scripts/test.sh runs in two guests side
# by side: single-threaded TCG emulates a guest on one host CPU, and one guest running
# every test in turn took two thirds of its bound (docs/testing.md, "The VM lane"). The
# labs wait for whole wall-clock minutes; the agent's tests (the probe, the sampler, the
# image) are CPU-bound. Every test file is in exactly one part (tests/unit checks it).
PARTS: dict[str, tuple[str, ...]] = {
    "all": ("tests/vm",),
    "labs": ("tests/vm/test_v2_labs.py",),
    "agent": (
        "tests/vm/test_v2_probe.py",
        "tests/vm/test_v2_sampler.py",
        "tests/vm/test_v2_image.py",
    ),
}
# The parts that run the image's tests (the others need no image).
IMAGE_PARTS = frozenset({"all", "agent"})
EXIT_NO_TESTS = 5
# What the guest's container test needs beyond the lane's own packages.
GUEST_PACKAGES = ("runc",)
IMAGE_FLAVOR = "core"
# containers/common's seccomp profile as Debian ships it (scripts/setup-vm.sh unpacks it).
SECCOMP_PROFILE = guest.CACHE / "containers-common" / "seccomp.json"


def _ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def guest_pytest(results: str, extra: list[str], part: str = "all") -> list[str]:
    """The command the guest runs: this venv's pytest on the VM selection (one part of
    it: :data:`PARTS`). Plugin
    autoload is off (the Kubernetes plugins cost a minute of TCG time to import and the
    selection needs none of them); pytest-timeout is loaded by name."""
    return [
        "env",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1",
        "PYTHONDONTWRITEBYTECODE=1",
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "pytest_timeout",
        "-p",
        "no:cacheprovider",
        "-v",
        "-rA",
        "--durations=20",  # a slow fixture told apart from a slow test
        f"--junitxml={os.path.join(results, 'junit.xml')}",
        *SELECTION,
        *PARTS[part],
        *extra,
    ]


def build_image(out: str) -> dict[str, str]:
    """Build the image as users do (``scripts/build-image.sh``) into ``out``, a directory
    the guest sees. Returns the guest's environment: see :func:`image_env`."""
    try:
        build = subprocess.run(
            ["bash", "scripts/build-image.sh", "--flavor", IMAGE_FLAVOR, "--out", out],
            capture_output=True,
            text=True,
            timeout=900,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"CONTENTION_VM_IMAGE_ERROR": f"scripts/build-image.sh: {e}"}
    if build.returncode != 0:
        tail = build.stderr.strip().splitlines()[-3:]
        return {"CONTENTION_VM_IMAGE_ERROR": "scripts/build-image.sh failed: " + " | ".join(tail)}
    return image_env(out)


def image_env(out: str) -> dict[str, str]:
    """The guest's view of an image built into ``out``: ``CONTENTION_VM_IMAGE`` (``out``,
    holding ``rootfs-core.tar`` and now the OCI runtime config umoci derives from the
    image's config, ``config.json``) or ``CONTENTION_VM_IMAGE_ERROR`` (why not)."""
    rootfs = os.path.join(out, f"rootfs-{IMAGE_FLAVOR}.tar")
    if not os.path.exists(rootfs):
        return {"CONTENTION_VM_IMAGE_ERROR": f"{rootfs} is missing"}
    image, config_json = f"{out}/oci:{image_tag()}", os.path.join(out, "config.json")
    config = subprocess.run(
        ["umoci", "raw", "runtime-config", "--image", image, config_json],
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )
    if config.returncode != 0:
        return {"CONTENTION_VM_IMAGE_ERROR": f"umoci raw runtime-config: {config.stderr.strip()}"}
    return {"CONTENTION_VM_IMAGE": out}


def guest_kernel_crashed(res: guest.GuestResult) -> bool:
    """The guest powered off by itself, without the command's status, after a kernel
    panic on its console (not a timeout: the lane killed nothing)."""
    return res.status is None and "Kernel panic" in res.console_tail and "powered off" in res.reason


def image_tag() -> str:
    with open(guest.ROOT / "pyproject.toml", "rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def inside_shares(path: str) -> bool:
    """Whether ``path`` is inside a tree the guest shares read-only and remounts (the
    checkout, the venv, its Python): a read-write share there would keep the remount
    from happening."""
    real = os.path.realpath(path)
    return any(
        real == d or real.startswith(d.rstrip("/") + "/")
        for d in map(os.path.realpath, guest.python_dirs())
    )


def write_summary(results: str | None, summary: dict[str, object]) -> None:
    """The lane's figures, ``lane.json`` in the results directory (when there is one)."""
    if results is None:
        return
    with open(os.path.join(results, "lane.json"), "w") as f:
        json.dump(summary, f, indent=1)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="vm-test.sh",
        description="Run the vm-marked tests inside a pure cgroup v2 guest (qemu, TCG).",
    )
    ap.add_argument("--memory", default="1G", help="guest RAM (qemu -m); default 1G")
    ap.add_argument("--cpus", type=int, default=2, help="guest CPUs; default 2")
    ap.add_argument("--timeout", type=float, default=1200.0, help="hard bound on the boot, seconds")
    ap.add_argument(
        "--results", default=None, help="keep the guest's results and lane.json in this dir"
    )
    ap.add_argument(
        "--no-image", action="store_true", help="do not build the image (its test skips)"
    )
    ap.add_argument(
        "--image",
        default=None,
        help="use this scripts/build-image.sh --out DIR (core flavour) instead of building",
    )
    ap.add_argument(
        "--image-error",
        default=None,
        metavar="TEXT",
        help="the image build failed, for this reason: the guest's image test reports it",
    )
    ap.add_argument(
        "--image-pending",
        default=None,
        metavar="DIR",
        help="scripts/build-image.sh --out DIR runs beside the boot; DIR.status, written when "
        "it ends, holds its exit status (then why it failed): the guest's image tests, run "
        "last, wait for it",
    )
    ap.add_argument(
        "--part",
        choices=sorted(PARTS),
        default="all",
        help="the guest's tests: all (default), or one of the two parts scripts/test.sh "
        "runs in two guests side by side: labs (tests/vm/test_v2_labs.py) or agent (the "
        "probe, sampler and image tests); labs needs no image",
    )
    ap.add_argument(
        "--boost-nice",
        type=int,
        default=None,
        metavar="N",
        help="while the guest asks for it (tests.support.host_load.boosted: the labs "
        "around their CPU measurements), run it at nice N instead of this lane's nice "
        "value (scripts/test.sh: -10 for the labs, beside a lane at -5)",
    )
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    return ap


def _seccomp(results: str, env: dict[str, str]) -> None:
    if SECCOMP_PROFILE.exists():
        # The guest sees /var under a tmpfs overlay: hand it a copy in the results dir.
        profile = os.path.join(results, "containers-common-seccomp.json")
        shutil.copyfile(SECCOMP_PROFILE, profile)
        env["CONTENTION_VM_SECCOMP"] = profile
        version = SECCOMP_PROFILE.with_name("version")
        env["CONTENTION_VM_SECCOMP_VERSION"] = (
            version.read_text().strip() if version.exists() else ""
        )


def _image(args: argparse.Namespace, env: dict[str, str]) -> str | None:
    """The guest's image (or why there is none) into ``env``. Returns the directory the
    lane built it in, for the lane to remove: never one it was given."""
    if args.no_image:
        env["CONTENTION_VM_IMAGE_ERROR"] = "the lane ran with --no-image"
    elif args.image_error:
        env["CONTENTION_VM_IMAGE_ERROR"] = args.image_error
    elif args.image:
        env.update(image_env(os.path.abspath(args.image)))
    else:
        # Inside the checkout: a directory the guest shares read-only, at the same path.
        image_dir = str(guest.ROOT / "build" / "vm-image")
        shutil.rmtree(image_dir, ignore_errors=True)
        print(f"==> VM lane: building the {IMAGE_FLAVOR} image for the guest", flush=True)
        env.update(build_image(image_dir))
        return image_dir
    return None


PENDING_ENV = "image/env.json"  # in the results share: what the guest's image tests wait for


def build_status(status_file: str) -> str | None:
    """Why the image build beside the boot failed ("" when it passed), from its status
    file; None while it is still running."""
    try:
        text = Path(status_file).read_text()
    except FileNotFoundError:
        return None
    first, _, rest = text.partition("\n")
    if first.strip() == "0":
        return ""
    return rest.strip() or f"scripts/build-image.sh exited {first.strip() or '?'}"


def hand_over_image(image_dir: str, results: str, timeout_s: float) -> dict[str, str]:
    """Wait for the build beside the boot, then give the guest its image: the root
    filesystem and runtime config put in the results share (the checkout's share is
    cached in the guest, so files made there after the boot may stay unseen), and its
    environment as ``results/image/env.json``, written last. Returns that environment."""
    status_file = image_dir.rstrip("/") + ".status"
    deadline = time.monotonic() + timeout_s
    while (why := build_status(status_file)) is None:
        if time.monotonic() > deadline:
            why = f"the image build did not end within {timeout_s:.0f}s of the guest's boot"
            break
        time.sleep(2.0)
    env = {"CONTENTION_VM_IMAGE_ERROR": why} if why else image_env(image_dir)
    out = os.path.join(results, os.path.dirname(PENDING_ENV))
    os.makedirs(out, exist_ok=True)
    if "CONTENTION_VM_IMAGE" in env:
        for name in (f"rootfs-{IMAGE_FLAVOR}.tar", "config.json"):
            src, dst = os.path.join(image_dir, name), os.path.join(out, name)
            try:
                os.link(src, dst)
            except OSError:  # another filesystem
                shutil.copyfile(src, dst)
        env = {"CONTENTION_VM_IMAGE": out}
    tmp = os.path.join(out, ".env.json")
    Path(tmp).write_text(json.dumps(env))
    os.replace(tmp, os.path.join(results, PENDING_ENV))
    return env


def _hand_over_in_background(
    args: argparse.Namespace, results: str, env: dict[str, str], handed: dict[str, str]
) -> threading.Thread | None:
    """With --image-pending: the guest is told where to wait (``env``), a thread hands
    the image over once built and records what it handed in ``handed``."""
    if not args.image_pending:
        return None
    env["CONTENTION_VM_IMAGE_PENDING"] = os.path.join(results, PENDING_ENV)

    def work() -> None:
        handed.update(hand_over_image(os.path.abspath(args.image_pending), results, args.timeout))
        print(f"==> VM lane: image handed to the guest: {handed}", flush=True)

    t = threading.Thread(target=work, name="image-hand-over", daemon=True)
    t.start()
    return t


def _run(spec: guest.GuestSpec, command: list[str], results: str) -> tuple[guest.GuestResult, int]:
    """Boot the guest; once more if its own kernel crashed. Returns the result, boots."""
    res = guest.run(spec, command, results_dir=results)
    if not guest_kernel_crashed(res):
        return res, 1
    # The TCG guest's own kernel has panicked (seen twice in the page allocator while a
    # container started): the guest died, no test failed. Boot once more, and say so;
    # a second crash fails the lane.
    print(
        "==> VM lane: the guest kernel crashed; booting it once more\n"
        f"--- console ---\n{res.console_tail}",
        file=sys.stderr,
        flush=True,
    )
    return guest.run(spec, command, results_dir=results), 2


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.results is not None:
        args.results = os.path.abspath(args.results)
        os.makedirs(args.results, exist_ok=True)

    t0 = time.monotonic()
    try:
        kernel = guest.prepare(GUEST_PACKAGES)
    except guest.GuestUnavailable as e:
        if _ci():
            print(f"VM lane FAILED to start under CI: {e}", file=sys.stderr)
            write_summary(args.results, {"status": None, "reason": f"cannot start: {e}"})
            return 1
        print(f"VM lane SKIPPED: {e}", file=sys.stderr)
        write_summary(args.results, {"status": None, "skipped": str(e)})
        return 0
    prepared = time.monotonic() - t0

    # The guest's own results directory: --results, unless the guest would not see it
    # (inside a tree it remounts), then a temporary one copied there afterwards.
    results = args.results
    if results is None or inside_shares(results):
        results = tempfile.mkdtemp(prefix="contention-vm-results-")
    env = {
        "BCC_KERNEL_SOURCE": str(kernel.headers),
        "CONTENTION_VM_KERNEL": kernel.release,
        "CI": os.environ.get("CI", ""),
    }
    _seccomp(results, env)
    needs_image = args.part in IMAGE_PARTS
    if not needs_image:
        args.image_pending = None
    t = time.monotonic()
    image_dir = None if args.image_pending or not needs_image else _image(args, env)
    image_s = time.monotonic() - t
    handed: dict[str, str] = {}
    hand_over = _hand_over_in_background(args, results, env, handed)
    # The host's side of the guest's run, for the guest's failure notes and lane.json.
    env[host_load.ENV] = os.path.join(results, "host-load.tsv")
    recorder = host_load.Recorder(env[host_load.ENV], os.getpid())
    spec = guest.GuestSpec(
        kernel=kernel,
        memory=args.memory,
        cpus=args.cpus,
        timeout_s=args.timeout,
        loose_dirs=guest.python_dirs(),
        scratch_disk_mib=1024,
        env=env,
        boost_nice=args.boost_nice,
    )
    print(
        f"==> VM lane: Linux {kernel.release}, {args.cpus} CPUs, {args.memory} RAM, "
        f"TCG (no KVM); selection: pytest "
        f"{' '.join([*SELECTION, *PARTS[args.part], *args.pytest_args])}",
        flush=True,
    )
    recorder.start()
    try:
        res, boots = _run(spec, guest_pytest(results, args.pytest_args, args.part), results)
    finally:
        host = recorder.stop()
        if image_dir is not None:
            shutil.rmtree(image_dir, ignore_errors=True)
        if hand_over is not None:
            hand_over.join(timeout=5.0)
        shutil.rmtree(os.path.join(results, os.path.dirname(PENDING_ENV)), ignore_errors=True)
        if args.results is not None and results != args.results:
            shutil.copytree(results, args.results, dirs_exist_ok=True)
            shutil.rmtree(results, ignore_errors=True)
            results = args.results
    summary = {
        "kernel": kernel.release,
        "part": args.part,
        "prepare_s": round(prepared, 1),
        "image_s": round(image_s, 1),
        "image": {**env, **handed}.get("CONTENTION_VM_IMAGE_ERROR", "built")
        if needs_image
        else "",  # this part has no image tests
        "wall_s": round(res.wall_s, 1),
        "boot_s": res.boot_s,
        "status": res.status,
        "reason": res.reason,
        "boots": boots,
        "host": host.as_dict() if host else None,
        "boost_nice": args.boost_nice,
        "boosted_s": round(res.boosted_s, 1),
    }
    write_summary(results, summary)
    print(
        f"==> VM lane: guest pytest exit {res.status}; boot {res.boot_s or 0:.0f}s, "
        f"guest {res.wall_s:.0f}s (+{prepared:.0f}s setup, {image_s:.0f}s image); results "
        f"in {results}; {host.describe() if host else 'host load unknown'}"
        + (
            f"; at nice {args.boost_nice} on its request for {res.boosted_s:.0f}s"
            if args.boost_nice is not None
            else ""
        ),
        flush=True,
    )
    if res.status is None:
        print(f"VM lane FAILED: {res.reason}\n--- console ---\n{res.console_tail}", file=sys.stderr)
        return 1
    if res.status == EXIT_NO_TESTS:
        print("VM lane FAILED: the guest's pytest collected no tests", file=sys.stderr)
        return 1
    if res.status == 0 and args.results is None:
        # A passing lane's results are in its output already; a failing one keeps them
        # (junit.xml, observed.json) for whoever reads the failure.
        shutil.rmtree(results, ignore_errors=True)
    return res.status


if __name__ == "__main__":
    sys.exit(main())
