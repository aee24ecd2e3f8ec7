"""The ``kube`` collector: the pod-metadata watch's health (Kubernetes mode only;
families: ``exporter.catalog.own``).

``contention_metadata_staleness_seconds`` itself comes from the sampler snapshot (it is
part of the :class:`~exporter.identity.IdentityResolver` protocol); these add why.
Built once per pass from one :meth:`KubeIdentityResolver.status` snapshot.
"""

from __future__ import annotations

from prometheus_client.core import Metric

from ..catalog import own as O
from ..kube.resolver import KubeIdentityResolver
from ..kube.watch import WatchState
from .inputs import Context
from .series import new, one


def kube(ctx: Context) -> list[Metric]:
    kres = ctx.sources.kube
    return [] if kres is None else metric_families(kres)


def metric_families(resolver: KubeIdentityResolver) -> list[Metric]:
    st = resolver.status()
    state = new(O.KUBE_WATCH_STATE)
    for s in WatchState:
        state.add_metric([s.value], 1.0 if st.state is s else 0.0)
    events = new(O.KUBE_WATCH_EVENTS)
    for t in O.KUBE_WATCH_EVENTS.label("type").values:
        events.add_metric([t], float(st.events_total.get(t, 0)))
    return [
        state,
        one(O.KUBE_SYNCED, 1.0 if st.synced else 0.0),
        one(O.KUBE_PODS, float(st.pods)),
        one(O.KUBE_LISTS, float(st.lists_total)),
        one(O.KUBE_WATCH_EXPIRED, float(st.expired_total)),
        one(O.KUBE_API_ERRORS, float(st.errors_total)),
        one(O.KUBE_MALFORMED_PODS, float(st.malformed_total)),
        events,
    ]
