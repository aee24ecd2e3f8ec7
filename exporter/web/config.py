"""``--web.config.file``: exporter-toolkit's web configuration format, read strictly.

The same file node_exporter and Prometheus read (docs/serving.md, "TLS and basic
auth")::

    tls_server_config:        # TLS: cert(_file) and key(_file), client certificates
    http_server_config:       # extra response headers (http2 is accepted, unused)
    basic_auth_users:         # user: bcrypt hash
    rate_limit:               # interval, burst

Read like every configuration file (:mod:`exporter.config_file`: the strict YAML
loader, schema ``exporter/data/web.schema.json`` for the keys and their types); here,
what a schema cannot say: the names translated for OpenSSL, durations, the checks
that involve several keys, the certificates and keys loaded. Unknown keys, wrong
types and settings this exporter cannot honour are errors that name the file and the
key, never silently ignored: a security setting that does nothing would be worse than
a refusal. Relative paths are relative to the file.

:class:`WebConfigSource` re-reads the file, and the certificates, keys and CAs it
names, when any of them changes (checked at most once a second, on new connections
and requests), so rotated certificates are served without a restart. A bad edit
keeps the last good configuration, logs once and counts a reload failure
(``contention_config_*{kind="web"}``).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import re
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config_file import ConfigError, ConfigFileStatus, WatchedFile, load_yaml, read_config
from ..config_file import validate as validate_schema

log = logging.getLogger(__name__)

SCHEMA = "web"
KIND = "web"  # contention_config_*{kind="web"}
MAX_FILE_BYTES = 1 << 20  # a web config is a few lines; refuse anything that is not
CHECK_EVERY_S = 1.0

# Go's names -> what OpenSSL calls the same thing.
CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    # Go asks for a certificate and ignores it; Python's ssl cannot ask without
    # verifying, and an unverified certificate proves nothing: not asked for.
    "RequestClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
# Accepted by exporter-toolkit, refused here: they admit any certificate, unverified.
UNVERIFIED_CLIENT_AUTH = ("RequireAnyClientCert", "RequireClientCert")
TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
# Go's crypto/tls CipherSuites() (the secure ones exporter-toolkit accepts) -> OpenSSL.
CIPHER_SUITES = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
}
# TLS 1.3 suites are not configurable (in Go either): accepted, no effect.
TLS13_SUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")
_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}


class WebConfigError(ConfigError):
    """A web configuration that cannot be used at start; the message names the file
    and the key: ``web config <file>: <key>: <what is wrong>``."""


@dataclass(frozen=True, slots=True)
class RateLimit:
    interval_s: float  # one request per interval on average
    burst: int


@dataclass(frozen=True, slots=True)
class TLSSettings:
    context: ssl.SSLContext
    client_auth: str
    allowed_sans: tuple[str, ...]  # one of these must be among the client's SANs


@dataclass(frozen=True, slots=True)
class WebConfig:
    path: Path
    tls: TLSSettings | None = None
    users: Mapping[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash
    headers: tuple[tuple[str, str], ...] = ()
    rate_limit: RateLimit | None = None
    http2: bool = True  # accepted for compatibility; this server speaks HTTP/1.1
    files: tuple[Path, ...] = ()  # everything read: re-read when one changes


def load_web_config(path: str | os.PathLike[str]) -> WebConfig:
    """Read, validate and build (TLS context included) or raise WebConfigError."""
    source = os.fspath(path)
    try:
        return parse_web_config(read_config(source, MAX_FILE_BYTES), source)
    except ConfigError as e:
        raise WebConfigError(f"web config {e}") from None


def parse_web_config(data: bytes, source: str) -> WebConfig:
    """A web configuration file's bytes, validated and built (errors:
    :class:`ConfigError`, ``<file>: <key>: <what is wrong>``)."""
    doc = load_yaml(data, source)
    validate_schema(doc, SCHEMA, source)
    try:
        return _build(Path(source), doc or {})
    except _Invalid as e:
        raise ConfigError(f"{source}: {e}") from None


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())


class _Invalid(Exception):
    pass


def _strings(d: Mapping[str, Any], key: str) -> list[str]:
    return d.get(key) or []


def _flag(d: Mapping[str, Any], key: str, default: bool) -> bool:
    v = d.get(key)
    return default if v is None else bool(v)


TLS_STRINGS = (  # the schema's strings of tls_server_config ("" when unset)
    "cert",
    "key",
    "client_ca",
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
)


def _build(path: Path, top: Mapping[str, Any]) -> WebConfig:
    files = [path]
    tls = _tls(path.parent, top.get("tls_server_config") or {})
    if tls is not None:
        files.extend(tls[1])
    http = top.get("http_server_config") or {}
    return WebConfig(
        path=path,
        tls=tls[0] if tls is not None else None,
        users={u: h.encode("ascii") for u, h in (top.get("basic_auth_users") or {}).items()},
        headers=tuple((k, v) for k, v in (http.get("headers") or {}).items() if v),
        rate_limit=_rate_limit(top.get("rate_limit") or {}),
        http2=_flag(http, "http2", True),
        files=tuple(files),
    )


def go_duration(value: Any, where: str) -> float:
    """Seconds from a Go duration ("1s", "250ms", "1m30s"; an integer is nanoseconds)."""
    if isinstance(value, bool):
        raise _Invalid(f"{where} must be a duration like 1s or 250ms")
    if isinstance(value, int):
        return value * 1e-9
    if not isinstance(value, str):
        raise _Invalid(f"{where} must be a duration like 1s or 250ms")
    text = value.strip()
    if text in ("0", ""):
        return 0.0
    pos, total = 0, 0.0
    for m in _GO_DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_S[m.group(2)]
        pos = m.end()
    if pos != len(text) or pos == 0:
        raise _Invalid(f"{where}: {value!r} is not a duration like 1s or 250ms")
    return total


def _rate_limit(d: Mapping[str, Any]) -> RateLimit | None:
    interval = go_duration(d.get("interval", 0), "rate_limit.interval")
    if interval <= 0:
        return None
    burst = d.get("burst", 0)
    if burst < 1:
        raise _Invalid(
            f"rate_limit.burst must be a whole number >= 1 with an interval (got {burst!r}): "
            "0 would refuse every request"
        )
    return RateLimit(interval, burst)


def _tls(base: Path, d: Mapping[str, Any]) -> tuple[TLSSettings, list[Path]] | None:
    w = "tls_server_config"
    s = {k: d.get(k) or "" for k in TLS_STRINGS}
    if not any(s.values()):
        for k in ("client_allowed_sans", "cipher_suites", "curve_preferences", "min_version"):
            if d.get(k):
                raise _Invalid(f"{w}.{k} without a certificate: set cert_file and key_file")
        return None
    for inline, file in (
        ("cert", "cert_file"),
        ("key", "key_file"),
        ("client_ca", "client_ca_file"),
    ):
        if s[inline] and s[file]:
            raise _Invalid(f"{w}: set {inline} or {file}, not both")
    if not (s["cert"] or s["cert_file"]):
        raise _Invalid(f"{w}: missing one of cert or cert_file")
    if not (s["key"] or s["key_file"]):
        raise _Invalid(f"{w}: missing one of key or key_file")
    if d.get("curve_preferences"):
        raise _Invalid(
            f"{w}.curve_preferences is not supported (Python's ssl module cannot set the "
            "key exchange groups): remove it to use OpenSSL's defaults"
        )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = _version(d, "min_version", "TLS12")
    ctx.maximum_version = _version(d, "max_version", "TLS13")
    if ctx.minimum_version > ctx.maximum_version:
        raise _Invalid(f"{w}: min_version is above max_version")
    ctx.set_alpn_protocols(["http/1.1"])
    _load_cert(ctx, base, s)
    auth = _client_auth(ctx, base, s)
    sans = tuple(_strings(d, "client_allowed_sans"))
    if sans and auth != "RequireAndVerifyClientCert":
        raise _Invalid(f"{w}.client_allowed_sans needs client_auth_type RequireAndVerifyClientCert")
    _ciphers(ctx, d)
    files = [base / s[k] for k in ("cert_file", "key_file", "client_ca_file") if s[k]]
    return TLSSettings(ctx, auth, sans), files


def _client_auth(ctx: ssl.SSLContext, base: Path, s: Mapping[str, str]) -> str:
    w = "tls_server_config"
    auth = s["client_auth_type"] or "NoClientCert"
    if auth in UNVERIFIED_CLIENT_AUTH:
        raise _Invalid(
            f"{w}.client_auth_type {auth} accepts any client certificate without verifying "
            "it: use RequireAndVerifyClientCert with client_ca_file"
        )
    if auth not in CLIENT_AUTH:
        raise _Invalid(f"{w}.client_auth_type {auth!r} is not one of {', '.join(CLIENT_AUTH)}")
    has_ca = bool(s["client_ca"] or s["client_ca_file"])
    if has_ca and CLIENT_AUTH[auth] == ssl.CERT_NONE:
        raise _Invalid(f"{w}: a client CA is set but client_auth_type is {auth}")
    if CLIENT_AUTH[auth] != ssl.CERT_NONE and not has_ca:
        raise _Invalid(f"{w}.client_auth_type {auth} needs client_ca_file (or client_ca)")
    if has_ca:
        _load_ca(ctx, base, s)
    ctx.verify_mode = CLIENT_AUTH[auth]
    return auth


def _ciphers(ctx: ssl.SSLContext, d: Mapping[str, Any]) -> None:
    w = "tls_server_config"
    suites = _strings(d, "cipher_suites")
    unknown = [c for c in suites if c not in CIPHER_SUITES and c not in TLS13_SUITES]
    if unknown:
        raise _Invalid(f"{w}.cipher_suites: unknown or insecure {', '.join(unknown)}")
    tls12 = [CIPHER_SUITES[c] for c in suites if c in CIPHER_SUITES]
    if tls12:
        try:
            ctx.set_ciphers(":".join(tls12))
        except ssl.SSLError:
            raise _Invalid(f"{w}.cipher_suites: none is available in this OpenSSL") from None
    if _flag(d, "prefer_server_cipher_suites", True):
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE


def _version(d: Mapping[str, Any], key: str, default: str) -> ssl.TLSVersion:
    name = d.get(key) or default
    if name not in TLS_VERSIONS:
        raise _Invalid(f"tls_server_config.{key} {name!r} is not one of {', '.join(TLS_VERSIONS)}")
    return TLS_VERSIONS[name]


def _load_cert(ctx: ssl.SSLContext, base: Path, s: Mapping[str, str]) -> None:
    for key in ("cert_file", "key_file"):
        if s[key]:
            try:
                with open(base / s[key], "rb"):
                    pass
            except OSError as e:
                raise _Invalid(f"tls_server_config.{key} {base / s[key]}: {e.strerror}") from None
    try:
        with (
            _pem(base, s["cert_file"], s["cert"]) as cert,
            _pem(base, s["key_file"], s["key"]) as key,
        ):
            ctx.load_cert_chain(cert, key)
    except ssl.SSLError as e:
        raise _Invalid(
            "tls_server_config: the certificate and key do not load (not PEM, or not a "
            f"pair): {e.reason or _one_line(e)}"
        ) from None
    except OSError as e:
        raise _Invalid(f"tls_server_config: cannot load the certificate and key: {e}") from None


def _load_ca(ctx: ssl.SSLContext, base: Path, s: Mapping[str, str]) -> None:
    try:
        if s["client_ca_file"]:
            ctx.load_verify_locations(cafile=str(base / s["client_ca_file"]))
        else:
            ctx.load_verify_locations(cadata=s["client_ca"])
    except ssl.SSLError as e:
        raise _Invalid(
            f"tls_server_config: the client CA does not load: {e.reason or _one_line(e)}"
        ) from None
    except OSError as e:
        where = base / s["client_ca_file"]
        raise _Invalid(f"tls_server_config.client_ca_file {where}: {e.strerror or e}") from None
    if not ctx.get_ca_certs():
        raise _Invalid("tls_server_config: the client CA holds no certificate")


class _pem:
    """A path OpenSSL can read: the file, or the inline PEM in an anonymous memory
    file (never written to disk), closed on exit."""

    def __init__(self, base: Path, file: str, inline: str) -> None:
        self.path = str(base / file) if file else ""
        self.inline = inline
        self.fd = -1

    def __enter__(self) -> str:
        if self.path:
            return self.path
        self.fd = os.memfd_create("web-config-pem", os.MFD_CLOEXEC)
        os.write(self.fd, self.inline.encode("utf-8"))
        return f"/proc/self/fd/{self.fd}"

    def __exit__(self, *exc: object) -> None:
        if self.fd >= 0:
            os.close(self.fd)


def san_allowed(peercert: Mapping[str, Any] | None, allowed: tuple[str, ...]) -> bool:
    """Does the (verified) client certificate carry one of ``allowed`` as a DNS, IP,
    e-mail or URI subject alternative name? IPs compare as addresses."""
    if not peercert:
        return False
    want_ips = set()
    for a in allowed:
        with contextlib.suppress(ValueError):
            want_ips.add(ipaddress.ip_address(a))
    for kind, value in peercert.get("subjectAltName", ()):
        if kind == "IP Address":
            try:
                if ipaddress.ip_address(value.strip()) in want_ips:
                    return True
            except ValueError:
                continue
        elif kind in ("DNS", "email", "URI") and value in allowed:
            return True
    return False


class WebConfigSource:
    """The web configuration in force: the file, and the files it names, re-read when
    one of them changes (checked at most once every ``check_every_s``)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        check_every_s: float = CHECK_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        try:  # at start: the caller exits on error
            self._file = WatchedFile(
                os.fspath(path),
                KIND,
                parse_web_config,
                names=lambda c: [str(f) for f in c.files[1:]],
                check=_same_tls,
                max_bytes=MAX_FILE_BYTES,
            )
        except ConfigError as e:
            raise WebConfigError(f"web config {e}") from None
        self._check_every = check_every_s
        self._clock = clock
        self._checked = clock()
        self._lock = threading.Lock()

    @property
    def config(self) -> WebConfig:
        return self._file.value

    def current(self) -> WebConfig:
        now = self._clock()
        if now - self._checked >= self._check_every:
            with self._lock:
                if now - self._checked >= self._check_every:
                    self._checked = now
                    self._file.poll()
        return self._file.value

    def status(self) -> ConfigFileStatus:
        """For ``contention_config_*{kind="web"}``."""
        return self._file.status()


def _same_tls(old: WebConfig, new: WebConfig) -> None:
    if (new.tls is None) != (old.tls is None):
        raise ConfigError(f"{new.path}: turning TLS on or off needs a restart")
