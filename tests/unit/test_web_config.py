"""--web.config.file read strictly (docs/serving.md, "TLS and basic auth"): what
exporter-toolkit accepts loads here too (promtool check web-config agrees), what it
refuses is refused with a message naming the file and the key, and what this exporter
cannot honour is refused rather than ignored. A bad edit at run time keeps the last
good configuration."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

import bcrypt
import pytest
import trustme

from exporter.commands import build_parser, run
from exporter.web.config import WebConfigError, WebConfigSource, go_duration, load_web_config

HASH = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode()


@pytest.fixture(scope="module")
def pems(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pems")
    ca = trustme.CA()
    leaf = ca.issue_cert("localhost")
    leaf.private_key_pem.write_to_path(str(d / "server.key"))
    leaf.cert_chain_pems[0].write_to_path(str(d / "server.crt"))
    ca.cert_pem.write_to_path(str(d / "ca.crt"))
    return d


def cfg(d: Path, text: str, name: str = "web.yml") -> Path:
    p = d / name
    p.write_text(text)
    return p


def promtool_accepts(path: Path) -> bool | None:
    promtool = shutil.which("promtool")
    if promtool is None:
        return None
    proc = subprocess.run(
        [promtool, "check", "web-config", str(path)], capture_output=True, timeout=60
    )
    return proc.returncode == 0


TLS = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
GOOD = {
    "empty": "",
    "tls": TLS,
    "tls-versions-ciphers": TLS
    + "  min_version: TLS12\n  max_version: TLS13\n"
    + "  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, "
    + "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384]\n  prefer_server_cipher_suites: false\n",
    "mtls": TLS + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n",
    "mtls-sans": TLS + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
    "  client_allowed_sans: [prometheus]\n",
    "mtls-optional": TLS
    + "  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.crt\n",
    "users": f"basic_auth_users:\n  prometheus: {HASH}\n  alice: {HASH}\n",
    "headers": "http_server_config:\n  http2: false\n  headers:\n"
    "    X-Content-Type-Options: nosniff\n    Content-Security-Policy: default-src 'self'\n",
}


@pytest.mark.parametrize("name", list(GOOD))
def test_what_exporter_toolkit_accepts_loads(pems: Path, name: str) -> None:
    path = cfg(pems, GOOD[name], f"{name}.yml")
    c = load_web_config(path)
    assert (c.tls is not None) == ("cert_file" in GOOD[name])
    if name != "mtls-sans":  # client_allowed_sans is newer than Debian's promtool 2.42
        assert promtool_accepts(path) in (True, None)


def test_paths_are_relative_to_the_file_and_inline_pems_work(pems: Path, tmp_path: Path) -> None:
    sub = tmp_path / "elsewhere"
    sub.mkdir()
    rel = cfg(sub, f"tls_server_config:\n  cert_file: ../{''}x\n")  # placeholder
    rel.write_text(
        f"tls_server_config:\n  cert_file: {pems}/server.crt\n  key_file: {pems}/server.key\n"
    )
    assert load_web_config(rel).tls is not None
    cert = (pems / "server.crt").read_text()
    key = (pems / "server.key").read_text()
    ca = (pems / "ca.crt").read_text()

    def indent(t: str) -> str:
        return "\n".join("    " + x for x in t.splitlines())

    inline = cfg(
        tmp_path,
        f"tls_server_config:\n  cert: |\n{indent(cert)}\n  key: |\n{indent(key)}\n"
        f"  client_ca: |\n{indent(ca)}\n  client_auth_type: RequireAndVerifyClientCert\n",
    )
    c = load_web_config(inline)
    assert c.tls is not None and c.tls.client_auth == "RequireAndVerifyClientCert"
    assert c.files == (inline,)


BAD = {
    "not-yaml": ("tls_server_config: [", "not valid YAML"),
    "not-a-mapping": ("- a\n- b\n", "must be a mapping"),
    "unknown-top": (
        "tls_config:\n  cert_file: x\n",
        "unknown key(s) tls_config; known keys: basic_auth_users, http_server_config",
    ),
    "unknown-tls": (TLS + "  certfile: x\n", "tls_server_config: unknown key(s) certfile; known"),
    "cert-no-key": ("tls_server_config:\n  cert_file: server.crt\n", "missing one of key"),
    "missing-file": (
        "tls_server_config:\n  cert_file: nope.crt\n  key_file: server.key\n",
        "nope.crt",
    ),
    "key-not-pem": (
        "tls_server_config:\n  cert_file: server.crt\n  key_file: ca.crt\n",
        "do not load",
    ),
    "bad-auth-type": (TLS + "  client_auth_type: Sometimes\n", "client_auth_type 'Sometimes'"),
    "ca-without-auth": (TLS + "  client_ca_file: ca.crt\n", "client CA is set but"),
    "verify-without-ca": (
        TLS + "  client_auth_type: RequireAndVerifyClientCert\n",
        "needs client_ca_file",
    ),
    "sans-optional": (
        TLS + "  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.crt\n"
        "  client_allowed_sans: [x]\n",
        "client_allowed_sans needs",
    ),
    "bad-version": (TLS + "  min_version: TLS14\n", "min_version 'TLS14'"),
    "min-above-max": (TLS + "  min_version: TLS13\n  max_version: TLS12\n", "above max_version"),
    "bad-cipher": (TLS + "  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n", "unknown or insecure"),
    "bad-hash": (
        "basic_auth_users:\n  u: plaintext\n",
        "basic_auth_users.u: must be a bcrypt hash",
    ),
    "hash-not-string": ("basic_auth_users:\n  u: 12\n", "bcrypt hash string"),
    "header-not-allowed": (
        "http_server_config:\n  headers:\n    X-Powered-By: me\n",
        "http_server_config.headers: unknown key(s) X-Powered-By",
    ),
    "header-bad-value": (
        "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
        "X-Frame-Options: must be deny or sameorigin (or empty: not sent) (got 'allow')",
    ),
    "header-line-break": (
        'http_server_config:\n  headers:\n    Content-Security-Policy: "a\\nb"\n',
        "Content-Security-Policy: must be a header value on one line",
    ),
    "user-with-colon": (f"basic_auth_users:\n  'a:b': {HASH}\n", "'a:b' is not a user name"),
    "duplicate-key": (f"basic_auth_users:\n  a: {HASH}\n  a: {HASH}\n", "duplicate key 'a'"),
    "alias": (
        f"basic_auth_users:\n  a: &h {HASH}\n  b: *h\n",
        "YAML aliases (*h) are not allowed",
    ),
    "http2-not-bool": ("http_server_config:\n  http2: yes please\n", "true or false"),
    "rate-burst-0": ("rate_limit:\n  interval: 1s\n  burst: 0\n", "burst must be"),
    "rate-bad-interval": ("rate_limit:\n  interval: soon\n  burst: 1\n", "not a duration"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_configs_are_refused_naming_file_and_key(pems: Path, name: str) -> None:
    text, expected = BAD[name]
    path = cfg(pems, text, f"bad-{name}.yml")
    with pytest.raises(WebConfigError) as e:
        load_web_config(path)
    msg = str(e.value)
    assert msg.startswith(f"web config {path}: ") and expected in msg, msg
    assert "\n" not in msg
    assert "plaintext" not in msg  # a password put where its hash goes is never repeated
    if name not in STRICTER:
        # exporter-toolkit refuses these too (promtool uses it).
        assert promtool_accepts(path) in (False, None), name


# Refused here, accepted by exporter-toolkit (the handshake or every request would fail
# later instead, or the system's CAs would vouch for clients): refused at start.
STRICTER = (
    "rate-burst-0",
    "key-not-pem",
    "verify-without-ca",
    "min-above-max",
    "header-line-break",
    "user-with-colon",
    "alias",
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (TLS + "  client_auth_type: RequireAnyClientCert\n", "without verifying"),
        (TLS + "  curve_preferences: [X25519]\n", "curve_preferences is not supported"),
    ],
)
def test_settings_that_cannot_be_honoured_are_refused_not_ignored(
    pems: Path, text: str, expected: str
) -> None:
    path = cfg(pems, text, "unsupported.yml")
    with pytest.raises(WebConfigError, match=expected):
        load_web_config(path)


def test_unreadable_and_oversized_files(tmp_path: Path) -> None:
    with pytest.raises(WebConfigError, match="no such file"):
        load_web_config(tmp_path / "missing.yml")
    with pytest.raises(WebConfigError, match="cannot read: No such file"):
        WebConfigSource(tmp_path / "missing.yml")
    (tmp_path / "bin.yml").write_bytes(b"\xff\xfe: 1\n")
    with pytest.raises(WebConfigError, match="not UTF-8 text"):
        load_web_config(tmp_path / "bin.yml")
    (tmp_path / "big.yml").write_text("# " + "x" * (2 << 20))
    with pytest.raises(WebConfigError, match="longer than 1048576 bytes"):
        load_web_config(tmp_path / "big.yml")
    os.mkfifo(tmp_path / "fifo.yml")  # no writer: a read must not wait for one
    with pytest.raises(WebConfigError, match="not a regular file"):
        load_web_config(tmp_path / "fifo.yml")


def test_go_durations() -> None:
    assert go_duration("1s", "x") == 1
    assert go_duration("1m30s", "x") == 90
    assert go_duration("250ms", "x") == pytest.approx(0.25)
    assert go_duration(1_000_000_000, "x") == 1
    assert go_duration("0", "x") == 0


def test_a_bad_edit_keeps_the_last_good_config(
    pems: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    now = [0.0]
    path = cfg(tmp_path, f"basic_auth_users:\n  a: {HASH}\n")
    src = WebConfigSource(path, check_every_s=1.0, clock=lambda: now[0])
    assert set(src.current().users) == {"a"}
    path.write_text(f"basic_auth_users:\n  b: {HASH}\n")
    now[0] += 0.5
    assert set(src.current().users) == {"a"}  # not checked yet: at most once a second
    now[0] += 1
    assert set(src.current().users) == {"b"}
    with caplog.at_level(logging.WARNING):
        path.write_text("basic_auth_users:\n  c: not-a-hash\n")
        for _ in range(5):
            now[0] += 1
            assert set(src.current().users) == {"b"}
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(logged) == 1 and "keeping the last good contents" in logged[0], logged
    assert f"{path}: basic_auth_users.c: must be a bcrypt hash" in logged[0]
    st = src.status()
    assert (st.kind, st.path, st.reload_failures_total, st.last_reload_ok) == (
        "web",
        str(path),
        1,
        False,
    )
    path.write_text(f"basic_auth_users:\n  d: {HASH}\n")
    now[0] += 1
    assert set(src.current().users) == {"d"} and src.status().last_reload_ok
    # TLS cannot be switched on while running: refused, the plain config stays.
    for name in ("server.crt", "server.key"):
        shutil.copy(pems / name, tmp_path / name)
    path.write_text(TLS)  # loads, but TLS was off
    now[0] += 1
    assert src.current().tls is None and src.status().reload_failures_total == 2
    assert "turning TLS on or off needs a restart" in src.status().last_error


def test_run_exits_2_with_one_line_for_a_bad_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = cfg(tmp_path, "tls_config: {}\n")
    args = build_parser().parse_args(["run", f"--web.config.file={path}", "--no-probe"])
    assert run.cmd_run(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown key(s) tls_config" in err[0] and "level=ERROR" in err[0]
