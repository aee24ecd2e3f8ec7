"""The VM lane's start-up contract (tests/vm/lane.py), without booting anything: where
the VM cannot start, a developer's run skips the lane and says why, CI fails it. The
reasons are injected (this machine can start the VM); the lane's own exit codes are
what is tested."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support import host_load
from tests.vm import guest, lane


def _cannot_start(_packages: object = ()) -> guest.Kernel:
    raise guest.GuestUnavailable("qemu-system-x86_64 is not installed")


@pytest.mark.parametrize("ci", ["true", "1", "TRUE"])
def test_ci_fails_when_the_vm_cannot_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], ci: str
) -> None:
    monkeypatch.setattr(guest, "prepare", _cannot_start)
    monkeypatch.setenv("CI", ci)
    assert lane.main([]) == 1
    assert "VM lane FAILED to start under CI: qemu-system-x86_64" in capsys.readouterr().err


def test_a_developers_run_skips_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(guest, "prepare", _cannot_start)
    monkeypatch.delenv("CI", raising=False)
    assert lane.main([]) == 0
    assert "VM lane SKIPPED: qemu-system-x86_64 is not installed" in capsys.readouterr().err


def test_a_missing_image_is_a_reason_not_a_crash(tmp_path: Path) -> None:
    env = lane.image_env(str(tmp_path))
    assert set(env) == {"CONTENTION_VM_IMAGE_ERROR"}
    assert "rootfs-core.tar is missing" in env["CONTENTION_VM_IMAGE_ERROR"]


def _result(status: int | None, reason: str, console: str) -> guest.GuestResult:
    return guest.GuestResult(
        status=status, reason=reason, wall_s=1.0, boot_s=1.0, results_dir="", console_tail=console
    )


def test_only_a_guest_kernel_panic_earns_a_second_boot() -> None:
    powered_off = "the guest powered off without the command's exit status (see the console)"
    panic = "[ 58.4] Kernel panic - not syncing: Fatal exception in interrupt"
    assert lane.guest_kernel_crashed(_result(None, powered_off, panic))
    assert not lane.guest_kernel_crashed(_result(None, powered_off, "reboot: Power down"))
    assert not lane.guest_kernel_crashed(_result(None, "killed after 1200 s", panic))
    assert not lane.guest_kernel_crashed(_result(1, "", panic))


def test_the_guest_runs_single_threaded_tcg(tmp_path: Path) -> None:
    """docs/testing.md, "A guest kernel crash": multi-threaded TCG let a vCPU run code
    the guest kernel had just patched in __schedule. vng takes qemu options as one
    ``--qemu-opts=...`` argument (a separate "-accel ..." value reads as vng's own -a)."""
    spec = guest.GuestSpec(kernel=guest.Kernel(tmp_path), cpus=2)
    argv = guest.vng_argv(spec, str(tmp_path), None)
    assert "--qemu-opts=-accel tcg,thread=single" in argv
    assert argv[argv.index("--cpus") + 1] == "2"


def test_an_image_built_beside_the_boot_is_handed_over_once_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """scripts/test.sh builds the image while the guest boots: the guest gets its files
    in the results share, and the environment pointing there is written last."""
    image, results = tmp_path / "test-image", tmp_path / "results"
    image.mkdir()
    results.mkdir()
    (image / "rootfs-core.tar").write_bytes(b"tar")
    (image / "config.json").write_text("{}")
    monkeypatch.setattr(lane, "image_env", lambda out: {"CONTENTION_VM_IMAGE": out})
    assert lane.build_status(f"{image}.status") is None  # still building
    Path(f"{image}.status").write_text("0\n")
    env = lane.hand_over_image(str(image), str(results), timeout_s=5.0)
    handed = results / "image"
    assert env == {"CONTENTION_VM_IMAGE": str(handed)}
    assert (handed / "rootfs-core.tar").read_bytes() == b"tar"
    assert (handed / "config.json").read_text() == "{}"
    assert json.loads((results / lane.PENDING_ENV).read_text()) == env


def test_a_failed_or_missing_build_is_handed_over_as_its_reason(tmp_path: Path) -> None:
    image, results = tmp_path / "test-image", tmp_path / "results"
    results.mkdir()
    Path(f"{image}.status").write_text("25\nscripts/build-image.sh failed: E: apt\n")
    env = lane.hand_over_image(str(image), str(results), timeout_s=5.0)
    assert env == {"CONTENTION_VM_IMAGE_ERROR": "scripts/build-image.sh failed: E: apt"}
    Path(f"{image}.status").write_text("3\n")
    assert lane.build_status(f"{image}.status") == "scripts/build-image.sh exited 3"
    Path(f"{image}.status").unlink()
    env = lane.hand_over_image(str(image), str(results), timeout_s=0.0)
    assert "did not end within 0s" in env["CONTENTION_VM_IMAGE_ERROR"]
    assert "did not end" in (results / lane.PENDING_ENV).read_text()


def test_the_two_parts_run_every_guest_test_file_once() -> None:
    """scripts/test.sh runs the guest's tests as two parts in two guests: a test file in
    neither would silently never run in CI, one in both would run twice."""
    files = sorted(
        str(p.relative_to(guest.ROOT)) for p in (guest.ROOT / "tests/vm").glob("test_*.py")
    )
    halves = [f for part in ("labs", "agent") for f in lane.PARTS[part]]
    assert sorted(halves) == files
    assert lane.PARTS["all"] == ("tests/vm",)
    assert {"all", "agent"} == lane.IMAGE_PARTS  # the image's tests are in the agent's part
    assert "tests/vm/test_v2_image.py" in lane.PARTS["agent"]


def test_a_part_is_selected_after_the_vm_marker() -> None:
    argv = lane.guest_pytest("/r", ["-k", "x"], "labs")
    i = argv.index("vm")
    assert argv[i - 1 : i + 4] == ["-m", "vm", "tests/vm/test_v2_labs.py", "-k", "x"]


def test_the_guests_session_keeps_the_lanes_priority(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guest runs in a session of its own, which autogroup scheduling weighs as one
    nice-0 task: the lane's nice value is written to the session's autogroup (a fake
    /proc here); at nice 0 nothing is written, and a refusal is not an error."""
    (tmp_path / "42").mkdir()
    group = tmp_path / "42" / "autogroup"
    group.write_text("/autogroup-7 nice 0\n")
    monkeypatch.setattr(os, "nice", lambda inc: -5)
    guest.keep_priority(42, procfs=str(tmp_path))
    assert group.read_text() == "-5"
    guest.keep_priority(43, procfs=str(tmp_path))  # no such process: nothing raised
    group.write_text("/autogroup-7 nice 0\n")
    monkeypatch.setattr(os, "nice", lambda inc: 0)
    guest.keep_priority(42, procfs=str(tmp_path))
    assert group.read_text() == "/autogroup-7 nice 0\n"


def test_the_guest_runs_ahead_while_it_asks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """host_load.boosted in the guest writes the flag in its results share; the host's
    Boost, polled with the guest's run, gives the session its boost nice value while the
    flag is there and the lane's own after, and counts the seconds (nested blocks ask
    once)."""
    (tmp_path / "42").mkdir()
    group = tmp_path / "42" / "autogroup"
    group.write_text("/autogroup-7 nice 0\n")
    results = tmp_path / "results"
    results.mkdir()
    monkeypatch.setenv("CONTENTION_VM_RESULTS", str(results))
    monkeypatch.setattr(os, "nice", lambda inc: -5)
    boost = guest.Boost(str(results / host_load.BOOST_FILE), -10)
    boost.update(42, procfs=str(tmp_path))
    assert group.read_text() == "/autogroup-7 nice 0\n" and not boost.on  # not asked
    with host_load.boosted():
        with host_load.boosted():
            boost.update(42, procfs=str(tmp_path))
            assert group.read_text() == "-10" and boost.on
        assert (results / host_load.BOOST_FILE).exists()  # the outer block still asks
    assert not (results / host_load.BOOST_FILE).exists()
    boost.update(42, procfs=str(tmp_path))
    assert group.read_text() == "-5" and not boost.on
    assert boost.total() >= 0.0 and boost.total() == boost.seconds
    monkeypatch.delenv("CONTENTION_VM_RESULTS")
    with host_load.boosted():  # outside a guest: nothing to write, nothing raised
        pass


@pytest.mark.parametrize("boost_nice", [-10, None])
def test_a_flag_left_by_a_killed_guest_is_not_taken_as_a_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, boost_nice: int | None
) -> None:
    """A guest killed inside host_load.boosted leaves the flag in its results directory;
    the next guest run into that directory starts unboosted."""
    results = tmp_path / "results"
    results.mkdir()
    (results / host_load.BOOST_FILE).write_text("")
    seen: list[bool] = []

    def boot(spec: object, argv: object, console: object, tail: object, boost: object) -> str:
        seen.append((results / host_load.BOOST_FILE).exists())
        return "stopped by the test"

    monkeypatch.setattr(guest, "_boot", boot)
    spec = guest.GuestSpec(kernel=guest.Kernel(tmp_path), boost_nice=boost_nice)
    res = guest.run(spec, ["true"], results_dir=str(results), echo=lambda s: None)
    assert seen == [False] and res.boosted_s == 0.0
