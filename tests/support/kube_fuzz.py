"""A seeded fuzzer for the pod objects the Kubernetes API sends (a list's items, a
watch event's object): every mutated pod is either read, with every field of the
type the index expects and every quantity bounded, or refused with the declared
:class:`PodParseError` (the resolver counts it and goes on with the next pod);
anything else is an *escape* that would have failed a whole list. Read pods go into
a :class:`PodIndex` (put, look up by container ID, delete), which must not raise.

    python -m tests.support.kube_fuzz --inputs 20000 --seed 16

``tests/fuzz/test_kube_fuzz.py`` runs it; tests/unit/test_kube_resolver.py has the
same through the real client against an API emulator (a list with malformed pods
still syncs).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from exporter.kube.index import PodIndex
from exporter.kube.pods import ContainerMeta, PodMeta, PodParseError, parse_pod
from tests.support.parser_fuzz import Note, kinds_line, no_note, value_key

NODE = "node-1"


def good_pod(n: int) -> dict[str, Any]:
    uid = f"{n:08d}-0000-4000-8000-000000000000"
    res = {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"web-{n}",
            "namespace": "shop",
            "uid": uid,
            "resourceVersion": str(1000 + n),
            "annotations": {"kubernetes.io/config.hash": uid},
        },
        "spec": {
            "nodeName": NODE,
            "containers": [{"name": "app", "image": "x", "resources": res}],
            "initContainers": [{"name": "init", "image": "x", "resources": {}}],
        },
        "status": {
            "phase": "Running",
            "qosClass": "Burstable",
            "containerStatuses": [
                {"name": "app", "containerID": f"containerd://{n:064x}", "resources": res}
            ],
            "initContainerStatuses": [{"name": "init", "containerID": f"cri-o://{n:063x}1"}],
        },
    }


HOSTILE: tuple[Any, ...] = (
    None, 0, -1, 1.5, True, "", "x" * 100_000, [], {}, [None], {"a": None}, "1e400",
    "-1", "99999999999999999999Ei", "nan", "inf", "1" + "0" * 5000, 2**80, -(2**80),
    float("nan"), [{"name": 7}], {"name": []}, "containerd://", "\u0000", "a" * 300,
)  # fmt: skip


def _paths(obj: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*at, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*at, i))
    return out


# Every kind of mutation :func:`mutate` makes, as the figures count them: a field
# deleted, a field replaced by each hostile value, the whole object replaced.
MUTATION_KINDS: tuple[str, ...] = (
    "field deleted",
    "field replaced",
    "object replaced",
    *(value_key(v) for v in HOSTILE),
)


def mutate(rng: random.Random, pod: dict[str, Any], note: Note = no_note) -> Any:
    obj: Any = copy.deepcopy(pod)
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(_paths(obj))
        if not path:
            new = rng.choice(HOSTILE)
            note("object replaced")
            note(value_key(new))
            return new
        parent = obj
        for key in path[:-1]:
            parent = parent[key]
        if rng.random() < 0.2 and isinstance(parent, dict):
            del parent[path[-1]]
            note("field deleted")
        else:
            new = rng.choice(HOSTILE)
            note("field replaced")
            note(value_key(new))
            parent[path[-1]] = copy.deepcopy(new)
    return obj


def implausible(pod: PodMeta) -> str | None:
    for name in ("uid", "namespace", "name", "node", "qos", "resource_version", "config_hash"):
        if not isinstance(getattr(pod, name), str):
            return f"{name} = {getattr(pod, name)!r:.60}"
    for c in pod.containers.values():
        if not isinstance(c, ContainerMeta) or not isinstance(c.name, str):
            return f"container {c!r:.80}"
        for v in (c.cpu_request_cores, c.cpu_limit_cores):
            if v is not None and not (isinstance(v, float) and math.isfinite(v) and v >= 0):
                return f"{c.name} cores {v!r}"
        for b in (c.memory_request_bytes, c.memory_limit_bytes):
            if b is not None and not (type(b) is int and 0 <= b <= 2**63):
                return f"{c.name} bytes {b!r:.60}"
    for cid, name in pod.container_ids.items():
        if not (isinstance(cid, str) and isinstance(name, str)):
            return f"container id {cid!r:.60} -> {name!r:.60}"
    return None


@dataclass
class Figures:
    inputs: int = 0
    read: int = 0
    refused: int = 0
    escapes: int = 0
    implausible: int = 0
    seconds: float = 0.0
    mutations: dict[str, int] = field(default_factory=dict)  # made, by kind (MUTATION_KINDS)
    examples: list[str] = field(default_factory=list)

    def bad(self, kind: str, detail: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        if len(self.examples) < 10:
            self.examples.append(f"{kind}: {detail}"[:300])

    def count(self, kind: str) -> None:
        self.mutations[kind] = self.mutations.get(kind, 0) + 1


def run(inputs: int, seed: int) -> Figures:
    rng = random.Random(seed)
    fig = Figures()
    index = PodIndex(grace_s=60.0)
    started = time.perf_counter()
    for i in range(inputs):
        obj = mutate(rng, good_pod(i), fig.count)
        fig.inputs += 1
        try:
            pod = parse_pod(obj)
        except PodParseError:
            fig.refused += 1
            continue
        except Exception as e:
            fig.bad("escapes", f"parse: {type(e).__name__}: {e!s:.100} <- {str(obj)[:150]}")
            continue
        fig.read += 1
        why = implausible(pod)
        if why is not None:
            fig.bad("implausible", why)
            continue
        try:
            index.put(pod)
            for cid in pod.container_ids:
                index.by_container(cid, float(i))
            index.by_uid(pod.uid, float(i))
            if rng.random() < 0.5:
                index.delete(pod.uid, float(i))
            index.expire(float(i))
        except Exception as e:
            fig.bad("escapes", f"index: {type(e).__name__}: {e!s:.100}")
    fig.seconds = time.perf_counter() - started
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    fig = run(args.inputs, args.seed)
    if args.json:
        d = dict(fig.__dict__)
        d["seconds"] = round(fig.seconds, 1)
        print(json.dumps(d))
    else:
        print(f"kube fuzz: {fig.inputs} mutated pod objects, seed {args.seed}")
        print(f"  read {fig.read}, refused with PodParseError {fig.refused}")
        print(f"  escapes {fig.escapes}, implausible {fig.implausible}, {fig.seconds:.1f} s")
        print("  " + kinds_line(fig.mutations, MUTATION_KINDS))
        for line in fig.examples:
            print("  " + line)
    return 1 if fig.escapes or fig.implausible else 0


if __name__ == "__main__":
    sys.exit(main())
