"""The container image, built here the way users build it (scripts/build-image.sh:
mmdebstrap + umoci, Debian's packages and PyPI only) and checked from the outside:
its OCI config (entrypoint, uid, port), what is inside (the package and its
dependencies import, the CO-RE object ships and libbpf loads, no compiler/LLVM/pip in
the CO-RE image, no setuid binary, no file capability) and its size.

Not run here: the image under the DaemonSet's security context. Container runtimes
need a pure cgroup v2 host (docs/kubernetes.md, "Run it under the DaemonSet's
privileges"); the entrypoint below runs in a plain chroot, with no namespace and no
cgroup of its own. Needs root (mmdebstrap's root mode, chroot) and Debian's archive;
about a minute per flavour. Deselect with -m 'not image'.

``scripts/test.sh`` builds the core image once, before the VM lane (whose guest runs
it) and these tests: ``$CONTENTION_IMAGE_CORE_DIR`` names that build's ``--out``
directory (with ``build-image.stdout``, what the script printed), and these tests
inspect it instead of building core again; ``$CONTENTION_IMAGE_CORE_ERROR`` says why
that build failed, which fails them the way a failed build here does. The bcc flavour
is built here either way.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tarfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [pytest.mark.image, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
FLAVORS = ("core", "bcc")
COMPILERS = ("gcc", "cc", "c++", "clang", "ld", "as", "make", "pip", "pip3", "tcc")
# scripts/test.sh builds each flavour in a lane of its own and hands it on in
# CONTENTION_IMAGE_<FLAVOR>_DIR (or why the build failed in ..._ERROR); without them,
# the fixture builds the image itself.
PREBUILT = "CONTENTION_IMAGE_{}_DIR"
PREBUILT_ERROR = "CONTENTION_IMAGE_{}_ERROR"


@dataclass
class Image:
    flavor: str
    tag: str
    layout: Path
    rootfs_tar: Path
    rootfs: Path
    info: str
    config: dict[str, object]


def _blob(layout: Path, digest: str) -> dict[str, object]:
    algo, hexd = digest.split(":", 1)
    data: dict[str, object] = json.loads((layout / "blobs" / algo / hexd).read_text())
    return data


def _config(layout: Path, tag: str) -> dict[str, object]:
    index = json.loads((layout / "index.json").read_text())
    (desc,) = [
        m
        for m in index["manifests"]
        if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag
    ]
    manifest = _blob(layout, desc["digest"])
    cfg = manifest["config"]
    assert isinstance(cfg, dict)
    return _blob(layout, cfg["digest"])


@pytest.fixture(scope="module", params=FLAVORS)
def image(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Image]:
    if os.geteuid() != 0:
        pytest.skip("building the image needs root (mmdebstrap root mode, chroot)")
    flavor = request.param
    work = tmp_path_factory.mktemp(f"image-{flavor}")
    prebuilt = os.environ.get(PREBUILT.format(flavor.upper()), "")
    failed = os.environ.get(PREBUILT_ERROR.format(flavor.upper()), "")
    if failed:
        pytest.fail(f"the {flavor} image scripts/test.sh built for these tests: {failed}")
    if prebuilt:  # not removed here: scripts/test.sh removes it (the guest uses core's)
        out = Path(prebuilt)
        stdout = (out / "build-image.stdout").read_text()
    else:
        out = work
        proc = subprocess.run(
            ["bash", str(ROOT / "scripts/build-image.sh"), "--flavor", flavor, "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=840,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        stdout = proc.stdout
    tag = VERSION if flavor == "core" else f"{VERSION}-bcc"
    assert stdout.strip() == f"{out}/oci:{tag}"
    bundle = work / "bundle"
    unpack = subprocess.run(
        ["umoci", "unpack", "--image", f"{out}/oci:{tag}", str(bundle)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert unpack.returncode == 0, unpack.stderr
    info = (out / f"build-info-{flavor}.txt").read_text()
    with request.config.pluginmanager.get_plugin("capturemanager").global_and_fixture_disabled():  # type: ignore[union-attr]
        print(f"\n[image] {info.split('wheels:')[0].strip()}")
    yield Image(
        flavor,
        tag,
        out / "oci",
        out / f"rootfs-{flavor}.tar",
        bundle / "rootfs",
        info,
        _config(out / "oci", tag),
    )
    shutil.rmtree(work, ignore_errors=True)


def chroot(img: Image, *argv: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("chroot")
    assert binary is not None
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/root"}
    return subprocess.run(
        [binary, str(img.rootfs), *argv], capture_output=True, text=True, timeout=120, env=env
    )


def test_oci_config(image: Image) -> None:
    cfg = image.config["config"]
    assert isinstance(cfg, dict)
    assert cfg["Entrypoint"] == ["/usr/local/bin/contention-exporter"]
    assert cfg["User"] == "0:0"  # the probe's capabilities only reach uid 0 (docs/kubernetes.md)
    assert "10366/tcp" in cfg["ExposedPorts"]
    assert "PYTHONDONTWRITEBYTECODE=1" in cfg["Env"]
    assert cfg["Labels"]["io.contention-exporter.flavor"] == image.flavor
    assert cfg["Labels"]["org.opencontainers.image.revision"] == source_revision()
    assert image.config["architecture"] == "amd64" and image.config["os"] == "linux"
    skopeo = shutil.which("skopeo")
    if skopeo:  # a standard tool reads the layout the same way
        proc = subprocess.run(
            [skopeo, "inspect", "--config", f"oci:{image.layout}:{image.tag}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["config"]["Entrypoint"] == cfg["Entrypoint"]


def test_entrypoint_runs(image: Image) -> None:
    help_ = chroot(image, "/usr/local/bin/contention-exporter", "--help")
    assert help_.returncode == 0, help_.stderr
    # Without a command the exporter runs: --help shows its flags and the commands.
    assert "--web.listen-address" in help_.stdout and "diagnose" in help_.stdout
    run_help = chroot(image, "/usr/local/bin/contention-exporter", "run", "--help")
    assert run_help.returncode == 0 and "--path.sysfs" in run_help.stdout
    version = chroot(image, "/usr/local/bin/contention-exporter", "--version")
    assert version.returncode == 0 and version.stdout.split()[-1] == VERSION


def source_revision() -> str:
    """What the build stamps: this checkout's HEAD, -modified when it differs."""
    env = os.environ.get("CONTENTION_REVISION")
    if env:
        return env
    from exporter.revision import git_revision

    return git_revision(ROOT) or "unknown"


def test_the_package_and_its_dependencies_import(image: Image) -> None:
    code = (
        "import ctypes, exporter.commands, exporter.kube, kubernetes.client, kubernetes.config, "
        "kubernetes.watch, prometheus_client, yaml, h11, bcrypt; ctypes.CDLL('libbpf.so.1'); "
        "print('ok')"
    )
    proc = chroot(image, "python3", "-c", code)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
    # contention_build_info's revision: stamped into the wheel, not "unknown".
    stamped = "from exporter.revision import revision; print(revision())"
    rev = chroot(image, "python3", "-c", stamped)
    assert rev.returncode == 0 and rev.stdout.strip() == source_revision(), rev.stderr
    bcc = chroot(image, "python3", "-c", "import bcc")
    if image.flavor == "bcc":
        assert bcc.returncode == 0, bcc.stderr
    else:
        assert bcc.returncode != 0  # the CO-RE image has no BCC


def test_the_core_probe_ships_and_finds_libbpf(image: Image) -> None:
    """The compiled CO-RE object is in the package, byte for byte the committed one,
    and the loader finds it, and a libbpf.so.1 with every function it calls, in either
    flavour (the BCC image falls back to BCC only on a node without BTF)."""
    site = "/usr/local/lib/python3.11/dist-packages"
    shipped = image.rootfs / site.lstrip("/") / "exporter/bpf/sched_probe.bpf.o"
    assert shipped.read_bytes() == (ROOT / "bpf/sched_probe.bpf.o").read_bytes()
    code = (
        "from exporter.probe.core import find_object; from exporter.probe.libbpf import "
        "Libbpf; print(Libbpf.open().version); print(find_object())"
    )
    proc = chroot(image, "python3", "-c", code)
    assert proc.returncode == 0, proc.stderr
    version, found = proc.stdout.split()
    assert found == f"{site}/exporter/bpf/sched_probe.bpf.o"
    assert version.startswith("v1."), version


def test_no_compiler_pip_or_unused_client_copy(image: Image) -> None:
    bins = [image.rootfs / d for d in ("usr/bin", "usr/sbin", "usr/local/bin")]
    for name in COMPILERS:
        assert not any((d / name).exists() for d in bins), name
    site = image.rootfs / "usr/local/lib/python3.11/dist-packages"
    assert (site / "exporter").is_dir()
    assert not (site / "pip").exists()
    assert not (site / "kubernetes" / "aio").exists()
    llvm = list((image.rootfs / "usr/lib").rglob("libLLVM*")) + list(
        (image.rootfs / "usr/lib").rglob("libclang*")
    )
    if image.flavor == "core":
        assert not llvm, llvm
    else:
        assert llvm, "the BCC image compiles the probe with libbcc's LLVM"
    assert not list(
        (image.rootfs / "usr/src").glob("linux-headers-*")
    )  # headers come from the node


def test_no_setuid_binary_or_file_capability(image: Image) -> None:
    with tarfile.open(image.rootfs_tar) as tar:
        for m in tar:
            assert not (m.isfile() and m.mode & (stat.S_ISUID | stat.S_ISGID)), m.name
            assert not any("security.capability" in k for k in m.pax_headers), m.name


def test_sizes_are_reported(image: Image) -> None:
    lines = dict(line.split(": ", 1) for line in image.info.splitlines() if ": " in line)
    layer = int(lines["layer bytes (compressed)"])
    rootfs = int(lines["root filesystem bytes (tar)"])
    assert 0 < layer < rootfs
    assert rootfs == image.rootfs_tar.stat().st_size
    assert int(lines["build seconds"]) >= 0
