"""Runs one fusion rule over a model: native matching, then the rule's
check and replacement at each match, then removal of the matched nodes
that nothing reads any more."""

from __future__ import annotations

from pyonnxopt.fusion.pattern import compile_pattern
from pyonnxopt.fusion.rule import Edit, Match, Rule, node_id, opset_of
from pyonnxopt.model import Model
from pyonnxopt.passes.base import PassOptions, PassResult


NEAR_MISSES_KEPT = 200  # per rule and run: enough to explain, bounded on huge graphs


def _graphs(model: Model) -> list:
    """The main graph and its subgraphs (function bodies have no
    initializers for new weights, so rules leave them alone)."""
    out = []
    for g in model._core.all_graphs():
        root = g
        while root.parent is not None:
            root = root.parent
        if not root.is_function_body:
            out.append(g)
    return out


def _unread(node) -> bool:
    return all(v is None or (not v.uses and not v.is_graph_output) for v in node.outputs)


def run_rule(rule: Rule, model: Model, options: PassOptions) -> PassResult:
    stats = {"nodes_removed": 0, "nodes_added": 0, "rewrites": [], "refused": [], "near_misses": []}
    opset = opset_of(model, None)
    if opset < rule.min_opset:
        return PassResult(False, stats)
    pattern, names = compile_pattern(rule.pattern(opset), opset)
    for graph in _graphs(model):
        found, near = graph.match(pattern)
        for anchor, why in near:
            stats["near_misses"].append(f"{node_id(anchor)}: {why}")
        touched: set = set()
        for bound in found:
            nodes = [b for b in bound if hasattr(b, "op_type")]
            if any(n.removed or n in touched for n in nodes):
                continue  # an earlier rewrite changed this spot; the next iteration sees it anew
            m = Match(model, graph, names, bound, opset, options)
            why = rule.check(m)
            if why is None:
                ids = [node_id(n) for n in nodes]
                edit = Edit(m)
                why = rule.rewrite(m, edit)
            if why is not None:
                stats["near_misses"].append(f"{node_id(m.root)}: {why}")
                continue
            touched.update(nodes)
            touched.update(edit.added)
            _remove_unread(graph, nodes)
            consumed = [i for i, n in zip(ids, nodes) if n.removed]
            stats["nodes_removed"] += len(consumed)
            stats["nodes_added"] += len(edit.added)
            stats["rewrites"].append({"what": rule.name, "consumed": consumed,
                                      "produced": [node_id(n) for n in edit.added]})
    near = stats["near_misses"]
    if len(near) > NEAR_MISSES_KEPT:
        stats["near_misses"] = near[:NEAR_MISSES_KEPT] + [f"... and {len(near) - NEAR_MISSES_KEPT} more"]
    return PassResult(bool(stats["rewrites"]), stats)


def _remove_unread(graph, nodes: list) -> None:
    """Removes the matched nodes that nothing reads any more, readers first."""
    changed = True
    while changed:
        changed = False
        for n in nodes:
            if not n.removed and _unread(n):
                graph.remove_node(n)
                changed = True
