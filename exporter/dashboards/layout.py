"""How a dashboard is put together: rows, each a title and the functions that build
its panels, called in order, so the panel ids follow the layout (``Ids``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.models import dashboard as dm

from ..findings.thresholds import Thresholds
from .panels import Ids
from .selectors import Selectors


@dataclass(frozen=True, slots=True)
class Context:
    """What every panel of one dashboard reads: the selectors (and through them the
    thresholds) and the panel ids, handed out in build order."""

    selectors: Selectors
    ids: Ids = field(default_factory=Ids)

    @property
    def th(self) -> Thresholds:
        return self.selectors.th


Panel = Callable[[Context], cogbuilder.Builder[dm.Panel]]


@dataclass(frozen=True, slots=True)
class Row:
    """A row of a dashboard: its title, then its panels left to right, top to bottom."""

    title: str
    panels: tuple[Panel, ...]


def with_rows(dashboard: db.Dashboard, context: Context, rows: Iterable[Row]) -> db.Dashboard:
    """``dashboard`` with ``rows`` added in order, each row before its panels."""
    for row in rows:
        dashboard = dashboard.with_row(db.Row(row.title).id(context.ids()))
        for build in row.panels:
            dashboard = dashboard.with_panel(build(context))
    return dashboard
