"""The ``http`` collector: the HTTP front's own counters (families:
``exporter.catalog.own``; the counts: ``exporter.web``), built with each pass like the
rest. Nothing while no server is attached (``diagnose``). ``--web.config.file``'s
reload state is the ``config`` collector's, with the other configuration files."""

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
    return [closed, responses, one(O.HTTP_OPEN_CONNECTIONS, stats.open)]
