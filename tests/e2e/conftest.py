"""One alerting chain for the whole end-to-end session: what a default install runs.

Started once and shared by every lab (run in slots: tests/e2e/test_labs_e2e.py), built
from the chart rendered with its defaults (tests/e2e/default_install.py) but for the
labs' short window (``thresholds: {windowMinutes: 2, sustainMinutes: 1}``, every
threshold at its default). The chart takes a window other than the packaged one only
with its rules and dashboards left to the generators (docs/kubernetes.md): so the
exporter's ConfigMap comes from the chart's values, and the PrometheusRule is the one
``contention-exporter rules generate --config.file`` writes for the same thresholds (what
the chart would ship for them; its templating is checked equal to the generators in
tests/unit/test_chart_thresholds.py):

* the ``lab-node`` exporter: started exactly as the DaemonSet starts it (its args, env
  and mounts; Kubernetes mode, against the API emulator, which holds the labs' pods),
  with the scheduler probe, on this host's kernel;
* one exporter per replayed lab (memory, CPU steal), each a node of its own, reading a
  fixture tree that a thread rewrites every second, named by a metadata file (host
  mode: the replayed trees are not kubelet-shaped), and a quiet node: an exporter
  started as the DaemonSet starts it on a still fixture tree (probe off), which must
  never notify; a monitor thread records what the replays' exporters say meanwhile;
* Prometheus scraping all of them with the scrape job the Prometheus Operator
  generates from the rendered ServiceMonitor (its relabelings, the target labels of
  each exporter's pod), loaded with the rendered PrometheusRule's groups and
  kube-prometheus-stack's Watchdog and InfoInhibitor;
* Alertmanager with kube-prometheus-stack's default configuration (routes, inhibit
  rules, grouping by namespace) plus the pack's inhibit rule, the root receiver a
  webhook in the test.

Compressed time, the lane's one liberty besides the labs' window: scrapes every 1 s
(the ServiceMonitor says 15 s), rule groups every 2 s (1m), Alertmanager's group_wait
and group_interval scaled by the same 2/60 (30 s -> 1 s, 5 m -> 10 s). The deviations
of the exporter's start from the DaemonSet's (listen address, kubeconfig) are printed.
Everything listens on 127.0.0.1 and lives in a temporary directory; every process is
stopped by PID and every lab cgroup removed, pass or fail. Real-kernel timing: run the
suite under ``flock /tmp/contention-kernel.lock`` when other kernel suites may run.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.findings.thresholds import Thresholds, load_thresholds
from exporter.rules.pack import render_prometheus_rule
from labs import workload
from labs.cgroups import LabError, LabLayout, cleanup_stale, detect_layout
from labs.exporter_proc import ExporterError, ExporterProcess, free_port
from labs.kube import NODE_NAME
from labs.replay import REPLAYS, ReplayLab, ReplayRun
from labs.scenarios import (
    SHORT_WINDOW,
    LabRun,
    MetadataFile,
    finding_key,
    write_short_window_config,
)
from labs.workload import WorkloadLab
from tests.e2e import default_install as di
from tests.e2e.chain import (
    RULE_EVAL_INTERVAL,
    SCRAPE_INTERVAL,
    Chain,
    ChainError,
    container_of,
    generate_rules,
    missing_binaries,
)
from tests.e2e.dashboard_queries import all_panel_queries
from tests.support.kube_emulator import Emulator, kubeconfig
from tests.support.kube_emulator import pod as api_pod

REPLAY_STALL_SECONDS = 150.0
# The chart values the lane gives: the labs' short window (so the rules and dashboards
# come from the generators for it: the chart refuses another window for its own).
CHART_VALUES: dict[str, Any] = {
    "thresholds": dict(SHORT_WINDOW),
    "prometheusRule": {"enabled": False},
    "dashboards": {"enabled": False},
}
# The rendered rule groups' interval (1m) over the lane's (2 s).
TIME_SCALE = 2.0 / 60.0
JOB = "contention-exporter"  # the job the chart's ServiceMonitor gives its targets
QUIET_NODE = "quiet-node"
QUIET_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "v2-systemd"
# The fixture tree's one container the API names (as in test_default_install_e2e.py).
QUIET_POD = ("shop", "api-7d9f8c6b5-x2k4q", "app")
QUIET_UID = "3f9d2a41-6c0e-4b7a-9f15-2d8c7e41b0a3"
QUIET_CID = "82d09898ea003cbf23a5fd036c36c9d616ac203ed0ca1504788be5ab14e37e3a"


def replay_node(name: str) -> str:
    """The node a replayed lab's exporter stands for (its ``instance``)."""
    return f"replay-{name}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Every collected item comes through here: select by the marker (a keyword match
    # would also take any test under a directory named "e2e").
    e2e_items = [i for i in items if i.get_closest_marker("e2e") is not None]
    if not e2e_items:
        return
    from labs.cgroups import unavailable_reason

    missing = missing_binaries()
    reason = (
        f"end-to-end test: {', '.join(missing)} not installed (scripts/test.sh installs them)"
        if missing
        else None
    )
    kreason = unavailable_reason()
    for item in e2e_items:
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
        elif kreason is not None and item.get_closest_marker("kernel") is not None:
            item.add_marker(pytest.mark.skip(reason=f"real-kernel test: {kreason}"))


@dataclass
class ReplayWatch:
    """A replayed lab, its exporter, and what that exporter said over time."""

    lab: ReplayLab
    run: ReplayRun
    exporter: ExporterProcess
    metadata: MetadataFile
    findings: list[tuple[float, set[tuple[str, str, str | None, str]]]] = field(
        default_factory=list
    )
    matched_at: float | None = None  # time.time() /findings first held the expected set
    dashboards: dict[tuple[str, str, str], bool] | None = None
    dashboard_errors: list[str] = field(default_factory=list)
    concerned: dict[str, bool] = field(default_factory=dict)
    observed: dict[str, Any] = field(default_factory=dict)


@dataclass
class WorkloadCase:
    """The workload lab (labs.workload) as the session ran it."""

    lab: WorkloadLab

    def refs(self) -> set[str]:
        out = {f"{workload.NAMESPACE}/{workload.VICTIM_POD}/app"}
        out |= {f"{p.namespace}/{p.name}/{p.container}" for p, _, _ in self.lab.generations}
        return out

    def paths(self) -> set[str]:
        out = {cg.path for _, cg, _ in self.lab.generations}
        return out | ({self.lab.victim.path} if self.lab.victim is not None else set())


@dataclass
class E2E:
    workdir: str
    config: str
    thresholds: Thresholds
    layout: LabLayout | None
    metadata: MetadataFile
    node: InstalledExporter
    chain: Chain
    probe_loaded: bool
    probe_reason: str
    probe_loader: str  # "core" or "bcc" when loaded
    replays: dict[str, ReplayWatch]
    api: Emulator  # the API server the lab-node exporter watches (the labs' pods)
    objects: list[dict[str, Any]]  # the chart as rendered
    deviations: list[str]  # how the exporter's start differs from the DaemonSet's
    quiet: ExporterProcess
    # filled by the tests:
    workload: WorkloadCase | None = None
    stopped: dict[str, float] = field(default_factory=dict)  # lab -> workloads stopped
    runs: dict[str, LabRun] = field(default_factory=dict)  # removed by test_3 / teardown
    coverage: dict[tuple[str, str, str], bool] = field(default_factory=dict)
    observed: dict[str, Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def node_instance(self) -> str:
        """The lab node's ``instance`` label: its node name (the ServiceMonitor's
        relabeling)."""
        return NODE_NAME

    def record_coverage(self, results: dict[tuple[str, str, str], bool]) -> None:
        with self.lock:
            for k, has in results.items():
                self.coverage[k] = self.coverage.get(k, False) or has

    def announce_labs_done(self) -> None:
        """Every real-kernel lab and the self-test have run: what is left (their alerts
        resolving, the idle containers deleted) holds on a busy machine, since an idle
        container can be neither throttled nor kept waiting. Said by writing the file
        ``$CONTENTION_E2E_LABS_DONE`` names, when set: scripts/test.sh then runs its
        lab-CPU and any-load lanes beside the rest of this session."""
        path = os.environ.get("CONTENTION_E2E_LABS_DONE")
        if path:
            with open(path, "w") as f:
                f.write(f"{time.time():.3f}\n")

    def save_observed(self) -> None:
        path = os.environ.get("CONTENTION_E2E_OBSERVED") or os.path.join(
            self.workdir, "observed.json"
        )
        with open(path, "w") as f:
            json.dump(self.observed, f, indent=1, sort_keys=True, default=str)


def run_dashboards(
    chain: Chain, th: Thresholds
) -> tuple[dict[tuple[str, str, str], bool], list[str], dict[tuple[str, str, str], str]]:
    """Every dashboard panel query against Prometheus: which returned data, the errors,
    and each result as JSON text (to look for a lab's containers in it)."""
    has: dict[tuple[str, str, str], bool] = {}
    texts: dict[tuple[str, str, str], str] = {}
    errors: list[str] = []
    for uid, title, expr in all_panel_queries(thresholds=th):
        key = (uid, title, expr)
        try:
            r = chain.query(expr)
        except (ChainError, OSError, ValueError) as e:
            errors.append(f"{uid} / {title}: {e}")
            has[key] = False
            continue
        has[key] = has.get(key, False) or bool(r)
        texts[key] = texts.get(key, "") + json.dumps(r)
    return has, errors, texts


# Panels (title prefixes) that must show a replay's victim while it stalls; True: a
# node panel, which must show the replay's exporter instead.
REPLAY_CONCERNS: dict[str, tuple[tuple[str, bool], ...]] = {
    "memory-pressure": (
        ("Active findings for this selection", False),
        ("Memory pressure some (per minute)", False),
        ("Workingset refaults per minute", False),
        ("Memory working set vs request vs limit", False),
    ),
    "memory-limit-thrash": (
        ("Active findings for this selection", False),
        ("Memory pressure some (per minute)", False),
        ("Workingset refaults per minute", False),
        ("Memory limit hits per minute", False),
        ("Memory working set vs request vs limit", False),
    ),
    "cpu-steal": (
        ("Active findings for this selection", False),
        ("CPU pressure some (per minute)", False),
        ("CPU used vs request vs limit", False),
        ("CPU steal", True),
    ),
}


def _monitor(e2e: E2E, stop: threading.Event) -> None:
    """Record the replay exporters' /findings every 2 s; once a replay's expected
    findings are there and its alerts fire, run the dashboard queries once for it."""
    while not stop.wait(2.0):
        for name, w in e2e.replays.items():
            try:
                status, body = w.exporter.get("/findings", timeout=3)
                doc = json.loads(body) if status == 200 else {}
            except (OSError, ValueError):
                continue
            rows = w.lab.findings(doc)
            keys = {finding_key(f) for f in rows}
            w.findings.append((time.time(), keys))
            if keys == w.lab.expected_keys() and w.matched_at is None:
                w.matched_at = time.time()
                w.observed["findings"] = rows
            if w.matched_at is not None and w.dashboards is None and w.run.stalled:
                # (kind, victim): a container by name, the node as None (no victim labels)
                node = replay_node(name)
                firing = {
                    (a["labels"].get("finding"), container_of(a["labels"]))
                    for a in e2e.chain.firing_alerts()
                    if a["labels"].get("instance") == node
                }
                gauge = {
                    (r["metric"].get("kind"), container_of(r["metric"]))
                    for r in e2e.chain.query(f'contention_finding{{instance="{node}"}}')
                }
                victims = {(e.kind, w.lab.alert_victim(e.victim)) for e in w.lab.expect}
                if victims <= firing and victims <= gauge:
                    has, errors, texts = run_dashboards(e2e.chain, e2e.thresholds)
                    w.dashboards = has
                    w.dashboard_errors = errors
                    e2e.record_coverage(has)
                    # the panels' `victim`: the first container expected; node panels
                    # show the replay's exporter (its instance)
                    victim = w.lab.ref(w.lab.container_expects[0].victim)
                    instance = node
                    for title, node_panel in REPLAY_CONCERNS.get(name, ()):
                        needle = instance if node_panel else victim
                        w.concerned[title] = any(
                            needle in t for (_, tt, _), t in texts.items() if tt.startswith(title)
                        )


class InstalledExporter(ExporterProcess):
    """The exporter started exactly as a :class:`~tests.e2e.default_install.Invocation`
    says (its argv holds the listen address), with that environment alone."""

    def __init__(self, inv: di.Invocation, port: int, log_path: str) -> None:
        super().__init__(env=inv.env, port=port, log_path=log_path)
        self.invocation = inv

    def argv(self) -> list[str]:
        return list(self.invocation.argv)


def _install(
    workdir: str, objects: list[dict[str, Any]], kubeconfig_path: str, node: str, **kw: Any
) -> InstalledExporter:
    port = free_port()
    inv = di.exporter_from_daemonset(
        objects,
        workdir=os.path.join(workdir, f"rootfs-{node}"),
        node_name=node,
        kubeconfig=kubeconfig_path,
        listen=f"127.0.0.1:{port}",
        **kw,
    )
    return InstalledExporter(inv, port, os.path.join(workdir, f"exporter-{node}.log"))


def _scrape_job(
    objects: Sequence[dict[str, Any]], exporters: Mapping[str, ExporterProcess]
) -> dict[str, Any]:
    """The operator's scrape job for the rendered monitor, one static target per
    exporter (keyed by the node it stands for), each with the discovery labels of the
    DaemonSet's pod on that node."""
    monitors = di.objects_of(objects, "ServiceMonitor") or di.objects_of(objects, "PodMonitor")
    if len(monitors) != 1:
        raise ChainError(f"the chart rendered {len(monitors)} monitors, want one")
    services = di.objects_of(objects, "Service")
    job: dict[str, Any] | None = None
    for node, exp in exporters.items():
        target = f"127.0.0.1:{exp.port}"
        pod = (
            exp.invocation.pod
            if isinstance(exp, InstalledExporter)
            else di.daemonset_pod(objects, node=node, listen=target)
        )
        one = di.operator_scrape_config(
            monitors[0],
            target=target,
            pod=pod,
            service=services[0] if services else None,
            scrape_interval=SCRAPE_INTERVAL,
        )
        if job is None:
            job = one
        else:
            job["static_configs"] += one["static_configs"]
    assert job is not None
    return job


def _write_yaml(path: str, doc: Any) -> str:
    with open(path, "w") as f:
        yaml.safe_dump(doc, f, sort_keys=False, width=4096)
    return path


def _probe_state(node: ExporterProcess, kernel_reason: str | None) -> tuple[bool, str, str]:
    loaded = node.scrape().select("contention_probe_loaded")
    ok = bool(loaded) and loaded[0].value == 1
    loader = loaded[0].labels.get("loader", "") if ok else ""
    reason = ", ".join(f"{s.labels.get('reason', '')}" for s in loaded if s.value != 1) or (
        "not started: " + kernel_reason if kernel_reason else ""
    )
    return ok, reason, loader


@pytest.fixture(scope="package")
def e2e(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2E]:
    missing = missing_binaries()
    if missing:
        pytest.skip(f"end-to-end test: {', '.join(missing)} not installed")
    from labs.cgroups import unavailable_reason

    kernel_reason = unavailable_reason()
    workdir = str(tmp_path_factory.mktemp("e2e"))
    config = write_short_window_config(workdir)  # the chart's values, as a file
    th = load_thresholds(config)
    _, inhibit_rules = generate_rules(workdir, config)
    layout = None
    if kernel_reason is None:
        layout = detect_layout()
        cleanup_stale(layout=layout)
    metadata = MetadataFile(os.path.join(workdir, "metadata.yaml"))
    stack = contextlib.ExitStack()
    stop_monitor = threading.Event()
    try:
        objects = di.render_chart(CHART_VALUES)
        api = Emulator()
        stack.callback(api.close)
        api.start()
        kc = kubeconfig(Path(workdir) / "kubeconfig", api.port)
        ns, pod_name, container = QUIET_POD
        api.create(
            api_pod(pod_name, QUIET_UID, ns=ns, node=QUIET_NODE,
                    containers=[(container, {}, QUIET_CID)])
        )  # fmt: skip
        node = _install(workdir, objects, kc, NODE_NAME)
        stack.callback(node.close)
        node.start(timeout=60)
        probe_loaded, probe_reason, probe_loader = _probe_state(node, kernel_reason)
        quiet_objects = di.render_chart({**CHART_VALUES, "probe": {"loader": "off"}})
        quiet = _install(workdir, quiet_objects, kc, QUIET_NODE, host_root=QUIET_FIXTURE)
        stack.callback(quiet.close)
        quiet.start(timeout=60)
        replays: dict[str, ReplayWatch] = {}
        for name, rlab in REPLAYS.items():
            meta = MetadataFile(os.path.join(workdir, f"metadata-{name}.yaml"))
            run = ReplayRun(
                rlab,
                stall_seconds=REPLAY_STALL_SECONDS,
                metadata=meta,
                root=os.path.join(workdir, f"replay-{name}"),
            )
            exp = run.exporter(config, os.path.join(workdir, f"exporter-replay-{name}.log"))
            stack.callback(exp.close)
            stack.callback(run.stop)
            exp.start(timeout=60)
            replays[name] = ReplayWatch(rlab, run, exp, meta)
        exporters: dict[str, ExporterProcess] = {NODE_NAME: node, QUIET_NODE: quiet}
        exporters.update({replay_node(n): w.exporter for n, w in replays.items()})
        rule = yaml.safe_load(render_prometheus_rule(th))
        chain = Chain(
            workdir=workdir,
            rule_file=_write_yaml(
                os.path.join(workdir, "prometheusrule.rules.yaml"),
                di.prometheus_rule_file(rule, interval=RULE_EVAL_INTERVAL),
            ),
            targets={},
            scrape_configs=[_scrape_job(objects, exporters)],
            extra_rule_files=[
                _write_yaml(os.path.join(workdir, "kps-general.rules.yaml"), di.KPS_GENERAL_RULES)
            ],
            alertmanager_config=lambda url: di.kps_alertmanager_config(
                webhook_url=url, extra_inhibit_rules=inhibit_rules, time_scale=TIME_SCALE
            ),
        )
        stack.callback(chain.stop)
        chain.start(timeout=60)
        env = E2E(
            workdir=workdir,
            config=config,
            thresholds=th,
            layout=layout,
            metadata=metadata,
            node=node,
            chain=chain,
            probe_loaded=probe_loaded,
            probe_reason=probe_reason,
            probe_loader=probe_loader,
            replays=replays,
            api=api,
            objects=objects,
            deviations=node.invocation.deviations,
            quiet=quiet,
        )
        print("\n[e2e] the lab node's exporter differs from the DaemonSet's start in: "
              + "; ".join(env.deviations))  # fmt: skip
        for w in replays.values():
            w.run.start()
        monitor = threading.Thread(target=_monitor, args=(env, stop_monitor), daemon=True)
        monitor.start()
        stack.callback(monitor.join, 10)
        stack.callback(stop_monitor.set)
        try:
            yield env
        finally:
            env.save_observed()
            errors = []
            for lab_run in env.runs.values():  # every lab's cgroups, whatever happened
                try:
                    lab_run.stop()
                except LabError as err:
                    errors.append(str(err))
            if env.workload is not None:  # its cgroups too, if test_3b never removed them
                try:
                    env.workload.lab.stop()
                except LabError as err:
                    errors.append(str(err))
            if errors:
                pytest.fail("lab cleanup failed: " + "; ".join(errors), pytrace=False)
    except (ChainError, ExporterError, di.InstallError) as e:
        pytest.fail(f"could not start the end-to-end chain: {e}", pytrace=False)
    finally:
        stack.close()
        if layout is not None:
            with contextlib.suppress(LabError):
                cleanup_stale(layout=layout)
        metadata.delete()
