"""Runs one fusion rule over a model: native matching, then the rule's
check and replacement at each match, then removal of the matched nodes
that nothing reads any more."""

from __future__ import annotations

import logging
from typing import Optional

from pyonnxopt._core import NearMisses
from pyonnxopt.errors import first_line
from pyonnxopt.fusion.pattern import Op, compile_pattern, elements
from pyonnxopt.fusion.rule import Edit, Match, Rule, node_id, opset_of
from pyonnxopt.fusion.values import output_dim_aliases
from pyonnxopt.model import Model
from pyonnxopt.passes.base import PassOptions, PassResult

log = logging.getLogger(__name__)

NEAR_MISSES_KEPT = 200  # per rule and run: enough to explain, bounded on huge graphs
ROUNDS = 8  # per variant: a match an earlier rewrite made stale is matched again, up to this many times


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


class _Variant:
    """One of a rule's patterns at an opset: the op types it needs at once,
    the native pattern the first time a graph may fit it (the 35 rules have
    1,766 variants; a CNN's process compiled the transformer rules' hundreds
    for nothing, most of the first run's 0.45 s on resnet50)."""

    __slots__ = ("root", "opset", "needs", "_native")

    def __init__(self, root: Op, opset: int):
        self.root, self.opset, self.needs, self._native = root, opset, _op_types(root), None

    def native(self) -> tuple:
        """(native Pattern, element names)."""
        if self._native is None:
            self._native = compile_pattern(self.root, self.opset)
        return self._native


def _variants(rule: Rule, opset: int) -> list:
    """The rule's variants at an opset, kept on the rule, each compiled once
    (fuse_attention has 210: compiling them took 60x the matching, on every
    pipeline round of every model)."""
    cache = rule.__dict__.setdefault("_variants", {})
    if opset not in cache:
        roots = rule.pattern(opset)
        if not isinstance(roots, (list, tuple)):
            roots = [roots]
        cache[opset] = [_Variant(root, opset) for root in roots]
    return cache[opset]


def _op_types(root) -> list:
    """For each op of the pattern, the op types it may be."""
    return [frozenset(e.op_types) for e in elements(root) if isinstance(e, Op)]


def _cannot_fit(needs: list, present: set, enough_ops: int, near_misses: bool) -> bool:
    """Whether a variant can neither match (an op type it needs is not in
    the graph at all) nor, with `near_misses`, come near: its root's type is
    absent (a near miss is reported at a root), or fewer of its ops than
    `enough_ops` find their type. Such variants are not tried: a Mul heavy
    graph without MatMul made fuse_matmul_scale's 896 variants scan every
    Mul each (19 s on a 100,000-node chain), and fuse_attention's 552, rooted
    at Reshape or MatMul, scanned it for nothing (3 s)."""
    fit = sum(1 for types in needs if types & present)
    return fit < len(needs) and (not near_misses or fit < enough_ops or not needs[0] & present)


def run_rule(rule: Rule, model: Model, options: PassOptions) -> PassResult:
    with output_dim_aliases(model.dim_aliases):
        return _run_rule(rule, model, options)


def _run_rule(rule: Rule, model: Model, options: PassOptions) -> PassResult:
    stats = {"nodes_removed": 0, "nodes_added": 0, "rewrites": [], "refused": [], "near_misses": []}
    opset = opset_of(model, None)
    if opset < rule.min_opset or rule.only_target not in (None, options.target):
        return PassResult(False, stats)
    variants = _variants(rule, opset)
    for graph in _graphs(model):
        closest = NearMisses() if rule.pattern_near_misses else None  # the deepest failure at each root
        matched: set = set()
        # The graph's op types cost a pass over its nodes, as a variant's scan
        # does: worth it only for rules with several variants to skip.
        present = {n.op_type for n in graph.nodes} if len(variants) > 1 else None
        for variant in variants:
            enough_ops = min(rule.near_miss_min_ops, len(variant.needs))
            if present is not None and _cannot_fit(variant.needs, present, enough_ops, rule.pattern_near_misses):
                continue
            pattern, names = variant.native()
            # Again while an earlier rewrite made a match stale: the larger
            # variants (tried first) then still win where they apply.
            for _ in range(ROUNDS):
                found = graph.find_matches(pattern, closest, enough_ops)
                touched: set = set()
                stale = [_apply(rule, model, graph, names, bound, opset, options, touched, matched, stats)
                         for bound in found].count(False)
                if not stale:
                    break
        for anchor, why in closest.items() if closest is not None else ():
            if anchor not in matched:
                stats["near_misses"].append(f"{node_id(anchor)}: {why}")
    near = list(dict.fromkeys(stats["near_misses"]))  # overlapping variants refuse alike
    if len(near) > NEAR_MISSES_KEPT:
        near = near[:NEAR_MISSES_KEPT] + [f"... and {len(near) - NEAR_MISSES_KEPT} more"]
    stats["near_misses"] = near
    return PassResult(bool(stats["rewrites"]), stats)


def _apply(rule: Rule, model: Model, graph, names: list, bound: list, opset: int, options: PassOptions,
           touched: set, matched: set, stats: dict) -> bool:
    """Checks and rewrites one match; `touched`: nodes this round's earlier
    rewrites consumed or made. False when the match was stale (an earlier
    rewrite changed its nodes or values)."""
    nodes = [b for b in bound if hasattr(b, "op_type")]
    values = [b for b in bound if b is not None and not hasattr(b, "op_type")]
    if any(n.removed or n in touched for n in nodes) or any(_dropped(v) for v in values):
        return False
    m = Match(model, graph, names, bound, opset, options)
    matched.add(m.root)
    why = _quantized_reason(nodes) if rule.emits_ort_op(m) else None
    try:
        why = why or rule.check(m)
    except Exception as e:  # noqa: BLE001 - check() changes nothing: one bad match must not stop the model's others
        why = f"the rule's check failed ({type(e).__name__}: {first_line(e)}): a bug in the rule, please report it"
        log.warning("%s at %s: %s", rule.name, node_id(m.root), why)
    if why is None:
        ids = [node_id(n) for n in nodes]
        edit = Edit(m)
        why = rule.rewrite(m, edit)
    if why is not None:
        if why:  # "" refuses quietly: not the rule's case
            stats["near_misses"].append(f"{node_id(m.root)}: {why}")
        return True
    touched.update(nodes)
    touched.update(edit.added)
    _remove_unread(graph, nodes)
    consumed = [i for i, n in zip(ids, nodes) if n.removed]
    stats["nodes_removed"] += len(consumed)
    stats["nodes_added"] += len(edit.added)
    stats["rewrites"].append({"what": rule.name, "consumed": consumed,
                              "produced": [node_id(n) for n in edit.added]})
    return True


def _quantized_reason(nodes: list) -> Optional[str]:
    """Why a com.microsoft op must not replace `nodes`: they read a
    DequantizeLinear or feed a QuantizeLinear. onnxruntime turns such QDQ
    groups (DequantizeLinear -> Conv [-> Relu] -> QuantizeLinear, ...) into
    its quantized kernels, which it cannot do around its own fused ops."""
    why = "onnxruntime runs this quantized (QDQ) group as one int8 kernel"
    for n in nodes:
        if any(v is not None and v.producer is not None and v.producer.op_type == "DequantizeLinear"
               for v in n.inputs):
            return f"'{n.name}' reads a DequantizeLinear: {why}"
    for n in nodes:
        if any(r.op_type == "QuantizeLinear" for v in n.outputs if v is not None for r, _ in v.uses):
            return f"'{n.name}' feeds a QuantizeLinear: {why}"
    return None


def _dropped(v) -> bool:
    """A value an earlier rewrite replaced: its producer is gone."""
    return v.producer is None and not v.is_graph_input and v.initializer is None


def _remove_unread(graph, nodes: list) -> None:
    """Removes the matched nodes that nothing reads any more, readers first."""
    changed = True
    while changed:
        changed = False
        for n in nodes:
            if not n.removed and _unread(n):
                graph.remove_node(n)
                changed = True
