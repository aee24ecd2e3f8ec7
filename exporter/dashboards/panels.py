"""Small wrappers over grafana-foundation-sdk builders, so every panel gets the same
datasource, an explicit unit, a description and a stable id."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, Self, TypeVar

from grafana_foundation_sdk.builders import bargauge, common, stat, table, timeseries
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus as prom
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm

from .selectors import V_DATASOURCE, VICTIM_LEGEND, named

DS = dm.DataSourceRef(type_val="prometheus", uid=f"${{{V_DATASOURCE}}}")

GREEN = "green"
ORANGE = "orange"
RED = "red"
BLUE = "blue"


@dataclass
class Ids:
    """Panel ids in build order: stable as long as the panel order is."""

    next_id: int = 1
    used: list[int] = field(default_factory=list)

    def __call__(self) -> int:
        i = self.next_id
        self.next_id += 1
        self.used.append(i)
        return i


@dataclass(frozen=True, slots=True)
class Query:
    """One query of a panel (a Prometheus target)."""

    expr: str
    legend: str = ""
    ref: str = "A"
    instant: bool = False
    fmt: pm.PromQueryFormat | None = None


def victim_query(expr: str, what: str = "", ref: str = "A") -> Query:
    """``expr`` per container, named as a victim (``what``: after the name)."""
    legend = f"{VICTIM_LEGEND} {what}" if what else VICTIM_LEGEND
    return Query(named(expr), legend, ref=ref)


def target(query: Query) -> prom.Dataquery:
    dataquery = (
        prom.Dataquery()
        .expr(query.expr)
        .ref_id(query.ref)
        .datasource(DS)
        .editor_mode(pm.QueryEditorMode.CODE)
    )
    if query.legend:
        dataquery = dataquery.legend_format(query.legend)
    dataquery = dataquery.instant() if query.instant else dataquery.range()
    if query.fmt is not None:
        dataquery = dataquery.format(query.fmt)
    return dataquery


def thresholds(*steps: tuple[float, str], base: str = GREEN) -> db.ThresholdsConfig:
    """Absolute thresholds: ``base`` below the first step."""
    return (
        db.ThresholdsConfig()
        .mode(dm.ThresholdsMode.ABSOLUTE)
        .steps([dm.Threshold(None, base), *(dm.Threshold(v, c) for v, c in steps)])
    )


def prop(id_val: str, value: object) -> dm.DynamicConfigValue:
    return dm.DynamicConfigValue(id_val=id_val, value=value)


def dashed(regex: str) -> tuple[str, list[dm.DynamicConfigValue]]:
    """An override (for ``override_by_regexp``): the series whose name matches ``regex``
    drawn as dashed lines without fill (a request or a limit beside the usage)."""
    return regex, [
        prop("custom.lineStyle", {"fill": "dash", "dash": [10, 10]}),
        prop("custom.fillOpacity", 0),
    ]


def transform(id_val: str, options: dict[str, object]) -> dm.DataTransformerConfig:
    return dm.DataTransformerConfig(id_val=id_val, options=options)


def link(title: str, url: str) -> db.DashboardLink:
    return db.DashboardLink(title).url(url)


class _PanelBuilder(Protocol):
    """What every panel builder of grafana-foundation-sdk has."""

    def id(self, id_val: int, /) -> Self: ...
    def title(self, title: str, /) -> Self: ...
    def description(self, description: str, /) -> Self: ...
    def datasource(self, datasource: dm.DataSourceRef, /) -> Self: ...
    def unit(self, unit: str, /) -> Self: ...
    def span(self, w: int, /) -> Self: ...
    def height(self, h: int, /) -> Self: ...
    def with_target(self, target: cogbuilder.Builder[cogvariants.Dataquery], /) -> Self: ...


P = TypeVar("P", bound=_PanelBuilder)


def _panel(
    p: P,
    ids: Ids,
    title: str,
    desc: str,
    unit: str,
    queries: Sequence[Query],
    width: int,
    height: int,
) -> P:
    """What every panel has: the next id, title, description, the datasource, an
    explicit unit, its size, and its queries in order."""
    p = (
        p.id(ids())
        .title(title)
        .description(desc)
        .datasource(DS)
        .unit(unit)
        .span(width)
        .height(height)
    )
    for query in queries:
        p = p.with_target(target(query))
    return p


def timeseries_panel(
    ids: Ids,
    title: str,
    desc: str,
    unit: str,
    queries: Sequence[Query],
    *,
    width: int = 12,
    height: int = 8,
    lines: Sequence[tuple[float, str]] = (),
    min_val: float | None = 0,
    max_val: float | None = None,
    log: bool = False,
    stack: bool = False,
    fill: int = 10,
    base: str = GREEN,
) -> timeseries.Panel:
    """A time series; ``lines`` are threshold steps drawn as dashed lines."""
    p = (
        _panel(timeseries.Panel(), ids, title, desc, unit, queries, width, height)
        .fill_opacity(fill)
        .line_width(1)
        .legend(
            common.VizLegendOptions()
            .display_mode(cm.LegendDisplayMode.TABLE)
            .placement(cm.LegendPlacement.BOTTOM)
            .show_legend(True)
            .calcs(["lastNotNull", "max"])
        )
        .tooltip(
            common.VizTooltipOptions()
            .mode(cm.TooltipDisplayMode.MULTI)
            .sort(cm.SortOrder.DESCENDING)
        )
    )
    if min_val is not None:
        p = p.min(min_val)
    if max_val is not None:
        p = p.max(max_val)
    if lines:
        p = p.thresholds(thresholds(*lines, base=base)).thresholds_style(
            common.GraphThresholdsStyleConfig().mode(cm.GraphThresholdsStyleMode.DASHED)
        )
    else:
        p = p.thresholds(thresholds())
    if log:
        p = p.scale_distribution(
            common.ScaleDistributionConfig().type(cm.ScaleDistribution.LOG).log(10)
        )
    if stack:
        p = p.stacking(common.StackingConfig().mode(cm.StackingMode.NORMAL))
    return p


def bar_gauge_panel(
    ids: Ids,
    title: str,
    desc: str,
    unit: str,
    queries: Sequence[Query],
    steps: Sequence[tuple[float, str]],
    *,
    width: int = 12,
    height: int = 10,
    max_val: float | None = None,
) -> bargauge.Panel:
    """A horizontal bar gauge per series (instant queries): one gauge per container."""
    p = (
        _panel(bargauge.Panel(), ids, title, desc, unit, queries, width, height)
        .min(0)
        .orientation(cm.VizOrientation.HORIZONTAL)
        .display_mode(cm.BarGaugeDisplayMode.GRADIENT)
        .show_unfilled(True)
        .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .thresholds(thresholds(*steps))
        .color_scheme(db.FieldColor().mode(dm.FieldColorModeId.THRESHOLDS))
    )
    if max_val is not None:
        p = p.max(max_val)
    return p


def stat_panel(
    ids: Ids,
    title: str,
    desc: str,
    unit: str,
    queries: Sequence[Query],
    steps: Sequence[tuple[float, str]] = (),
    *,
    base: str = GREEN,
    width: int = 4,
    height: int = 5,
    mappings: Sequence[dm.ValueMapping] = (),
) -> stat.Panel:
    """A stat panel (one big number per series, coloured by thresholds)."""
    p = (
        _panel(stat.Panel(), ids, title, desc, unit, queries, width, height)
        .color_mode(cm.BigValueColorMode.BACKGROUND)
        .graph_mode(cm.BigValueGraphMode.NONE)
        .text_mode(cm.BigValueTextMode.VALUE_AND_NAME)
        .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .thresholds(thresholds(*steps, base=base))
    )
    if mappings:
        p = p.mappings(list(mappings))
    return p


def table_panel(
    ids: Ids,
    title: str,
    desc: str,
    unit: str,
    queries: Sequence[Query],
    *,
    width: int = 24,
    height: int = 8,
) -> table.Panel:
    return _panel(table.Panel(), ids, title, desc, unit, queries, width, height).thresholds(
        thresholds()
    )


def value_map(values: dict[str, tuple[str, str]]) -> dm.ValueMap:
    """``{"1": ("loaded", "green")}`` -> a value mapping (text, colour)."""
    return dm.ValueMap(
        options={
            k: dm.ValueMappingResult(text=t, color=c, index=i)
            for i, (k, (t, c)) in enumerate(values.items())
        }
    )
