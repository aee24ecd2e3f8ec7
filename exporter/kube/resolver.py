"""Name cgroups after pods: a background list+watch of this node's pods.

One daemon thread keeps an in-memory index of the pods scheduled on this node
(``fieldSelector=spec.nodeName=<node>``), the way a client-go reflector does:

1. **list** (first time with ``resourceVersion=0``, served from the API server's watch
   cache; after an expiry with no resourceVersion, a consistent read), replace the
   index, note the list's resourceVersion;
2. **watch** from that resourceVersion with bookmarks and a server-side timeout; apply
   ``ADDED``/``MODIFIED``/``DELETED``; when the server ends the watch, watch again
   from the last resourceVersion seen;
3. **410 Gone** (as an HTTP status or an ``ERROR`` event): the resourceVersion has
   expired, relist;
4. any other failure (API down, 5xx, RBAC, DNS, TLS): mark the metadata stale, back
   off exponentially with jitter, then try the watch again (or the list if there never
   was one). Nothing is restarted and nothing is raised to the sampler.

The sampler thread only reads: every change builds a fresh immutable index and swaps
one reference, so :meth:`KubeIdentityResolver.resolve` takes no lock.

A pod that leaves the API is kept as a *tombstone* for ``deleted_grace_seconds`` so a
cgroup that outlives its pod keeps its name (and its series) until it goes; a cgroup
nobody has told us about is named by :func:`exporter.identity.identity_from_ref`
(``pod:<uid8>``) until the API does.

The ``kubernetes`` package is not imported here: the caller passes a factory that
returns a ``CoreV1Api`` (see :mod:`exporter.kube`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..cgroupfs.discovery import CgroupRef
from ..identity import Identity, identity_from_ref
from .pods import PodMeta, merge_container_ids, parse_pod

log = logging.getLogger("exporter.kube")

SANDBOX_CONTAINER = "POD"  # the name cAdvisor/kubelet conventions give the pod sandbox
EVENT_TYPES = ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR", "OTHER")


class WatchState(StrEnum):
    STARTING = "starting"  # thread not yet started, or building the client
    LISTING = "listing"  # a list request is in flight
    WATCHING = "watching"  # a watch stream is open (metadata is current)
    BACKOFF = "backoff"  # the last request failed; waiting before the next try
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class KubeStatus:
    """A consistent-enough snapshot for metrics and logs."""

    state: WatchState
    synced: bool  # at least one list has succeeded
    healthy: bool  # the last request succeeded (staleness 0)
    staleness_seconds: float
    pods: int
    lists_total: int
    watches_total: int
    expired_total: int  # 410 Gone: relists forced by an expired resourceVersion
    errors_total: int
    events_total: Mapping[str, int] = field(default_factory=dict)
    last_error: str = ""


class _Gone(Exception):
    """The resourceVersion we watch from has expired (HTTP 410)."""


class _ApiError(Exception):
    """An ``ERROR`` event in a watch stream other than 410."""


@dataclass(frozen=True, slots=True)
class _Index:
    by_uid: Mapping[str, PodMeta]  # API UID and, for static pods, the config hash
    by_cid: Mapping[str, tuple[PodMeta, str]]  # runtime container ID -> (pod, name)
    # Pods that left the API recently, by UID/hash and by container ID, with a deadline.
    tomb_uid: Mapping[str, tuple[float, PodMeta]]
    tomb_cid: Mapping[str, tuple[float, PodMeta, str]]


_EMPTY = _Index({}, {}, {}, {})

ApiFactory = Callable[[], Any]  # returns a kubernetes.client.CoreV1Api


class KubeIdentityResolver:
    """An :class:`exporter.identity.IdentityResolver` backed by the Kubernetes API."""

    def __init__(
        self,
        node_name: str,
        api_factory: ApiFactory,
        *,
        watch_timeout_seconds: int = 300,
        read_timeout_margin: float = 30.0,
        connect_timeout: float = 10.0,
        list_timeout: float = 60.0,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        deleted_grace_seconds: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not node_name:
            raise ValueError("the node name is empty: pass --node-name or set NODE_NAME")
        self.node_name = node_name
        self._api_factory = api_factory
        self._watch_timeout = int(watch_timeout_seconds)
        self._read_margin = float(read_timeout_margin)
        self._connect_timeout = float(connect_timeout)
        self._list_timeout = float(list_timeout)
        self._backoff_initial = float(backoff_initial)
        self._backoff_max = float(backoff_max)
        self._grace = float(deleted_grace_seconds)
        self._clock = clock

        # Written by the watch thread only.
        self._pods: dict[str, PodMeta] = {}
        self._tombs: dict[str, tuple[float, PodMeta]] = {}  # uid -> (deadline, pod)
        self._rv = ""
        self._listed_at = -1e9
        # Read by any thread: one reference swapped per change.
        self._index: _Index = _EMPTY

        self._state = WatchState.STARTING
        self._healthy = False
        self._synced = threading.Event()
        self._last_good = clock()
        self._lists = 0
        self._watches = 0
        self._expired = 0
        self._errors = 0
        # Fixed keys: status() copies this from another thread while it is counted.
        self._events: dict[str, int] = dict.fromkeys(EVENT_TYPES, 0)
        self._last_error = ""

        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._resp: Any = None  # the open watch response, so stop() can unblock a read

    # -- IdentityResolver -------------------------------------------------------------

    def refresh(self) -> None:
        """Nothing to do per pass: the watch thread keeps the index current."""

    def resolve(self, ref: CgroupRef) -> Identity:
        k = ref.k8s
        if k is None or not (k.pod_uid or k.container_id):
            return identity_from_ref(ref)
        idx = self._index
        now = self._clock()
        pod: PodMeta | None = None
        name = ""
        if k.container_id:
            hit = idx.by_cid.get(k.container_id) or _prefix_hit(idx.by_cid, k.container_id)
            if hit is not None:
                pod, name = hit
            else:
                tomb = idx.tomb_cid.get(k.container_id)
                if tomb is not None and tomb[0] > now:
                    pod, name = tomb[1], tomb[2]
        if pod is None and k.pod_uid:
            pod = idx.by_uid.get(k.pod_uid)
            if pod is None:
                t = idx.tomb_uid.get(k.pod_uid)
                if t is not None and t[0] > now:
                    pod = t[1]
            if pod is not None and k.container_id:
                # A container cgroup of a known pod whose ID the API has not listed: the
                # sandbox once every container has an ID, else one not reported yet.
                name = SANDBOX_CONTAINER if pod.all_ids_known else ""
        if pod is None:
            return identity_from_ref(ref)
        base = identity_from_ref(ref)
        c = pod.containers.get(name) if name else None
        return Identity(
            cgroup=base.cgroup,
            kind=base.kind,
            namespace=pod.namespace,
            pod=pod.name,
            container=name,
            pod_uid=pod.uid,
            container_id=base.container_id,
            runtime=base.runtime,
            qos=pod.qos or base.qos,
            cpu_request_cores=c.cpu_request_cores if c else None,
            cpu_limit_cores=c.cpu_limit_cores if c else None,
            memory_request_bytes=c.memory_request_bytes if c else None,
            memory_limit_bytes=c.memory_limit_bytes if c else None,
            opted_out=pod.opted_out,
        )

    def staleness_seconds(self) -> float | None:
        """0 while the list/watch is healthy; else seconds since it last was."""
        if self._healthy:
            return 0.0
        return max(0.0, self._clock() - self._last_good)

    # -- state for metrics ------------------------------------------------------------

    def watch_state(self) -> WatchState:
        return self._state

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Block until the first list has succeeded (or ``timeout``); True if it has."""
        return self._synced.wait(timeout)

    def status(self) -> KubeStatus:
        return KubeStatus(
            state=self._state,
            synced=self.synced,
            healthy=self._healthy,
            staleness_seconds=self.staleness_seconds() or 0.0,
            pods=len(self._pods),
            lists_total=self._lists,
            watches_total=self._watches,
            expired_total=self._expired,
            errors_total=self._errors,
            events_total=dict(self._events),
            last_error=self._last_error,
        )

    def pods(self) -> list[PodMeta]:
        """The pods currently known on this node (from the published index)."""
        return list({p.uid: p for p in self._index.by_uid.values()}.values())

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="kube-pod-watch", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        _abort(self._resp)
        if self._thread is not None:
            self._thread.join(timeout)
        self._state = WatchState.STOPPED

    # -- the watch thread -------------------------------------------------------------

    def _run(self) -> None:
        api: Any = None
        attempt = 0
        gone_streak = 0  # consecutive 410s: backs off like errors do
        consistent_list = False  # after a 410, list from etcd rather than the cache
        need_list = True
        while not self._stop.is_set():
            try:
                if api is None:
                    self._state = WatchState.STARTING
                    api = self._api_factory()
                if need_list:
                    self._list(api, consistent=consistent_list)
                    need_list = consistent_list = False
                    attempt = 0
                started = self._clock()
                self._watch(api)
                attempt = gone_streak = 0
                if self._clock() - started < 1.0:
                    # A server (or proxy) that ends watches at once must not make us spin.
                    self._stop.wait(self._backoff_initial)
            except Exception as e:
                if self._stop.is_set():
                    break
                if isinstance(e, _Gone) or getattr(e, "status", None) == 410:
                    self._expired += 1
                    log.info("pod watch: resourceVersion %r expired (410), relisting", self._rv)
                    # A 410 from the list itself, or right after one, must not spin.
                    if need_list or self._clock() - self._listed_at < 5.0:
                        self._backoff(gone_streak)
                        gone_streak += 1
                    need_list = consistent_list = True
                    continue
                self._failed(e, attempt)
                self._backoff(attempt)
                attempt += 1
        self._state = WatchState.STOPPED

    def _list(self, api: Any, consistent: bool) -> None:
        self._state = WatchState.LISTING
        kwargs: dict[str, Any] = {}
        if not consistent:
            kwargs["resource_version"] = "0"
        resp = api.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={self.node_name}",
            _preload_content=False,
            _request_timeout=(self._connect_timeout, self._list_timeout),
            **kwargs,
        )
        try:
            body = json.loads(resp.data)
        finally:
            _release(resp)
        self._lists += 1
        self._listed_at = self._clock()
        items = body.get("items") or []
        pods: dict[str, PodMeta] = {}
        for obj in items:
            pod = parse_pod(obj)
            if not pod.uid or (pod.node and pod.node != self.node_name):
                continue
            old = self._pods.get(pod.uid)
            pods[pod.uid] = merge_container_ids(old, pod) if old else pod
        now = self._clock()
        for uid, gone in self._pods.items():
            if uid not in pods:
                self._tombs[uid] = (now + self._grace, gone)
        for uid in pods:
            self._tombs.pop(uid, None)
        self._pods = pods
        self._rv = str((body.get("metadata") or {}).get("resourceVersion") or "")
        self._publish()
        self._good()
        if not self._synced.is_set():
            log.info("pod metadata synced: %d pods on node %s", len(pods), self.node_name)
        self._synced.set()

    def _watch(self, api: Any) -> None:
        kwargs: dict[str, Any] = {}
        if self._rv:
            kwargs["resource_version"] = self._rv
        resp = api.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={self.node_name}",
            watch=True,
            allow_watch_bookmarks=True,
            timeout_seconds=self._watch_timeout,
            _preload_content=False,
            _request_timeout=(self._connect_timeout, self._watch_timeout + self._read_margin),
            **kwargs,
        )
        self._watches += 1
        self._resp = resp
        if self._stop.is_set():  # stop() ran before _resp was set: it could not abort us
            self._resp = None
            _release(resp)
            return
        self._state = WatchState.WATCHING
        self._good()
        try:
            for line in _lines(resp):
                if self._stop.is_set():
                    return
                try:
                    event = json.loads(line)
                except ValueError:
                    log.debug("pod watch: skipping a line that is not JSON: %.200s", line)
                    continue
                if isinstance(event, dict):
                    self._apply(event)
        except Exception as e:
            if _is_read_timeout(e):
                # Nothing arrived for longer than the server-side timeout: watch again.
                log.debug("pod watch: read timed out, watching again")
                return
            raise
        finally:
            self._resp = None
            _release(resp)

    def _apply(self, event: Mapping[str, Any]) -> None:
        etype = str(event.get("type", ""))
        obj = event.get("object")
        if not isinstance(obj, Mapping):
            return
        key = etype if etype in self._events else "OTHER"
        self._events[key] += 1
        if etype == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise _Gone()
            raise _ApiError(f"watch error {code}: {obj.get('reason')}: {obj.get('message')}")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if rv:
            self._rv = str(rv)
        if etype == "BOOKMARK":
            return
        pod = parse_pod(obj)
        if not pod.uid:
            return
        if etype == "DELETED" or (pod.node and pod.node != self.node_name):
            gone = self._pods.pop(pod.uid, None)
            if gone is not None:
                self._tombs[pod.uid] = (self._clock() + self._grace, gone)
                self._publish()
            return
        if etype in ("ADDED", "MODIFIED"):
            old = self._pods.get(pod.uid)
            self._pods[pod.uid] = merge_container_ids(old, pod) if old else pod
            self._tombs.pop(pod.uid, None)
            self._publish()

    def _publish(self) -> None:
        now = self._clock()
        self._tombs = {u: t for u, t in self._tombs.items() if t[0] > now}
        by_uid: dict[str, PodMeta] = {}
        by_cid: dict[str, tuple[PodMeta, str]] = {}
        for pod in self._pods.values():
            by_uid[pod.uid] = pod
            if pod.config_hash:
                by_uid.setdefault(pod.config_hash, pod)
            for cid, name in pod.container_ids.items():
                by_cid[cid] = (pod, name)
        tomb_uid: dict[str, tuple[float, PodMeta]] = {}
        tomb_cid: dict[str, tuple[float, PodMeta, str]] = {}
        for deadline, pod in self._tombs.values():
            tomb_uid[pod.uid] = (deadline, pod)
            if pod.config_hash:
                tomb_uid.setdefault(pod.config_hash, (deadline, pod))
            for cid, name in pod.container_ids.items():
                tomb_cid[cid] = (deadline, pod, name)
        self._index = _Index(by_uid, by_cid, tomb_uid, tomb_cid)

    def _good(self) -> None:
        self._healthy = True
        self._last_good = self._clock()
        if self._last_error:
            log.info("pod metadata: Kubernetes API reachable again")
            self._last_error = ""

    def _failed(self, e: Exception, attempt: int) -> None:
        if self._healthy:  # the data was current until just now
            self._last_good = self._clock()
        self._healthy = False
        self._errors += 1
        msg = _describe(e)
        if msg != self._last_error:
            log.warning("pod metadata: %s (keeps serving; names may go stale)", msg)
        else:
            log.debug("pod metadata: %s (attempt %d)", msg, attempt + 1)
        self._last_error = msg

    def _backoff(self, attempt: int) -> None:
        self._state = WatchState.BACKOFF
        delay = min(self._backoff_max, self._backoff_initial * (2 ** min(attempt, 20)))
        self._stop.wait(delay * random.uniform(0.5, 1.0))


def _prefix_hit(by_cid: Mapping[str, tuple[PodMeta, str]], cid: str) -> tuple[PodMeta, str] | None:
    """Short (12-character) IDs in a cgroup path: match them against full IDs."""
    if len(cid) >= 64:
        return None
    for full, hit in by_cid.items():
        if full.startswith(cid):
            return hit
    return None


def _lines(resp: Any) -> Iterator[str]:
    """Split a streamed watch response into lines (one JSON event each)."""
    buf = b""
    for chunk in resp.stream(amt=None, decode_content=False):
        buf += chunk if isinstance(chunk, bytes) else str(chunk).encode()
        while True:
            nl = buf.find(b"\n")
            if nl < 0:
                break
            line, buf = buf[:nl], buf[nl + 1 :]
            if line.strip():
                yield line.decode("utf-8", errors="replace")
    if buf.strip():
        yield buf.decode("utf-8", errors="replace")


def _release(resp: Any) -> None:
    for name in ("close", "release_conn"):
        fn = getattr(resp, name, None)
        if fn is not None:
            with contextlib.suppress(Exception):  # best effort on a dead connection
                fn()


def _abort(resp: Any) -> None:
    """Unblock a thread reading ``resp`` (urllib3 2.3+ has shutdown(); else the socket)."""
    if resp is None:
        return
    try:
        shutdown = getattr(resp, "shutdown", None)
        if shutdown is not None:
            shutdown()
            return
        sock = getattr(getattr(resp, "connection", None), "sock", None)
        if sock is not None:
            import socket

            sock.shutdown(socket.SHUT_RDWR)
    except Exception:  # pragma: no cover - best effort
        pass


def _is_read_timeout(e: BaseException) -> bool:
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if type(cur).__name__ in ("ReadTimeoutError", "TimeoutError", "timeout"):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def _describe(e: Exception) -> str:
    status = getattr(e, "status", None)
    reason = getattr(e, "reason", None)
    if status:
        hint = ""
        if status == 401:
            hint = " (credentials rejected)"
        elif status == 403:
            hint = " (RBAC: the service account needs get/list/watch on pods)"
        return f"API returned {status} {reason or ''}{hint}".strip()
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text}"[:300]
