"""fuse_matmul_scale: a constant scale (Mul, or Div by a constant) of a
MatMul's or Gemm's product becomes part of its weight (and bias), also
where the product is reshaped or transposed on its way to the scale:

    y = Mul(T(MatMul(x, W)), k)          ->  y = T(MatMul(x, W * k))
    y = Mul(T(Add(MatMul(x, W), b)), k)  ->  y = T(Add(MatMul(x, W * k), b * k))
    (the Add may also read the product through a Reshape, k then one number)
    y = Mul(T(Gemm(a, B, C)), k)         ->  y = T(Gemm(a, B, C)), alpha and beta times k

with T up to three Reshape, Transpose, Flatten, Squeeze or Unsqueeze nodes,
which move elements without computing on them, so that one number commutes
with them. Torch's scaled_dot_product_attention exports scale the query
and the key by sqrt(1/sqrt(d)) each, after the head split (Q and K:
MatMul -> Reshape -> Transpose -> Mul): two elementwise passes per layer
that the projections' weights take at no cost. Without T, k may also be
one number per output column (W's columns, the product's last axis).

A packed projection (GPT-2's c_attn: q, k and v side by side) is cut by a
Split along its columns, directly or after a Reshape that keeps them as
the last axis, before the head split; one part's scale goes into that
part's columns only (the other parts read the same values as before):

    y = Mul(T(Split(P)[i]), k)  ->  y = T(Split(P')[i]),  P' = P with the
                                     columns of part i scaled by k

torchvision's attention regroups the packed columns instead ([rows, 3E] ->
[.., 3, E], Swin's then a Transpose bringing the 3 first) and picks q, k
and v with Gathers; the columns a Gather picks take the scale, where every
other reader of what it reads is a Gather of other entries.

A scale of the other operand of a MatMul that reads such a chain moves
into the chain's weights too: GPT-2's keys are scaled after the Concat with
the past, a pass over the whole cache at every generated token, while
MatMul(q, k * s) = MatMul(q * s, k) and q's part of the projection takes s:

    y = MatMul(T(P), Mul(b, k))  ->  y = MatMul(T(P'), b)

and so does a scale of their product, the attention scores' 1/sqrt(d) as
hand-written attention and jax2onnx write it (a pass over batch x heads x
length^2 elements):

    y = Mul(MatMul(T(P), b), k)  ->  y = MatMul(T(P'), b)   (either operand)

It runs once no other fusion fires: Attention and the --target ort ops read
their scale from such a Mul. A GELU's final * 0.5 is left alone: its Mul
reads the GELU's product, not the MatMul's, and onnxruntime fuses the GELU
by that Mul at its default level.

Refuses when:
 1. the weight (or the bias) is not a constant, or a product, Add or moved
    value has another reader or is a graph output (pattern);
 2. the weight is not float16, float or double, or k's element type is not
    the product's;
 3. k is not one number, or (without T, and not moved to another operand or
    out of a product with one) one per output column; or k has more
    axes than the value it scales (the broadcast would change its shape);
 4. k is not finite, or a Div's k is 0;
 5. the scaled weight or bias overflows or flushes a non-zero element to 0
    in its element type;
 6. after a Split: the part has another reader or is a graph output; the
    Split is not along the product's columns, or a Reshape before it
    regroups them; its sizes are not constant; a Gemm's B or C is not a
    constant, or its C does not broadcast along the columns;
 7. after a Gather: the Reshape does not split the columns into trailing
    axes, or the Gather picks along another axis; what it reads has another
    reader than Gathers of other entries along that axis, or is a graph
    output.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from pyonnxopt import fold
from pyonnxopt.fusion.pattern import Const, Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule, known_shape
from pyonnxopt.fusion.rules._channels import attribute, bias_refusal, channels_of, type_refusal
from pyonnxopt.fusion.values import constant_ints

# Ops that only move or relabel elements: a scale by one number commutes with them.
MOVERS = "Reshape|Transpose|Flatten|Squeeze|Unsqueeze"
MAX_MOVERS = 3
MAX_PARTS = 3  # a packed projection's q, k and v


class FuseMatmulScale(Rule):
    name = "fuse_matmul_scale"
    description = "a constant scale of a MatMul/Gemm product, through Reshapes and Transposes -> its weight (bias)"
    after_fusions = True  # Attention (and --target ort's ops) take their scale from the Mul first
    min_opset = 7  # Mul and Add broadcast by attribute before
    # Every Mul and Div starts the pattern: one that reads no MatMul is no "almost".
    pattern_near_misses = False

    def pattern(self, opset: int) -> list:
        products = [
            Op("MatMul", Var("x"), Const("w"), name="product"),
            Op("Add", Op("MatMul", Var("x"), Const("w"), name="product"), Const("b"), name="bias", commutative=True),
            Op("Gemm", Var("a"), Var("bmat"), Var("c", optional=True), name="product"),
            # the bias added after a Reshape (Keras's EinsumDense through tf2onnx: [B, S, H, d] + b[H, d])
            Op("Add", Op("Reshape", Op("MatMul", Var("x"), Const("w"), name="product"), Var("pre_shape"), name="pre"),
               Const("b"), name="bias", commutative=True),
        ]
        variants = []
        for product in products:
            variants += _scales(product)
        # A part of a packed projection: Split [after a Reshape] along the columns.
        packed = [products[0], products[1],
                  Op("Gemm", Var("a"), Const("w"), Const("c", optional=True), name="product")]
        for product in packed:
            for source in (product, Op("Reshape", product, Var("regroup_shape"), name="regroup")):
                for i in range(MAX_PARTS):
                    part = Op("Split", source, Var("sizes", optional=True), name="part", output=i, exclusive=False)
                    variants += _scales(part)
            # ... or a Gather of the columns regrouped as [.., 3, E] (torchvision's attention)
            regroup = Op("Reshape", product, Var("regroup_shape"), name="regroup", exclusive=False)
            ordered = Op("Transpose", Op("Reshape", product, Var("regroup_shape"), name="regroup"), name="order",
                         exclusive=False)
            for source in (regroup, ordered):
                variants += _scales(Op("Gather", source, Const("index"), name="pick"))
        return variants

    def check(self, m: Match) -> Optional[str]:
        gemm = m["product"].op_type == "Gemm"
        dtype = m.dtype("bmat" if "bmat" in m else "w")
        why = type_refusal(dtype)
        if why:
            return why
        if m.dtype("k") != dtype:
            return "the constant's element type is not the product's"
        k = m.array("k")
        if not np.all(np.isfinite(k)):
            return f"'{m['k'].name}' is not finite"
        if m["scale"].op_type == "Div" and np.any(k == 0):
            return f"'{m['k'].name}' has a 0: the Div is not a scale"
        if "pre" in m and k.size != 1:
            return f"the constant's shape {list(k.shape)} is not one number after the Reshape before the bias"
        if ("scores" in m or "pair" in m) and k.size != 1:
            return f"the constant's shape {list(k.shape)} is not one number: it cannot move to the other operand"
        if "part" in m or "pick" in m:
            columns = _scaled_columns(m)
            if isinstance(columns, str):
                return columns
            if k.size != 1:
                cut = m["pick" if "pick" in m else "part"].op_type
                return f"the constant's shape {list(k.shape)} is not one number after a {cut}"
        return _shape_refusal(m, k, gemm)

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        product = m["product"]
        k = np.asarray(m.array("k"), np.float64)
        k = 1.0 / k if m["scale"].op_type == "Div" else k
        if "part" in m or "pick" in m:  # only the columns the part holds
            k = np.where(_scaled_columns(m), k.reshape(-1)[0], 1.0)
        if "bmat" in m:  # a Gemm by any B: one number goes into alpha and beta
            new = edit.node("Gemm", [m["a"], m["bmat"], m["c"]], hint=product.name or "gemm_scaled", before=product)
            scale = float(k.reshape(-1)[0])
            edit.added[-1].copy_attributes(product)
            edit.added[-1].set_attribute("alpha", float(attribute(product, "alpha", 1.0)) * scale)
            if m["c"] is not None:
                edit.added[-1].set_attribute("beta", float(attribute(product, "beta", 1.0)) * scale)
            old = product.outputs[0]
        else:
            made = _scaled_product(m, edit, k)
            if isinstance(made, str):
                return made
            new, old = made
        edit.replace_value(old, new[0])
        if "scores" in m:  # the MatMul reads the other operand unscaled
            edit.replace_root("MatMul", [m.root.inputs[0], _scaled_value(m)], copy_attrs_from=m.root)
            return None
        return edit.bypass_root(_scaled_value(m))


def _scaled_product(m: Match, edit: Edit, k: np.ndarray):
    """(new outputs, old value): the product remade with its constant weight
    (and bias: the Add's, or a Gemm's C) scaled by k along its columns; or
    why not, having changed nothing."""
    product, w = m["product"], m.array("w")
    # A packed projection's Gemm (its weight checked by _scaled_columns): the columns are on transB's axis.
    scaled = {"w": _scaled(w, k, axis=channels_of(product, w).weight_axis if product.op_type == "Gemm" else -1)}
    bias = "b" if "bias" in m else "c" if "c" in m and m["c"] is not None else None
    if bias is not None:
        scaled[bias] = _scaled(m.array(bias), k)
    for name, array in scaled.items():
        if isinstance(array, str):
            return f"'{m[name].name}': {array}"
    made = {name: edit.constant(array, f"{m[name].name}_scaled") for name, array in scaled.items()}
    hint = product.name or "scaled"
    if product.op_type == "Gemm":  # a packed projection's
        new = edit.node("Gemm", [m["a"], made["w"], made.get("c")], hint=hint, before=product)
        edit.added[-1].copy_attributes(product)
        return new, product.outputs[0]
    new = edit.node("MatMul", [m["x"], made["w"]], hint=hint, before=product)
    if "bias" not in m:
        return new, product.outputs[0]
    if "pre" in m:
        new = edit.node("Reshape", [new[0], m["pre_shape"]], hint=m["pre"].name or hint, before=product)
        edit.added[-1].copy_attributes(m["pre"])
    return edit.node("Add", [new[0], made["b"]], hint=m["bias"].name or hint, before=product), m["bias"].outputs[0]


def _scales(value: Op) -> list:
    """Mul and Div of `value` by a constant after 0 to MAX_MOVERS movers, a
    MatMul of the moved value by a Mul or Div of another value, and a Mul or
    Div of the moved value's MatMul with another value."""
    variants = []
    for i in range(MAX_MOVERS + 1):
        variants.append(Op("Mul", value, Const("k"), name="scale", commutative=True))
        variants.append(Op("Div", value, Const("k"), name="scale"))
        for other in (Op("Mul", Var("other"), Const("k"), name="scale", commutative=True),
                      Op("Div", Var("other"), Const("k"), name="scale")):
            variants.append(Op("MatMul", value, other, name="scores"))
        for pair in (Op("MatMul", value, Var("other"), name="pair"), Op("MatMul", Var("other"), value, name="pair")):
            variants.append(Op("Mul", pair, Const("k"), name="scale", commutative=True))
            variants.append(Op("Div", pair, Const("k"), name="scale"))
        value = Op(MOVERS, value, Var(f"how{i}", optional=True), name=f"move{i}")
    return variants


def _scaled_columns(m: Match):
    """A bool per column of the product: those the Split's part or the
    Gather takes (the only ones the scale reaches), or why they are not
    known."""
    ch = channels_of(m["product"], m.array("w"))
    if isinstance(ch, str):
        return ch
    columns = ch.count
    why = bias_refusal(m["product"], list(m.array("c").shape), ch) if "c" in m and m["c"] is not None else None
    if why:
        return why
    if (m.shape("bias" if "bias" in m else "product") or [None])[-1] != columns:
        return "the product's columns are not its last axis"
    return _part_columns(m, columns) if "part" in m else _picked_columns(m, columns)


def _part_columns(m: Match, columns: int):
    """The columns the matched Split output holds."""
    part = m["part"]
    # The node reading the part: the first mover, else the MatMul whose
    # product is scaled (the root is then the scale), else the root.
    reader = m["move0"] if "move0" in m else m["pair"] if "pair" in m else m.root
    read = {v.name for v in reader.inputs if v is not None}
    index = next(i for i, v in enumerate(part.outputs) if v is not None and v.name in read)
    if len(part.outputs[index].uses) != 1 or part.outputs[index].is_graph_output:
        return "the Split's part has another reader or is a graph output"
    source = m.shape("regroup") if "regroup" in m else m.shape("bias" if "bias" in m else "product")
    if not source or source[-1] != columns:
        return "the Split's input does not hold the product's columns on its last axis"
    axis = attribute(part, "axis", 0)
    if axis not in (-1, len(source) - 1):
        return f"the Split is along axis {axis}, not the product's columns"
    sizes = _split_sizes(m, part, columns)
    if isinstance(sizes, str):
        return sizes
    taken = np.zeros(columns, bool)
    taken[sum(sizes[:index]):sum(sizes[:index + 1])] = True
    return taken


def _picked_columns(m: Match, columns: int):
    """The columns the matched Gather takes: the Reshape before it splits
    the columns into trailing axes ([rows, 3E] -> [.., 3, E]), [a Transpose
    moves them,] and the Gather picks along one of those axes. Every other
    reader of what the Gather reads must be a Gather along the same axis
    picking other entries (q, k and v), or the scale would reach it too."""
    regroup, pick = m["regroup"], m["pick"]
    shape = m.shape("regroup")
    if shape is None:
        return "the Reshape before the Gather has an unknown shape"
    start, size = len(shape), 1  # the trailing axes shape[start:] hold exactly the columns
    while start > 0 and isinstance(shape[start - 1], int) and size < columns:
        start -= 1
        size *= shape[start]
    if size != columns:
        return f"the Reshape to {shape} does not split the {columns} columns into trailing axes"
    source = m["order"] if "order" in m else regroup
    rank, axis = len(shape), attribute(pick, "axis", 0)
    if not -rank <= axis < rank:
        return "the Gather's axis is out of range"
    axis %= rank
    moved = attribute(source, "perm", list(range(rank))[::-1]) if "order" in m else list(range(rank))
    if len(moved) != rank or moved[axis] < start:
        return "the Gather does not pick along the columns' axes"
    indices = _entries_taken(m.array("index"), shape[moved[axis]])
    for reader, _ in source.outputs[0].uses:
        if reader.outputs[0] is not None and reader.outputs[0].name == pick.outputs[0].name:
            continue  # the Gather itself
        other = _gathered(reader, source.outputs[0], axis, rank, shape[moved[axis]])
        if other is None or other & indices:
            return "what the Gather reads has a reader that is not a Gather of other entries"
    if source.outputs[0].is_graph_output:
        return "what the Gather reads is a graph output"
    grid = np.arange(columns).reshape(shape[start:])
    taken = np.zeros(columns, bool)
    taken[np.take(grid, sorted(indices), axis=moved[axis] - start).ravel()] = True
    return taken


def _entries_taken(index: np.ndarray, length: int) -> set:
    """The entries (0..length-1) a Gather's constant indices take."""
    return {int(i) % length for i in np.asarray(index).ravel()}


def _gathered(node, value, axis: int, rank: int, length: int):
    """The entries a reader takes when it is a Gather of `value` along
    `axis` by constant indices, else None."""
    if node.op_type != "Gather" or node.domain or node.inputs[0] is None or node.inputs[0].name != value.name:
        return None
    if attribute(node, "axis", 0) % rank != axis or len(node.inputs) < 2:
        return None
    ints = constant_ints(node.inputs[1])
    return None if ints is None else _entries_taken(np.asarray(ints), length)


def _split_sizes(m: Match, split, total: int):
    """The Split's part sizes, or why they are not known."""
    if "split" in split.attributes:
        sizes = list(split.attributes["split"])
    elif m["sizes"] is not None:
        sizes = constant_ints(m["sizes"])
        if sizes is None:
            return "the Split's sizes are not constant"
    else:  # equal parts; from opset 18 the last may be smaller
        n = len(split.outputs)
        step = -(-total // n)
        sizes = [step] * (n - 1) + [total - step * (n - 1)]
    if len(sizes) != len(split.outputs) or sum(sizes) != total or min(sizes) < 0:
        return f"the Split's sizes {sizes} do not cut the {total} columns"
    return sizes


def _shape_refusal(m: Match, k: np.ndarray, gemm: bool) -> Optional[str]:
    """None when k is one number (or, straight after a MatMul, one per
    output column) and does not broadcast the value it scales to more axes."""
    shape = known_shape(_scaled_value(m))
    if k.ndim and (shape is None or k.ndim > len(shape)):
        return (f"the constant's shape {list(k.shape)} has more axes than the scaled value's "
                f"({'unknown' if shape is None else len(shape)}): the broadcast could change its shape")
    if k.size == 1:
        return None
    columns = None if gemm or "move0" in m or m.array("w").ndim < 2 else m.array("w").shape[-1]
    if columns is None or any(d != 1 for d in k.shape[:-1]) or k.shape[-1] != columns:
        where = "after a Gemm" if gemm else "after a Reshape or Transpose" if "move0" in m else "here"
        return f"the constant's shape {list(k.shape)} is not one number (or one per output column) {where}"
    return None


def _scaled_value(m: Match):
    """The value the scale multiplies (its input that is not k)."""
    return next(v for v in m["scale"].inputs if v.name != m["k"].name)


def _scaled(a: np.ndarray, k: np.ndarray, axis: int = -1):
    """a * k (k one number, or one per column: along a's `axis`) in a's
    element type, or why not: an element it overflows or flushes to 0."""
    with np.errstate(over="ignore"):  # an overflow is a refusal, below
        if a.ndim == 0 or (k.size > 1 and a.shape[axis] != k.size):
            out = (a.astype(np.float64) * k).astype(a.dtype)  # a bias that broadcasts along the columns
        else:
            out = fold.scale_channels(a, np.broadcast_to(k.reshape(-1), (a.shape[axis],)), axis=axis % a.ndim)
    # Only a factor above 1 can overflow, only one below 1 flush: the big weights are read once more at most.
    # (A bias that broadcast along the columns has their shape now: compare it broadcast.)
    magnitude, a = np.abs(k), np.broadcast_to(a, out.shape)
    if magnitude.max() > 1 and not np.all(np.isfinite(out)[np.isfinite(a)]):
        return "scaling overflows its element type"
    if magnitude.min() < 1 and np.any((out == 0) & (a != 0)):
        return "scaling flushes a non-zero element to 0 in its element type"
    return out
