"""flatten_linear_rows: a Linear on a [..., K] tensor (MatMul by a 2-D
weight, then a bias Add) becomes one Gemm by running the whole row-wise
region around it on [rows, K] instead.

    x: [B, S, 768]                         x2 = Reshape(x, [-1, 768])
    h = Add(MatMul(x, W), b)          ->   h = Gemm(x2, W, b)           [B*S, 3072]
    g = Gelu(h)                            g = Gelu(h)
    y = Add(MatMul(g, W2), b2)             y = Gemm(g, W2, b2)          [B*S, 768]
    z = LayerNormalization(Add(y, x))      z = LayerNormalization(Add(y, x2))
    out = Reshape(z, [B, S, 12, 64])       out = Reshape(z, [B, S, 12, 64])

A transformer's residual stream is such a region from the embeddings to
the last norm: its Linears, biases, residual Adds, activations and norms
each compute a row of the result from the same row of their inputs, so
they are the same computation on the rows laid out 2-D. Gemm only takes
2-D operands; MatMul + Add on 3-D ones is two kernels (onnxsim instead
wraps each Linear in Reshape -> Gemm -> Reshape).

A region is a connected set of row-wise nodes whose values share the
leading dims (the rows): elementwise ops whose other operands broadcast
along the last axis only (onnxruntime's BiasGelu, FastGelu, Gelu and
QuickGelu too), MatMul by a rank-2 value, LayerNormalization,
RMSNormalization, SimplifiedLayerNormalization, Softmax and reductions
over the last axis. Where the region starts, a
Reshape to [-1, K] goes in, unless the value came from a Reshape already
(its target changes). Where it ends, a Reshape back goes in, unless the
reader is a Reshape (its target is kept, or rewritten where a 0 copied a
row dim). Symbolic rows are read back at run time: Shape of an input of
the region as wide as the value, else Shape(start, end) of a value still
holding the rows (below opset 15: Shape and a Slice) and a Concat.

The region is rewritten only when the Gemms it makes outnumber the
Reshapes and shape nodes it adds; otherwise it is refused with both
counts. Refused, too: rows or widths that are not known (a width must be
an int), rows shared with a subgraph, no value outside the region that
holds symbolic rows, and symbolic rows below opset 10.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
from onnx import helper

from pyonnxopt.fusion.rule import known_dtype, node_id, take_over
from pyonnxopt.fusion.rules._channels import type_refusal
from pyonnxopt.fusion.values import attr_or_input, constant_ints, dims
from pyonnxopt.model import Model, raw_data
from pyonnxopt.opset import default_opset
from pyonnxopt.passes.base import Pass, PassOptions, PassResult

# Output row i of these reads row i of each input (inputs broadcast along
# the last axis only, checked per node).
_ELEMENTWISE = frozenset({
    "Abs", "Acos", "Acosh", "Add", "And", "Asin", "Asinh", "Atan", "Atanh", "BitShift", "Cast", "Ceil", "Celu",
    "Clip", "Cos", "Cosh", "Div", "Dropout", "Elu", "Equal", "Erf", "Exp", "Floor", "Gelu", "Greater",
    "GreaterOrEqual", "HardSigmoid", "HardSwish", "Identity", "IsInf", "IsNaN", "LeakyRelu", "Less", "LessOrEqual",
    "Log", "Max", "Mean", "Min", "Mish", "Mod", "Mul", "Neg", "Not", "Or", "Pow", "PRelu", "Reciprocal", "Relu",
    "Round", "Selu", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus", "Softsign", "Sqrt", "Sub", "Sum", "Tan",
    "Tanh", "ThresholdedRelu", "Where", "Xor",
})
# onnxruntime's (--target ort): the bias, where there is one, is 1-D.
_ELEMENTWISE_MS = frozenset({"BiasGelu", "FastGelu", "Gelu", "QuickGelu"})
_LAST_AXIS = frozenset({"Softmax", "LogSoftmax", "Hardmax", "LayerNormalization", "RMSNormalization",
                        "SimplifiedLayerNormalization"})
_REDUCE = frozenset({
    "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd",
    "ReduceSum", "ReduceSumSquare",
})


def _rows_of(v, rows: tuple) -> bool:
    """v has the rows `rows` and a last axis: [*rows, width]."""
    d = dims(v)
    return d is not None and len(d) == len(rows) + 1 and tuple(d[:-1]) == rows


def _known(d: Optional[list]) -> bool:
    return d is not None and all(isinstance(e, (int, str)) and e != 0 for e in d)


def _broadcast_row(v, rows: tuple, width) -> bool:
    """v, not a row value, is the same for every row: rank 0 or 1, or
    leading 1s (rank > 2 only as an initializer, which is flattened)."""
    d = dims(v)
    if d is None or len(d) > len(rows) + 1 or (d and d[-1] not in (1, width)):
        return False
    if any(e != 1 for e in d[:-1]):
        return False
    return len(d) <= 2 or (v.initializer is not None and not v.is_graph_input)


def _elementwise(n) -> bool:
    return n.op_type in (_ELEMENTWISE_MS if n.domain == "com.microsoft" else _ELEMENTWISE if not n.domain else ())


def _row_op_rows(n, g, opset: int, foreign: set) -> Optional[tuple]:
    """The rows of a row-wise node (the leading dims of its output), or None."""
    if (n.domain and not _elementwise(n)) or n.pinned or n.removed or n.subgraphs or not n.outputs \
            or n.outputs[0] is None:
        return None
    out = n.outputs[0]
    d = dims(out)
    if not _known(d) or len(d) < 3 or out.name in foreign or any(u.graph != g for u, _ in out.uses):
        return None
    if any(o is not None and (o.uses or o.is_graph_output) for o in n.outputs[1:]):
        return None  # Dropout's mask, LayerNormalization's mean: not rows of the same width
    rows, width, rank = tuple(d[:-1]), d[-1], len(d)
    op = n.op_type
    if op == "MatMul":
        w = dims(n.inputs[1])
        return rows if _rows_of(n.inputs[0], rows) and w is not None and len(w) == 2 and w[1] == width else None
    if op in _LAST_AXIS:
        default = -1 if op not in ("Softmax", "LogSoftmax", "Hardmax") or opset >= 13 else 1
        if n.attributes.get("axis", default) not in (-1, rank - 1) or dims(n.inputs[0]) != d:
            return None
        params = [v for v in n.inputs[1:] if v is not None]
        return rows if all(dims(v) is not None and len(dims(v)) <= 1 for v in params) else None
    if op in _REDUCE:
        if n.attributes.get("keepdims", 1) != 1 or attr_or_input(n, "axes", 1) not in ([-1], [rank - 1]) or width != 1:
            return None
        return rows if _rows_of(n.inputs[0], rows) else None
    if not _elementwise(n):
        return None
    inputs = [v for v in n.inputs if v is not None]  # Clip's bounds, Dropout's ratio: scalars, broadcast
    row_inputs = [v for v in inputs if _rows_of(v, rows)]
    if not row_inputs or any(dims(v)[-1] not in (1, width) for v in row_inputs):
        return None
    return rows if all(_rows_of(v, rows) or _broadcast_row(v, rows, width) for v in inputs) else None


class _Component:
    """One connected row-wise region and what rewriting it takes."""

    def __init__(self, nodes: list, rows: tuple, row_wise: dict):
        self.nodes, self.rows = nodes, rows
        self.row_wise = row_wise  # every row-wise node of the graph (other regions' too)
        self.members = set(nodes)
        self.values = {n.outputs[0] for n in nodes}
        self.entries: list = []  # (value, retarget: its producer Reshape takes a new target)
        self.exits: list = []  # (value, [(reshape reader, new target)], [other readers], is graph output)
        self.gemms: list = []  # (MatMul, Add, bias index in the Add)
        self.source = None  # a value outside holding the rows, when they are symbolic and put back
        self.whole: dict = {}  # width -> an entry of that width kept 3-D, whose Shape puts such values back
        self.added = 0  # Reshapes and shape nodes the rewrite adds (besides the Gemms)


class FlattenLinearRows(Pass):
    name = "flatten_linear_rows"
    description = "a row-wise region around 3-D MatMul + bias runs on [rows, K], each Linear one Gemm"
    after_cleanup = True
    after_fusions = True  # fuse_attention reads the head split of a 3-D projection

    def run(self, model: Model, options: PassOptions = PassOptions()) -> PassResult:
        stats = {"nodes_removed": 0, "nodes_added": 0, "rewrites": [], "refused": []}
        opset = default_opset(model)
        if opset < 7:
            return PassResult(False, stats)
        for g in model._core.all_graphs():
            if g.is_function_body:
                continue
            for comp in _components(g, opset):
                why = _plan(comp, g, opset)
                if why is not None:
                    if comp.gemms:
                        stats["refused"].append(f"the region at '{node_id(comp.nodes[0])}' "
                                                f"({len(comp.nodes)} nodes): {why}")
                    continue
                consumed = [mm.outputs[0].name for mm, _, _ in comp.gemms]
                produced = [add.outputs[0].name for _, add, _ in comp.gemms]
                _rewrite(comp, g, opset)
                stats["nodes_added"] += comp.added + len(comp.gemms)
                stats["nodes_removed"] += 2 * len(comp.gemms)
                stats["rewrites"].append({"what": f"{len(comp.gemms)} Linears as Gemm on rows",
                                          "consumed": consumed, "produced": produced})
        return PassResult(bool(stats["rewrites"]), stats)


def _foreign(g) -> set:
    """Names of this graph's values read inside its nodes' subgraphs."""
    names: set = set()
    for n in g.nodes:
        for sub in n.subgraphs:
            names.update(v.name for v in sub.outer_references())
    return names


def _components(g, opset: int) -> list:
    foreign = _foreign(g)
    rows_of = {}
    for n in g.nodes:
        rows = _row_op_rows(n, g, opset, foreign)
        if rows is not None:
            rows_of[n] = rows
    parent = {n: n for n in rows_of}

    def find(n):
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    readers: dict = {}  # a value's row-wise readers share its 2-D form: one region
    for n, rows in rows_of.items():
        for v in n.inputs:
            if v is not None and _rows_of(v, rows):
                readers.setdefault(v, []).append(n)
    for v, nodes in readers.items():
        for n in [*nodes, v.producer] if v.producer in rows_of else nodes:
            parent[find(n)] = find(nodes[0])
    groups: dict = {}
    for n in g.nodes:  # graph order within each component
        if n in rows_of:
            groups.setdefault(find(n), []).append(n)
    return [_Component(nodes, rows_of[nodes[0]], rows_of) for nodes in groups.values()]


def _plan(c: _Component, g, opset: int) -> Optional[str]:
    """Fills in the component's Gemms, entries and exits; None when
    rewriting it pays, else why not."""
    for n in c.nodes:
        out = n.outputs[0]
        if n.op_type != "MatMul" or not _is_float(out) or out.is_graph_output or len(out.uses) != 1:
            continue
        add, index = out.uses[0]
        if add in c.members and add.op_type == "Add" and len(add.inputs) == 2 \
                and not _rows_of(add.inputs[1 - index], c.rows) and dims(add.outputs[0]) == dims(out):
            c.gemms.append((n, add, 1 - index))  # a bias that widened the product is no Gemm's C
    seen = set()
    for n in c.nodes:
        for v in n.inputs:
            if v is None or v in c.values or v in seen or not _rows_of(v, c.rows):
                continue
            seen.add(v)
            if not isinstance(dims(v)[-1], int):
                return f"the width of '{v.name}' is not known"
            p = v.producer
            # Its target may change when no region reads or feeds it otherwise (another
            # region's exit would set it back to its own).
            retarget = (p is not None and p.graph == g and p.op_type == "Reshape" and not p.domain and not p.pinned
                        and p.inputs[0].producer not in c.row_wise and not v.is_graph_output
                        and all(u in c.members for u, _ in v.uses))
            c.entries.append((v, retarget))
    targets: set = set()  # (row dims copied at run time, the dims after them)
    for n in c.nodes:
        w = n.outputs[0]
        outside = [(u, i) for u, i in w.uses if u not in c.members]
        if not outside and not w.is_graph_output:
            continue
        if not isinstance(dims(w)[-1], int):
            return f"the width of '{w.name}' is not known"
        reshapes, others = [], []
        for u, i in outside:
            target = _reader_target(u, i, w, c.rows)
            if target is None:
                others.append((u, i))
            else:
                reshapes.append((u, target))
        c.exits.append((w, reshapes, others, w.is_graph_output))
        targets.update(t for _, t in reshapes if isinstance(t, tuple))
        if (others or w.is_graph_output) and not _static(c.rows):
            targets.add((len(c.rows), (dims(w)[-1],)))
    nops = _reshapes_made_nops(c)
    if not c.gemms and not nops:
        return "no MatMul + bias in it, nor a Reshape to or from [rows, K] it makes a no-op"
    if targets:
        why = _choose_source(c, g, opset)  # may keep an entry's Reshape: before counting the entries
        if why:
            return why
        k = len(c.rows)
        whole = {t for t in targets if t[0] == k and len(t[1]) == 1 and t[1][0] in c.whole}
        partial = targets - whole
        c.added = len({c.whole[t[1][0]] for t in whole})
        if partial:  # Shape (and a Slice below opset 15), then per target a Concat (and a Slice)
            c.added += 1 + (opset < 15) + len(partial) + sum(1 for lead, _ in partial if lead < k)
    c.added += sum(1 for _, retarget in c.entries if not retarget)
    c.added += sum(1 for _, _, others, is_output in c.exits if others or is_output)
    if c.added >= len(c.gemms) + nops:
        gemms = f"{len(c.gemms)} Gemm" + ("s" if len(c.gemms) != 1 else "")
        return f"{gemms} and {nops} Reshapes made no-ops would take {c.added} Reshapes and shape nodes"
    return None


def _reshapes_made_nops(c: _Component) -> int:
    """Reshapes at the region's border that the rewrite leaves with nothing
    to do (eliminate_nop then removes them): an entry's Reshape of a 2-D
    value (a Gemm's [B*S, N] back to [B, S, N]), which gets the target
    [-1, N], and an exit's Reshape reader that flattens to [-1, K] (the
    flattening before a Gemm). GPT-2 writes each Linear that way."""
    count = sum(1 for v, retarget in c.entries
                if retarget and (d := dims(v.producer.inputs[0])) is not None and len(d) == 2 and d[1] == dims(v)[-1])
    for w, reshapes, _, _ in c.exits:
        width = dims(w)[-1]
        count += sum(1 for _, target in reshapes if isinstance(target, list) and len(target) == 2
                     and target[1] == width and (target[0] == -1 or (_static(c.rows) and target[0] == math.prod(c.rows))))
    return count


def _static(rows: tuple) -> bool:
    return all(isinstance(e, int) for e in rows)


def _is_float(v) -> bool:
    return type_refusal(known_dtype(v)) is None


def _reader_target(u, i: int, w, rows: tuple):
    """The target a Reshape reading w takes when w comes as [rows, width]:
    a list of ints, or (count of leading row dims copied at run time, the
    rest); None when u is not such a Reshape."""
    if u.op_type != "Reshape" or u.domain or u.pinned or i != 0 or len(u.inputs) < 2:
        return None
    target = constant_ints(u.inputs[1])
    if target is None:
        return None
    if 0 not in target or u.attributes.get("allowzero", 0):
        return target
    full = [*rows, dims(w)[-1]]
    copied = [j for j, e in enumerate(target) if e == 0]
    if copied[-1] >= len(full):
        return None
    if all(isinstance(full[j], int) for j in copied):
        return [full[j] if e == 0 else e for j, e in enumerate(target)]
    lead = len(copied)
    if copied != list(range(lead)) or lead > len(rows):
        return None
    return (lead, tuple(target[lead:]))


def _choose_source(c: _Component, g, opset: int) -> Optional[str]:
    """Picks the value the symbolic rows are read from at run time: the
    earliest outside value whose leading dims are the rows (an entry kept
    as it is, or the input of an entry's Reshape; failing those, an entry
    whose Reshape is then kept and a new one put in). None, or why not."""
    if opset < 10:
        return "its rows are symbolic and reading them back (Shape, then Slice by inputs) needs opset 10"
    position = {n: i for i, n in enumerate(g.nodes)}
    k = len(c.rows)
    found = [v for v, retarget in c.entries if not retarget]
    for v, retarget in c.entries:
        d = dims(v.producer.inputs[0]) if retarget else None
        if d is not None and len(d) > k and tuple(d[:k]) == c.rows:
            found.append(v.producer.inputs[0])
    demoted = not found
    found = found or [v for v, _ in c.entries]
    source = min(found, key=lambda v: position.get(v.producer, -1))  # -1: an input, or outer scope
    readers = [u for _, reshapes, others, _ in c.exits for u, _ in [*reshapes, *others]]
    first = min((position[u] for u in readers), default=len(position))
    if position.get(source.producer, -1) >= first:
        return f"no value holding its symbolic rows comes before '{node_id(g.nodes[first])}'"
    if demoted:
        c.entries = [(v, retarget and v is not source) for v, retarget in c.entries]
    c.source = source
    for v, retarget in c.entries:  # Shape(v) alone is the target that puts back a value as wide as v
        if not retarget and position.get(v.producer, -1) < first:
            c.whole.setdefault(dims(v)[-1], v)
    return None


def _set_rows_type(g, v, rows: tuple, width, like=None) -> None:
    """v is [rows, width], of the element type of `like` (default: its own);
    left untyped when that is not known."""
    elem = known_dtype(like if like is not None else v)
    if not elem:
        return
    m = math.prod(rows) if _static(rows) else None
    tp = helper.make_tensor_type_proto(elem, [m, width if isinstance(width, int) else None])
    g.set_value_type(v, tp.SerializeToString())


def _int64s(g, values, hint: str):
    return g.add_initializer(g.unique_name(hint), *raw_data(np.asarray(values, np.int64)))


def _node(g, op_type: str, inputs: list, hint: str, before, **attrs):
    name = g.unique_name(hint)
    n = g.add_node(op_type, inputs, [name], name=name, before=before)
    for key, value in attrs.items():
        n.set_attribute(key, value)
    return n.outputs[0]


def _rewrite(c: _Component, g, opset: int) -> None:
    """Rewrites a planned component (adding the c.added nodes planned)."""
    position = {n: i for i, n in enumerate(g.nodes)}

    def earliest(nodes):
        return min(nodes, key=position.__getitem__, default=None)

    for v, retarget in c.entries:
        width = dims(v)[-1]
        if retarget:
            g.set_input(v.producer, 1, _int64s(g, [-1, width], f"{v.name}_rows_shape"))
            _set_rows_type(g, v, c.rows, width)
            continue
        readers = [(u, i) for u, i in v.uses if u in c.members]
        flat = _node(g, "Reshape", [v, _int64s(g, [-1, width], f"{v.name}_rows_shape")], f"{v.name}_rows",
                     earliest(u for u, _ in readers))
        _set_rows_type(g, flat, c.rows, width, like=v)
        for u, i in readers:
            g.set_input(u, i, flat)

    made: dict = {}
    first_reader = earliest(u for _, reshapes, others, _ in c.exits for u, _ in [*reshapes, *others])

    def row_shape(lead: int, rest: tuple, hint: str):
        """A 1-D int64 value: the first `lead` dims of the rows, then `rest`."""
        if _static(c.rows) or lead == 0:
            return _int64s(g, [*c.rows[:lead], *rest], hint)
        if lead == len(c.rows) and len(rest) == 1 and rest[0] in c.whole:
            like = c.whole[rest[0]]
            if like not in made:
                made[like] = _node(g, "Shape", [like], f"{like.name}_shape", first_reader)
            return made[like]
        if (lead, rest) not in made:
            if "rows" not in made and opset >= 15:
                made["rows"] = _node(g, "Shape", [c.source], f"{c.source.name}_rows", first_reader,
                                     start=0, end=len(c.rows))
            elif "rows" not in made:
                whole = _node(g, "Shape", [c.source], f"{c.source.name}_shape", first_reader)
                made["rows"] = _node(g, "Slice", [whole, _int64s(g, [0], f"{hint}_start"),
                                                  _int64s(g, [len(c.rows)], f"{hint}_end")],
                                     f"{c.source.name}_rows", first_reader)
            lead_dims = made["rows"]
            if lead < len(c.rows):
                lead_dims = _node(g, "Slice", [lead_dims, _int64s(g, [0], f"{hint}_start"),
                                               _int64s(g, [lead], f"{hint}_end")], f"{hint}_lead", first_reader)
            made[(lead, rest)] = _node(g, "Concat", [lead_dims, _int64s(g, list(rest), f"{hint}_rest")], hint,
                                       first_reader, axis=0)
        return made[(lead, rest)]

    # Before the region's values are restated on rows: a put-back value takes
    # over its value's name and stated (full) type.
    for w, reshapes, others, is_output in c.exits:
        for u, target in reshapes:
            g.set_input(u, 1, row_shape(*target, f"{w.name}_target") if isinstance(target, tuple)
                        else _int64s(g, target, f"{w.name}_target"))
        if others or is_output:
            back = _node(g, "Reshape", [w, row_shape(len(c.rows), (dims(w)[-1],), f"{w.name}_shape")],
                         f"{w.name}_unrows", earliest(u for u, _ in others))
            rows_readers = {*c.members, *(u for u, _ in reshapes), back.producer}
            kept = [(u, i) for u, i in w.uses if u in rows_readers]
            take_over(g, w, back, old_suffix="_rows")
            for u, i in kept:
                g.set_input(u, i, w)

    for n in c.nodes:
        _flatten_node(g, n, len(c.rows) + 1)
        for v in n.outputs:  # the unread ones too (LayerNormalization's mean): their stated rank changes
            d = dims(v) if v is not None else None
            if d is not None and len(d) == len(c.rows) + 1:
                _set_rows_type(g, v, c.rows, d[-1])

    for mm, add, bias_index in c.gemms:
        g.replace_node(add, "Gemm", [mm.inputs[0], mm.inputs[1], add.inputs[bias_index]], name=add.name)
        g.remove_node(mm)


def _flatten_node(g, n, rank: int) -> None:
    """Axis attributes and broadcast constants of a node now on [rows, width]."""
    if n.op_type in _LAST_AXIS and n.attributes.get("axis") == rank - 1:
        n.set_attribute("axis", -1)
    elif n.op_type in _REDUCE:
        if "axes" in n.attributes:
            n.set_attribute("axes", [-1])
        elif len(n.inputs) > 1 and n.inputs[1] is not None:
            g.set_input(n, 1, _int64s(g, [-1], f"{node_id(n)}_axes"))
    elif _elementwise(n):
        for i, v in enumerate(n.inputs):
            d = dims(v) if v is not None else None
            if d is not None and len(d) > 2 and v.initializer is not None and not v.is_graph_input:
                flat = np.asarray(v.initializer.numpy()).reshape(d[-1:])
                g.set_input(n, i, g.add_initializer(g.unique_name(f"{v.name}_row"), *raw_data(flat)))
