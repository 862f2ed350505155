"""share_branch_constants: a constant that several subgraphs of one graph
hold alike is held once, by that graph, and they all read it there.

optimum's merged decoders are one If whose two branches are the decoder
with and without its cache; tied embeddings are exported as a Transpose of
the embedding in each branch. Folding makes that Transpose a constant in
each branch, so the file held the embedding three times (a real GPT-2:
two more copies of 147 MiB):

    W[1000, 64] --Gather-->              W[1000, 64] --Gather-->
    If(then: Wt = T(W)[64, 1000] ...,    Wt[64, 1000]
       else: Wt = T(W)[64, 1000] ...)    If(then: ... MatMul(h, Wt), else: ... MatMul(h, Wt))

A branch's constant equal to one the graph holds already reads that one.
Constants under MIN_BYTES are left where they are (their copies cost
little), and so are branch outputs and a Loop body's inputs.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict

import numpy as np

from pyonnxopt.model import Model
from pyonnxopt.passes.base import Pass, PassOptions, PassResult

MIN_BYTES = 1024


def _names_below(graph) -> set:
    """Every value name in the graph and its nested subgraphs."""
    names = {v.name for v in graph.values}
    for n in graph.nodes:
        for body in n.subgraphs:
            names |= _names_below(body)
    return names


def _fresh_name(base: str, taken: set) -> str:
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_shared{k}"
    taken.add(name)
    return name


def _shareable(value) -> bool:
    t = value.initializer
    return (t is not None and not value.is_graph_input and not value.is_graph_output and t.nbytes >= MIN_BYTES
            and t.numpy_view() is not None)


def _bytes(value) -> np.ndarray:
    return np.ascontiguousarray(value.initializer.numpy_view()).reshape(-1).view(np.uint8)


def _sample(value) -> bytes:
    """A cheap key: the first and last 4 KiB (a model's weights of one
    layout differ there; only tensors alike there are read whole)."""
    data = _bytes(value)
    return hashlib.blake2b(data[:4096].tobytes() + data[-4096:].tobytes(), digest_size=16).digest()


def _digest(value) -> bytes:
    return hashlib.blake2b(_bytes(value), digest_size=16).digest()


def _held_apart(members: list, graph) -> bool:
    """Whether (graph, value) pairs span two graphs or more, a body among
    them: only then can one copy serve."""
    return len({id(g) for g, _ in members}) > 1 and any(g != graph for g, _ in members)


def _grouped(members: list, key) -> list:
    """(graph, value) pairs grouped by key(value)."""
    groups = defaultdict(list)
    for g, v in members:
        groups[key(v)].append((g, v))
    return list(groups.values())


class ShareBranchConstants(Pass):
    name = "share_branch_constants"
    description = "a constant several subgraphs hold alike (an If's branches) is held once by the graph around them"

    def run(self, model: Model, options: PassOptions = PassOptions()) -> PassResult:
        stats = {"initializers_shared": 0, "bytes_saved": 0, "rewrites": []}
        for graph in model._core.all_graphs():
            bodies = [body for n in graph.nodes if not n.removed for body in n.subgraphs]
            if bodies:
                self._share(graph, bodies, stats)
        return PassResult(bool(stats["rewrites"]), stats)

    @staticmethod
    def _share(graph, bodies: list, stats: dict) -> None:
        by_layout = defaultdict(list)  # (type, dims) -> [(graph, value)]
        for g in [graph, *bodies]:
            for t in g.initializers:
                v = g.value(t.name)
                if v is not None and v.graph == g and _shareable(v):
                    by_layout[(t.data_type, tuple(t.dims))].append((g, v))
        taken = None
        # Cheap keys first: only tensors alike in layout, then in their ends, are read whole.
        candidates = [m for m in by_layout.values() if _held_apart(m, graph)]
        candidates = [m for ms in candidates for m in _grouped(ms, _sample) if _held_apart(m, graph)]
        for members in candidates:
            for alike in _grouped(members, _digest):
                if not _held_apart(alike, graph):
                    continue
                inner = [(g, v) for g, v in alike if g != graph]
                outer = next((v for g, v in alike if g == graph), None)
                if outer is None:  # one copy goes up
                    taken = taken if taken is not None else _names_below(graph)
                    t = inner[0][1].initializer
                    data = np.ascontiguousarray(t.numpy_view()).tobytes()
                    outer = graph.add_initializer(_fresh_name(t.name, taken), t.data_type, list(t.dims), data)
                    stats["bytes_saved"] -= t.nbytes
                for g, v in inner:
                    g.replace_all_uses(v, outer)
                    stats["initializers_shared"] += 1
                    stats["bytes_saved"] += v.initializer.nbytes
                    stats["rewrites"].append({"what": f"'{v.name}' of subgraph '{g.name}' read from '{outer.name}'",
                                              "consumed": [v.name], "produced": []})
