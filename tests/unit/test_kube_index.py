"""The pod index (updated per watch event) and the watch stream's line splitter."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.kube.index import PodIndex
from exporter.kube.pods import PodMeta
from exporter.kube.watch import split_lines


def meta(uid: str, *cids: str, config_hash: str = "") -> PodMeta:
    return PodMeta(
        uid=uid,
        namespace="ns",
        name=f"pod-{uid}",
        node="n",
        qos="burstable",
        opted_out=False,
        resource_version="1",
        config_hash=config_hash,
        container_ids={c: f"c-{c}" for c in cids},
    )


def test_put_delete_tombstone_expire() -> None:
    idx = PodIndex(grace_s=60)
    idx.put(meta("a", "a1", config_hash="h" * 32))
    idx.put(meta("b", "b1"))
    assert idx.by_uid("a", 0) is idx.by_uid("h" * 32, 0) is idx.get("a")
    assert idx.by_container("b1", 0) == (idx.get("b"), "c-b1")
    assert idx.by_container("b1"[:1], 0) is not None  # a short ID matches a prefix
    # a restart: the new ID is added, the old one kept (merge_container_ids)
    idx.put(meta("a", "a2", config_hash="h" * 32))
    assert idx.by_container("a1", 0) is not None and idx.by_container("a2", 0) is not None
    # deleted: names stay until the grace period is over
    assert idx.delete("a", now=100)
    assert idx.get("a") is None and len(idx) == 1
    assert idx.by_container("a2", 150) is not None and idx.by_uid("h" * 32, 150) is not None
    assert idx.by_container("a2", 161) is None and idx.by_uid("a", 161) is None
    idx.expire(161)
    assert idx._tombs == {} and idx._tomb_cid == {} and idx._tomb_key == {}
    # a full list replaces the contents: b goes (tombstoned), c comes
    idx.replace([meta("c", "c1")], now=200)
    assert [p.uid for p in idx.pods()] == ["c"]
    assert idx.by_container("b1", 210) is not None
    idx.expire(1000)
    assert len(idx._by_cid) == 1 and len(idx._by_key) == 1 and not idx._expiry


def test_an_event_touches_only_its_pod() -> None:
    """Incremental: an update replaces the entries of its own pod and leaves every
    other pod's entries as they were (the old index was rebuilt on every event)."""
    idx = PodIndex(grace_s=60)
    for i in range(2000):
        idx.put(meta(f"u{i}", f"{i:064x}"))
    before = dict(idx._by_cid)
    idx.put(meta("u7", f"{7:064x}", "f" * 64))
    after = idx._by_cid
    changed = {k for k in after if before.get(k) is not after[k]}
    assert changed == {f"{7:064x}", "f" * 64}


lines = st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=20)


@settings(max_examples=300, deadline=None)
@given(lines=lines, cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=30))
def test_split_lines_is_independent_of_chunking(lines: list[bytes], cuts: list[int]) -> None:
    data = b"\n".join(lines)
    points = sorted({c % (len(data) + 1) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    dropped: list[int] = []
    got = list(split_lines(chunks, max_line=30, on_dropped=dropped.append))
    want = [x.decode("utf-8", "replace") for x in lines if x.strip() and len(x) <= 30]
    assert got == want
    assert sorted(dropped) == sorted(len(x) for x in lines if len(x) > 30)


def test_split_lines_one_huge_chunk_of_many_lines() -> None:
    data = b"".join(b'{"type":"ADDED","n":%d}\n' % i for i in range(100_000))
    assert sum(1 for _ in split_lines([data], max_line=1 << 20)) == 100_000
