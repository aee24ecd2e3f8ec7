"""The evaluator on hand-built windows, the finding model, the gauge and the CLI."""

from __future__ import annotations

import argparse
import json
import random
import re
import threading
from collections import deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from exporter.agent import Agent, AgentConfig
from exporter.cgroupfs.discovery import CgroupKind
from exporter.commands import build_parser
from exporter.exposition.findings import finding_families
from exporter.findings import (
    culprit_shares,
    evaluate,
    findings_document,
    load_thresholds,
    memory_overages,
)
from exporter.findings.model import Kind, Severity
from exporter.findings.signals import runq_minute
from exporter.findings.thresholds import RUNQ_BOUNDS_S, Thresholds
from exporter.identity import Identity
from exporter.probe.histogram import count_le
from exporter.window import ContainerWindow, MinuteFold, NodeFold, Window
from tests.support.corpus import load_corpus
from tests.support.promtool_tests import alert_labels
from tests.support.stand_ins import FakeProbe, pass_findings

from .test_probe_histogram import as_prom, prom_bucket_quantile

ROOT = Path(__file__).resolve().parents[2]
T = 5940.0  # at 99m: minutes 94..98 are the window, 97 and 98 the sustain minutes


@pytest.fixture(scope="module")
def th() -> Thresholds:
    return load_thresholds()


def ident(name: str, **kw: Any) -> Identity:
    kw.setdefault("kind", CgroupKind.CONTAINER)
    if kw["kind"] is CgroupKind.CONTAINER and "pod" not in kw:
        kw.update(namespace="ns", pod=name, container="c", pod_uid=f"uid-{name}")
    return Identity(cgroup=f"/t/{name}", **kw)


def fold(m: int, **kw: Any) -> MinuteFold:
    kw.setdefault("seconds", 60.0)
    return MinuteFold(minute=m * 60, **kw)


def cw(cid: int, identity: Identity, folds: list[MinuteFold]) -> ContainerWindow:
    return ContainerWindow(identity, cid, identity.cpu_limit_cores, None, tuple(folds))


def stalled_victim(cid: int = 10, some: float = 15.0, **kw: Any) -> list[MinuteFold]:
    return [fold(m, cpu_usage_s=30.0, cpu_some_s=some, cpu_full_s=0.0, **kw) for m in range(94, 99)]


def window(*cws: ContainerWindow, others: dict[int, Identity] | None = None) -> Window:
    w = Window(minutes=5, probe_loaded=True)
    for c in cws:
        w.containers[c.cgroup_id] = c
    w.others = others or {}
    return w


def test_no_probe_data_decides_from_psi_and_names_nobody(th: Thresholds) -> None:
    w = window(cw(10, ident("api"), stalled_victim()))
    w.probe_loaded = False
    (f,) = evaluate(w, th, T)
    assert f.kind is Kind.CPU_CONTENDED
    assert f.culprit is None
    assert "no scheduler probe data" in f.message
    assert f.severity is Severity.INFO


def test_opted_out_culprit_is_named_with_null_usage(th: Thresholds) -> None:
    vault = ident("vault", cpu_request_cores=0.1, opted_out=True)
    folds = [
        fold(m, cpu_usage_s=30.0, cpu_some_s=15.0, blame_s={77: 8.0, "idle": 2.0})
        for m in range(94, 99)
    ]
    (f,) = evaluate(window(cw(10, ident("api"), folds), others={77: vault}), th, T)
    assert f.kind is Kind.NOISY_NEIGHBOR
    assert f.culprit is not None
    d = f.to_dict()["culprit"]
    assert d["cpu_usage_cores"] is None
    assert d["opted_out"] is True
    assert d["cpu_request_cores"] == 0.1
    assert d["blame_share"] == 0.8
    assert d["ref"] == "ns/vault/c"


def test_culprit_inside_request_is_not_named(th: Thresholds) -> None:
    folds = [fold(m, cpu_some_s=15.0, blame_s={20: 9.0, "idle": 1.0}) for m in range(94, 99)]
    db = [fold(m, cpu_usage_s=60.0) for m in range(94, 99)]  # 1 core
    w = window(cw(10, ident("api"), folds), cw(20, ident("db", cpu_request_cores=2.0), db))
    (f,) = evaluate(w, th, T)
    assert f.kind is Kind.CPU_CONTENDED
    assert "oversubscribed" in f.message
    # ...and with a smaller request it is named.
    w.containers[20] = cw(20, ident("db", cpu_request_cores=0.5), db)
    (f,) = evaluate(w, th, T)
    assert f.kind is Kind.NOISY_NEIGHBOR
    assert f.culprit is not None and f.culprit.cpu_usage_cores == 1.0


def test_throttled_victim_is_never_a_noisy_neighbor_victim(th: Thresholds) -> None:
    folds = [
        fold(
            m,
            cpu_usage_s=30.0,
            cpu_some_s=40.0,
            cpu_full_s=30.0,
            periods=600,
            throttled_periods=300,
            throttled_s=25.0,
            blame_s={20: 50.0},
        )
        for m in range(94, 99)
    ]
    w = window(cw(10, ident("api", cpu_limit_cores=0.5), folds), cw(20, ident("b"), []))
    (f,) = evaluate(w, th, T)
    assert f.kind is Kind.CPU_THROTTLED
    assert f.culprit is None
    assert f.severity is Severity.CRITICAL
    assert f.evidence["throttled_ratio"] == 0.5
    assert f.evidence["throttled_seconds"] == 125.0
    assert f.first_seen == 94 * 60 and f.last_seen == 99 * 60


def test_gap_in_minutes_breaks_the_sustain(th: Thresholds) -> None:
    folds = [f for f in stalled_victim() if f.minute != 97 * 60]
    assert evaluate(window(cw(10, ident("api"), folds)), th, T) == []


def test_stale_window_fires_nothing(th: Thresholds) -> None:
    # The latest complete minute is 98; data ending at 96 is too old to be "now".
    folds = [f for f in stalled_victim() if f.minute <= 96 * 60]
    assert evaluate(window(cw(10, ident("api"), folds)), th, T) == []


def test_first_seen_is_the_start_of_the_run(th: Thresholds) -> None:
    folds = stalled_victim()
    folds[0].cpu_some_s = 1.0  # minute 94 calm, 95..98 stalled
    (f,) = evaluate(window(cw(10, ident("api"), folds)), th, T)
    assert f.first_seen == 95 * 60
    assert f.last_seen == 99 * 60


def test_culprit_shares_merge_unknown_and_mark_self(th: Thresholds) -> None:
    folds = [
        fold(m, blame_s={10: 2.0, 555: 1.0, 556: 1.0, "idle": 1.0, "unattributed": 1.0, 1: 4.0})
        for m in range(94, 99)
    ]
    root = Identity(cgroup="/", kind=CgroupKind.ROOT)
    w = window(cw(10, ident("api"), folds), others={1: root})
    shares = {(b.culprit_kind, b.ref): b.share for b in culprit_shares(w, 10, T, th)}
    assert shares == {
        ("kernel", "kernel"): 0.4,
        ("self", "ns/api/c"): 0.2,
        ("unknown", "unknown"): 0.2,  # two unresolved ids, merged
        ("idle", "idle"): 0.1,
        ("unknown", "unattributed"): 0.1,
    }
    assert culprit_shares(w, 12345, T, th) == []


def test_culprits_are_named_like_the_blame_gauge(th: Thresholds) -> None:
    docker = Identity("/system.slice/docker-0123456789ab.scope", CgroupKind.CONTAINER)
    unit = Identity("/system.slice/kubelet.service", CgroupKind.SYSTEM)
    folds = [fold(m, blame_s={30: 4.0, 31: 4.0, "idle": 2.0}) for m in range(94, 99)]
    w = window(cw(10, ident("api"), folds), others={30: docker, 31: unit})
    shares = {b.key: b for b in culprit_shares(w, 10, T, th)}
    assert shares[30].culprit_kind == "pod"
    assert shares[31].culprit_kind == "system"
    assert shares[31].ref == "system.slice/kubelet.service"
    assert shares[31].labels["culprit_cgroup"] == "/system.slice/kubelet.service"


def test_memory_overage_without_request_counts_in_full(th: Thresholds) -> None:
    a = cw(1, ident("a", memory_request_bytes=100), [fold(98, working_set_bytes=400)])
    b = cw(2, ident("b"), [fold(98, working_set_bytes=100)])
    c = cw(3, ident("c", memory_request_bytes=500), [fold(98, working_set_bytes=100)])
    o = memory_overages(window(a, b, c), T, th)
    assert [(x.identity.pod, x.bytes, x.share) for x in o] == [
        ("a", 300, 0.75),
        ("b", 100, 0.25),
        ("c", 0, 0.0),
    ]


def test_memory_limit_thrash_needs_limit_hits_every_sustain_minute(th: Thresholds) -> None:
    def folds(hits: list[int]) -> list[MinuteFold]:
        return [
            fold(m, mem_some_s=9.0, refaults=10, mem_events={"max": h})
            for m, h in zip(range(94, 99), hits, strict=True)
        ]

    w = window(cw(10, ident("app"), folds([0, 0, 0, 1, 1])))
    w.node = deque(NodeFold(minute=m * 60, seconds=60.0, mem_some_s=0.0) for m in range(94, 99))
    (f,) = evaluate(w, th, T)
    assert f.kind is Kind.MEMORY_LIMIT_THRASH
    assert f.evidence["limit_hits"] == [1, 1]
    w.containers[10] = cw(10, ident("app"), folds([1, 1, 1, 0, 1]))
    assert evaluate(w, th, T) == []


def test_runq_buckets_must_match_the_bounds(th: Thresholds) -> None:
    folds = [fold(m, runq_buckets=[1, 2, 3]) for m in range(94, 99)]
    with pytest.raises(ValueError, match="slots"):
        evaluate(window(cw(10, ident("api"), folds)), th, T)


def test_runq_evidence_reports_p99(th: Thresholds) -> None:
    slots = [0] * (len(RUNQ_BOUNDS_S) + 1)
    slots[RUNQ_BOUNDS_S.index(0.005)] = 90
    slots[RUNQ_BOUNDS_S.index(0.05)] = 10
    folds = [fold(m, cpu_some_s=0.0, runq_buckets=list(slots)) for m in range(94, 99)]
    (f,) = evaluate(window(cw(10, ident("api"), folds)), th, T)
    assert f.kind is Kind.CPU_CONTENDED
    assert f.evidence["runq_events"] == [100, 100]
    p99 = f.evidence["runq_p99_seconds"][-1]
    assert 0.02 < p99 <= 0.05


def _p99_at_least(counts: list[int], bound_s: float, th: Thresholds) -> bool:
    runq = runq_minute(fold(98, runq_buckets=counts), th)
    assert runq is not None
    return runq.p99_at_least(bound_s)


OVERFLOW = -1  # the bucket above the largest bound


def _counts(at: dict[int, int]) -> list[int]:
    """One minute's bucket counts: ``at`` maps a slot (or ``OVERFLOW``) to its count."""
    counts = [0] * (len(RUNQ_BOUNDS_S) + 1)
    for slot, n in at.items():
        counts[slot] = n
    return counts


def test_p99_is_decided_by_the_rules_rank_test(th: Thresholds) -> None:
    """rate(le=bound) / rate(le="+Inf") <= 0.99, as rules.terms writes runq_slow."""
    i20 = RUNQ_BOUNDS_S.index(0.02)
    assert not _p99_at_least(_counts({}), 0.02, th)  # no events: no verdict
    assert _p99_at_least(_counts({0: 98, i20 + 1: 2}), 0.02, th)  # 2 % above 20 ms
    assert not _p99_at_least(_counts({0: 990, i20 + 1: 9}), 0.02, th)  # 0.9 % above
    assert _p99_at_least(_counts({OVERFLOW: 1}), 0.2, th)  # above every bound


def test_p99_at_exactly_99_percent_follows_the_rules_not_histogram_quantile(
    th: Thresholds,
) -> None:
    # 99 waits under 5 ms, one over 1 s: histogram_quantile interpolates the p99 to
    # 5 ms (rank 99 is reached in the first bucket), but the rules' rank test counts
    # the minute as slow, and so does the evaluator (docs/findings.md).
    counts = _counts({0: 99, OVERFLOW: 1})
    assert prom_bucket_quantile(0.99, as_prom(counts)) == pytest.approx(RUNQ_BOUNDS_S[0])
    assert _p99_at_least(counts, 0.02, th)
    # At exactly 99 % the division's rounding decides, as in PromQL: 693 / 700 over
    # 60 s is 0.9900000000000001.
    assert not _p99_at_least(_counts({0: 693, OVERFLOW: 7}), 0.02, th)


def test_p99_agrees_with_histogram_quantile_but_at_exactly_99_percent(th: Thresholds) -> None:
    rng = random.Random(7)
    for _ in range(3000):
        counts = [rng.choice([0, 0, 0, 1, 2, 5, 50]) for _ in range(len(RUNQ_BOUNDS_S) + 1)]
        total = sum(counts)
        if total == 0:
            continue
        prom = prom_bucket_quantile(0.99, as_prom(counts))
        for bound in (th.runq_bound_s, th.critical_runq_bound_s):
            if count_le(counts, bound) * 100 == total * 99:
                continue  # the edge above
            assert _p99_at_least(counts, bound, th) == (prom >= bound), (counts, bound)


# -- the whole corpus through the model -------------------------------------------------


def _corpus_findings(th: Thresholds) -> list[Any]:
    out = []
    for scn in load_corpus(ROOT / "tests" / "scenarios"):
        for t in scn.eval_times(th):
            w = scn.window_at(t, th)
            fs = evaluate(w, th, float(t))
            out.append((fs, findings_document(fs, float(t), w, th.window_minutes)))
    return out


def test_documents_match_the_json_schema(th: Thresholds) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "exporter" / "data" / "finding.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    n = 0
    for fs, doc in _corpus_findings(th):
        json.dumps(doc)  # serialisable
        errors = list(validator.iter_errors(doc))
        assert not errors, errors[0]
        n += len(fs)
    assert n > 50


def test_finding_gauge(th: Thresholds) -> None:
    for fs, doc in _corpus_findings(th):
        t = doc["evaluated_at"]
        fam, at = finding_families(fs, float(t))
        assert fam.name == "contention_finding"
        assert at.samples[0].value == float(t)  # the pass the findings were evaluated for
        assert len(fam.samples) == len(fs)
        for f, s in zip(fs, fam.samples, strict=True):
            assert s.value == 1.0
            assert s.labels["kind"] == f.kind.value
            assert s.labels["level"] == f.severity.value  # the alert's `level` annotation
            # the identity labels of the alert the rules fire for it (promtool_tests)
            alert = alert_labels(f, th)
            own = {k: v for k, v in s.labels.items() if k not in ("kind", "level")}
            if f.kind not in (Kind.NOISY_NEIGHBOR, Kind.CPU_STEAL):  # alerts naming the culprit
                own.pop("culprit_kind", None)
                own.pop("culprit", None)
            assert own == {
                k: v
                for k, v in alert.items()
                if k not in ("severity", "finding", "instance", "job")
            }, (s.labels, alert)
    assert finding_families([], 0.0)[0].samples == []


# -- CLI -------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    return build_parser()


@pytest.fixture
def server(th: Thresholds) -> Iterator[str]:
    scn = next(s for s in load_corpus(ROOT / "tests" / "scenarios") if s.name == "mixed-node")
    w = scn.window_at(600, th)
    body = json.dumps(
        findings_document(evaluate(w, th, 600.0), 600.0, w, th.window_minutes)
    ).encode()

    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            code = 200 if self.path == "/findings" else 404
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body if code == 200 else b"{}")

        def log_message(self, *a: Any) -> None:
            pass

    srv = HTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_cli_findings_table_and_json(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    p = _parser()
    a = p.parse_args(["findings", "--url", server + "/findings", "--evidence"])
    assert a.handler(a) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["SEVERITY", "KIND", "VICTIM", "CULPRIT", "SINCE"]
    assert "noisy-neighbor" in out and "jobs/crunch-1/worker [pod]" in out
    assert "throttled_ratio:" in out
    a = p.parse_args(["findings", "--url", server + "/findings", "--json"])
    assert a.handler(a) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {f["kind"] for f in doc["findings"]} == {
        "cpu-throttled",
        "noisy-neighbor",
        "memory-limit-thrash",
    }


def test_cli_findings_errors(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    p = _parser()
    a = p.parse_args(["findings", "--url", server + "/nope"])
    assert a.handler(a) == 1
    assert "HTTP 404" in capsys.readouterr().err
    a = p.parse_args(["findings", "--url", "http://127.0.0.1:9/findings", "--timeout", "1"])
    assert a.handler(a) == 1
    assert "cannot reach" in capsys.readouterr().err


def test_cli_diagnose_runs_the_agent_on_a_node(capsys: pytest.CaptureFixture[str]) -> None:
    """diagnose runs the exporter's own passes (here on a fixture node, probe off) and
    says what the last pass saw: the containers, the probe, the findings."""
    root = ROOT / "tests/fixtures/v2-systemd"
    node = ["--path.sysfs", str(root / "sys"), "--path.procfs", str(root / "proc")]
    args = ["diagnose", "--duration", "0.01", "--quiet", "--no-probe", *node]
    a = _parser().parse_args(args)
    assert a.handler(a) == 0
    out = capsys.readouterr()
    first = out.out.splitlines()[0]
    assert re.match(r"9 containers sampled in [12] passes; ", first)
    assert "scheduler probe off: disabled" in first and "no culprit can be named" in first
    assert "no findings" in out.out and "demo --list" in out.out
    assert "need 2 complete minutes" in out.err
    a = _parser().parse_args([*args, "--json"])
    assert a.handler(a) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["probe_loaded"] is False and doc["findings"] == []
    assert doc["containers"] > 0 and doc["window_minutes"] == 5


def test_cli_diagnose_with_the_probe_loaded_says_so_next_to_the_culprit(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """diagnose with the scheduler probe loaded (a stand-in; the real one in
    tests/e2e/diagnose.py, beside the noisy-neighbour lab) and a finding naming a culprit (the
    stand-in evaluator): the probe line, the evidence and --json say the probe was
    loaded, and "no blame" appears nowhere. (diagnose once closed the agent, and the
    probe with it, before reading what it printed: "probe not loaded (no blame)" next
    to a named culprit.)"""
    probes: list[FakeProbe] = []

    def agent(config: AgentConfig, th: Thresholds) -> Agent:
        probes.append(FakeProbe())
        return Agent(config, th, probe=probes[-1])

    monkeypatch.setattr("exporter.commands.diagnose.Agent", agent)
    monkeypatch.setattr("exporter.agent.evaluate", pass_findings)
    root = ROOT / "tests/fixtures/v2-systemd"
    node = ["--path.sysfs", str(root / "sys"), "--path.procfs", str(root / "proc")]
    args = ["diagnose", "--duration", "0.01", "--quiet", *node]
    a = _parser().parse_args(args)
    assert a.handler(a) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert "scheduler probe loaded by core" in first and "culprits can be named" in first
    assert "no blame" not in out and "probe_loaded: false" not in out, out
    named = [r.split() for r in out.splitlines() if " noisy-neighbor " in r]
    assert named and all(r[3].startswith("pass-at-") for r in named), out
    assert "probe_loaded: true" in out
    a = _parser().parse_args([*args, "--json"])
    assert a.handler(a) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["probe_loaded"] is True and doc["findings"], doc
    for f in doc["findings"]:
        assert f["culprit"]["ref"].startswith("pass-at-")
        assert f["evidence"]["probe_loaded"] is True
    assert [p.loaded for p in probes] == [False, False]  # diagnose closed it, afterwards


def test_the_minute_that_just_ended_may_not_be_folded_yet(th: Thresholds) -> None:
    """Between a minute boundary and the sampler's next pass, the previous minute is the
    latest: verdicts must not blink off. Anything older is stale."""
    w = window(cw(10, ident("api"), stalled_victim()))  # minutes 94..98
    assert [f.kind for f in evaluate(w, th, T)] == [Kind.CPU_CONTENDED]  # at 99:00
    assert [f.kind for f in evaluate(w, th, T + 61)] == [Kind.CPU_CONTENDED]  # 100:01
    assert evaluate(w, th, T + 121) == []  # 101:01: two minutes without data


@pytest.mark.parametrize(
    ("first_seen", "judged"),
    [
        (0.0, True),  # long ago
        (97 * 60, True),  # since the start of the first sustain minute (97)
        (97 * 60 + 15, True),  # 15 s into it: 45 s of that minute watched, enough
        (97 * 60 + 16, False),  # later: the minute is not a whole minute of data
        (98 * 60, False),  # only the latest minute watched
    ],
)
def test_nothing_is_judged_before_sustain_minutes_of_watching(
    th: Thresholds, first_seen: float, judged: bool
) -> None:
    """A young container is not judged on its first seconds (young series), whatever
    its folds say; old enough, the same folds give the finding."""
    throttled = [
        fold(
            m,
            cpu_usage_s=12.0,
            periods=600,
            throttled_periods=500,
            cpu_some_s=50.0,
            cpu_full_s=45.0,
        )
        for m in range(97, 99)
    ]
    c = cw(10, ident("api", cpu_limit_cores=0.2), throttled)
    c.first_seen = first_seen
    kinds = [f.kind for f in evaluate(window(c), th, T)]
    assert kinds == ([Kind.CPU_THROTTLED] if judged else [])


def test_workload_culprit_says_it_is_a_workload_of_n_containers(th: Thresholds) -> None:
    """A Deployment replaced every two minutes: its name, its member count (gone ones
    too), the running replica's use against its request, and requests adding up to that
    use as the remediation (while the replica that just started has no use yet, sized
    from its gone replicas' use)."""
    from tests.support.corpus import load_scenario

    scn = load_scenario(ROOT / "tests/scenarios/080_workload_culprit_replaced.yaml")
    (f,) = evaluate(scn.window_at(7 * 60, th), th, 7 * 60.0)
    c = f.culprit
    assert f.kind is Kind.NOISY_NEIGHBOR and c is not None
    assert (c.kind, c.ref, c.members) == ("workload", "jobs/Deployment/batch", 3)
    assert c.blame_share == pytest.approx(0.6)
    assert c.cpu_usage_cores == pytest.approx(1.5)  # the running replica
    assert c.cpu_request_cores == 0.5
    assert "workload jobs/Deployment/batch, made of 3 containers" in f.message
    assert "1.50 cores against requests of 0.5 cores" in f.message
    d = f.to_dict()["culprit"]
    assert (d["workload"], d["members"], d["namespace"], d["cgroup_id"]) == (
        "Deployment/batch",
        3,
        "jobs",
        0,
    )
    assert f.suggestion is not None and f.suggestion.value == 1500
    assert f.suggestion.to_dict()["setting"] == "cpu_request"
    assert "jobs/Deployment/batch CPU requests that add up to at least 1500m" in (
        f.remediation_text()
    )
    (young,) = evaluate(scn.window_at(6 * 60, th), th, 6 * 60.0)
    assert young.suggestion is not None and young.suggestion.value == 1500
    assert young.suggestion.basis["running_containers"] == 1
    assert young.suggestion.basis["measured_containers"] == 2  # batch1 and batch2, gone
    assert "1500m each for 1 running at once" in young.suggestion.text
