"""An API server for tests: kmock's ``KubernetesEmulator`` (an in-memory Kubernetes API
over HTTP on 127.0.0.1), extended with the three things a pod reflector depends on and
kmock leaves out: the ``spec.nodeName`` field selector, increasing resourceVersions (a
watch from a resourceVersion does not replay older objects) and expiry (410 Gone).

Clients are not patched: they load a kubeconfig (:func:`kubeconfig`) pointing at the
emulator and speak HTTP. Used by the resolver's unit tests and by the end-to-end
default-install lane, where the real exporter in Kubernetes mode watches it.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import attrs
import kmock

PODS = kmock.resource("v1/pods")


def _node_of(request: Any) -> str | None:
    sel = request.params.get("fieldSelector", "")
    for term in sel.split(","):
        key, _, value = term.partition("=")
        if key == "spec.nodeName":
            return str(value)
    return None


def _on_node(obj: Any, node: str | None) -> bool:
    return node is None or (obj.get("spec") or {}).get("nodeName") == node


def _rv(obj: Any) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


_Emulator: Any = kmock.KubernetesEmulator


@attrs.define(kw_only=True)
class PodApi(_Emulator):  # type: ignore[misc]
    rv: int = 0  # the newest resourceVersion handed out
    inflight: set[int] = attrs.Factory(set)  # handed out, the write not yet stored
    expired_below: int = 0  # a watch from an older resourceVersion gets 410 Gone

    async def _serve_list(self, request: Any) -> Any:
        payload = await super()._serve_list(request)
        node = _node_of(request)
        payload["items"] = [o for o in payload["items"] if _on_node(o, node)]
        payload["kind"], payload["apiVersion"] = "PodList", "v1"
        # A list is as new as the last stored write, as on a real API server: claiming
        # the rv of a write still in flight would make a watch from it skip that write.
        done = min(self.inflight) - 1 if self.inflight else self.rv
        payload["metadata"] = {"resourceVersion": str(done)}
        return payload

    async def _serve_watch(self, request: Any) -> AsyncIterator[Any]:
        node = _node_of(request)
        since = int(request.params.get("resourceVersion") or 0)
        if since and since < self.expired_below:
            yield b""
            yield {
                "type": "ERROR",
                "object": {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "code": 410,
                    "reason": "Expired",
                    "message": f"too old resource version: {since} ({self.expired_below})",
                },
            }
            return
        async for ev in super()._serve_watch(request):
            if isinstance(ev, dict):
                obj = ev.get("object") or {}
                if not _on_node(obj, node):
                    continue
                # kmock replays the current objects as ADDED first; a real API server
                # watching from a resourceVersion sends only what is newer.
                if ev.get("type") == "ADDED" and since and _rv(obj) <= since:
                    continue
            yield ev


class Emulator:
    """PodApi on its own event loop thread, driven synchronously from the test."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.api: Any = self._call(self._enter())
        self.server: Any = None
        self.port = free_port()

    async def _enter(self) -> Any:
        api = PodApi()
        await api.__aenter__()
        api.resources["v1/pods"] = kmock.ResourceInfo(kind="Pod", namespaced=True)
        return api

    def _call(self, coro: Any, timeout: float = 15) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> None:
        async def up() -> Any:
            srv = kmock.Server(self.api, port=self.port)
            await srv.__aenter__()
            return srv

        self.server = self._call(up())

    def stop(self) -> None:
        """Take the API down: drop open watch connections, stop listening."""
        srv, self.server = self.server, None
        if srv is None:
            return

        async def down() -> None:
            web = srv.server.runner.server
            for proto in web.connections:
                proto.force_close()
                if proto.transport is not None:
                    proto.transport.close()
            await srv.__aexit__(None, None, None)

        self._call(down())

    def close(self) -> None:
        self.stop()
        self._call(self.api.__aexit__(None, None, None))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    # writes go over HTTP so kmock emits the watch events
    def _http(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            method=method,
            data=data,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read() or b"null")

    def _next_rv(self) -> str:
        self.api.rv += 1
        return str(self.api.rv)

    def _write(self, method: str, path: str, body: dict[str, Any]) -> None:
        rv = self._next_rv()
        body.setdefault("metadata", {})["resourceVersion"] = rv
        self.api.inflight.add(int(rv))
        try:
            self._http(method, path, body)
        finally:
            self.api.inflight.discard(int(rv))

    def create(self, pod: dict[str, Any]) -> None:
        self._write("POST", f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods", pod)

    def patch(self, ns: str, name: str, body: dict[str, Any]) -> None:
        self._write("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}", body)

    def delete(self, ns: str, name: str) -> None:
        self.patch(ns, name, {})  # the DELETED event carries a fresh resourceVersion
        self._http("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}")

    def replace_silently(self, add: list[dict[str, Any]], remove: list[tuple[str, str]]) -> None:
        """Change the stored pods without any watch event (what a client misses
        while its resourceVersion expires)."""

        async def edit() -> None:
            for ns, name in remove:
                self.api.objects[PODS, ns, name].delete()
            for pod in add:
                pod["metadata"]["resourceVersion"] = self._next_rv()
                m = pod["metadata"]
                self.api.objects[PODS, m["namespace"], m["name"]] = pod

        self._call(edit())

    def requests(self, watch: bool) -> list[Any]:
        return [
            r
            for r in list(self.api)
            if str(r.url.path) == "/api/v1/pods" and (r.params.get("watch") == "true") == watch
        ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kubeconfig(path: Path, port: int) -> str:
    """A kubeconfig for the emulator on ``port``, written to ``path``; its path."""
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "emu", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "emu", "user": {"token": "test-token"}}],
        "contexts": [{"name": "emu", "context": {"cluster": "emu", "user": "emu"}}],
        "current-context": "emu",
    }
    path.write_text(json.dumps(cfg))
    return str(path)


# A bound on a hang, not on speed: it returns as soon as the condition holds. In CI the
# host lanes get what the prioritized guests leave (docs/testing.md), and a first list
# took over 10 s there.
HANG_S = 60.0


def wait_for(cond: Callable[[], bool], timeout: float = HANG_S, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what or cond}")


def cid(n: int) -> str:
    """A 64-hex container ID made of one repeated byte."""
    return f"{n:02x}" * 32


def pod(
    name: str,
    uid: str,
    *,
    ns: str = "shop",
    node: str = "node-a",
    qos: str = "Burstable",
    containers: list[tuple[str, dict[str, Any], str | None]] | None = None,
    init: list[tuple[str, dict[str, Any], str | None]] | None = None,
    annotations: dict[str, str] | None = None,
    runtime: str = "containerd",
    owners: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Pod object as the API serves it: ``containers`` are (name, resources,
    container ID or None) and get running statuses."""
    containers = containers or []
    init = init or []

    def status(name: str, cid_: str | None) -> dict[str, Any]:
        s: dict[str, Any] = {"name": name, "restartCount": 0, "ready": True}
        if cid_:
            s["containerID"] = f"{runtime}://{cid_}"
        return s

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": uid,
            "annotations": annotations or {},
            "labels": labels or {},
            "ownerReferences": owners or [],
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": n, "image": "x", "resources": r} for n, r, _ in containers],
            "initContainers": [{"name": n, "image": "x", "resources": r} for n, r, _ in init],
        },
        "status": {
            "phase": "Running",
            "qosClass": qos,
            "containerStatuses": [status(n, c) for n, _, c in containers],
            "initContainerStatuses": [status(n, c) for n, _, c in init],
        },
    }
