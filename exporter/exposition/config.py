"""The ``config`` collector: the configuration files' reload state
(``contention_config_*``; families: ``exporter.catalog.own``): a bad edit keeps the
last good contents, and these say so."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from ..catalog import own as O
from ..config_file import ConfigFileStatus
from .inputs import Context
from .series import new


def config(ctx: Context) -> list[Metric]:
    files = ctx.sources.config_files
    return config_families(f() for f in files) if files else []


def config_families(files: Iterable[ConfigFileStatus]) -> list[Metric]:
    ok = new(O.CONFIG_LAST_RELOAD_SUCCESSFUL)
    failures = new(O.CONFIG_RELOAD_FAILURES)
    for f in files:
        ok.add_metric([f.kind, f.path], 1 if f.last_reload_ok else 0)
        failures.add_metric([f.kind, f.path], f.reload_failures_total)
    return [ok, failures]
