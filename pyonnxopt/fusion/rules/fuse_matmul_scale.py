"""fuse_matmul_scale: a constant scale (Mul, or Div by a constant) of a
MatMul's or Gemm's product becomes part of its weight (and bias), also
where the product is reshaped or transposed on its way to the scale:

    y = Mul(T(MatMul(x, W)), k)          ->  y = T(MatMul(x, W * k))
    y = Mul(T(Add(MatMul(x, W), b)), k)  ->  y = T(Add(MatMul(x, W * k), b * k))
    y = Mul(T(Gemm(a, B, C)), k)         ->  y = T(Gemm(a, B, C)), alpha and beta times k

with T up to three Reshape, Transpose, Flatten, Squeeze or Unsqueeze nodes,
which move elements without computing on them, so that one number commutes
with them. Torch's scaled_dot_product_attention exports scale the query
and the key by sqrt(1/sqrt(d)) each, after the head split (Q and K:
MatMul -> Reshape -> Transpose -> Mul): two elementwise passes per layer
that the projections' weights take at no cost. Without T, k may also be
one number per output column (W's columns, the product's last axis).

It runs once no other fusion fires: Attention and the --target ort ops read
their scale from such a Mul. A GELU's final * 0.5 is left alone: its Mul
reads the GELU's product, not the MatMul's, and onnxruntime fuses the GELU
by that Mul at its default level.

Refuses when:
 1. the weight (or the bias) is not a constant, or a product, Add or moved
    value has another reader or is a graph output (pattern);
 2. the weight is not float16, float or double, or k's element type is not
    the product's;
 3. k is not one number, or (without T) one per output column; or k has more
    axes than the value it scales (the broadcast would change its shape);
 4. k is not finite, or a Div's k is 0;
 5. the scaled weight or bias overflows or flushes a non-zero element to 0
    in its element type.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from pyonnxopt import fold
from pyonnxopt.fusion.pattern import Const, Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule, known_shape
from pyonnxopt.fusion.rules._channels import attribute, type_refusal

# Ops that only move or relabel elements: a scale by one number commutes with them.
MOVERS = "Reshape|Transpose|Flatten|Squeeze|Unsqueeze"
MAX_MOVERS = 3


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
        ]
        variants = []
        for product in products:
            moved = product
            for i in range(MAX_MOVERS + 1):
                variants.append(Op("Mul", moved, Const("k"), name="scale", commutative=True))
                variants.append(Op("Div", moved, Const("k"), name="scale"))
                moved = Op(MOVERS, moved, Var(f"how{i}", optional=True), name=f"move{i}")
        return variants

    def check(self, m: Match) -> Optional[str]:
        gemm = m["product"].op_type == "Gemm"
        dtype = m.dtype("bmat" if gemm else "w")
        why = type_refusal(dtype)
        if why:
            return why
        if m.dtype("k") != dtype:
            return "the constant's element type is not the product's"
        k = m.array("k")
        if not np.all(np.isfinite(k)):
            return f"'{m['k'].name}' is not finite"
        if m.root.op_type == "Div" and np.any(k == 0):
            return f"'{m['k'].name}' has a 0: the Div is not a scale"
        return _shape_refusal(m, k, gemm)

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        product = m["product"]
        k = np.asarray(m.array("k"), np.float64)
        k = 1.0 / k if m.root.op_type == "Div" else k
        if product.op_type == "Gemm":
            k = float(k.reshape(-1)[0])
            new = edit.node("Gemm", [m["a"], m["bmat"], m["c"]], hint=product.name or "gemm_scaled", before=product)
            edit.added[-1].copy_attributes(product)
            edit.added[-1].set_attribute("alpha", float(attribute(product, "alpha", 1.0)) * k)
            if m["c"] is not None:
                edit.added[-1].set_attribute("beta", float(attribute(product, "beta", 1.0)) * k)
            old = product.outputs[0]
        else:
            w = m.array("w")
            scaled_w = _scaled(w, k)
            if isinstance(scaled_w, str):
                return f"'{m['w'].name}': {scaled_w}"
            inputs = [m["x"], edit.constant(scaled_w, f"{m['w'].name}_scaled")]
            if "bias" in m:
                scaled_b = _scaled(m.array("b"), k)
                if isinstance(scaled_b, str):
                    return f"'{m['b'].name}': {scaled_b}"
            new = edit.node("MatMul", inputs, hint=product.name or "matmul_scaled", before=product)
            old = product.outputs[0]
            if "bias" in m:
                b = edit.constant(scaled_b, f"{m['b'].name}_scaled")
                new = edit.node("Add", [new[0], b], hint=m["bias"].name or "bias_scaled", before=product)
                old = m["bias"].outputs[0]
        edit.replace_value(old, new[0])
        return edit.bypass_root(_scaled_value(m))


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
    """The value the root scales (its input that is not k)."""
    return next(v for v in m.root.inputs if v.name != m["k"].name)


def _scaled(a: np.ndarray, k: np.ndarray):
    """a * k (k one number, or one per column of a's last axis) in a's
    element type, or why not: an element it overflows or flushes to 0."""
    with np.errstate(over="ignore"):  # an overflow is a refusal, below
        if a.ndim == 0 or (k.size > 1 and a.shape[-1] != k.size):
            out = (a.astype(np.float64) * k).astype(a.dtype)  # a bias that broadcasts along the columns
        else:
            out = fold.scale_channels(a, np.broadcast_to(k.reshape(-1), (a.shape[-1],)), axis=a.ndim - 1)
    finite = np.isfinite(a)
    if not np.all(np.isfinite(out)[finite]):
        return "scaling overflows its element type"
    if np.any((out == 0) & (a != 0)):
        return "scaling flushes a non-zero element to 0 in its element type"
    return out
