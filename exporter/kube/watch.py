"""A background list+watch of this node's pods, kept in a :class:`PodIndex`.

One daemon thread keeps the index of the pods scheduled on this node
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

A pod object that cannot be read costs that pod only: it is skipped, counted
(``contention_kube_malformed_pods_total``) and logged once. The stream helpers below
split the watch response into events in time linear in its size.

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
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .index import PodIndex
from .pods import PodMeta, PodParseError, parse_pod

log = logging.getLogger("exporter.kube")

EVENT_TYPES = ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR", "OTHER")
# One watch event is one object; etcd stores objects up to 1.5 MiB. A longer line is
# not a pod: dropped (and counted) rather than buffered without bound.
MAX_EVENT_BYTES = 16 << 20


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
    malformed_total: int = 0  # pod objects (or watch lines) that could not be read


class _Gone(Exception):
    """The resourceVersion we watch from has expired (HTTP 410)."""


class _ApiError(Exception):
    """An ``ERROR`` event in a watch stream other than 410."""


ApiFactory = Callable[[], Any]  # returns a kubernetes.client.CoreV1Api


class PodWatch:
    """The list+watch of one node's pods into ``index``, on a daemon thread, with its
    state and counters for the metrics (:meth:`status`)."""

    def __init__(
        self,
        node_name: str,
        api_factory: ApiFactory,
        index: PodIndex,
        *,
        watch_timeout_seconds: int = 300,
        read_timeout_margin: float = 30.0,
        connect_timeout: float = 10.0,
        list_timeout: float = 60.0,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not node_name:
            raise ValueError("the node name is empty: pass --kubernetes.node-name or set NODE_NAME")
        self.node_name = node_name
        self._api_factory = api_factory
        self._watch_timeout = int(watch_timeout_seconds)
        self._read_margin = float(read_timeout_margin)
        self._connect_timeout = float(connect_timeout)
        self._list_timeout = float(list_timeout)
        self._backoff_initial = float(backoff_initial)
        self._backoff_max = float(backoff_max)
        self._clock = clock

        # Written by the watch thread only (the index is thread-safe).
        self._index = index
        self._rv = ""
        self._listed_at = -1e9
        self._malformed = 0
        self._warned_malformed: set[str] = set()  # pods logged as malformed (bounded)

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

    # -- state for metrics ------------------------------------------------------------

    def staleness_seconds(self) -> float | None:
        """0 while the list/watch is healthy; else seconds since it last was."""
        if self._healthy:
            return 0.0
        return max(0.0, self._clock() - self._last_good)

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
            pods=len(self._index),
            lists_total=self._lists,
            watches_total=self._watches,
            expired_total=self._expired,
            errors_total=self._errors,
            events_total=dict(self._events),
            last_error=self._last_error,
            malformed_total=self._malformed,
        )

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
        if not isinstance(body, Mapping):
            raise _ApiError(f"pod list: expected a JSON object, got {type(body).__name__}")
        self._lists += 1
        self._listed_at = self._clock()
        items = body.get("items") or []
        pods: list[PodMeta] = []
        for obj in items if isinstance(items, list) else ():
            pod = self._parse(obj)  # a malformed pod costs that pod, not the list
            if pod is None or not pod.uid or (pod.node and pod.node != self.node_name):
                continue
            pods.append(pod)
        self._index.replace(pods, self._clock())
        meta = body.get("metadata")
        self._rv = str((meta if isinstance(meta, Mapping) else {}).get("resourceVersion") or "")
        self._good()
        if not self._synced.is_set():
            log.info("pod metadata synced: %d pods on node %s", len(self._index), self.node_name)
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
            for line in _lines(resp, on_dropped=self._dropped_line):
                if self._stop.is_set():
                    return
                try:
                    event = json.loads(line)
                except ValueError:
                    self._malformed += 1
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
        meta = obj.get("metadata")
        rv = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
        if rv:
            self._rv = str(rv)
        if etype == "BOOKMARK":
            return
        pod = self._parse(obj)
        if pod is None or not pod.uid:
            return
        now = self._clock()
        if etype == "DELETED" or (pod.node and pod.node != self.node_name):
            self._index.delete(pod.uid, now)
        elif etype in ("ADDED", "MODIFIED"):
            self._index.put(pod)
        self._index.expire(now)

    def _parse(self, obj: Any) -> PodMeta | None:
        """One pod object, or None (counted, logged once per pod) if it is malformed."""
        try:
            return parse_pod(obj)
        except PodParseError as e:
            self._malformed += 1
            if e.pod not in self._warned_malformed:
                if len(self._warned_malformed) >= 1000:
                    self._warned_malformed.clear()
                self._warned_malformed.add(e.pod)
                log.warning("pod metadata: skipping a pod object that cannot be read: %s", e)
            return None

    def _dropped_line(self, size: int) -> None:
        self._malformed += 1
        log.warning("pod watch: dropped an event of %d bytes (over %d)", size, MAX_EVENT_BYTES)

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


def _lines(resp: Any, on_dropped: Callable[[int], object] | None = None) -> Iterator[str]:
    """Split a streamed watch response into lines (one JSON event each)."""
    stream = resp.stream(amt=None, decode_content=False)
    chunks = (c if isinstance(c, bytes) else str(c).encode() for c in stream)
    yield from split_lines(chunks, MAX_EVENT_BYTES, on_dropped)


def split_lines(
    chunks: Iterable[bytes], max_line: int, on_dropped: Callable[[int], object] | None = None
) -> Iterator[str]:
    """Lines of a byte stream in time linear in its size, however it is cut into
    chunks (each byte is copied at most twice). A line longer than ``max_line`` bytes
    is dropped and ``on_dropped`` gets its size: it is counted, never buffered."""
    pending: list[bytes] = []  # the current line's start, in pieces
    size = 0  # the current line's length so far
    for chunk in chunks:
        start = 0
        while (nl := chunk.find(b"\n", start)) >= 0:
            piece = chunk[start:nl]
            if size + len(piece) > max_line:
                if on_dropped is not None:
                    on_dropped(size + len(piece))
            else:
                line = b"".join(pending) + piece if pending else piece
                if line.strip():
                    yield line.decode("utf-8", errors="replace")
            pending, size, start = [], 0, nl + 1
        rest = chunk[start:]
        if rest:
            size += len(rest)
            if size <= max_line:
                pending.append(rest)
            else:
                pending = []  # too long: counted on, not kept
    if size > max_line:
        if on_dropped is not None:
            on_dropped(size)
    elif pending:
        line = b"".join(pending)
        if line.strip():
            yield line.decode("utf-8", errors="replace")


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
