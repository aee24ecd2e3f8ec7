"""The ``http`` collector: the HTTP front's own counters, and ``--web.config.file``'s
reload state (families: ``exporter.catalog.own``; the counts: ``exporter.web``),
built with each pass like the rest. Nothing while no server is attached (``diagnose``)."""

from __future__ import annotations

from prometheus_client.core import Metric

from ..catalog import own as O
from .inputs import Context, HttpFront
from .series import new, one


def http(ctx: Context) -> list[Metric]:
    front = ctx.sources.http
    return [] if front is None else http_families(front)


def http_families(front: HttpFront) -> list[Metric]:
    stats = front.stats
    closed = new(O.HTTP_CONNECTIONS_CLOSED)
    # Copies: the loop thread counts while a pass renders (dict.copy holds the GIL).
    for reason, n in stats.closed.copy().items():
        closed.add_metric([reason], n)
    responses = new(O.HTTP_RESPONSES)
    for code, n in sorted(stats.responses.copy().items()):
        responses.add_metric([str(code)], n)
    out = [closed, responses, one(O.HTTP_OPEN_CONNECTIONS, stats.open)]
    web = front.web_config
    if web is not None:
        out.append(one(O.WEB_CONFIG_LAST_RELOAD_SUCCESSFUL, 1 if web.last_reload_ok else 0))
        out.append(one(O.WEB_CONFIG_RELOAD_FAILURES, web.reload_failures_total))
    return out
