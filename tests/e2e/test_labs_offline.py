"""The labs' definitions and the replay tree, checked without a kernel or Prometheus:
quick, and part of every test run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from exporter.cgroupfs import parsers
from exporter.findings.model import NODE_KINDS
from exporter.findings.thresholds import load_thresholds
from exporter.metadata_file import parse_metadata
from exporter.rules.finding_alerts import ALERT_NAMES
from labs.cgroups import PREFIX, kubelet_shares
from labs.memory import MEMORY_LABS, MIB
from labs.replay import HYPERVISOR, NODE, REPLAYS, ReplayTree
from labs.scenarios import (
    LABS,
    SHORT_WINDOW,
    MetadataFile,
    expected_keys,
    verdict,
    write_short_window_config,
)


def test_kubelet_shares_match_the_kubelet() -> None:
    assert kubelet_shares(0.1) == 102
    assert kubelet_shares(0.8) == 819
    assert kubelet_shares(1.0) == 1024
    assert kubelet_shares(0.2) == 204


@pytest.mark.parametrize("name", list(LABS))
def test_lab_definitions_are_consistent(name: str) -> None:
    lab = LABS[name]
    roles = {b.role for b in lab.boxes}
    kinds = {str(k) for k in ALERT_NAMES}
    for e in lab.expect:
        assert e.victim in roles and (e.culprit is None or e.culprit in roles)
        assert e.kind in kinds and e.severity in ("critical", "warning", "info")
    assert set(lab.quiet) <= roles
    assert all(k in kinds for k in lab.never)
    assert not {e.kind for e in lab.expect} & set(lab.never)
    for b in lab.boxes:
        assert lab.cgroup_path(b.role).startswith("/" + PREFIX)
        assert (b.busy > 0) != (b.periodic is not None)
    entries = lab.metadata_entries()
    parsed = parse_metadata({"cgroups": entries}, "lab")  # what the exporter will accept
    for b in lab.boxes:
        got = parsed[lab.cgroup_path(b.role)]
        assert got.get("cpu_request_cores") == b.cpu_request
        assert got.get("cpu_limit_cores") == b.cpu_limit
    assert lab.describe().startswith(name)


@pytest.mark.parametrize("name", list(MEMORY_LABS))
def test_memory_lab_definitions_are_consistent(name: str) -> None:
    """The real-kernel memory labs (run in the VM lane): expectations name their own
    containers and real kinds, and the metadata they write is what the exporter reads."""
    lab = MEMORY_LABS[name]
    roles = {b.role for b in lab.boxes}
    kinds = {str(k) for k in ALERT_NAMES}
    for e in lab.expect:
        assert e.victim in roles and (e.culprit is None or e.culprit in roles)
        assert e.kind in kinds and e.severity in ("critical", "warning", "info")
    assert set(lab.quiet) <= roles and all(k in kinds for k in lab.never)
    assert not {e.kind for e in lab.expect} & set(lab.never)
    parsed = parse_metadata({"cgroups": lab.metadata_entries()}, "lab")
    for b in lab.boxes:
        got = parsed[lab.cgroup_path(b.role)]
        for key, mib in (
            ("memory_request_bytes", b.memory_request_mib),
            ("memory_limit_bytes", b.memory_max_mib),
        ):
            assert got.get(key) == (None if mib is None else mib * MIB), (b.role, key)
        if b.memory_high_mib is not None:
            assert b.memory_max_mib is not None and b.memory_high_mib <= b.memory_max_mib
    assert lab.describe().startswith(name)
    assert (lab.known_gap != "") == ("today's rules say otherwise" in lab.describe())


def test_verdict_compares_exact_sets() -> None:
    lab = LABS["noisy-neighbor"]
    (kind, victim, culprit, sev) = next(iter(expected_keys(lab)))
    row = {
        "kind": kind,
        "severity": sev,
        "victim": {"cgroup": victim},
        "culprit": {"cgroup": culprit},
    }
    assert verdict(lab, {"findings": [row]}) == (True, [])
    extra = {**row, "victim": {"cgroup": lab.cgroup_path("greedy")}, "culprit": None}
    ok, problems = verdict(lab, {"findings": [row, extra]})
    assert not ok and problems[0].startswith("unexpected")
    ok, problems = verdict(lab, {"findings": []})
    assert not ok and problems[0].startswith("missing")


def test_short_window_only_changes_timing_knobs(tmp_path: Path) -> None:
    th = load_thresholds(write_short_window_config(str(tmp_path)))
    default = load_thresholds()
    assert (th.window_minutes, th.sustain_minutes) == (
        SHORT_WINDOW["windowMinutes"],
        SHORT_WINDOW["sustainMinutes"],
    )
    for k, v in default.to_yaml_dict().items():
        if k not in SHORT_WINDOW:
            assert th.to_yaml_dict()[k] == v, k


def test_metadata_file_add_remove(tmp_path: Path) -> None:
    m = MetadataFile(str(tmp_path / "meta.yaml"))
    a, b = LABS["weights"], LABS["throttled"]
    m.add(a.metadata_entries())
    m.add(b.metadata_entries())
    assert set(m.read()) == set(a.metadata_entries()) | set(b.metadata_entries())
    m.remove(list(a.metadata_entries()))
    doc = yaml.safe_load((tmp_path / "meta.yaml").read_text())
    assert set(doc["cgroups"]) == set(b.metadata_entries())
    parse_metadata(doc, "meta")
    m.delete()
    assert not (tmp_path / "meta.yaml").exists()


@pytest.mark.parametrize("name", list(REPLAYS))
def test_replay_definitions_are_consistent(name: str) -> None:
    """Expectations name the lab's containers (or the node and the hypervisor, for a
    node-level kind), real kinds, and the metadata is what the exporter reads."""
    lab = REPLAYS[name]
    roles = {b.role for b in lab.boxes}
    kinds = {str(k) for k in ALERT_NAMES}
    for e in lab.expect:
        assert e.kind in kinds and e.severity in ("critical", "warning", "info")
        if e.kind in NODE_KINDS:
            assert (e.victim, e.culprit) == (NODE, HYPERVISOR)
        else:
            assert e.victim in roles and (e.culprit is None or e.culprit in roles)
    assert lab.container_expects, "the dashboards' victim is the first container expected"
    assert set(lab.quiet) <= roles and all(k in kinds for k in lab.never)
    assert not {e.kind for e in lab.expect} & set(lab.never)
    parsed = parse_metadata({"cgroups": lab.metadata_entries()}, "replay")
    for b in lab.boxes:
        assert parsed[lab.cgroup_path(b.role)].get("cpu_request_cores") == b.cpu_request
    assert lab.describe().startswith(name)


@pytest.mark.parametrize("name", list(REPLAYS))
def test_replay_tree_is_in_kernel_format_and_advances(tmp_path: Path, name: str) -> None:
    lab = REPLAYS[name]
    tree = ReplayTree(lab, str(tmp_path))
    tree.build()
    victim = lab.container_expects[0].victim
    d = os.path.join(tree.cgroup_root, lab.cgroup_path(victim).lstrip("/"))

    def read(f: str) -> str:
        return Path(d, f).read_text()

    def steal_ticks() -> int | None:
        return parsers.parse_proc_stat(Path(tree.procfs, "stat").read_text()).steal_ticks

    before = parsers.parse_pressure(read("memory.pressure"))
    cpu_before = parsers.parse_pressure(read("cpu.pressure"))
    steal_before = steal_ticks()
    tree.advance(60.0, stalled=True)
    after = parsers.parse_pressure(read("memory.pressure"))
    assert before.some is not None and after.some is not None
    box = lab.box(victim)
    assert after.some.total_usec - before.some.total_usec == pytest.approx(
        box.mem_some * 60e6, rel=0.01
    )
    cpu_after = parsers.parse_pressure(read("cpu.pressure"))
    assert cpu_before.some is not None and cpu_after.some is not None
    assert cpu_after.some.total_usec - cpu_before.some.total_usec == pytest.approx(
        box.cpu_some * 60e6, rel=0.01
    )
    # steal: the 8th CPU time, the lab's share of the node's CPUs (USER_HZ ticks)
    steal_after = steal_ticks()
    assert steal_before is not None and steal_after is not None
    assert steal_after - steal_before == pytest.approx(
        lab.node_cpu_steal * tree.ncpu * 60 * 100, abs=1
    )
    stat = parsers.parse_memory_stat(read("memory.stat"))
    assert stat is not None
    events = parsers.parse_memory_events(read("memory.events"))
    assert events is not None
    parsers.parse_cpu_stat(read("cpu.stat"))
    parsers.parse_proc_stat(Path(tree.procfs, "stat").read_text())
    node = parsers.parse_pressure(Path(tree.procfs, "pressure", "memory").read_text())
    assert node.some is not None
    assert node.some.total_usec == pytest.approx(lab.node_mem_some * 60e6, rel=0.01)
    tree.advance(60.0, stalled=False)  # calm: nothing stalls any more
    calm = parsers.parse_pressure(read("memory.pressure"))
    assert calm.some is not None and calm.some.total_usec == after.some.total_usec
    cpu_calm = parsers.parse_pressure(read("cpu.pressure"))
    assert cpu_calm.some is not None and cpu_calm.some.total_usec == cpu_after.some.total_usec
    assert steal_ticks() == steal_after
