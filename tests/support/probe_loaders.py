"""Loading the real scheduler probe in real-kernel tests: one loader per test run,
skipped (failed under CI) with the reason when this machine cannot load it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import pytest

from exporter.probe import SchedProbe
from exporter.probe.status import (
    REASON_LIBBPF_MISSING,
    REASON_NO_BCC,
    REASON_NO_BTF,
    REASON_NO_HEADERS,
    REASON_NO_TRACEFS,
    REASON_NOT_ROOT,
)

# Reasons that mean "this machine cannot run this loader": skip, except in CI, where
# scripts/setup.sh --test installs both and a skip would hide a broken setup.
SKIP_REASONS = {
    "core": (REASON_NOT_ROOT, REASON_NO_BTF, REASON_LIBBPF_MISSING),
    "bcc": (REASON_NOT_ROOT, REASON_NO_BCC, REASON_NO_HEADERS, REASON_NO_TRACEFS),
}
# --probe.loader auto (the default: the exporter and diagnose choose): either one's.
SKIP_REASONS["auto"] = tuple(dict.fromkeys(SKIP_REASONS["core"] + SKIP_REASONS["bcc"]))
LOADERS = ("core", "bcc")


def cannot_load(loader: str, reason: str, detail: str) -> NoReturn:
    msg = f"{loader} probe cannot load here: {reason}: {detail}"
    if reason in SKIP_REASONS[loader] and not os.environ.get("CI"):
        pytest.skip(msg)
    pytest.fail(msg)


def probe_loader(loader: str) -> Iterator[Callable[..., SchedProbe]]:
    """The body of the ``load_probe`` fixture: ``load(**knobs)`` -> a SchedProbe
    loaded by ``loader`` (``loader=`` in the knobs overrides it), closed afterwards."""
    made: list[SchedProbe] = []

    def load(**kw: Any) -> SchedProbe:
        kw.setdefault("loader", loader)
        p = SchedProbe(**kw)
        made.append(p)
        st = p.load()
        if not st.loaded:
            cannot_load(kw["loader"], st.reason, st.detail)
        assert st.loaded and st.loader == kw["loader"] and st.reason == "", st
        return p

    try:
        yield load
    finally:
        for p in made:
            p.close()
