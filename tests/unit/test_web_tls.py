"""--web.config.file with real TLS clients on 127.0.0.1 and [::1]: Python's ssl, curl
and openssl, against certificates from a throwaway CA (trustme); basic auth with real
bcrypt hashes; client certificates; headers; the rate limit; certificate rotation."""

from __future__ import annotations

import base64
import shutil
import socket
import ssl
import subprocess
import time
from pathlib import Path

import bcrypt
import pytest
import trustme

from exporter.exposition.config import config_families
from exporter.exposition.inputs import Sources

from .web_support import host_for, raw_get, running

pytestmark = pytest.mark.timeout(120)
HOSTS = ["127.0.0.1", "::1"]
PASSWORD = "s3cret pass"


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def certs(tmp_path: Path, ca: trustme.CA) -> Path:
    d = tmp_path / "web"
    d.mkdir()
    leaf = ca.issue_cert("localhost", "127.0.0.1", "::1")
    leaf.private_key_pem.write_to_path(str(d / "server.key"))
    leaf.cert_chain_pems[0].write_to_path(str(d / "server.crt"))
    ca.cert_pem.write_to_path(str(d / "ca.crt"))
    return d


def write_config(d: Path, text: str) -> Path:
    p = d / "web-config.yml"
    p.write_text(text)
    return p


def client(ca: trustme.CA, *, cert: trustme.LeafCert | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    if cert is not None:
        cert.configure_cert(ctx)
    return ctx


def auth(user: str, password: str) -> str:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return f"Authorization: Basic {token}\r\n"


def listen(host: str) -> str:
    return f"[{host}]:0" if ":" in host else f"{host}:0"


TLS_ONLY = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"


@pytest.mark.parametrize("host", HOSTS)
def test_https_with_pythons_ssl_curl_and_openssl(
    tmp_path: Path, certs: Path, ca: trustme.CA, host: str
) -> None:
    cfg = write_config(certs, TLS_ONLY)
    with running(tmp_path, listen(host), web_config=cfg) as server:
        h = host_for(server)
        status, headers, body, _ = raw_get(h, server.port, tls=client(ca))
        assert status == 200 and b"contention_build_info" in body
        curl = shutil.which("curl")
        if curl:
            out = subprocess.run(
                [curl, "-sS", "-g", "--cacert", str(certs / "ca.crt"),
                 "-o", "/dev/null", "-w", "%{http_code} %{scheme}",
                 f"https://{h}:{server.port}/metrics"],
                capture_output=True, text=True, timeout=30,
            )  # fmt: skip
            assert out.stdout == "200 HTTPS", out.stderr
        openssl = shutil.which("openssl")
        if openssl:
            out = subprocess.run(
                [openssl, "s_client", "-connect", f"{h}:{server.port}",
                 "-CAfile", str(certs / "ca.crt"), "-verify_return_error", "-brief"],
                input="", capture_output=True, text=True, timeout=30,
            )  # fmt: skip
            assert "Verification: OK" in out.stderr and "TLSv1.3" in out.stderr, out.stderr
        # Plain HTTP to the TLS port: no answer in clear text, a closed connection.
        with socket.create_connection((h.strip("[]"), server.port), timeout=10) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            assert not s.recv(100).startswith(b"HTTP/1.1 200")
    assert server.http.stats.closed["tls_error"] >= 1


def test_min_version_refuses_older_clients(tmp_path: Path, certs: Path, ca: trustme.CA) -> None:
    cfg = write_config(certs, TLS_ONLY + "  min_version: TLS13\n")
    with running(tmp_path, web_config=cfg) as server:
        old = client(ca)
        old.maximum_version = ssl.TLSVersion.TLSv1_2
        with pytest.raises(ssl.SSLError):
            raw_get("127.0.0.1", server.port, tls=old)
        assert raw_get("127.0.0.1", server.port, tls=client(ca))[0] == 200


@pytest.mark.parametrize("host", HOSTS)
def test_basic_auth_over_tls(tmp_path: Path, certs: Path, ca: trustme.CA, host: str) -> None:
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    cfg = write_config(certs, TLS_ONLY + f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    with running(tmp_path, listen(host), web_config=cfg) as server:
        h, port, tls = host_for(server), server.port, client(ca)
        status, headers, _, _ = raw_get(h, port, tls=tls)
        assert status == 401 and headers["www-authenticate"] == "Basic"
        assert raw_get(h, port, headers=auth("prometheus", "wrong"), tls=tls)[0] == 401
        assert raw_get(h, port, headers=auth("nobody", PASSWORD), tls=tls)[0] == 401
        for _ in range(3):  # bcrypt once; then the remembered outcome
            assert raw_get(h, port, headers=auth("prometheus", PASSWORD), tls=tls)[0] == 200
        users = server.http.config.config.users if server.http.config else {}
        assert server.http.auth.cached(users, auth("prometheus", PASSWORD)[15:-2]) is True
        # The kubelet's probes carry no credentials: /healthz answers without them.
        assert raw_get(h, port, "/healthz", tls=tls)[0] == 200
        curl = shutil.which("curl")
        if curl:
            out = subprocess.run(
                [curl, "-sS", "-g", "--cacert", str(certs / "ca.crt"), "-u",
                 f"prometheus:{PASSWORD}", "-o", "/dev/null", "-w", "%{http_code}",
                 f"https://{h}:{port}/metrics"],
                capture_output=True, text=True, timeout=30,
            )  # fmt: skip
            assert out.stdout == "200", out.stderr
    assert server.http.stats.responses[401] >= 3


def test_basic_auth_without_tls(tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode()
    d = tmp_path / "web"
    d.mkdir()
    cfg = write_config(d, f"basic_auth_users:\n  u: {hashed}\n")
    with running(tmp_path, web_config=cfg) as server:
        assert raw_get("127.0.0.1", server.port)[0] == 401
        assert raw_get("127.0.0.1", server.port, headers=auth("u", "pw"))[0] == 200


def test_client_certificates_and_allowed_sans(tmp_path: Path, certs: Path, ca: trustme.CA) -> None:
    client_ca = trustme.CA()
    client_ca.cert_pem.write_to_path(str(certs / "client-ca.crt"))
    cfg = write_config(
        certs,
        TLS_ONLY
        + "  client_auth_type: RequireAndVerifyClientCert\n"
        + "  client_ca_file: client-ca.crt\n"
        + "  client_allowed_sans: [prometheus.monitoring.svc]\n",
    )
    allowed = client_ca.issue_cert("prometheus.monitoring.svc")
    other = client_ca.issue_cert("someone-else.example")
    stranger = trustme.CA().issue_cert("prometheus.monitoring.svc")  # not our CA
    with running(tmp_path, web_config=cfg) as server:
        port = server.port
        assert raw_get("127.0.0.1", port, tls=client(ca, cert=allowed))[0] == 200
        for bad in (None, other, stranger):
            with pytest.raises((ssl.SSLError, ConnectionError, IndexError, ValueError)):
                raw_get("127.0.0.1", port, tls=client(ca, cert=bad))
        stats = server.http.stats.closed
        # The server counts a refused handshake when its side of the connection closes,
        # which can be just after the client has seen the failure: wait for it (bounded).
        deadline = time.monotonic() + 10.0
        while (stats["tls_san"] < 1 or stats["tls_error"] < 2) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stats["tls_san"] == 1 and stats["tls_error"] >= 2


def test_headers_and_rate_limit(tmp_path: Path, certs: Path, ca: trustme.CA) -> None:
    cfg = write_config(
        certs,
        TLS_ONLY
        + "http_server_config:\n  headers:\n    X-Frame-Options: deny\n"
        + "    Strict-Transport-Security: max-age=31536000\n"
        + "rate_limit:\n  interval: 1h\n  burst: 2\n",
    )
    with running(tmp_path, web_config=cfg) as server:
        codes = []
        for _ in range(3):
            status, headers, _, _ = raw_get("127.0.0.1", server.port, tls=client(ca))
            codes.append(status)
            assert headers["x-frame-options"] == "deny"
            assert headers["strict-transport-security"] == "max-age=31536000"
        assert codes == [200, 200, 429]


def test_a_rotated_certificate_is_served_without_a_restart(
    tmp_path: Path, certs: Path, ca: trustme.CA
) -> None:
    cfg = write_config(certs, TLS_ONLY)
    with running(tmp_path, web_config=cfg, check_every_s=0) as server:
        assert raw_get("127.0.0.1", server.port, tls=client(ca))[0] == 200
        new_ca = trustme.CA()
        leaf = new_ca.issue_cert("127.0.0.1")
        leaf.private_key_pem.write_to_path(str(certs / "server.key"))
        leaf.cert_chain_pems[0].write_to_path(str(certs / "server.crt"))
        assert raw_get("127.0.0.1", server.port, tls=client(new_ca))[0] == 200
        with pytest.raises(ssl.SSLError):
            raw_get("127.0.0.1", server.port, tls=client(ca))  # the old CA no longer works
        # A broken edit keeps the certificate loaded before, and says so.
        (certs / "server.key").write_text("not a key")
        assert raw_get("127.0.0.1", server.port, tls=client(new_ca))[0] == 200
        source = server.http.config
        assert source is not None and source.status().reload_failures_total == 1
        # contention_config_*{kind="web"}, as `run` wires the server to the exposition
        sources = Sources()
        sources.attach_http(server)
        fams = {f.name: f for f in config_families(f() for f in sources.config_files)}
        for name, value in (("last_reload_successful", 0), ("reload_failures", 1)):
            (sample,) = fams[f"contention_config_{name}"].samples
            assert sample.labels == {"kind": "web", "file": str(cfg)}
            assert sample.value == value
