"""``tls_server_config`` of ``--web.config.file`` into an :class:`ssl.SSLContext`.

Go's names (client auth types, TLS versions, cipher suites) translated for OpenSSL,
what Python's ssl module cannot honour refused, and the certificate, key and client CA
loaded, from files or inline PEM (never written to disk). :func:`san_allowed` is the
client certificate check ``client_allowed_sans`` asks for, made per connection by the
transport. ``web.config`` reads the file and builds the rest of it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


class Invalid(Exception):
    """A setting of the web configuration that cannot be used; the message names its
    key (``web.config`` adds the file's name)."""


def flag(d: Mapping[str, Any], key: str, default: bool) -> bool:
    v = d.get(key)
    return default if v is None else bool(v)


@dataclass(frozen=True, slots=True)
class TLSSettings:
    context: ssl.SSLContext
    client_auth: str
    allowed_sans: tuple[str, ...]  # one of these must be among the client's SANs


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())


def _strings(d: Mapping[str, Any], key: str) -> list[str]:
    return d.get(key) or []


TLS_STRINGS = (  # the schema's strings of tls_server_config ("" when unset)
    "cert",
    "key",
    "client_ca",
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
)


def tls_settings(base: Path, d: Mapping[str, Any]) -> tuple[TLSSettings, list[Path]] | None:
    """``tls_server_config`` (paths relative to ``base``) built, with the files it read;
    None without a certificate (plain HTTP)."""
    w = "tls_server_config"
    s = {k: d.get(k) or "" for k in TLS_STRINGS}
    if not any(s.values()):
        for k in ("client_allowed_sans", "cipher_suites", "curve_preferences", "min_version"):
            if d.get(k):
                raise Invalid(f"{w}.{k} without a certificate: set cert_file and key_file")
        return None
    for inline, file in (
        ("cert", "cert_file"),
        ("key", "key_file"),
        ("client_ca", "client_ca_file"),
    ):
        if s[inline] and s[file]:
            raise Invalid(f"{w}: set {inline} or {file}, not both")
    if not (s["cert"] or s["cert_file"]):
        raise Invalid(f"{w}: missing one of cert or cert_file")
    if not (s["key"] or s["key_file"]):
        raise Invalid(f"{w}: missing one of key or key_file")
    if d.get("curve_preferences"):
        raise Invalid(
            f"{w}.curve_preferences is not supported (Python's ssl module cannot set the "
            "key exchange groups): remove it to use OpenSSL's defaults"
        )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = _version(d, "min_version", "TLS12")
    ctx.maximum_version = _version(d, "max_version", "TLS13")
    if ctx.minimum_version > ctx.maximum_version:
        raise Invalid(f"{w}: min_version is above max_version")
    ctx.set_alpn_protocols(["http/1.1"])
    _load_cert(ctx, base, s)
    auth = _client_auth(ctx, base, s)
    sans = tuple(_strings(d, "client_allowed_sans"))
    if sans and auth != "RequireAndVerifyClientCert":
        raise Invalid(f"{w}.client_allowed_sans needs client_auth_type RequireAndVerifyClientCert")
    _ciphers(ctx, d)
    files = [base / s[k] for k in ("cert_file", "key_file", "client_ca_file") if s[k]]
    return TLSSettings(ctx, auth, sans), files


def _client_auth(ctx: ssl.SSLContext, base: Path, s: Mapping[str, str]) -> str:
    w = "tls_server_config"
    auth = s["client_auth_type"] or "NoClientCert"
    if auth in UNVERIFIED_CLIENT_AUTH:
        raise Invalid(
            f"{w}.client_auth_type {auth} accepts any client certificate without verifying "
            "it: use RequireAndVerifyClientCert with client_ca_file"
        )
    if auth not in CLIENT_AUTH:
        raise Invalid(f"{w}.client_auth_type {auth!r} is not one of {', '.join(CLIENT_AUTH)}")
    has_ca = bool(s["client_ca"] or s["client_ca_file"])
    if has_ca and CLIENT_AUTH[auth] == ssl.CERT_NONE:
        raise Invalid(f"{w}: a client CA is set but client_auth_type is {auth}")
    if CLIENT_AUTH[auth] != ssl.CERT_NONE and not has_ca:
        raise Invalid(f"{w}.client_auth_type {auth} needs client_ca_file (or client_ca)")
    if has_ca:
        _load_ca(ctx, base, s)
    ctx.verify_mode = CLIENT_AUTH[auth]
    return auth


def _ciphers(ctx: ssl.SSLContext, d: Mapping[str, Any]) -> None:
    w = "tls_server_config"
    suites = _strings(d, "cipher_suites")
    unknown = [c for c in suites if c not in CIPHER_SUITES and c not in TLS13_SUITES]
    if unknown:
        raise Invalid(f"{w}.cipher_suites: unknown or insecure {', '.join(unknown)}")
    tls12 = [CIPHER_SUITES[c] for c in suites if c in CIPHER_SUITES]
    if tls12:
        try:
            ctx.set_ciphers(":".join(tls12))
        except ssl.SSLError:
            raise Invalid(f"{w}.cipher_suites: none is available in this OpenSSL") from None
    if flag(d, "prefer_server_cipher_suites", True):
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE


def _version(d: Mapping[str, Any], key: str, default: str) -> ssl.TLSVersion:
    name = d.get(key) or default
    if name not in TLS_VERSIONS:
        raise Invalid(f"tls_server_config.{key} {name!r} is not one of {', '.join(TLS_VERSIONS)}")
    return TLS_VERSIONS[name]


def _load_cert(ctx: ssl.SSLContext, base: Path, s: Mapping[str, str]) -> None:
    for key in ("cert_file", "key_file"):
        if s[key]:
            try:
                with open(base / s[key], "rb"):
                    pass
            except OSError as e:
                raise Invalid(f"tls_server_config.{key} {base / s[key]}: {e.strerror}") from None
    try:
        with (
            _pem(base, s["cert_file"], s["cert"]) as cert,
            _pem(base, s["key_file"], s["key"]) as key,
        ):
            ctx.load_cert_chain(cert, key)
    except ssl.SSLError as e:
        raise Invalid(
            "tls_server_config: the certificate and key do not load (not PEM, or not a "
            f"pair): {e.reason or _one_line(e)}"
        ) from None
    except OSError as e:
        raise Invalid(f"tls_server_config: cannot load the certificate and key: {e}") from None


def _load_ca(ctx: ssl.SSLContext, base: Path, s: Mapping[str, str]) -> None:
    try:
        if s["client_ca_file"]:
            ctx.load_verify_locations(cafile=str(base / s["client_ca_file"]))
        else:
            ctx.load_verify_locations(cadata=s["client_ca"])
    except ssl.SSLError as e:
        raise Invalid(
            f"tls_server_config: the client CA does not load: {e.reason or _one_line(e)}"
        ) from None
    except OSError as e:
        where = base / s["client_ca_file"]
        raise Invalid(f"tls_server_config.client_ca_file {where}: {e.strerror or e}") from None
    if not ctx.get_ca_certs():
        raise Invalid("tls_server_config: the client CA holds no certificate")


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
