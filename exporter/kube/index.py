"""This node's pods, indexed for naming cgroups: by UID (and a static pod's config
hash) and by runtime container ID, with the pods deleted within a grace period kept as
*tombstones*, so a cgroup that outlives its pod keeps its name (and its series) until
it goes.

The index (:class:`PodIndex`) is updated per event, in time proportional to the pod
that changed (not to the node's pods), under a lock that lookups take only for a few
dictionary reads. The watch (``watch``) writes it; the resolver (``resolver``) reads
it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping

from .pods import PodMeta, merge_container_ids


class PodIndex:
    """This node's pods, by UID (and a static pod's config hash) and by runtime
    container ID, and the pods deleted within the grace period (tombstones), so a
    cgroup that outlives its pod keeps its name.

    Every update costs the size of the pod it touches, not the node's pod count; a
    full list replaces the contents in one call. Thread-safe: one writer (the watch
    thread) and any number of readers.
    """

    def __init__(self, grace_s: float) -> None:
        self._grace = grace_s
        self._lock = threading.Lock()
        self._pods: dict[str, PodMeta] = {}  # uid -> pod
        self._by_key: dict[str, PodMeta] = {}  # uid and config hash -> pod
        self._by_cid: dict[str, tuple[PodMeta, str]] = {}  # container ID -> (pod, name)
        self._tombs: dict[str, tuple[float, PodMeta]] = {}  # uid -> (deadline, pod)
        self._tomb_key: dict[str, tuple[float, PodMeta]] = {}
        self._tomb_cid: dict[str, tuple[float, PodMeta, str]] = {}
        self._expiry: deque[tuple[float, str]] = deque()  # (deadline, uid), oldest first

    # -- reading ---------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._pods)

    def get(self, uid: str) -> PodMeta | None:
        return self._pods.get(uid)

    def pods(self) -> list[PodMeta]:
        with self._lock:
            return list(self._pods.values())

    def by_container(self, cid: str, now: float) -> tuple[PodMeta, str] | None:
        """The pod and container name of a runtime container ID (a 12-character
        prefix matches a full ID), live or deleted within the grace period."""
        with self._lock:
            hit = self._by_cid.get(cid) or _prefix_hit(self._by_cid, cid)
            if hit is not None:
                return hit
            tomb = self._tomb_cid.get(cid)
            return (tomb[1], tomb[2]) if tomb is not None and tomb[0] > now else None

    def by_uid(self, key: str, now: float) -> PodMeta | None:
        """The pod with this UID (or static pod config hash), live or recently deleted."""
        with self._lock:
            pod = self._by_key.get(key)
            if pod is not None:
                return pod
            tomb = self._tomb_key.get(key)
            return tomb[1] if tomb is not None and tomb[0] > now else None

    # -- writing ---------------------------------------------------------------------

    def put(self, pod: PodMeta) -> None:
        """Add or update a pod (container IDs it had before are kept, bounded)."""
        with self._lock:
            old = self._pods.get(pod.uid)
            if old is not None:
                pod = merge_container_ids(old, pod)
                self._unlink(old)
            self._untomb(pod.uid)
            self._link(pod)

    def delete(self, uid: str, now: float) -> bool:
        """The pod left the API: keep its names for the grace period."""
        with self._lock:
            pod = self._pods.get(uid)
            if pod is None:
                return False
            self._unlink(pod)
            self._tomb(pod, now + self._grace)
            return True

    def replace(self, pods: Iterable[PodMeta], now: float) -> None:
        """A full list: these are the node's pods now; the others are deleted."""
        fresh = {p.uid: p for p in pods}
        for uid in [u for u in self._pods if u not in fresh]:
            self.delete(uid, now)
        for pod in fresh.values():
            self.put(pod)

    def expire(self, now: float) -> None:
        """Forget tombstones whose grace period is over (oldest first: O(expired))."""
        with self._lock:
            while self._expiry and self._expiry[0][0] <= now:
                deadline, uid = self._expiry.popleft()
                tomb = self._tombs.get(uid)
                if tomb is not None and tomb[0] == deadline:
                    self._untomb(uid)

    # -- under the lock ----------------------------------------------------------------

    def _link(self, pod: PodMeta) -> None:
        self._pods[pod.uid] = pod
        self._by_key[pod.uid] = pod
        if pod.config_hash:
            self._by_key.setdefault(pod.config_hash, pod)
        for cid, name in pod.container_ids.items():
            self._by_cid[cid] = (pod, name)

    def _unlink(self, pod: PodMeta) -> None:
        self._pods.pop(pod.uid, None)
        for key in (pod.uid, pod.config_hash):
            hit = self._by_key.get(key) if key else None
            if hit is not None and hit.uid == pod.uid:
                del self._by_key[key]
        for cid in pod.container_ids:
            entry = self._by_cid.get(cid)
            if entry is not None and entry[0].uid == pod.uid:
                del self._by_cid[cid]

    def _tomb(self, pod: PodMeta, deadline: float) -> None:
        self._untomb(pod.uid)
        self._tombs[pod.uid] = (deadline, pod)
        self._tomb_key[pod.uid] = (deadline, pod)
        if pod.config_hash:
            self._tomb_key.setdefault(pod.config_hash, (deadline, pod))
        for cid, name in pod.container_ids.items():
            self._tomb_cid[cid] = (deadline, pod, name)
        self._expiry.append((deadline, pod.uid))

    def _untomb(self, uid: str) -> None:
        tomb = self._tombs.pop(uid, None)
        if tomb is None:
            return
        pod = tomb[1]
        for key in (pod.uid, pod.config_hash):
            hit = self._tomb_key.get(key) if key else None
            if hit is not None and hit[1].uid == uid:
                del self._tomb_key[key]
        for cid in pod.container_ids:
            entry = self._tomb_cid.get(cid)
            if entry is not None and entry[1].uid == uid:
                del self._tomb_cid[cid]


def _prefix_hit(by_cid: Mapping[str, tuple[PodMeta, str]], cid: str) -> tuple[PodMeta, str] | None:
    """Short (12-character) IDs in a cgroup path: match them against full IDs."""
    if len(cid) >= 64:
        return None
    for full, hit in by_cid.items():
        if full.startswith(cid):
            return hit
    return None
