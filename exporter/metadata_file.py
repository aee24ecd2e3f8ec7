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
        workload: Deployment/victim  # optional: what owns it (culprits are grouped by it)
        cpu_request: "1"

Read and validated like every configuration file (:mod:`exporter.config_file`, schema
``exporter/data/metadata.schema.json``). The file is re-read when it changes; a broken
edit keeps the last good contents, is logged once and counted
(``contention_config_reload_failures_total``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from .cgroupfs.discovery import CgroupRef
from .config_file import ConfigError, ConfigFileStatus, WatchedFile, load_yaml, validate
from .identity import HostIdentityResolver, Identity, IdentityResolver
from .quantity import cpu_cores, memory_bytes

log = logging.getLogger(__name__)

SCHEMA = "metadata"
Entries = Mapping[str, Mapping[str, Any]]  # cgroup path -> Identity field -> value


class MetadataFileError(ConfigError):
    pass


# key in the file -> (Identity field, conversion of the schema-checked value)
_FIELDS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "namespace": ("namespace", str),
    "pod": ("pod", str),
    "container": ("container", str),
    "workload": ("workload", str),
    "cpu_request": ("cpu_request_cores", cpu_cores),
    "cpu_limit": ("cpu_limit_cores", cpu_cores),
    "memory_request": ("memory_request_bytes", memory_bytes),
    "memory_limit": ("memory_limit_bytes", memory_bytes),
    "opted_out": ("opted_out", bool),
}


def parse_metadata(doc: Any, source: str) -> dict[str, dict[str, Any]]:
    """Validate a metadata document, ``{cgroups: {path: {key: value}}}``, and convert
    it to Identity fields per cgroup path."""
    if doc is None:
        return {}
    try:
        validate(doc, SCHEMA, source)
    except ConfigError as e:
        raise MetadataFileError(str(e)) from None
    out: dict[str, dict[str, Any]] = {}
    for path, entry in (doc.get("cgroups") or {}).items():
        fields: dict[str, Any] = {}
        for key, value in entry.items():
            field, convert = _FIELDS[key]
            try:
                fields[field] = convert(value)
            except ValueError as e:
                raise MetadataFileError(f"{source}: cgroups.{path}.{key}: {e}") from None
        out[path] = fields
    return out


def parse_metadata_file(data: bytes, source: str) -> dict[str, dict[str, Any]]:
    """A metadata file's bytes, parsed and validated (errors name the file and key)."""
    try:
        doc = load_yaml(data, source)
    except ConfigError as e:
        raise MetadataFileError(str(e)) from None
    return parse_metadata(doc, source)


class FileIdentityResolver:
    """Overlays a metadata file on another resolver (host mode by default)."""

    def __init__(self, path: str, inner: IdentityResolver | None = None) -> None:
        self.path = path
        self.inner = inner or HostIdentityResolver()
        try:
            self._file = WatchedFile(path, "metadata", parse_metadata_file)
        except ConfigError as e:
            raise MetadataFileError(str(e)) from None

    def refresh(self) -> None:
        """Called once per sampler pass: pick up edits to the file."""
        self._file.poll()
        self.inner.refresh()

    def resolve(self, ref: CgroupRef) -> Identity:
        base = self.inner.resolve(ref)
        entry = self._file.value.get(ref.path)
        if not entry:
            return base
        if "pod" in entry and "workload" not in entry:
            # a pod the file names and no owner given: the pod stands for itself, as a
            # pod without ownerReferences does in Kubernetes
            entry = {**entry, "workload": f"Pod/{entry['pod']}"}
        return replace(base, **entry)

    def staleness_seconds(self) -> float | None:
        return self.inner.staleness_seconds()

    def status(self) -> ConfigFileStatus:
        return self._file.status()
