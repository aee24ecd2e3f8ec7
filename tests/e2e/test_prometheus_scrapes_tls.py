"""The real Prometheus scrapes the exporter over TLS with basic auth, at an IPv6 and an
IPv4 address of the same dual-stack listener (docs/serving.md): what an IPv6-only or
dual-stack cluster with a secured /metrics does, with the real client."""

from __future__ import annotations

import json
import os
from pathlib import Path

import bcrypt
import pytest
import trustme
import yaml

from labs.exporter_proc import free_port
from tests.unit.web_support import running

from .chain import PROMETHEUS, Proc, http_get, missing_binaries, wait_until

# any_load: a scrape over TLS either works or it does not, however busy the machine
pytestmark = [pytest.mark.e2e, pytest.mark.any_load, pytest.mark.timeout(180)]


def test_prometheus_scrapes_https_with_basic_auth_over_ipv4_and_ipv6(tmp_path: Path) -> None:
    if PROMETHEUS in missing_binaries():
        pytest.skip("prometheus not installed (scripts/setup.sh --test installs it)")
    web = tmp_path / "web"
    web.mkdir()
    ca = trustme.CA()
    leaf = ca.issue_cert("localhost", "127.0.0.1", "::1")
    leaf.private_key_pem.write_to_path(str(web / "tls.key"))
    leaf.cert_chain_pems[0].write_to_path(str(web / "tls.crt"))
    ca.cert_pem.write_to_path(str(web / "ca.crt"))
    hashed = bcrypt.hashpw(b"scrape-pass", bcrypt.gensalt(rounds=4)).decode()
    (web / "web-config.yml").write_text(
        "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n"
        f"basic_auth_users:\n  prometheus: '{hashed}'\n"
    )
    with running(tmp_path, ":0", web_config=web / "web-config.yml") as server:
        port = server.port
        job = {
            "scheme": "https",
            "tls_config": {"ca_file": str(web / "ca.crt")},
            "basic_auth": {"username": "prometheus", "password": "scrape-pass"},
        }
        cfg = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [
                {"job_name": "ipv6", **job, "static_configs": [{"targets": [f"[::1]:{port}"]}]},
                {"job_name": "ipv4", **job, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]},
                {
                    "job_name": "no-password",
                    "scheme": "https",
                    "tls_config": {"ca_file": str(web / "ca.crt")},
                    "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
                },
            ],
        }
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(cfg))
        prom_port = free_port()
        prom = Proc(
            "prometheus",
            [
                PROMETHEUS,
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
            ],
            os.path.join(tmp_path, "prometheus.log"),
        )
        prom.start()
        try:
            base = f"http://127.0.0.1:{prom_port}"

            def health() -> dict[str, tuple[str, str]]:
                status, body = http_get(base + "/api/v1/targets", 2)
                if status != 200:
                    return {}
                return {
                    t["labels"]["job"]: (t["health"], t.get("lastError", ""))
                    for t in json.loads(body)["data"]["activeTargets"]
                }

            def settled() -> bool:
                h = health()
                return (
                    h.get("ipv6", ("",))[0] == "up"
                    and h.get("ipv4", ("",))[0] == "up"
                    and (h.get("no-password", ("",))[0] == "down")
                )

            wait_until("Prometheus to scrape both addresses", settled, 90, detail=prom.log_tail)
            h = health()
            assert "401" in h["no-password"][1], h
        finally:
            prom.stop()
    assert server.http.stats.responses[200] >= 2 and server.http.stats.responses[401] >= 1
