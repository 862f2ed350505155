"""fuse_gemm_batchnorm: a BatchNormalization (inference) over the [N, C]
output of a Gemm or MatMul with a constant 2-D weight becomes part of the
weight and the bias.

    y = BatchNormalization(Gemm(a, W, C), scale, beta, mean, var)
 -> y = Gemm(a, W', C')       (alpha, transA, transB kept; beta = 1)
    y = BatchNormalization(MatMul(a, W), ...)
 -> y = Add(MatMul(a, W'), C')   (fuse_matmul_add_into_gemm may make it a Gemm)

    s  = scale / sqrt(var + epsilon)     per output column c
    W' = W * s along the output columns (axis 1; axis 0 with transB=1)
    C' = (beta_gemm * C - mean) * s + beta      (C absent: zeros)
computed by pyonnxopt.fold.

BatchNormalization normalizes axis 1; that is the weight's output axis
only when the product is 2-D [N, C], or when a 3-D (or higher) product's
rows go into it flattened (LeViT's Linear + BatchNorm1d, as TorchScript
writes it):

    y = BatchNormalization(Flatten(MatMul(a, W), axis=2), ...)     [B*S, C]
 -> y = Flatten(Add(MatMul(a, W'), C'), axis=2)
(or a Reshape to [rows, C]); the Reshape back to [B, S, C] after it then
meets the Flatten and both go (collapse_reshapes, eliminate_nop).

Refuses when:
1. the weight, C or a BatchNormalization parameter is not a constant, or the
   product has another reader or is a graph output (pattern);
2. BatchNormalization is in training mode or has spatial=0 (as
   fuse_conv_batchnorm);
3. the MatMul's output rank is unknown, or not 2 (axis 1 of a rank-3
   product is not its feature axis), unless its rows are flattened into
   [rows, C] (the flattened shape must be known);
4. the weight is not float16, float or double, or not 2-D;
5. Gemm's C varies along axis 0 (one bias per row, not per channel);
6. a BatchNormalization parameter is not one number per output column, or
   scale / sqrt(var + epsilon), mean or B is not finite;
7. the opset is below 7 (Add and Gemm broadcast by attribute there).
"""

from __future__ import annotations

from typing import Optional

from pyonnxopt import fold
from pyonnxopt.fusion.pattern import Const, Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.rules._batchnorm import batchnorm, batchnorm_refusal, epsilon, parameters
from pyonnxopt.fusion.rules._channels import (Channels, attribute, channel_vector, channels_of, per_channel_refusal,
                                              type_refusal)


class FuseGemmBatchnorm(Rule):
    name = "fuse_gemm_batchnorm"
    description = "fold an inference BatchNormalization over [N, C] into the Gemm/MatMul weight before it"
    min_opset = 7
    near_miss_min_ops = 1  # every BatchNormalization left unfused is worth a reason

    def pattern(self, opset: int) -> list:
        product = Op("Gemm|MatMul", Var("a"), Const("w"), Const("c", optional=True), name="product")
        rows = Op("Flatten|Reshape", Op("MatMul", Var("a"), Const("w"), name="product"),
                  Var("rows_shape", optional=True), name="rows")
        return [batchnorm(product, opset), batchnorm(rows, opset)]

    def check(self, m: Match) -> Optional[str]:
        why = type_refusal(m.dtype("w"))
        if why:
            return why
        if "rows" in m:
            why = _rows_refusal(m)
            if why:
                return why
        elif m["product"].op_type == "MatMul":
            why = _rank_refusal(m)
            if why:
                return why
        ch = channels_of(m["product"], m.array("w"))
        if isinstance(ch, str):
            return ch
        if _bias(m) is not None:
            why = per_channel_refusal(list(m.array("c").shape), ch)
            if why:
                return f"Gemm's C: {why}"
        return batchnorm_refusal(m, ch.count)

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        product = m["product"]
        w = m.array("w")
        ch: Channels = channels_of(product, w)
        bias = None
        if _bias(m) is not None:
            bias = channel_vector(m.array("c"), ch.count) * float(attribute(product, "beta", 1.0))
        new_w, new_b = fold.fold_batchnorm(w, bias, *parameters(m), epsilon(m), axis=ch.weight_axis)
        w_value = edit.constant(new_w, f"{m['w'].name}_bn")
        b_value = edit.constant(new_b, f"{m['c'].name}_bn" if _bias(m) is not None else f"{m['w'].name}_bn_bias")
        if product.op_type == "Gemm":
            edit.replace_root("Gemm", [m["a"], w_value, b_value], {"beta": 1.0}, copy_attrs_from=product)
        elif "rows" in m:
            (y,) = edit.node("MatMul", [m["a"], w_value], hint=product.name or "matmul_bn")
            (z,) = edit.node("Add", [y, b_value], hint=product.name or "matmul_bn")
            rows = m["rows"]
            edit.replace_root(rows.op_type, [z, *rows.inputs[1:]], copy_attrs_from=rows)
        else:
            (y,) = edit.node("MatMul", [m["a"], w_value], hint=product.name or "matmul_bn")
            edit.replace_root("Add", [y, b_value])
        return None


def _bias(m: Match):
    """Gemm's C, when the product has one (the flattened variant has none)."""
    return m["c"] if "c" in m else None


def _rows_refusal(m: Match) -> Optional[str]:
    """None when the flattened product is [rows, C] with C the MatMul's columns."""
    product, rows = m.shape("product"), m.shape("rows")
    if product is None or rows is None:
        return "the MatMul's or its flattened rows' shape is unknown"
    if len(product) < 3 or len(rows) != 2 or not isinstance(product[-1], int) or rows[-1] != product[-1]:
        return f"the MatMul output {product} does not go into BatchNormalization as its rows ({rows})"
    return None


def _rank_refusal(m: Match) -> Optional[str]:
    shape, a = m.shape("product"), m.shape("a")
    # With a 2-D weight, MatMul's output has a's rank (a vector a: rank 1).
    rank = len(shape) if shape is not None else max(len(a), 1) if a is not None else None
    if rank is None:
        return "the MatMul output's rank is unknown (BatchNormalization's axis 1 must be its feature axis)"
    if rank != 2:
        return f"the MatMul output has rank {rank}: BatchNormalization's axis 1 is not its feature axis"
    return None
