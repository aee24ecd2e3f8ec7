"""Identity from a YAML file: requests, limits and names for cgroups in host mode.

Kubernetes keeps requests in the pod spec, not in the cgroup. On a host without
Kubernetes (or for the contention labs) this file plays that part, so the culprit test
("does it run beyond its request?") applies exactly as on a cluster::

    cgroups:
      /system.slice/backup.service:
        cpu_request: 500m        # Kubernetes quantities, or plain numbers
        memory_request: 256Mi
      /contention-test-victim:
        namespace: lab           # optional names shown instead of the path
        pod: victim
        container: app
        cpu_request: "1"

The file is re-read when it changes; a broken file keeps the last good contents and
says why in the log.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import yaml

from .cgroupfs.discovery import CgroupRef
from .identity import HostIdentityResolver, Identity, IdentityResolver
from .quantity import cpu_cores, memory_bytes

log = logging.getLogger(__name__)


class MetadataFileError(ValueError):
    pass


def parse_metadata(doc: Any, source: str) -> dict[str, dict[str, Any]]:
    """Validate a metadata document: ``{cgroups: {path: {key: value}}}``."""
    if doc is None:
        return {}
    if not isinstance(doc, dict) or set(doc) - {"cgroups"}:
        raise MetadataFileError(f"{source}: expected a mapping with one key 'cgroups'")
    cgroups = doc.get("cgroups") or {}
    if not isinstance(cgroups, dict):
        raise MetadataFileError(f"{source}: 'cgroups' must map cgroup paths to settings")
    out: dict[str, dict[str, Any]] = {}
    for path, entry in cgroups.items():
        where = f"{source}: cgroups[{path!r}]"
        if not isinstance(path, str) or not path.startswith("/"):
            raise MetadataFileError(f"{where}: a cgroup path must start with '/'")
        out[path] = _parse_entry(entry, where)
    return out


# key in the file -> (Identity field, parser)
_FIELDS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "namespace": ("namespace", str),
    "pod": ("pod", str),
    "container": ("container", str),
    "cpu_request": ("cpu_request_cores", cpu_cores),
    "cpu_limit": ("cpu_limit_cores", cpu_cores),
    "memory_request": ("memory_request_bytes", memory_bytes),
    "memory_limit": ("memory_limit_bytes", memory_bytes),
    "opted_out": ("opted_out", bool),
}


_KEYS = set(_FIELDS)


def _parse_entry(entry: Any, where: str) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise MetadataFileError(f"{where}: expected a mapping")
    unknown = set(entry) - _KEYS
    if unknown:
        raise MetadataFileError(
            f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(_KEYS)}"
        )
    try:
        return {_FIELDS[k][0]: _FIELDS[k][1](v) for k, v in entry.items()}
    except ValueError as e:
        raise MetadataFileError(f"{where}: {e}") from None


class FileIdentityResolver:
    """Overlays a metadata file on another resolver (host mode by default)."""

    def __init__(self, path: str, inner: IdentityResolver | None = None) -> None:
        self.path = path
        self.inner = inner or HostIdentityResolver()
        self._entries: dict[str, dict[str, Any]] = {}
        self._mtime: float | None = None
        self._lock = threading.Lock()
        self.reload(strict=True)

    def reload(self, strict: bool = False) -> None:
        try:
            mtime = os.stat(self.path).st_mtime
        except OSError as e:
            if strict:
                raise MetadataFileError(f"{self.path}: {e.strerror}") from None
            return
        if mtime == self._mtime:
            return
        try:
            with open(self.path) as f:
                entries = parse_metadata(yaml.safe_load(f), self.path)
        except (OSError, yaml.YAMLError, MetadataFileError) as e:
            if strict:
                raise MetadataFileError(str(e)) from None
            log.warning("metadata file not reloaded, keeping the previous contents: %s", e)
            self._mtime = mtime
            return
        with self._lock:
            self._entries, self._mtime = entries, mtime

    def refresh(self) -> None:
        """Called once per sampler pass: pick up edits to the file."""
        self.reload()
        self.inner.refresh()

    def resolve(self, ref: CgroupRef) -> Identity:
        base = self.inner.resolve(ref)
        with self._lock:
            entry = self._entries.get(ref.path)
        return replace(base, **entry) if entry else base

    def staleness_seconds(self) -> float | None:
        return self.inner.staleness_seconds()
