"""Which loader loads the probe, and the reason when one does not.

The node facts are injected (the BTF file, the libbpf library, the object, the BCC
headers), so each situation is real up to the kernel: a missing BTF file, a library
that is not there, a real library that is not libbpf (``libc.so.6``: too old / wrong),
a BTF without the sched tracepoints (the object's own BTF), an unreadable BTF. What
needs the kernel (a verifier rejection, an attach failure) is in
tests/integration/test_probe_kernel.py; the reason rules are checked here with
stand-in loaders, since a unit test cannot make a kernel reject a program.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from exporter.probe import SchedProbe
from exporter.probe.backend import ProbeKnobs, ProbeLoadError, ProbeMaps
from exporter.probe.core import find_object
from exporter.probe.libbpf import Libbpf, LibbpfMissing, LibbpfTooOld
from exporter.probe.select import LoaderInputs, load_maps

ROOT_CAPS = "CapEff:\t000001ffffffffff\n"
FIXTURE_BTF = Path(__file__).parents[1] / "fixtures" / "hybrid" / "sys" / "kernel" / "btf"


def root_proc(tmp_path: Path) -> str:
    d = tmp_path / "proc" / "self"
    d.mkdir(parents=True)
    (d / "status").write_text(f"Name:\tpython\n{ROOT_CAPS}")
    return str(tmp_path / "proc")


def libbpf_or_skip() -> None:
    try:
        Libbpf.open()
    except (LibbpfMissing, LibbpfTooOld) as e:
        pytest.skip(f"libbpf unavailable: {e}")


def core_status(tmp_path: Path, **kw: Any) -> tuple[str, str, str]:
    kw.setdefault("loader", "core")
    st = SchedProbe(procfs=root_proc(tmp_path), **kw).load()
    assert not st.loaded
    return st.reason, st.detail, st.loader


def test_no_btf(tmp_path: Path) -> None:
    reason, detail, loader = core_status(tmp_path, btf_path=str(tmp_path / "vmlinux"))
    assert (reason, loader) == ("no-btf", "")
    assert "CONFIG_DEBUG_INFO_BTF" in detail


def test_unreadable_btf_is_no_btf(tmp_path: Path) -> None:
    libbpf_or_skip()
    empty = FIXTURE_BTF / "vmlinux"  # an empty file, as in the hybrid fixture tree
    reason, detail, _ = core_status(tmp_path, btf_path=str(empty))
    assert reason == "no-btf" and "cannot parse" in detail


def test_libbpf_missing(tmp_path: Path) -> None:
    reason, detail, _ = core_status(tmp_path, libbpf_name="libbpf-not-here.so.1")
    assert reason == "libbpf-missing" and "libbpf1" in detail


def test_libbpf_too_old(tmp_path: Path) -> None:
    """A real shared library that lacks libbpf's functions."""
    reason, detail, _ = core_status(tmp_path, libbpf_name="libc.so.6")
    assert reason == "libbpf-too-old" and "bpf_object__open_mem" in detail


def test_object_missing(tmp_path: Path) -> None:
    libbpf_or_skip()
    reason, detail, _ = core_status(tmp_path, object_path=str(tmp_path / "x.bpf.o"))
    assert reason == "no-object" and "build-bpf.sh" in detail


def test_btf_without_sched_tracepoints(tmp_path: Path) -> None:
    """The object's own BTF is valid BTF with no btf_trace_* types."""
    libbpf_or_skip()
    obj = find_object()
    assert obj is not None
    reason, detail, _ = core_status(tmp_path, btf_path=str(obj))
    assert reason == "no-tracepoint" and "sched_switch" in detail


def test_auto_without_btf_reports_what_bcc_lacks(tmp_path: Path) -> None:
    """No BTF and no headers: BCC is the loader meant for this node, so its reason
    is exported; the detail names both."""
    reason, detail, _ = core_status(
        tmp_path,
        loader="auto",
        btf_path=str(tmp_path / "vmlinux"),
        kernel_source=str(tmp_path / "no-headers"),
        tracefs=str(tmp_path),  # no tracefs either: BCC's first check
    )
    assert reason == "no-tracefs"
    assert detail.startswith("CO-RE: no-btf") and "; BCC: no-tracefs" in detail


# --- the reason rules, with stand-in loaders ------------------------------------------


class Loaded:
    loader = "bcc"
    detail = "stand-in"

    def close(self) -> None:
        pass


def raising(reason: str) -> Any:
    def load(knobs: ProbeKnobs, inputs: LoaderInputs) -> ProbeMaps:
        raise ProbeLoadError(reason, f"{reason} detail")

    return load


def loads(knobs: ProbeKnobs, inputs: LoaderInputs) -> ProbeMaps:
    return Loaded()  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("core", "bcc", "loaded", "reason"),
    [
        ("verifier", None, True, "verifier"),  # fallback loaded: why CO-RE did not
        ("no-btf", None, True, "no-btf"),
        ("verifier", "no-headers", False, "verifier"),  # CO-RE is meant here
        ("libbpf-missing", "no-bcc", False, "libbpf-missing"),
        ("no-btf", "no-headers", False, "no-headers"),  # no BTF: BCC is meant here
    ],
)
def test_reason_rules(core: str, bcc: str | None, loaded: bool, reason: str) -> None:
    out = load_maps(
        ProbeKnobs(), "auto", loaders={"core": raising(core), "bcc": raising(bcc) if bcc else loads}
    )
    assert (out.maps is not None) == loaded
    assert out.reason == reason
    assert [a.loader for a in out.attempts] == ["core", "bcc"]


def test_loaded_as_asked_has_no_reason() -> None:
    out = load_maps(ProbeKnobs(), "bcc", loaders={"core": raising("verifier"), "bcc": loads})
    assert out.maps is not None and out.reason == "" and len(out.attempts) == 1


def test_unexpected_errors_do_not_escape() -> None:
    def boom(knobs: ProbeKnobs, inputs: LoaderInputs) -> ProbeMaps:
        raise RuntimeError("bug")

    out = load_maps(ProbeKnobs(), "auto", loaders={"core": boom, "bcc": raising("no-bcc")})
    assert out.maps is None and out.reason == "load-error" and "bug" in out.summary()


def test_bad_loader_name() -> None:
    with pytest.raises(ValueError):
        load_maps(ProbeKnobs(), "ebpf")
