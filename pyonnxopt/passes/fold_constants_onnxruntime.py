"""fold_constants_onnxruntime: what the native kernels leave, onnxruntime
computes. Every standard-domain, deterministic node whose inputs are all
constant is a candidate; the candidates of a graph go to onnxruntime as one
model (a few when their constants are big), and the outputs read by the rest
of the graph become initializers under their own names.

Refuses, saying why in the report:
  1. a result larger than the fold size limit and larger than the constants
     it frees (growth-aware: a constant something else still reads is not
     freed), judged from inferred shapes before running where they are
     known, else after; unless only folded nodes read it, and it is known
     to be below SESSION_BYTES: computed on the way, it is never kept;
  2. a growing op (ConstantOfShape, Expand, Tile, ...) whose output size is
     not known before running;
  3. a node onnxruntime cannot run (its error's first line); nodes reading
     it are left too;
  4. a node excluded from optimization.
Never folds: random ops, QuantizeLinear/DequantizeLinear (quantized models
keep their Q/DQ pairs for TensorRT), sequence and optional ops, nodes with
subgraphs, other domains, function bodies (the native pass folds there).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Optional

import numpy as np

from pyonnxopt.errors import first_line
from pyonnxopt.model import Graph, Model, raw_data
from pyonnxopt.passes.base import Pass, PassOptions, PassResult

log = logging.getLogger(__name__)

NEVER_FOLDED = {
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli",
    "Dropout", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "Constant",
    "SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase", "SequenceInsert", "SequenceLength",
    "SequenceMap", "SplitToSequence", "ConcatFromSequence", "Optional", "OptionalGetElement", "OptionalHasElement",
}
# Ops whose output can be far larger than their inputs.
GROWING = {"ConstantOfShape", "Expand", "Tile", "Range", "Resize", "Upsample", "Pad", "OneHot", "EyeLike",
           "Col2Im", "CenterCropPad"}
SESSION_BYTES = 256 << 20  # constants per onnxruntime session, so big models fold in bounded memory


def _static_numel(value) -> Optional[int]:
    shape = value.type.get("shape") if value.type.get("kind") == "tensor" else None
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return int(np.prod(shape, dtype=np.int64))


def _elem_bytes(value) -> int:
    from onnx import helper

    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(value.type.get("elem_type", 0))).itemsize
    except Exception:  # unknown or undefined element type
        return 1


class _Plan:
    """The candidates of one graph: constant-input nodes, the constants each
    result depends on, and which outputs the rest of the graph reads."""

    def __init__(self, graph: Graph, options: PassOptions):
        self.nodes: list = []
        self.leaves: dict = {}  # node -> {constant values its result depends on}
        self.refused: list = []
        self.produced: dict = {}  # value -> candidate node
        found = []
        for n in graph.topological_order():
            if n.domain not in ("", "ai.onnx") or n.op_type in NEVER_FOLDED or n.subgraphs:
                continue
            outputs = [v for v in n.outputs if v is not None]
            if not outputs or not any(v.uses or v.is_graph_output for v in outputs):
                continue
            leaves: set = set()
            for v in n.inputs:
                if v is None:
                    continue
                if v in self.produced:
                    leaves |= self.leaves[self.produced[v]]
                elif v.initializer is not None and not v.is_graph_input:
                    leaves.add(v)
                else:
                    break
            else:
                if n.pinned:
                    self.refused.append(f"'{n.name}' ({n.op_type}): excluded from optimization")
                    continue
                found.append(n)
                self.leaves[n] = leaves
                for v in outputs:
                    self.produced[v] = n
        # A constant counts as a fold's input size only if folding frees it
        # (nothing else reads it): folding a transposed copy of a shared
        # embedding would add its whole size to the model.
        chosen = set(found)
        self.freed = {v for n in found for v in self.leaves[n]
                      if not v.is_graph_output and all(u in chosen for u, _ in v.uses)}
        # A result too big to keep may still be computed on the way to one
        # that is small enough, if only folded nodes read it: the cpb MLP of
        # Swin V2 (Gemm [2401, 2] -> [2401, 384] -> Relu -> Gemm) ends in a
        # bias of [2401, heads], and only that becomes an initializer.
        too_big = {n: why for n in found if (why := self._too_big_to_try(n, options))}
        kept = set(found)
        changed = True
        while changed:  # readers first (a refusal travels up the chain), then producers (and down)
            size = len(kept)
            for n in reversed(found):
                if n in too_big and n in kept and not self._passed_on(n, kept):
                    kept.discard(n)
            for n in found:
                if n in kept and any(v in self.produced and self.produced[v] not in kept
                                     for v in n.inputs if v is not None):
                    kept.discard(n)
            changed = len(kept) != size
        for n in found:
            if n in kept:
                self.nodes.append(n)
            elif n in too_big:
                self.refused.append(f"'{n.name}' ({n.op_type}): not folded: {too_big[n]}")

    def _passed_on(self, n, kept: set) -> bool:
        """Whether only nodes in `kept` read n's outputs, each of known size
        below SESSION_BYTES (computed in the session, never stored)."""
        for v in n.outputs:
            if v is None or not (v.uses or v.is_graph_output):
                continue
            numel = _static_numel(v)
            if v.is_graph_output or numel is None or numel * _elem_bytes(v) > SESSION_BYTES:
                return False
            if any(u not in kept for u, _ in v.uses):
                return False
        return True

    def allowed_bytes(self, node, options: PassOptions) -> int:
        return max(options.fold_size_limit, sum(v.initializer.nbytes for v in self.leaves[node] & self.freed))

    def _too_big_to_try(self, n, options) -> Optional[str]:
        allowed = self.allowed_bytes(n, options)
        for v in n.outputs:
            if v is None:
                continue
            numel = _static_numel(v)
            if numel is None:
                if n.op_type in GROWING:
                    return "its output size is unknown before running it (growing op)"
                continue
            if numel * _elem_bytes(v) > allowed:
                return f"result of {numel * _elem_bytes(v)} bytes passes the fold size limit ({allowed} bytes)"
        return None

    def results_wanted(self) -> list:
        """Outputs to compute: every read output of a node that has one read
        outside the candidates (so a folded node loses all its read outputs)."""
        chosen = set(self.nodes)
        wanted = []
        for n in self.nodes:
            read = [v for v in n.outputs if v is not None and (v.uses or v.is_graph_output)]
            if any(v.is_graph_output or any(u not in chosen for u, _ in v.uses) for v in read):
                wanted.extend(read)
        return wanted

    def batches(self, wanted: list) -> list:
        """Groups of (nodes, outputs) to run in one session each: connected
        candidates stay together; groups are packed up to SESSION_BYTES of constants."""
        parent = {n: n for n in self.nodes}

        def root(n):
            while parent[n] is not n:
                parent[n] = parent[parent[n]]
                n = parent[n]
            return n

        for n in self.nodes:
            for v in n.inputs:
                if v is not None and v in self.produced:
                    parent[root(self.produced[v])] = root(n)
        components: dict = defaultdict(list)
        for n in self.nodes:
            components[root(n)].append(n)
        outputs_of: dict = defaultdict(list)
        for v in wanted:
            outputs_of[root(self.produced[v])].append(v)
        batches, nodes, outs, size = [], [], [], 0
        for r, members in components.items():
            if not outputs_of[r]:
                continue
            weight = sum(v.initializer.nbytes for v in set().union(*(self.leaves[n] for n in members)))
            if nodes and size + weight > SESSION_BYTES:
                batches.append((nodes, outs))
                nodes, outs, size = [], [], 0
            nodes, outs, size = nodes + members, outs + outputs_of[r], size + weight
        if nodes:
            batches.append((nodes, outs))
        return batches


def _model_of(model: Model, nodes: list, outputs: list, fed: Optional[dict] = None) -> bytes:
    """A standalone model computing `outputs` from `nodes` and their
    constants; values in `fed` (value -> array) become graph inputs."""
    import onnx
    from onnx import helper

    fed = fed or {}
    inner = {v for n in nodes for v in n.outputs if v is not None}
    graph = onnx.GraphProto(name="fold")
    for v, a in fed.items():
        graph.input.append(helper.make_tensor_value_info(v.name, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape))
    seen = {v.name for v in fed}
    for n in nodes:
        proto = graph.node.add(op_type=n.op_type, domain=n.domain, name=n.name)
        proto.input.extend(v.name if v is not None else "" for v in n.inputs)
        proto.output.extend(v.name if v is not None else "" for v in n.outputs)
        proto.attribute.extend(onnx.AttributeProto.FromString(a) for a in n.attribute_protos())
        for v in n.inputs:
            if v is not None and v not in inner and v.name not in seen:
                seen.add(v.name)
                t = onnx.TensorProto.FromString(v.initializer.serialize())
                t.name = v.name
                graph.initializer.append(t)
    graph.output.extend(helper.make_empty_tensor_value_info(v.name) for v in outputs)
    opsets = [helper.make_opsetid(d, ver) for d, ver in model.opset_imports.items()]
    proto = helper.make_model(graph, opset_imports=opsets, ir_version=max(model.ir_version or 0, 4))
    return proto.SerializeToString()


def _session(ort, data: bytes):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def _run(ort, model: Model, nodes: list, outputs: list, refused: list) -> dict:
    """value -> array for what onnxruntime computes; one session for the
    batch, or, when onnxruntime rejects it, node by node, leaving out those
    it cannot run (and what reads them)."""
    try:
        sess = _session(ort, _model_of(model, nodes, outputs))
        return dict(zip(outputs, sess.run([v.name for v in outputs], {})))
    except Exception as e:
        log.debug("batched folding failed (%s); folding node by node", first_line(e))
    known: dict = {}
    failed: set = set()
    for n in nodes:
        if any(v in failed for v in n.inputs if v is not None):
            failed.update(v for v in n.outputs if v is not None)
            continue
        outs = [v for v in n.outputs if v is not None]
        try:
            fed = {v: known[v] for v in n.inputs if v is not None and v in known}  # computed by earlier nodes
            values = _session(ort, _model_of(model, [n], outs, fed)).run([v.name for v in outs], {v.name: a for v, a in fed.items()})
            known.update(zip(outs, values))
        except Exception as e:
            refused.append(f"'{n.name}' ({n.op_type}): onnxruntime cannot run it: {first_line(e)}")
            failed.update(outs)
    return {v: known[v] for v in outputs if v in known}


class FoldConstantsOnnxruntime(Pass):
    name = "fold_constants_onnxruntime"
    description = "compute the remaining constant-input nodes with onnxruntime, in as few sessions as possible"

    def run(self, model: Model, options: PassOptions = PassOptions()) -> PassResult:
        stats = {"nodes_removed": 0, "initializers_added": 0, "refused": [], "rewrites": []}
        as_node = (model.ir_version or 0) < 4
        for g in model.graphs():
            if g.is_function_body:
                continue
            plan = _Plan(g, options)
            stats["refused"] += plan.refused
            wanted = plan.results_wanted()
            if not wanted:
                continue
            try:
                import onnxruntime as ort
            except ImportError:
                stats["refused"].append("onnxruntime is not installed: nodes without a native kernel stay")
                return PassResult(False, stats)
            for nodes, outputs in plan.batches(wanted):
                results = _run(ort, model, nodes, outputs, stats["refused"])
                self._apply(g, plan, nodes, results, options, as_node, stats)
        return PassResult(stats["nodes_removed"] > 0, stats)

    @staticmethod
    def _apply(g: Graph, plan: _Plan, nodes: list, results: dict, options: PassOptions, as_node: bool, stats: dict):
        by_producer: dict = defaultdict(list)
        for v in results:
            by_producer[v.producer].append(v)
        produced = []
        for producer, values in by_producer.items():
            allowed = plan.allowed_bytes(producer, options)
            arrays = [np.asarray(results[v]) for v in values]
            why = None
            if any(a.dtype.kind in "OUS" for a in arrays):
                why = "string results are left to onnxruntime"
            elif sum(a.nbytes for a in arrays) > allowed:
                why = f"result of {sum(a.nbytes for a in arrays)} bytes passes the fold size limit ({allowed} bytes)"
            if why:
                stats["refused"].append(f"'{producer.name}' ({producer.op_type}): not folded: {why}")
                continue
            for v, a in zip(values, arrays):
                g.set_constant(v, *raw_data(a), as_node)
                produced.append(v.name)
        if not produced:
            return
        # Candidates nothing reads any more go now (dead-code elimination would, later).
        consumed = []
        for n in reversed(nodes):
            if n.removed:
                consumed.append(n.name or f"{n.op_type}")
                continue
            if all(v is None or (not v.uses and not v.is_graph_output) for v in n.outputs):
                consumed.append(n.name or f"{n.op_type}")
                g.remove_node(n)
        stats["nodes_removed"] += len(consumed)
        stats["initializers_added"] += 0 if as_node else len(produced)
        stats["rewrites"].append({"what": "folded (onnxruntime)", "consumed": consumed[::-1], "produced": produced})
