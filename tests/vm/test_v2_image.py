"""The container image, run inside the pure cgroup v2 guest under exactly the DaemonSet's
privileges, and scraped: the least-privilege claims of docs/kubernetes.md, proven on a
real kernel.

The VM lane builds the image on the host (``scripts/build-image.sh``, core flavour) and
hands the guest its root filesystem and OCI runtime config. Here each run unpacks
nothing new: one root filesystem on the guest's scratch disk, one runc bundle per run
whose config.json ``scripts/oci-run-spec.py`` writes from the DaemonSet in
``deploy/daemonset.yaml`` (the chart's defaults): every capability dropped but the
manifest's, uid 0, no_new_privs, read-only root, the manifest's read-only host mounts,
an emptyDir /tmp, private pid/ipc/uts/mount/cgroup/network namespaces, RLIMIT_MEMLOCK
8 MiB. The exporter listens on the container's own 127.0.0.1 (its network namespace,
as a pod's); the guest scrapes it there through ``nsenter --net``.

* the manifest's privileges: the exporter exports usage and stall for a kubelet-style
  container cgroup this test makes, and ``contention_probe_loaded{loader="core"} 1``;
  the process holds exactly the manifest's capabilities, and its BPF memory exceeds
  its RLIMIT_MEMLOCK (it is charged to the memory cgroup: kernels >= 5.11);
* each granted capability dropped in turn: the probe must then fail to load, both as
  the exporter reports it and when the CO-RE loader is called directly in the
  container past the exporter's own capability check (what the kernel answers); else
  the manifest grants more than it needs. What failed is recorded in image.json.
* the manifest's privileges under a seccomp profile (``oci-run-spec.py --seccomp``),
  what Kubernetes' ``RuntimeDefault`` is on a node: containers/common's profile as
  Debian ships it (``/usr/share/containers/seccomp.json``, podman's and CRI-O's
  default; ``scripts/setup-vm.sh`` unpacks it) allows ``bpf`` only with CAP_SYS_ADMIN,
  so the probe must NOT load, the reason saying so; the same profile with ``bpf``
  allowed to a holder of CAP_BPF (a model of the rule containerd >= 1.7 and Docker >=
  23.0 ship, not their file) must load it. docs/kubernetes.md has the table.
* ``helm test``'s path: the chart rendered with ``selftest.enabled=true``, its exporter
  asked to run the self-test (``POST /selftest``) by the ``selftest`` command from the
  pod's network: it must pass, leaving no cgroup behind (docs/troubleshooting.md, "The
  self-test").

Where the image could not be built the tests skip with the reason (under CI they fail).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from exporter.selftest.report import Report, summary
from labs import LabCgroup, LabLayout, spawn_periodic

pytestmark = pytest.mark.vm

ROOT = Path(__file__).resolve().parents[2]
DAEMONSET = ROOT / "deploy" / "daemonset.yaml"
LISTEN = "127.0.0.1:10366"  # the container's own loopback: no clash with the guest's
START_TIMEOUT = 240.0  # a TCG guest: Python imports and the first pass are slow
# The seconds of a minute the self-test is asked in (test_selftest_pod_starts_with_the_probe
# says why).
ASK_WITHIN_S = (32.0, 45.0)
MakeLab = Callable[..., LabCgroup]


def _ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def _daemonset() -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(DAEMONSET.read_text()) if d]
    (ds,) = [d for d in docs if d.get("kind") == "DaemonSet"]
    assert isinstance(ds, dict)
    return ds


def _exporter(ds: dict[str, Any]) -> dict[str, Any]:
    (c,) = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "exporter"]
    assert isinstance(c, dict)
    return c


GRANTED: list[str] = list(_exporter(_daemonset())["securityContext"]["capabilities"]["add"])


@dataclass
class Image:
    directory: Path  # from the lane: rootfs-core.tar and config.json
    rootfs: Path  # unpacked on the scratch disk
    work: Path
    results: Path


IMAGE_WAIT_S = 600.0  # the build beside the boot takes about a minute; the guest's other tests ten


def _image_env() -> dict[str, str]:
    """Where the lane put the image, or why there is none. When the host builds it
    beside the boot (``CONTENTION_VM_IMAGE_PENDING``, tests/vm/lane.py), wait for the
    environment it hands over: these tests run last (conftest.py), so it is there."""
    pending = os.environ.get("CONTENTION_VM_IMAGE_PENDING", "")
    if not pending:
        return dict(os.environ)
    deadline = time.monotonic() + IMAGE_WAIT_S
    while not os.path.exists(pending):
        if time.monotonic() > deadline:
            return {
                "CONTENTION_VM_IMAGE_ERROR": f"the host handed over no image within "
                f"{IMAGE_WAIT_S:.0f}s ({pending} never appeared)"
            }
        time.sleep(2.0)
    with open(pending) as f:
        handed: dict[str, str] = json.load(f)
    return handed


def _untar(tar: Path, into: Path) -> None:
    """Unpack ``tar``, read in 4 MiB requests: tar's own 10 KiB reads are one 9p round
    trip each over the uncached results share, 40 s for the 190 MiB under TCG."""
    proc = subprocess.Popen(
        ["tar", "--numeric-owner", "-xf", "-", "-C", str(into)], stdin=subprocess.PIPE
    )
    assert proc.stdin is not None
    with tar.open("rb") as f, proc.stdin:
        shutil.copyfileobj(f, proc.stdin, 4 << 20)
    assert proc.wait(timeout=300) == 0, f"tar exited {proc.returncode} unpacking {tar}"


@pytest.fixture(scope="module")
def image(v2_layout: LabLayout) -> Iterator[Image]:
    """The image, unpacked; after ``v2_layout``'s clean-up of stale lab cgroups, which
    would otherwise take a running container's ``contention-test-runc-*`` cgroup (it has
    no owner record) for a crashed run's and empty it."""
    env = _image_env()
    reason = env.get("CONTENTION_VM_IMAGE_ERROR", "")
    directory = env.get("CONTENTION_VM_IMAGE", "")
    if not directory:
        reason = reason or "the VM lane built no image (CONTENTION_VM_IMAGE unset)"
        if _ci():
            pytest.fail(f"the image test cannot run under CI: {reason}", pytrace=False)
        pytest.skip(reason)
    if shutil.which("runc") is None:
        pytest.fail("runc is not installed (scripts/setup-vm.sh --packages runc)", pytrace=False)
    scratch = os.environ.get("CONTENTION_VM_SCRATCH")
    assert scratch, "the guest has no scratch disk"
    work = Path(scratch) / "contention-test-image"
    shutil.rmtree(work, ignore_errors=True)
    rootfs = work / "rootfs"
    rootfs.mkdir(parents=True)
    t = time.monotonic()
    tar = Path(directory) / "rootfs-core.tar"
    _untar(tar, rootfs)
    print(f"[image] root filesystem unpacked in {time.monotonic() - t:.1f}s")
    results = Path(os.environ.get("CONTENTION_VM_RESULTS") or work)
    try:
        yield Image(Path(directory), rootfs, work, results)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@dataclass
class Container:
    name: str
    pid: int
    log: Path
    popen: subprocess.Popen[bytes]

    def scrape(self, path: str = "/metrics") -> str:
        """GET from the container's own 127.0.0.1 (its network namespace)."""
        proc = subprocess.run(
            ["nsenter", f"--net=/proc/{self.pid}/ns/net", "curl", "-sf", f"http://{LISTEN}{path}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if proc.returncode != 0:
            raise ConnectionError(f"curl exit {proc.returncode}: {proc.stderr.strip()}")
        return proc.stdout

    def log_tail(self, n: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        return ""


# The CO-RE loader called directly in the container, past the exporter's own check of
# its capabilities: what the kernel itself answers (stdout: reason, then the detail).
KERNEL_SAYS = """
from exporter.probe.loader import SchedProbe
from exporter.probe.select import load_maps
p = SchedProbe(loader="core")
out = load_maps(p.knobs, "core", p.inputs)
print("loaded" if out.maps is not None else out.reason)
print(out.summary())
"""


def kernel_says(c: Container) -> list[str]:
    """``runc exec`` (the container's own capabilities and namespaces) of KERNEL_SAYS."""
    proc = subprocess.run(
        ["runc", "exec", c.name, "/usr/bin/python3", "-c", KERNEL_SAYS],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"runc exec failed ({proc.returncode}): {proc.stderr}"
    return proc.stdout.strip().splitlines()


def _runc_state(name: str) -> dict[str, Any] | None:
    proc = subprocess.run(["runc", "state", name], capture_output=True, text=True, timeout=30)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


@contextlib.contextmanager
def run_image(
    img: Image,
    name: str,
    caps: list[str],
    seccomp: Path | None = None,
    daemonset: dict[str, Any] | None = None,
) -> Iterator[Container]:
    """The image under the DaemonSet's security context (``daemonset``: another
    rendering of the chart than deploy/daemonset.yaml), with ``caps`` as its
    ``capabilities.add`` (the manifest's list, or one less), and the seccomp profile
    ``seccomp`` (Docker/containers format) or none."""
    ds = daemonset if daemonset is not None else _daemonset()
    _exporter(ds)["securityContext"]["capabilities"]["add"] = caps
    bundle = img.work / f"bundle-{name}"
    bundle.mkdir()
    (bundle / "daemonset.yaml").write_text(yaml.safe_dump(ds))
    config = json.loads((img.directory / "config.json").read_text())
    config["root"]["path"] = str(img.rootfs)
    cgroup = f"contention-test-runc-{name}"
    config.setdefault("linux", {})["cgroupsPath"] = f"/{cgroup}"
    (bundle / "config.json").write_text(json.dumps(config))
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "oci-run-spec.py"),
            "runc",
            str(bundle / "daemonset.yaml"),
            str(bundle / "config.json"),
            "--no-kubernetes",
            "--listen",
            LISTEN,
            *(["--seccomp", str(seccomp)] if seccomp is not None else []),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    cid = f"contention-test-{name}"
    log = img.results / f"image-{name}.log"
    with open(log, "wb") as out:
        popen = subprocess.Popen(
            ["runc", "run", "--bundle", str(bundle), cid],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        state = _runc_state(cid)
        while (state is None or not state.get("pid")) and time.monotonic() < deadline:
            assert popen.poll() is None, f"runc exited {popen.returncode}: {log.read_text()}"
            time.sleep(0.5)
            state = _runc_state(cid)
        assert state is not None, f"runc did not start {cid}: {log.read_text()}"
        yield Container(cid, int(state["pid"]), log, popen)
    finally:
        subprocess.run(["runc", "kill", cid, "KILL"], capture_output=True, timeout=30)
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(30)
        subprocess.run(["runc", "delete", "--force", cid], capture_output=True, timeout=30)
        with contextlib.suppress(OSError):  # normally gone with runc delete
            os.rmdir(f"/sys/fs/cgroup/{cgroup}")
        shutil.rmtree(bundle, ignore_errors=True)


Samples = dict[str, list[tuple[dict[str, str], float]]]


def _samples(text: str) -> Samples:
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def await_metrics(c: Container, ready: Callable[[Samples], bool]) -> Samples:
    """Scrape until ``ready`` holds; fail with the container's log when it exits or
    does not get there in time."""
    deadline = time.monotonic() + START_TIMEOUT
    last = ""
    while time.monotonic() < deadline:
        if c.popen.poll() is not None:
            pytest.fail(f"the container exited ({c.popen.returncode}):\n{c.log_tail()}")
        try:
            got = _samples(c.scrape())
        except ConnectionError as e:
            last = str(e)
        else:
            if ready(got):
                return got
            last = "not ready yet"
        time.sleep(2.0)
    pytest.fail(f"no ready /metrics in {START_TIMEOUT:.0f}s ({last}):\n{c.log_tail()}")


def probe_loaded(s: Samples) -> tuple[float, dict[str, str]] | None:
    """``contention_probe_loaded``'s value and labels once the probe has been tried."""
    rows = [r for r in s.get("contention_probe_loaded", []) if r[0].get("reason") != "not-loaded"]
    return (rows[0][1], rows[0][0]) if rows else None


def _cap_names(mask: int) -> list[str]:
    """CAP_* names of a capability mask (the numbers of linux/capability.h that matter
    here; any other bit is shown by number)."""
    known = {21: "SYS_ADMIN", 24: "SYS_RESOURCE", 38: "PERFMON", 39: "BPF"}
    return sorted(known.get(b, str(b)) for b in range(64) if mask >> b & 1)


def _proc_facts(pid: int) -> dict[str, Any]:
    """What the kernel says about the container's process: its effective capabilities,
    RLIMIT_MEMLOCK, and the memory its BPF maps and programs lock (fdinfo memlock)."""
    with open(f"/proc/{pid}/status") as f:
        status = {k: v.strip() for k, _, v in (line.partition(":") for line in f)}
    cap_eff = int(status["CapEff"], 16)
    with open(f"/proc/{pid}/limits") as f:
        memlock = next(line.split()[3] for line in f if line.startswith("Max locked memory"))
    bpf_bytes = 0
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/fdinfo/{fd}") as f:
            for line in f:
                if line.startswith("memlock:"):
                    bpf_bytes += int(line.split()[1])
    return {
        "capabilities": _cap_names(cap_eff),
        "rlimit_memlock_bytes": int(memlock) if memlock.isdigit() else memlock,
        "bpf_memlock_bytes": bpf_bytes,
        "seccomp_mode": int(status.get("Seccomp", "0")),  # 2: a filter is on
    }


def _record(img: Image, key: str, value: Any) -> None:
    path = img.results / "image.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data[key] = value
    path.write_text(json.dumps(data, indent=1, sort_keys=True))
    print(f"[image] {key}: {json.dumps(value)}")


@pytest.mark.timeout(600)
def test_image_under_the_daemonsets_privileges(image: Image, make_lab: MakeLab) -> None:
    # A container as a kubelet's systemd driver makes it, below a --cgroup-root slice
    # named like every lab cgroup, with a light periodic load.
    uid = str(uuid.uuid4())
    kubepods = make_lab("kubepods.slice")
    burstable = make_lab("contention-test-kubepods-burstable.slice", parent=kubepods)
    pod = make_lab(
        f"contention-test-kubepods-burstable-pod{uid.replace('-', '_')}.slice", parent=burstable
    )
    box = make_lab(f"cri-containerd-{uuid.uuid4().hex}{uuid.uuid4().hex}.scope", parent=pod)
    spawn_periodic(box, work_ms=2.0, period_ms=20.0, seconds=400)
    cgroup = box.path

    def mine(s: Samples, name: str) -> float | None:
        vals = [v for labels, v in s.get(name, []) if labels.get("cgroup") == cgroup]
        return vals[0] if vals else None

    t0 = time.monotonic()
    with run_image(image, "granted", GRANTED) as c:
        s = await_metrics(
            c,
            lambda s: (
                probe_loaded(s) is not None
                and (mine(s, "contention_cpu_usage_seconds_total") or 0) > 0
            ),
        )
        ready_s = time.monotonic() - t0
        facts = _proc_facts(c.pid)
    loaded = probe_loaded(s)
    usage = mine(s, "contention_cpu_usage_seconds_total")
    stall = mine(s, "contention_pressure_cpu_waiting_seconds_total")
    mem = mine(s, "contention_memory_working_set_bytes")  # on by default
    _record(
        image,
        "granted",
        {
            "capabilities_added": GRANTED,
            "seconds_to_ready": round(ready_s, 1),
            "probe_loaded": loaded,
            "cgroup": cgroup,
            "cpu_usage_seconds": usage,
            "cpu_pressure_waiting_seconds": stall,
            "memory_working_set_bytes": mem,
            **facts,
        },
    )
    assert loaded is not None and loaded[0] == 1.0, f"probe not loaded: {loaded}\n{c.log_tail()}"
    assert loaded[1].get("loader") == "core", loaded
    assert usage is not None and usage > 0, usage
    assert stall is not None and stall >= 0, "no CPU stall series for the test cgroup"
    assert mem is not None and mem > 0, mem
    assert facts["capabilities"] == sorted(GRANTED), facts
    if "SYS_RESOURCE" not in GRANTED:
        # The proof that CAP_SYS_RESOURCE is not needed here: the probe locks more
        # memory than RLIMIT_MEMLOCK allows, and could not have raised the limit.
        assert facts["bpf_memlock_bytes"] > facts["rlimit_memlock_bytes"], facts


def probe_attempt(
    img: Image, name: str, caps: list[str], seccomp: Path | None = None
) -> dict[str, Any]:
    """Run the image until the probe has been tried: what the exporter reports
    (``probe_loaded``: value and labels), its probe log lines, what the kernel answers
    the CO-RE loader run directly in the container (``kernel_says``), and the process's
    facts (:func:`_proc_facts`)."""
    with run_image(img, name, caps, seccomp=seccomp) as c:
        s = await_metrics(c, lambda s: probe_loaded(s) is not None)
        facts = _proc_facts(c.pid)
        log = c.log_tail(60)
        kernel = kernel_says(c)
    loaded = probe_loaded(s)
    assert loaded is not None
    probe_lines = [line for line in log.splitlines() if "probe" in line.lower()]
    return {
        "capabilities_added": caps,
        "probe_loaded": loaded,
        "log": probe_lines[-3:],
        "kernel_says": kernel,
        **facts,
    }


@pytest.mark.timeout(600)
@pytest.mark.parametrize("dropped", GRANTED)
def test_each_granted_capability_is_needed(image: Image, dropped: str) -> None:
    """Without any one of the capabilities the manifest grants, the probe does not load
    (the exporter still serves, saying why). A probe that loads anyway proves the
    capability unneeded: drop it from the chart."""
    caps = [c for c in GRANTED if c != dropped]
    run = probe_attempt(image, f"without-{dropped.lower().replace('_', '-')}", caps)
    _record(image, f"without {dropped}", run)
    loaded, kernel = run["probe_loaded"], run["kernel_says"]
    assert loaded[0] == 0.0 and kernel[0] != "loaded", (
        f"the probe loads without CAP_{dropped} ({loaded[1]}, {kernel}): the manifest "
        "grants more than it needs"
    )


@pytest.fixture(scope="module")
def containers_profile(image: Image) -> dict[str, Any]:
    """containers/common's seccomp profile as Debian ships it (from the lane)."""
    path = os.environ.get("CONTENTION_VM_SECCOMP", "")
    if not path:
        reason = "scripts/setup-vm.sh could not fetch golang-github-containers-common"
        if _ci():
            pytest.fail(f"the seccomp test cannot run under CI: {reason}", pytrace=False)
        pytest.skip(reason)
    profile: dict[str, Any] = json.loads(Path(path).read_text())
    return profile


def bpf_gated_by_cap_bpf(profile: dict[str, Any]) -> dict[str, Any]:
    """``profile`` with ``bpf`` allowed to a holder of CAP_BPF, as containerd (PR #7301,
    1.7) and moby (PR #43987, 23.0) allow it: an ALLOW rule included by CAP_BPF, and
    ``bpf`` taken out of any rule that would deny it unless CAP_SYS_ADMIN and put back
    in its own copy of that rule, excluded by CAP_BPF too: containers/common denies with
    EPERM explicitly, and of two argument-less rules for one syscall with different
    actions libseccomp (2.5.4) keeps the first, so an allow rule merely appended would
    lose. A model of their rule, not their profile."""
    out: dict[str, Any] = json.loads(json.dumps(profile))
    rules = []
    for rule in out["syscalls"]:
        names = rule.get("names") or []
        if "bpf" in names and rule["action"] != "SCMP_ACT_ALLOW":
            rule["names"] = [n for n in names if n != "bpf"]
            alone = json.loads(json.dumps(rule))
            alone["names"] = ["bpf"]
            excludes = alone.setdefault("excludes", {})
            excludes["caps"] = [*(excludes.get("caps") or []), "CAP_BPF"]
            rules.append(alone)
        rules.append(rule)
    rules.append({"names": ["bpf"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_BPF"]}})
    out["syscalls"] = rules
    return out


@pytest.mark.timeout(600)
@pytest.mark.parametrize("variant", ["containers-common", "bpf-gated-by-cap-bpf"])
def test_the_probe_under_a_runtime_default_seccomp_profile(
    image: Image, containers_profile: dict[str, Any], variant: str
) -> None:
    """RuntimeDefault is the runtime's profile. With only CAP_BPF + CAP_PERFMON,
    containers/common's (CRI-O, podman) denies ``bpf`` (EPERM): the probe does not load
    and the reason says it was denied although the capabilities are held. With ``bpf``
    allowed to CAP_BPF (containerd, Docker) it loads: the CO-RE loader attaches through
    ``bpf()`` only, so ``perf_event_open`` (still denied here) is not needed."""
    profile = containers_profile
    if variant == "bpf-gated-by-cap-bpf":
        profile = bpf_gated_by_cap_bpf(profile)
    path = image.work / f"seccomp-{variant}.json"
    path.write_text(json.dumps(profile))
    run = probe_attempt(image, f"seccomp-{variant}", GRANTED, seccomp=path)
    run["profile"] = "golang-github-containers-common " + os.environ.get(
        "CONTENTION_VM_SECCOMP_VERSION", "?"
    )
    _record(image, f"seccomp {variant}", run)
    loaded, kernel = run["probe_loaded"], run["kernel_says"]
    assert run["seccomp_mode"] == 2, run  # the filter is on
    assert run["capabilities"] == sorted(GRANTED), run
    if variant == "containers-common":
        assert loaded[0] == 0.0 and kernel[0] != "loaded", (loaded, kernel)
        assert loaded[1].get("reason") == "not-root", loaded
        assert "seccomp" in "\n".join(kernel), kernel  # the detail names the cause
    else:
        assert loaded[0] == 1.0 and loaded[1].get("loader") == "core", (loaded, run["log"])
        assert kernel[0] == "loaded", kernel


CHART = ROOT / "deploy" / "helm" / "contention-exporter"


def _rendered_with_selftest() -> dict[str, Any]:
    """The chart's DaemonSet with ``selftest.enabled=true`` (``helm template``, the venv's
    pinned helm): what ``helm test`` needs on the node."""
    helm = Path(sys.executable).parent / "helm"
    if not helm.exists():
        pytest.fail("helm is not installed in the venv (scripts/setup-kube-tools.sh)")
    out = subprocess.run(
        [str(helm), "template", "contention-exporter", str(CHART), "--namespace",
         "contention-exporter", "--set", "selftest.enabled=true",
         "--show-only", "templates/daemonset.yaml"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    (ds,) = [d for d in yaml.safe_load_all(out.stdout) if d and d.get("kind") == "DaemonSet"]
    assert isinstance(ds, dict)
    return ds


def _leftovers(cgroup: str) -> list[str]:
    """The self-test's cgroups still below the container's cgroup (should be none)."""
    base = Path("/sys/fs/cgroup") / cgroup
    return sorted(str(p) for p in base.rglob("contention-selftest-*") if p.is_dir())


@dataclass
class SelftestPod:
    """The exporter's container as the chart renders it with ``selftest.enabled=true``,
    started by the scene's first phase and asked by its second."""

    stack: ExitStack = field(default_factory=ExitStack)
    container: Container | None = None


@pytest.fixture(scope="module")
def selftest_pod() -> Iterator[SelftestPod]:
    pod = SelftestPod()
    with pod.stack:
        yield pod


@pytest.mark.timeout(300)
def test_selftest_pod_starts_with_the_probe(image: Image, selftest_pod: SelftestPod) -> None:
    """``helm test``'s path, first phase: the chart rendered with
    ``selftest.enabled=true`` changes only ``--selftest.enabled`` and mounts the cgroup
    tree read-write; the image runs under that DaemonSet's privileges in its own cgroup
    namespace and loads the probe."""
    ds = _rendered_with_selftest()
    container = _exporter(ds)
    default = _exporter(_daemonset())
    assert [a for a in container["args"] if a != "--selftest.enabled"] == default["args"]
    assert "--selftest.enabled" in container["args"], container["args"]
    rw = [m for m in container["volumeMounts"] if m.get("readOnly") is False]
    assert [m["mountPath"] for m in rw] == ["/host/sys/fs/cgroup"], rw
    try:
        c = selftest_pod.stack.enter_context(run_image(image, "selftest", GRANTED, daemonset=ds))
        await_metrics(c, lambda s: probe_loaded(s) is not None)
    except BaseException:
        selftest_pod.stack.close()
        raise
    selftest_pod.container = c
    # The self-test's finding needs a whole minute its cgroups were watched in from its
    # first 15 s (findings.aggregates.WATCH_GRACE_S): asked at any second, it waits
    # 60-120 s. Asked within ASK_WITHIN_S, its cgroups appear at :44-:10 (the ask's
    # start takes 12-25 s under TCG) and it is judged on the minute that follows.
    into = time.time() % 60
    if not ASK_WITHIN_S[0] <= into <= ASK_WITHIN_S[1]:
        time.sleep((sum(ASK_WITHIN_S) / 2 - into) % 60)


@pytest.mark.timeout(600)
def test_selftest_in_the_daemonsets_container(image: Image, selftest_pod: SelftestPod) -> None:
    """``helm test``'s path, second phase: ``contention-exporter selftest
    --selftest.url`` asks the exporter started by the first from the pod's network, as
    the chart's test pod does: the exporter runs the self-test under its own sampler,
    probe and capabilities and must pass (probe loaded, noisy-neighbor naming the bully,
    blame within 10 points of the kernel's accounting, within 4 minutes), leaving no
    cgroup behind."""
    c = selftest_pod.container
    if c is None:
        pytest.fail("no exporter: test_selftest_pod_starts_with_the_probe did not start it")
    with selftest_pod.stack:
        t0 = time.monotonic()
        ask = subprocess.run(
            ["nsenter", f"--net=/proc/{c.pid}/ns/net", sys.executable, "-m", "exporter",
             "selftest", "--selftest.url", f"http://{LISTEN}", "--json"],
            capture_output=True, text=True, timeout=400,
        )  # fmt: skip
        asked_s = time.monotonic() - t0
        left = _leftovers("contention-test-runc-selftest")
        log = c.log_tail(40)
    assert ask.stdout, f"no report (exit {ask.returncode}): {ask.stderr[-2000:]}\n{log}"
    report: dict[str, Any] = json.loads(ask.stdout)
    keys = (
        "passed", "mode", "probe_loaded", "probe", "blame_share", "truth_share",
        "time_to_first_finding_s", "probe_ns_per_switch", "bpf_stats", "duration_s",
        "placement", "checks", "problems",
    )  # fmt: skip
    _record(
        image,
        "selftest",
        {
            "exit_code": ask.returncode,
            "seconds": round(asked_s, 1),
            "left_behind": left,
            **{k: report.get(k) for k in keys},
        },
    )
    print(summary(Report.from_dict(report)))  # the one-screen summary helm test's log shows
    checks = {x["name"]: x for x in report["checks"]}
    assert report["mode"] == "exporter", report["mode"]  # the DaemonSet's exporter ran it
    assert report["probe_loaded"], report.get("probe")
    assert checks["noisy-neighbor"]["ok"], checks["noisy-neighbor"]
    assert abs(report["blame_share"] - report["truth_share"]) <= 0.10, report
    assert report["left_behind"] == [] and left == [], (report["left_behind"], left)
    assert report["passed"] and ask.returncode == 0, (ask.returncode, report)
    assert report["duration_s"] <= 240, report["duration_s"]
