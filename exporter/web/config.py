"""``--web.config.file``: exporter-toolkit's web configuration format, read strictly.

The same file node_exporter and Prometheus read (docs/serving.md, "TLS and basic
auth")::

    tls_server_config:        # TLS: cert(_file) and key(_file), client certificates
    http_server_config:       # extra response headers (http2 is accepted, unused)
    basic_auth_users:         # user: bcrypt hash
    rate_limit:               # interval, burst

Read like every configuration file (:mod:`exporter.config_file`: the strict YAML
loader, schema ``exporter/data/web.schema.json`` for the keys and their types); here,
what a schema cannot say: durations, the checks that involve several keys, and (in
``tls``) the names translated for OpenSSL and the certificates and keys loaded.
Unknown keys, wrong types and settings this exporter cannot honour are errors that
name the file and the key, never silently ignored: a security setting that does
nothing would be worse than a refusal. Relative paths are relative to the file.

:class:`WebConfigSource` re-reads the file, and the certificates, keys and CAs it
names, when any of them changes (checked at most once a second, on new connections
and requests), so rotated certificates are served without a restart. A bad edit
keeps the last good configuration, logs once and counts a reload failure
(``contention_config_*{kind="web"}``).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config_file import ConfigError, ConfigFileStatus, WatchedFile, load_yaml, read_config
from ..config_file import validate as validate_schema
from .tls import Invalid, TLSSettings, flag, tls_settings

log = logging.getLogger(__name__)

SCHEMA = "web"
KIND = "web"  # contention_config_*{kind="web"}
MAX_FILE_BYTES = 1 << 20  # a web config is a few lines; refuse anything that is not
CHECK_EVERY_S = 1.0

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
    except Invalid as e:
        raise ConfigError(f"{source}: {e}") from None


def _build(path: Path, top: Mapping[str, Any]) -> WebConfig:
    files = [path]
    tls = tls_settings(path.parent, top.get("tls_server_config") or {})
    if tls is not None:
        files.extend(tls[1])
    http = top.get("http_server_config") or {}
    return WebConfig(
        path=path,
        tls=tls[0] if tls is not None else None,
        users={u: h.encode("ascii") for u, h in (top.get("basic_auth_users") or {}).items()},
        headers=tuple((k, v) for k, v in (http.get("headers") or {}).items() if v),
        rate_limit=_rate_limit(top.get("rate_limit") or {}),
        http2=flag(http, "http2", True),
        files=tuple(files),
    )


def go_duration(value: Any, where: str) -> float:
    """Seconds from a Go duration ("1s", "250ms", "1m30s"; an integer is nanoseconds)."""
    if isinstance(value, bool):
        raise Invalid(f"{where} must be a duration like 1s or 250ms")
    if isinstance(value, int):
        return value * 1e-9
    if not isinstance(value, str):
        raise Invalid(f"{where} must be a duration like 1s or 250ms")
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
        raise Invalid(f"{where}: {value!r} is not a duration like 1s or 250ms")
    return total


def _rate_limit(d: Mapping[str, Any]) -> RateLimit | None:
    interval = go_duration(d.get("interval", 0), "rate_limit.interval")
    if interval <= 0:
        return None
    burst = d.get("burst", 0)
    if burst < 1:
        raise Invalid(
            f"rate_limit.burst must be a whole number >= 1 with an interval (got {burst!r}): "
            "0 would refuse every request"
        )
    return RateLimit(interval, burst)


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
