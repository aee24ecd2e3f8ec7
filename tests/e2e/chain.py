"""The real alerting chain for the end-to-end tests: Prometheus, Alertmanager and a
webhook receiver, all on 127.0.0.1 with temporary directories.

Every process is started here and stopped here by its PID; every wait is bounded and
fails with the process's own log.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

import yaml
from prometheus_client.parser import text_string_to_metric_families

from exporter.rules.finding_alerts import ALERT_NAMES
from labs.exporter_proc import exporter_command, free_port, terminate
from labs.scenarios import LAB_CONTAINER, LAB_NAMESPACE

PROMETHEUS = "prometheus"
ALERTMANAGER = "prometheus-alertmanager"
PROMTOOL = "promtool"

# Rule evaluation every 2 s instead of the generated group's 1m (the rules' own
# windows and thresholds are untouched): alerts follow the data within seconds.
RULE_EVAL_INTERVAL = "2s"
SCRAPE_INTERVAL = "1s"


class ChainError(RuntimeError):
    pass


def missing_binaries() -> list[str]:
    return [b for b in (PROMETHEUS, ALERTMANAGER, PROMTOOL) if shutil.which(b) is None]


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return int(r.status), r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return int(e.code), e.read().decode("utf-8", "replace")


def wait_until(
    what: str,
    predicate: Callable[[], bool],
    timeout: float,
    interval: float = 0.5,
    detail: Callable[[], str] | None = None,
) -> None:
    """Poll ``predicate`` until true; :class:`ChainError` naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, ValueError):
            if predicate():
                return
        if time.monotonic() >= deadline:
            extra = f"\n{detail()}" if detail is not None else ""
            raise ChainError(f"timed out after {timeout:.0f}s waiting for {what}{extra}")
        time.sleep(interval)


# --- webhook receiver ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Notification:
    received: float  # time.time()
    status: str  # firing | resolved
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    starts_at: str
    ends_at: str


class Webhook:
    """An Alertmanager webhook receiver on 127.0.0.1: records every alert it is sent."""

    def __init__(self) -> None:
        self.notifications: list[Notification] = []
        self.payloads = 0
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                try:
                    outer._record(json.loads(body))
                    self.send_response(200)
                except ValueError:
                    self.send_response(400)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/alerts"

    def start(self) -> Webhook:
        self._thread.start()
        return self

    def _record(self, payload: Mapping[str, Any]) -> None:
        now = time.time()
        with self._lock:
            self.payloads += 1
            for a in payload.get("alerts") or []:
                self.notifications.append(
                    Notification(
                        now,
                        str(a.get("status")),
                        dict(a.get("labels") or {}),
                        dict(a.get("annotations") or {}),
                        str(a.get("startsAt")),
                        str(a.get("endsAt")),
                    )
                )

    def snapshot(self) -> list[Notification]:
        with self._lock:
            return list(self.notifications)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def container_of(labels: Mapping[str, str], prefix: str = "") -> str | None:
    """The container a series or alert names (``prefix="culprit_"``: its culprit):
    ``namespace/pod/container`` once named, else its cgroup path (docs/metrics.md)."""
    if labels.get(prefix + "pod"):
        return "/".join(labels.get(prefix + k, "") for k in ("namespace", "pod", "container"))
    return labels.get(prefix + "cgroup") or None


def received_log(notes: Sequence[Any]) -> list[dict[str, Any]]:
    """What the receiver got, one row per alert per notification in order (what the
    on-call person read): when, firing or resolved, alert, severity, level, victim,
    culprit and remediation. A firing alert repeated in a later notification of its
    group is one row only (same startsAt and status)."""
    rows, seen = [], set()
    for n in sorted(notes, key=lambda n: n.received):
        key = (tuple(sorted(n.labels.items())), n.status, n.starts_at)
        if key in seen:
            continue
        seen.add(key)
        rows.append(
            {
                "received": time.strftime("%H:%M:%S", time.gmtime(n.received)),
                "status": n.status,
                "alert": n.labels.get("alertname"),
                "severity": n.labels.get("severity"),
                "level": n.annotations.get("level"),
                "victim": container_of(n.labels),
                "culprit": container_of(n.labels, "culprit_") or n.labels.get("culprit"),
                "remediation": n.annotations.get("remediation"),
            }
        )
    return rows


def alert_key(labels: Mapping[str, str]) -> tuple[str, str, str, str | None]:
    """``(alertname, severity, victim, culprit or None)``, containers as
    :func:`container_of` names them (``severity``: the kind's fixed label)."""
    return (
        labels.get("alertname", ""),
        labels.get("severity", ""),
        container_of(labels) or "",
        container_of(labels, "culprit_"),
    )


def levels_agree(alerts: Sequence[Mapping[str, Any]], want: Mapping[Any, str]) -> bool:
    """Every expected alert (by :func:`alert_key`) is among Prometheus's ``alerts`` with
    the expected finding level in its ``level`` annotation (docs/findings.md#level-and-severity)."""
    return all(
        any(
            alert_key(a["labels"]) == key and (a.get("annotations") or {}).get("level") == level
            for a in alerts
        )
        for key, level in want.items()
    )


def _identity(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def alert_states(notes: Sequence[Notification]) -> dict[tuple[tuple[str, str], ...], str]:
    """The latest status (firing/resolved) of every alert (by its full label set)."""
    out: dict[tuple[tuple[str, str], ...], str] = {}
    for n in notes:
        out[_identity(n.labels)] = n.status
    return out


# --- processes -------------------------------------------------------------------------


@dataclass
class Proc:
    name: str
    argv: list[str]
    log_path: str
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                close_fds=True,
            )

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log_tail(self, n: int = 30) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return "\n".join(f.read().splitlines()[-n:])
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        if self.popen is not None:
            terminate(self.popen, timeout)


def prepare_rule_file(generated: str, out_path: str, interval: str = RULE_EVAL_INTERVAL) -> str:
    """Copy a generated rule file (``rules generate --interval`` ``interval``) for
    Prometheus, after ``promtool check rules``."""
    with open(generated) as f:
        doc = yaml.safe_load(f)
    intervals = {g.get("interval") for g in doc["groups"]}
    if intervals != {interval}:
        raise ChainError(f"{generated}: group intervals {intervals}, want {interval}")
    with open(out_path, "w") as f:
        yaml.safe_dump(doc, f, sort_keys=False, width=4096)
    res = subprocess.run(
        [PROMTOOL, "check", "rules", out_path], capture_output=True, text=True, timeout=60
    )
    if res.returncode != 0:
        raise ChainError(f"promtool check rules {out_path} failed:\n{res.stdout}{res.stderr}")
    return out_path


def generate_rules(
    workdir: str, config: str, interval: str = RULE_EVAL_INTERVAL
) -> tuple[str, list[dict[str, Any]]]:
    """``contention-exporter rules generate --config.file <config>`` with the rule group
    evaluated every ``interval``: the rule file for :class:`Chain`'s Prometheus (checked
    by promtool; give the chain the same ``eval_interval``) and the inhibit rules for
    its Alertmanager, both as shipped."""
    out_dir = os.path.join(workdir, "generated")
    res = subprocess.run(
        [
            *exporter_command(),
            "rules",
            "generate",
            "--config.file",
            config,
            "--output.dir",
            out_dir,
            "--interval",
            interval,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if res.returncode != 0:
        raise ChainError(f"rules generate failed ({res.returncode}):\n{res.stdout}{res.stderr}")
    rule_file = prepare_rule_file(
        os.path.join(out_dir, "rules", "contention.rules.yaml"),
        os.path.join(workdir, "contention.rules.e2e.yaml"),
        interval,
    )
    with open(os.path.join(out_dir, "rules", "alertmanager.inhibit.yaml")) as f:
        inhibit: list[dict[str, Any]] = yaml.safe_load(f)["inhibit_rules"]
    return rule_file, inhibit


class LabLike(Protocol):
    def pod(self, role: str) -> str: ...


def expected_alert_labels(
    kind: str, severity: str, victim: str, lab: LabLike, instance: str, job: str
) -> dict[str, str]:
    """An expected alert's name, severity (the kind's fixed ``alertSeverity``, not the
    finding's level: that is the ``level`` annotation), kind and victim labels, for a
    lab container named by the labs' metadata file (so by namespace/pod/container, not
    its path)."""
    return {
        "alertname": ALERT_NAMES[kind],  # type: ignore[index]
        "severity": severity,
        "finding": kind,
        "namespace": LAB_NAMESPACE,
        "pod": lab.pod(victim),
        "container": LAB_CONTAINER,
        "instance": instance,
        "job": job,
    }


@dataclass
class Chain:
    """Alertmanager → webhook, and Prometheus scraping the given targets with a rule file.

    By default a minimal chain: static targets per job, one notification group per alert.
    ``scrape_configs``, ``extra_rule_files`` and ``alertmanager_config`` (given the
    webhook's URL) replace those parts with a configuration of the caller's, e.g. what a
    default install runs (tests/e2e/default_install.py)."""

    workdir: str
    rule_file: str
    targets: dict[str, list[str]]  # job -> ["127.0.0.1:port", ...]
    # Alertmanager inhibit_rules (the shipped rules/alertmanager.inhibit.yaml)
    inhibit_rules: list[dict[str, Any]] = field(default_factory=list)
    scrape_configs: list[dict[str, Any]] | None = None
    extra_rule_files: list[str] = field(default_factory=list)
    alertmanager_config: Callable[[str], dict[str, Any]] | None = None
    # Prometheus's global scrape interval (and timeout) and rule evaluation interval
    scrape_interval: str = SCRAPE_INTERVAL
    eval_interval: str = RULE_EVAL_INTERVAL
    webhook: Webhook = field(default_factory=Webhook)
    am: Proc | None = None
    prom: Proc | None = None
    am_port: int = 0
    prom_port: int = 0

    @property
    def prom_url(self) -> str:
        return f"http://127.0.0.1:{self.prom_port}"

    @property
    def am_url(self) -> str:
        return f"http://127.0.0.1:{self.am_port}"

    def start(self, timeout: float = 60.0) -> Chain:
        self.webhook.start()
        self._start_alertmanager(timeout)
        self._start_prometheus(timeout)
        return self

    def _start_alertmanager(self, timeout: float) -> None:
        if self.alertmanager_config is not None:
            self._run_alertmanager(self.alertmanager_config(self.webhook.url), timeout)
            return
        cfg = {
            "route": {
                "receiver": "test",
                "group_by": ["..."],  # one notification group per alert
                "group_wait": "1s",
                "group_interval": "1s",
                "repeat_interval": "1h",
            },
            "receivers": [
                {
                    "name": "test",
                    "webhook_configs": [{"url": self.webhook.url, "send_resolved": True}],
                }
            ],
            "inhibit_rules": self.inhibit_rules,
        }
        self._run_alertmanager(cfg, timeout)

    def _run_alertmanager(self, cfg: Mapping[str, Any], timeout: float) -> None:
        path = os.path.join(self.workdir, "alertmanager.yml")
        with open(path, "w") as f:
            yaml.safe_dump(cfg, f)
        storage = os.path.join(self.workdir, "am-data")
        os.makedirs(storage, exist_ok=True)
        self.am_port = free_port()
        self.am = Proc(
            "alertmanager",
            [
                ALERTMANAGER,
                f"--config.file={path}",
                f"--storage.path={storage}",
                f"--web.listen-address=127.0.0.1:{self.am_port}",
                "--cluster.listen-address=",
            ],
            os.path.join(self.workdir, "alertmanager.log"),
        )
        self.am.start()
        am = self.am
        wait_until(
            "Alertmanager /-/ready",
            lambda: am.alive() and http_get(self.am_url + "/-/ready", 1)[0] == 200,
            timeout,
            detail=am.log_tail,
        )

    def _start_prometheus(self, timeout: float) -> None:
        cfg = {
            "global": {
                "scrape_interval": self.scrape_interval,
                "scrape_timeout": self.scrape_interval,
                "evaluation_interval": self.eval_interval,
            },
            "rule_files": [self.rule_file, *self.extra_rule_files],
            "alerting": {
                "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{self.am_port}"]}]}]
            },
            "scrape_configs": self._scrape_configs(),
        }
        path = os.path.join(self.workdir, "prometheus.yml")
        with open(path, "w") as f:
            yaml.safe_dump(cfg, f, sort_keys=False)
        storage = os.path.join(self.workdir, "prom-data")
        os.makedirs(storage, exist_ok=True)
        self.prom_port = free_port()
        self.prom = Proc(
            "prometheus",
            [
                PROMETHEUS,
                f"--config.file={path}",
                f"--storage.tsdb.path={storage}",
                f"--web.listen-address=127.0.0.1:{self.prom_port}",
                "--rules.alert.resend-delay=1s",
            ],
            os.path.join(self.workdir, "prometheus.log"),
        )
        self.prom.start()
        prom = self.prom
        wait_until(
            "Prometheus /-/ready",
            lambda: prom.alive() and http_get(self.prom_url + "/-/ready", 1)[0] == 200,
            timeout,
            detail=prom.log_tail,
        )

        def am_listed() -> bool:
            data = self.api("/api/v1/alertmanagers")
            return any(
                str(self.am_port) in a.get("url", "") for a in data.get("activeAlertmanagers", [])
            )

        wait_until(
            "Prometheus to list the Alertmanager (/api/v1/alertmanagers)",
            am_listed,
            timeout,
            detail=prom.log_tail,
        )

        def all_up() -> bool:
            active = self.api("/api/v1/targets").get("activeTargets", [])
            want = sum(
                len(sc["targets"]) for job in self._scrape_configs() for sc in job["static_configs"]
            )
            return len(active) == want and all(t.get("health") == "up" for t in active)

        wait_until(
            "every scrape target up",
            all_up,
            timeout,
            detail=lambda: json.dumps(self.api("/api/v1/targets"), indent=1)[:3000],
        )

    def _scrape_configs(self) -> list[dict[str, Any]]:
        if self.scrape_configs is not None:
            return self.scrape_configs
        return [
            {"job_name": job, "static_configs": [{"targets": t}]} for job, t in self.targets.items()
        ]

    # --- Prometheus API -----------------------------------------------------------------

    def api(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        url = self.prom_url + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        status, body = http_get(url, 10)
        doc = json.loads(body)
        if status != 200 or doc.get("status") != "success":
            raise ChainError(f"{path} {params}: HTTP {status}: {body[:500]}")
        return doc["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query; the result vector (or scalar as one sample)."""
        data = self.api("/api/v1/query", {"query": expr})
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def value(self, expr: str) -> float | None:
        r = self.query(expr)
        if not r:
            return None
        return float(r[0]["value"][1])

    def rule_failures(self) -> dict[str, Any]:
        """Rules that failed to evaluate: Prometheus's own count per group since it
        started (``prometheus_rule_evaluation_failures_total``, from its /metrics) and
        each rule's last error (/api/v1/rules). A rule whose evaluation fails (a
        many-to-many match, say) records nothing that time, so an alert built on it
        silently misses: the labs' data must evaluate cleanly."""
        status, body = http_get(self.prom_url + "/metrics", 10)
        if status != 200:
            raise ChainError(f"Prometheus /metrics: HTTP {status}")
        failures: dict[str, float] = {}
        for fam in text_string_to_metric_families(body):
            if fam.name != "prometheus_rule_evaluation_failures":
                continue
            for s in fam.samples:
                if s.name.endswith("_total") and s.value:
                    failures[s.labels.get("rule_group", "")] = s.value
        errors = [
            {"group": g["name"], "rule": r.get("name"), "error": r.get("lastError")}
            for g in self.api("/api/v1/rules").get("groups", [])
            for r in g.get("rules", [])
            if r.get("health") == "err" or r.get("lastError")
        ]
        return {"failures": failures, "errors": errors}

    def loaded_rules(self) -> dict[str, int]:
        """How many rules each loaded group holds (/api/v1/rules)."""
        groups = self.api("/api/v1/rules").get("groups", [])
        return {g["name"]: len(g.get("rules", [])) for g in groups}

    def firing_alerts(self) -> list[dict[str, Any]]:
        """Prometheus's own view: alerts in state firing."""
        alerts: list[dict[str, Any]] = self.api("/api/v1/alerts")["alerts"]
        return [a for a in alerts if a.get("state") == "firing"]

    # --- Alertmanager API ---------------------------------------------------------------

    def post_alerts(self, alerts: Sequence[Mapping[str, Any]]) -> None:
        """Send alerts to Alertmanager as a Prometheus would (``POST /api/v2/alerts``):
        alerts of rules that cannot run here, e.g. kube-prometheus-stack's."""
        req = urllib.request.Request(
            self.am_url + "/api/v2/alerts",
            data=json.dumps(list(alerts)).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=5) as r:
            if r.status != 200:
                raise ChainError(f"POST /api/v2/alerts: HTTP {r.status}")

    def am_alerts(self, **matchers: str) -> list[dict[str, Any]]:
        """Alertmanager's view of its alerts (active, silenced and inhibited ones too),
        filtered by exact label values."""
        q = urllib.parse.urlencode([("filter", f'{k}="{v}"') for k, v in matchers.items()])
        status, body = http_get(f"{self.am_url}/api/v2/alerts?{q}", 5)
        if status != 200:
            raise ChainError(f"GET /api/v2/alerts: HTTP {status}: {body[:300]}")
        alerts: list[dict[str, Any]] = json.loads(body)
        return alerts

    def logs(self) -> str:
        parts = []
        for p in (self.prom, self.am):
            if p is not None:
                parts.append(f"--- {p.name} ---\n{p.log_tail(15)}")
        return "\n".join(parts)

    def stop(self) -> None:
        for p in (self.prom, self.am):
            if p is not None:
                p.stop()
        with contextlib.suppress(Exception):
            self.webhook.stop()
