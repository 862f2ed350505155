"""Shapes: onnx's shape inference run on a weightless copy of the model (so
it is cheap and works past 2 GB), its results written back as value_info;
and fixing dynamic input dims (`--input-shape`, `--batch`)."""

from __future__ import annotations

import logging
import re
from typing import Mapping, Optional, Sequence

from pyonnxopt import symbolic_shapes
from pyonnxopt.errors import Error, first_line
from pyonnxopt.model import Graph, Model
from pyonnxopt.opset import default_opset
from pyonnxopt.proto_graphs import bodies, constant, graphs

log = logging.getLogger(__name__)

# Tensors up to this size keep their data in the copy: shape inference reads
# small constants (Reshape targets, Slice bounds) to infer through them.
WEIGHTLESS_THRESHOLD = 1 << 16


def _known_dims(type_proto) -> int:
    """How much a TypeProto says: -1 not a tensor, 0 no shape, else 1 + known dims."""
    if not type_proto.HasField("tensor_type"):
        return -1
    t = type_proto.tensor_type
    if not t.HasField("shape"):
        return 0
    return 1 + sum(d.HasField("dim_value") for d in t.shape.dim)


def _known_dims_of(t: dict) -> int:
    """_known_dims of a value's type (Value.type); -2 untyped."""
    if t.get("kind") != "tensor":
        return -1 if t else -2
    shape = t.get("shape")
    return 0 if shape is None else 1 + sum(isinstance(d, int) for d in shape)


def _dim_score(d) -> int:
    """0 unknown, 1 onnx's generated unk__ symbol, 2 a named symbol, 3 a size."""
    if isinstance(d, int):
        return 3
    if isinstance(d, str) and d:
        return 1 if d.startswith("unk__") else 2
    return 0


def _names_more(type_proto, t: dict) -> bool:
    """Same rank, no dim less specific, one more: a named symbol where the
    value (of type `t`) has a generated unk__ name or nothing (sizes are
    counted by _known_dims)."""
    if not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return False
    dims = type_proto.tensor_type.shape.dim
    if not any(d.dim_param and not d.dim_param.startswith("unk__") for d in dims):
        return False  # the common case, cheaply: no named symbol to add
    if t.get("kind") != "tensor" or t.get("shape") is None:
        return False
    new = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in dims]
    old = list(t["shape"])
    if len(new) != len(old):
        return False
    pairs = [(_dim_score(a), _dim_score(b)) for a, b in zip(new, old)]
    return all(a >= b for a, b in pairs) and any(a > b for a, b in pairs)


def _renamed(old, new, aliases: Mapping) -> bool:
    """Whether the inferred dim `new` names the value's dim `old` better: a
    generated name for a generated one (`_link_generated` joined the two to
    a group), or any name for an output's own (symbolic_shapes' rule 8)."""
    return isinstance(old, str) and old != new and (
        old in aliases or (_generated(old) >= 0 and isinstance(new, str) and _generated(new) >= 0))


def _renames(type_proto, t: dict, aliases: Mapping) -> bool:
    """Same rank as the value's type `t`, and some dim `_renamed`."""
    if t.get("kind") != "tensor" or t.get("shape") is None or not type_proto.HasField("tensor_type"):
        return False
    dims = type_proto.tensor_type.shape.dim
    return len(dims) == len(t["shape"]) and any(_renamed(old, d.dim_param, aliases)
                                                for d, old in zip(dims, t["shape"]))


def infer(model: Model, update_outputs: bool = False) -> dict:
    """Infers types and shapes and records them as value_info where the model
    says less (never changing graph inputs, nor outputs unless
    `update_outputs`). Inference that fails on a node leaves the rest
    inferred; a model onnx cannot infer at all is left as it was. Returns
    {"values_typed": n} or {"failed": reason}."""
    import onnx

    try:
        proto = onnx.ModelProto.FromString(model._core.serialize_weightless(WEIGHTLESS_THRESHOLD))
        _stand_in_for_onnxruntime_ops(proto.graph)
        kept = _forget_generated(proto.graph)
        renamed = _name_subgraph_values_apart(proto.graph)
        _forget_branch_output_shapes(proto.graph)
        data_prop = not _huge_input(proto.graph)
        inferred = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False, data_prop=data_prop)
        if default_opset(model) == 10:
            unbound = _unbind_slice_10_starts(proto, inferred)
            if unbound:  # again, without the Slices' constant starts
                inferred = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False,
                                                             data_prop=data_prop)
                _rebind_slice_10_starts(inferred, unbound)
        _rename_generated(inferred.graph, kept)
        aliases: dict = {}
        refined = symbolic_shapes.refine(inferred.graph, aliases)
        _restore_subgraph_names(inferred.graph, renamed)
        _link_generated(inferred.graph, model.graph, kept[0])
    except Exception as e:  # onnx raises several kinds; none may stop the passes that need no shapes
        reason = first_line(e)
        log.warning("shape inference failed: %s", reason)
        return {"failed": reason}
    model.dim_aliases = aliases
    typed = _write_back(inferred.graph, model.graph, update_outputs, aliases)
    return {"values_typed": typed, "dims_refined": refined} if refined else {"values_typed": typed}


# com.microsoft ops the fusion rules emit (--target ort), whose first and
# fourth outputs have their first input's type and shape; onnx's inference
# does not know them, and would stop there.
_SHAPE_OF_INPUT = {"Gelu", "FastGelu", "SkipLayerNormalization", "SkipSimplifiedLayerNormalization"}
# Standard ops whose output onnx 1.23's inference leaves untyped although it
# is their first input's type and shape: everything after them would lose
# its type (a diffusion UNet's 21 GroupNormalizations).
_STANDARD_SHAPE_OF_INPUT = {"GroupNormalization"}
# onnxruntime's quantized ops (its QOperator format: quantize_static writes
# them between QLinearMatMuls and QLinearConvs), each one type T for its
# tensors: the unary ones give their input's type and shape, QLinearAdd and
# QLinearMul broadcast A (input 0) and B (input 3) as Add and Mul do, and
# QLinearConcat concatenates inputs 2, 5, 8, ... as Concat does.
_QUANTIZED_SHAPE_OF_INPUT = {"QLinearSoftmax", "QLinearSigmoid", "QLinearLeakyRelu"}
_QUANTIZED_BROADCAST = {"QLinearAdd": "Add", "QLinearMul": "Mul"}


def _stand_in_for_onnxruntime_ops(graph) -> None:
    """In the copy inference runs on (main graph only: subgraph results are
    matched to nodes one to one), each such op becomes standard ops with the
    same output types and shapes: Identity of the input, for the Skip norms
    Add(input, skip) for the residual sum, and for the quantized ops the
    float op of the same shape (see above)."""
    nodes = []
    for n in graph.node:
        nodes.extend(_stand_ins(n) or [n])
    del graph.node[:]
    graph.node.extend(nodes)


def _stand_ins(n) -> Optional[list]:
    """The standard nodes standing in for `n` in the inference copy, or None
    where it is itself what onnx infers."""
    from onnx import helper

    if not n.input or not n.input[0]:
        return None
    op, outs = n.op_type, list(n.output)
    if n.domain in ("", "ai.onnx"):
        return [helper.make_node("Identity", [n.input[0]], [outs[0]])] if op in _STANDARD_SHAPE_OF_INPUT else None
    if n.domain != "com.microsoft":
        return None
    if op in _SHAPE_OF_INPUT and op.startswith("Skip") and len(n.input) > 1:
        total = outs[3] if len(outs) > 3 and outs[3] else f"{outs[0]}::pyonnxopt_sum"
        return [helper.make_node("Add", [n.input[0], n.input[1]], [total]),
                helper.make_node("Identity", [total], [outs[0]])]
    if op in _SHAPE_OF_INPUT or op in _QUANTIZED_SHAPE_OF_INPUT:
        return [helper.make_node("Identity", [n.input[0]], [outs[0]])]
    if op in _QUANTIZED_BROADCAST and len(n.input) > 3 and n.input[3]:
        return [helper.make_node(_QUANTIZED_BROADCAST[op], [n.input[0], n.input[3]], [outs[0]])]
    if op == "QLinearConcat" and len(n.input) > 2:
        axis = next((a.i for a in n.attribute if a.name == "axis"), None)
        parts = list(n.input[2::3])
        if axis is not None and all(parts):
            return [helper.make_node("Concat", parts, [outs[0]], axis=axis)]
    return None


def _unbind_slice_10_starts(proto, inferred) -> list:
    """onnx's inference of Slice-10 (opset 10 only; onnx 1.23) gives a sliced
    axis whose length is a symbol that same symbol, as if the Slice took the
    whole axis: `x[:, 4:6]` of `[5, N, 5]` comes out `[5, N, 5]`, and a rule
    trusting it drops the Slice. With starts it cannot read it leaves the
    axis unknown, as it should. Each Slice it got wrong (in `inferred`)
    reads its starts from a new graph input in `proto` (the copy inference
    runs on); returns [(graph index, node index, starts, stand-in)]."""
    from onnx import TensorProto, helper

    unbound = []
    # (subgraph values are named apart from the outer ones by now: one table)
    dims = {v.name: symbolic_shapes.dims_of(v.type)
            for g in graphs(inferred.graph) for v in [*g.input, *g.value_info, *g.output]}
    for gi, (pg, ig) in enumerate(zip(graphs(proto.graph), graphs(inferred.graph))):
        for ni, (pn, n) in enumerate(zip(pg.node, ig.node)):
            if n.op_type != "Slice" or n.domain not in ("", "ai.onnx") or len(n.input) < 3:
                continue
            before, after = dims.get(n.input[0]), dims.get(n.output[0])
            copied = {i for i, (a, b) in enumerate(zip(before or [], after or [])) if isinstance(a, str) and a == b}
            if copied & _slice_axes(proto, n, len(before or [])):
                stand_in = f"{n.input[1]}::pyonnxopt_unknown_starts{len(unbound)}"
                proto.graph.input.append(helper.make_tensor_value_info(stand_in, TensorProto.INT64, None))
                unbound.append((gi, ni, pn.input[1], stand_in))
                pn.input[1] = stand_in
    return unbound


def _rebind_slice_10_starts(inferred, unbound: list) -> None:
    """The Slices of `_unbind_slice_10_starts` read their starts again (in
    the inferred copy: the refinement reads constant bounds itself)."""
    every = graphs(inferred.graph)
    stand_ins = set()
    for gi, ni, starts, stand_in in unbound:
        every[gi].node[ni].input[1] = starts
        stand_ins.add(stand_in)
    kept = [v for v in inferred.graph.input if v.name not in stand_ins]
    del inferred.graph.input[:]
    inferred.graph.input.extend(kept)


def _slice_axes(proto, node, rank: int) -> set:
    """The axes a Slice-10 of a rank-`rank` value slices: its constant axes,
    its starts' (0, 1, ...) when it has none, every axis when they are not
    constants (initializers or Constant nodes, of any graph)."""
    def ints(name):
        found = (constant(g, name) for g in graphs(proto.graph))
        a = next((a for a in found if a is not None), None)
        return None if a is None else [int(v) for v in a.reshape(-1)]

    if len(node.input) > 3 and node.input[3]:
        axes = ints(node.input[3])
    else:
        starts = ints(node.input[1])
        axes = None if starts is None else range(len(starts))
    return set(range(rank)) if axes is None or not rank else {a % rank for a in axes}


# onnx's data propagation holds a computed shape's every entry as a message:
# a Range over a sequence of 10 million positions took 6 GB.
DATA_PROP_MAX_DIM = 1 << 20


def _huge_input(graph) -> bool:
    """Whether a graph input has a dim past DATA_PROP_MAX_DIM."""
    return any(d.dim_value > DATA_PROP_MAX_DIM for v in graph.input if v.type.HasField("tensor_type")
               for d in v.type.tensor_type.shape.dim)


def _generated(name: str) -> int:
    """N of onnx's generated symbol unk__N, else -1."""
    return int(name[5:]) if name.startswith("unk__") and name[5:].isdigit() else -1


_APART = "::pyonnxopt_body"


def _name_subgraph_values_apart(graph, scope: Optional[dict] = None, counter: Optional[list] = None) -> dict:
    """In the copy inference runs on, every value a subgraph defines gets a
    name of its own (`name::pyonnxopt_bodyK`), references inside it and its
    nested bodies following. onnx 1.23's data propagation keys shape data by
    name across bodies: where an If's branches both define `s`, the else
    branch's `ConstantOfShape(s)` took the then branch's shape (optimum's
    merged decoders name both branches alike). Returns {new: old}."""
    scope = dict(scope or {})
    counter = counter if counter is not None else [0]
    renamed: dict = {}
    for n in graph.node:
        for body in bodies(n):
            counter[0] += 1
            tag = f"{_APART}{counter[0]}"
            inner = dict(scope)
            defined = [v.name for v in body.input] + [t.name for t in body.initializer] + \
                [o for m in body.node for o in m.output]
            for name in defined:
                if name:
                    inner[name] = name + tag
                    renamed[name + tag] = name
            _rename(body, inner)
            renamed.update(_name_subgraph_values_apart(body, inner, counter))
    return renamed


def _rename(body, names: dict) -> None:
    """Renames a body's values (declared, held and computed) and its nodes'
    references by `names`, old -> new."""
    for v in [*body.input, *body.output, *body.value_info]:
        v.name = names.get(v.name, v.name)
    for t in body.initializer:
        t.name = names.get(t.name, t.name)
    for m in body.node:
        m.input[:] = [names.get(x, x) for x in m.input]
        m.output[:] = [names.get(x, x) for x in m.output]


def _forget_branch_output_shapes(graph) -> None:
    """In the copy, an If branch's outputs keep their element types and lose
    their declared shapes, so that inference gives the shapes the branch
    computes. optimum's merged decoders declare both branches' present keys
    `past_sequence_length + sequence_length` long; the branch without a
    cache computes them `sequence_length` long (its past is empty), and the
    mask that branch cuts to the keys' length must read that length."""
    for n in graph.node:
        for body in bodies(n):
            if n.op_type == "If" and n.domain in ("", "ai.onnx"):
                for o in body.output:
                    if o.type.HasField("tensor_type"):
                        o.type.tensor_type.ClearField("shape")
            _forget_branch_output_shapes(body)


def _restore_subgraph_names(graph, renamed: dict) -> None:
    """Undoes `_name_subgraph_values_apart` in the inferred copy."""
    if not renamed:
        return
    for n in graph.node:
        for body in bodies(n):
            _rename(body, renamed)
            _restore_subgraph_names(body, renamed)


def _forget_generated(graph) -> tuple:
    """Clears the generated unk__ symbols of the main graph's value_info in
    the copy: onnx keeps a symbol it finds there over what it infers, so a
    dim once unknown (a Reshape target computed by nodes that later passes
    simplified) would stay unknown. Returns (the generated names still in
    the copy, the largest N seen) for `_rename_generated`."""
    largest = -1
    for vi in graph.value_info:
        for d in vi.type.tensor_type.shape.dim:
            if _generated(d.dim_param) >= 0:
                largest = max(largest, _generated(d.dim_param))
                d.ClearField("dim_param")
    still = {d.dim_param for d in _all_dims(graphs(graph)) if _generated(d.dim_param) >= 0}
    return still, max([largest, *(_generated(n) for n in still)])


def _rename_generated(graph, kept: tuple) -> None:
    """onnx names what it could not work out unk__0, unk__1, ... afresh,
    avoiding only the names left in the copy: each name it made now becomes
    one above every N the model had, so that it never reads as a dim the
    model already gave that name (a false equality), in the main graph's
    value_info (whose old names the copy had forgotten) and in subgraphs
    alike (a branch's dim from an outer value keeps its link to it)."""
    still, largest = kept
    made = {}
    every = graphs(graph)
    top = max([largest, *(_generated(d.dim_param) for d in _all_dims(every))])
    for vi in (vi for g in every for vi in [*g.value_info, *g.output]):
        if not vi.type.HasField("tensor_type"):
            continue
        for d in vi.type.tensor_type.shape.dim:
            if _generated(d.dim_param) >= 0 and d.dim_param not in still:
                if d.dim_param not in made:
                    top += 1
                    made[d.dim_param] = f"unk__{top}"
                d.dim_param = made[d.dim_param]


def _link_generated(pg, g: Graph, still: set) -> None:
    """Generated names that the inference just made and those the model's
    values already have are one namespace (`_rename_generated`). Each
    value's dim joins its old name and its new one; a new name on two
    values joins their old names too: the fresh inference has linked dims
    that an earlier one could not (a Reshape's 0 copying a batch that was
    unknown then). Every dim of a group then takes one name: one on a
    graph input or output if the group has one (those keep theirs), else
    the smallest old one, else the new one. A group of one old and one new
    name keeps the old, so inferring again renames nothing. Subgraphs'
    values alike: onnx names their unknown dims afresh on every run too."""
    parent: dict = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def rank(name: str) -> tuple:  # the new names are numbered above the old ones
        return (name not in still, _generated(name))

    pairs, entries = [], []
    for pgraph, graph in _graph_pairs(pg, g):
        entries += [*pgraph.value_info, *pgraph.output]
        for vi in [*pgraph.value_info, *pgraph.output]:
            v = graph.value(vi.name)
            t = v.type if v is not None and v.graph == graph else {}
            if t.get("kind") != "tensor" or t.get("shape") is None:
                continue
            dims = vi.type.tensor_type.shape.dim
            if len(dims) != len(t["shape"]):
                continue
            pairs += [(d, old) for d, old in zip(dims, t["shape"])
                      if _generated(d.dim_param) >= 0 and isinstance(old, str) and _generated(old) >= 0]
    for d, old in pairs:
        a, b = find(d.dim_param), find(old)
        if a != b:
            parent[max(a, b, key=rank)] = min(a, b, key=rank)
    for vi in entries:
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param in parent:
                d.dim_param = find(d.dim_param)


def _bodies_of(pg, g: Graph):
    """(inferred body, the model's body, the node holding them) for the
    subgraphs of `g`'s nodes: nodes correspond one to one, in order; bodies
    by attribute name (an If's two branches often name their values alike,
    and the IR need not keep the proto's attribute order)."""
    for pn, n in zip(pg.node, g.nodes):
        if pn.op_type != n.op_type:
            break
        if not n.subgraphs:
            continue
        mine = n.attributes
        for a in pn.attribute:
            ours = mine.get(a.name)
            pairs = [(a.g, ours)] if a.HasField("g") else zip(a.graphs, ours if isinstance(ours, list) else [])
            for pbody, body in pairs:
                if isinstance(body, Graph):
                    yield pbody, body, n


def _graph_pairs(pg, g: Graph):
    """(inferred graph, the model's graph): `g` and its subgraphs, nested ones after their holder's."""
    yield pg, g
    for pbody, body, _ in _bodies_of(pg, g):
        yield from _graph_pairs(pbody, body)


def _all_dims(every: list):
    """Every dim of the graphs' (a graph's and its subgraphs', `graphs`) inputs, outputs and value_info."""
    for g in every:
        for vi in [*g.input, *g.output, *g.value_info]:
            if vi.type.HasField("tensor_type"):
                yield from vi.type.tensor_type.shape.dim


def _merged(type_proto, t: dict, aliases: Mapping, computed: bool = False) -> None:
    """Where the inferred type says less of a dim than the value's type `t`
    does, or the same but by another name, the value's dim goes back into
    it, unless the new name is `_renamed`'s better one, or the inference
    `computed` it (an If branch's output: the name of what the branch
    computes wins)."""
    if t.get("kind") != "tensor" or t.get("shape") is None or not type_proto.HasField("tensor_type"):
        return
    dims = type_proto.tensor_type.shape.dim
    if len(dims) != len(t["shape"]):
        return
    for d, old in zip(dims, t["shape"]):
        new = d.dim_value if d.HasField("dim_value") else d.dim_param
        if old is None or old == "" or _dim_score(old) < _dim_score(new) or _renamed(old, new, aliases):
            continue
        if computed and _dim_score(new) == _dim_score(old) == 2:
            continue
        if isinstance(old, int):
            d.dim_value = old
        else:
            d.dim_param = old


def _same_rank(type_proto, shape: Optional[list]) -> bool:
    """Whether inference gave a shape, of `shape`'s rank where that is known."""
    inferred = symbolic_shapes.dims_of(type_proto)
    return inferred is not None and (shape is None or len(shape) == len(inferred))


def _write_back(pg, g: Graph, update_outputs: bool, aliases: Mapping, branch: bool = False) -> int:
    """Writes the inferred types of `pg` (the copy) into `g`; `branch`: g is
    an If branch, whose outputs take the shapes it computes."""
    typed = 0
    entries = list(pg.value_info) + (list(pg.output) if update_outputs or branch else [])
    for vi in entries:
        v = g.value(vi.name)
        if v is None or v.graph != g or v.is_graph_input or not vi.HasField("type"):
            continue
        if v.is_graph_output and not update_outputs and not branch:
            continue
        t = v.type  # a dict made on each read: read once
        before = t.get("shape")
        # a branch output the branch computes, whose inferred shape has the declared rank
        computed = branch and v.is_graph_output and v.producer is not None and _same_rank(vi.type, before)
        _merged(vi.type, t, aliases, computed)
        if _known_dims(vi.type) > _known_dims_of(t) or _names_more(vi.type, t) or _renames(vi.type, t, aliases) \
                or (computed and symbolic_shapes.dims_of(vi.type) != before):
            g.set_value_type(v, vi.type.SerializeToString())
            typed += 1
    for pbody, body, n in _bodies_of(pg, g):
        typed += _write_back(pbody, body, False, {}, branch=n.op_type == "If" and not n.domain)
    return typed


# ---------------------------------------------------------------- input shapes

MAX_DIM = (1 << 31) - 1
_SPEC = re.compile(r"^(?P<name>.+):(?P<dims>[^:]*)$")


def parse_input_shape(spec: str) -> tuple:
    """"name:1,3,640,640" -> ("name", [1, 3, 640, 640]); a dim may stay
    symbolic by name ("name:N,3,640,640"); "name:" is a scalar (a
    diffusion model's timestep). Raises Error on a malformed spec."""
    m = _SPEC.match(spec)
    if not m:
        raise Error(f"--input-shape {spec!r}: expected NAME:D1,D2,... (e.g. images:1,3,640,640; NAME: for a scalar)")
    if not m.group("dims").strip():
        return m.group("name"), []
    dims: list = []
    for part in m.group("dims").split(","):
        part = part.strip()
        if re.fullmatch(r"\d+", part):
            if not 1 <= int(part) <= MAX_DIM:
                raise Error(f"--input-shape {spec!r}: dim {part} must be between 1 and {MAX_DIM}")
            dims.append(int(part))
        elif re.fullmatch(r"[A-Za-z_][\w.]*", part):
            dims.append(part)
        else:
            raise Error(f"--input-shape {spec!r}: dim {part!r} is neither a positive integer nor a symbol name")
    return m.group("name"), dims


def fix_input_shapes(model: Model, shapes: Mapping[str, Sequence] = (), batch: Optional[int] = None) -> list:
    """Sets the dims of graph inputs: `shapes` maps input names to full
    shapes; a named dim fixed there is fixed in every input that has it
    (input_ids [batch, seq] given as 1,12 fixes the attention mask's
    [batch, seq] too); `batch` fixes the first dim of every input where it
    is not a number yet. Intermediate types are then inferred again, and
    graph output shapes follow. Returns the inputs changed. Raises Error on
    an unknown input, a rank that does not match, a static dim that would
    change, or a named dim given two sizes."""
    import onnx

    shapes = dict(shapes or {})
    if batch is not None and not 1 <= batch <= MAX_DIM:
        raise Error(f"--batch {batch}: must be between 1 and {MAX_DIM}")
    inputs = {v.name: v for v in model.graph.inputs if v.initializer is None}
    for name in shapes:
        if name not in inputs:
            raise Error(f"--input-shape: the model has no input {name!r} (inputs: {', '.join(inputs) or 'none'})")
    bound = _bound_symbols(inputs, shapes)
    changed = []
    for name, v in inputs.items():
        raw = v.type_proto
        tp = onnx.TypeProto.FromString(raw) if raw is not None else onnx.TypeProto()
        named = {d.dim_param for d in tp.tensor_type.shape.dim if d.dim_param} if tp.HasField("tensor_type") else set()
        if name not in shapes and batch is None and not named & bound.keys():
            continue
        if not tp.HasField("tensor_type"):
            if name in shapes:
                raise Error(f"--input-shape: input {name!r} is not a tensor")
            continue
        dims = tp.tensor_type.shape.dim
        if name in shapes:
            new = list(shapes[name])
            if tp.tensor_type.HasField("shape") and len(dims) != len(new):
                raise Error(f"--input-shape: input {name!r} has rank {len(dims)}, the shape given has {len(new)} dims")
        else:
            if not tp.tensor_type.HasField("shape") or not dims:
                continue
            new = [d.dim_value if d.HasField("dim_value") else bound.get(d.dim_param, d.dim_param or None)
                   for d in dims]
            if batch is not None and not isinstance(new[0], int):
                new[0] = batch
            if new == [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in dims]:
                continue
        for i, d in enumerate(new):
            if i < len(dims) and dims[i].HasField("dim_value") and dims[i].dim_value != d:
                raise Error(f"--input-shape: input {name!r} dim {i} is {dims[i].dim_value} in the model, not {d}")
        tp.tensor_type.shape.Clear()
        for d in new:
            dim = tp.tensor_type.shape.dim.add()
            if isinstance(d, int):
                dim.dim_value = d
            elif d:
                dim.dim_param = d
        model.graph.set_value_type(v, tp.SerializeToString())
        changed.append(name)
    if changed:
        for g in model.graphs():
            if not g.is_function_body:
                g.clear_value_info()
        # Outputs are inferred afresh too: onnx keeps a declared shape that
        # contradicts the inferred one (exporters bake in an example's
        # sizes), and the written model would then fail onnx.checker.
        declared = {v.name: v.type_proto for v in model.graph.outputs if not v.is_graph_input}
        for v in model.graph.outputs:
            if v.name in declared:
                model.graph.set_value_type(v, _without_shape(declared[v.name]))
        infer(model, update_outputs=True)
        for v in model.graph.outputs:
            if v.name in declared:
                model.graph.set_value_type(v, _with_declared_dims(v.name, v.type_proto, declared[v.name]))
    return changed


def _bound_symbols(inputs: Mapping, shapes: Mapping) -> dict:
    """Named dims the given shapes fix: symbol -> size. Raises Error when
    one gets two sizes."""
    import onnx

    bound: dict = {}
    for name, new in shapes.items():
        raw = inputs[name].type_proto
        tp = onnx.TypeProto.FromString(raw) if raw is not None else onnx.TypeProto()
        if not tp.HasField("tensor_type"):
            continue
        for d, size in zip(tp.tensor_type.shape.dim, new):
            if not d.dim_param or not isinstance(size, int):
                continue
            if bound.setdefault(d.dim_param, size) != size:
                raise Error(f"--input-shape: dim {d.dim_param!r} is given as {bound[d.dim_param]} and as {size} "
                            f"(input {name!r}); one named dim has one size")
    return bound


def _without_shape(raw: Optional[bytes]) -> bytes:
    import onnx

    tp = onnx.TypeProto.FromString(raw or b"")
    if tp.HasField("tensor_type"):
        tp.tensor_type.ClearField("shape")
    return tp.SerializeToString()


def _with_declared_dims(name: str, raw: Optional[bytes], declared_raw: Optional[bytes]) -> bytes:
    """The inferred output type, with the declared dims where inference
    found none (a size or a named symbol it could not derive). A declared
    size that inference contradicts is dropped, with a warning."""
    import onnx

    tp, declared = onnx.TypeProto.FromString(raw or b""), onnx.TypeProto.FromString(declared_raw or b"")
    if not declared.HasField("tensor_type") or not declared.tensor_type.HasField("shape"):
        return tp.SerializeToString()
    if not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
        return declared_raw
    dims, old = tp.tensor_type.shape.dim, declared.tensor_type.shape.dim
    if len(dims) != len(old):
        log.warning("output %r: declared with rank %d, the fixed input shapes give rank %d", name, len(old), len(dims))
        return tp.SerializeToString()
    for i, (d, o) in enumerate(zip(dims, old)):
        if _dim_score(_dim(d)) < 2 and _dim_score(_dim(o)) >= 2:
            d.CopyFrom(o)
        elif o.HasField("dim_value") and _dim(d) != o.dim_value:
            log.warning("output %r dim %d: declared %d, the fixed input shapes give %s", name, i, o.dim_value, _dim(d))
    return tp.SerializeToString()


def _dim(d):
    return d.dim_value if d.HasField("dim_value") else d.dim_param
