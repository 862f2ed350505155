"""fuse_layer_normalization: the decomposed layer norm -> LayerNormalization.

    mean = ReduceMean(x, axes)          d = Sub(x, mean)
    var  = ReduceMean(Pow(d, 2), axes)  (or Mul(d, d))
    n    = Div(d, Sqrt(Add(var, eps)))  (or Mul(d, Reciprocal(Sqrt(...))))
    y    = Add(Mul(n, scale), bias)     (scale and bias each optional)
->  y = LayerNormalization(x, scale, bias, axis=-len(axes), epsilon=eps)

tf2onnx writes Keras's LayerNormalization folded into one scale w and one
shift, with GlobalAveragePool as the mean of a 3-d x's last axis:

    mean = GlobalAveragePool(x)         (or ReduceMean over the last axes)
    var  = GlobalAveragePool(Mul(d, d)) with d = Sub(x, mean)
    w    = Mul(Reciprocal(Sqrt(Add(var, eps))), gamma)
    y    = Add(Mul(x, w), Add(Mul(Neg(mean), w), beta))
->  y = LayerNormalization(x, gamma, beta, axis=-k, epsilon=eps)

(x*w - mean*w + beta is (x - mean)/std * gamma + beta; a GlobalAveragePool
averages all axes after the second: k = rank - 2.)

Flax (and jax2onnx's decomposition of it) takes the variance from the
second moment, clamped at 0 against rounding:

    var  = ReduceMean(Mul(x, x), axes) - Mul(mean, mean)   (or Pow(., 2))
    var  = Max(var, 0)                  (or Clip(var, 0[, inf]), Relu, none)
    n    = Div(Sub(x, mean), Sqrt(Add(var, eps)))   ... as above

E[x^2] - E[x]^2 is E[(x - mean)^2], so this too is a LayerNormalization.

Both targets: opset 17 and later. onnxruntime also runs a default-domain
LayerNormalization below 17, but onnx.checker rejects it, so we do not emit
it; nor com.microsoft SkipLayerNormalization, with or without a residual
Add, for --target ort (slower than what it replaces: targets.py).

Refuses when:
 1. the opset is below 17;
 2. the two ReduceMeans reduce different axes, or not the trailing ones
    (or axes that need x's rank, unknown);
 3. eps is not a scalar float constant; a Pow exponent is not 2; the
    variance's Clip has a finite maximum;
 4. scale/bias vary outside the normalized axes, would broadcast x, or
    must be materialized (absent scale, or a broadcast one) while x's
    normalized dims are unknown;
 5. onnxruntime's CPU provider has no LayerNormalization for the type.
"""

from __future__ import annotations

import itertools
from typing import Optional

import numpy as np

from pyonnxopt.fusion import Const, Op, Rule, Var
from pyonnxopt.fusion.rule import Edit, Match
from pyonnxopt.fusion.rules._normalization import affine_input, check_affine, epsilon, reduce_mean, trailing_axes
from pyonnxopt.fusion.targets import dtype_reason, opset_reason
from pyonnxopt.fusion.values import constant_reason


def _layer_norm(opset: int, x, square_by_pow: bool, div: bool, scale: bool, bias: bool) -> Op:
    d = Op("Sub", x, reduce_mean(x, "mean", opset), name="centered")
    sq = Op("Pow", d, Const("two"), name="square") if square_by_pow else Op("Mul", d, d, name="square")
    return _normalize(d, reduce_mean(sq, "variance", opset), div, scale, bias)


def _second_moment_variance(opset: int, x, mean, square_by_pow: bool, mean_by_pow: bool, clamp: str):
    """Flax's variance: E[x^2] - E[x]^2, clamped at 0 (or not)."""
    sq = Op("Pow", x, Const("two"), name="square") if square_by_pow else Op("Mul", x, x, name="square")
    mean_sq = Op("Pow", mean, Const("two_mean"), name="mean_square") if mean_by_pow else Op(
        "Mul", mean, mean, name="mean_square")
    var = Op("Sub", reduce_mean(sq, "second_moment", opset), mean_sq, name="variance_raw")
    floor = Const("floor", value=0.0)
    if clamp == "Max":
        return Op("Max", var, floor, name="clamped", commutative=True)
    if clamp == "Clip":
        return Op("Clip", var, floor, Const("ceiling", optional=True), name="clamped")
    if clamp == "Relu":
        return Op("Relu", var, name="clamped")
    return var


def _fast_layer_norm(opset: int, x, square_by_pow: bool, mean_by_pow: bool, clamp: str, div: bool,
                     scale: bool, bias: bool) -> Op:
    mean = reduce_mean(x, "mean", opset)
    var = _second_moment_variance(opset, x, mean, square_by_pow, mean_by_pow, clamp)
    return _normalize(Op("Sub", x, mean, name="centered"), var, div, scale, bias)


def _normalize(d, var, div: bool, scale: bool, bias: bool) -> Op:
    """(d / sqrt(var + eps)) [* scale] [+ bias]"""
    std = Op("Sqrt", Op("Add", var, Const("eps"), name="plus_eps", commutative=True), name="std")
    if div:
        out = Op("Div", d, std, name="normed")
    else:
        out = Op("Mul", d, Op("Reciprocal", std, name="inv_std"), name="normed", commutative=True)
    if scale:
        out = Op("Mul", out, Const("scale"), name="scaled", commutative=True)
    if bias:
        out = Op("Add", out, Const("bias"), name="shifted", commutative=True)
    return out


def _mean(x, name: str, opset: int, pool: bool) -> Op:
    return Op("GlobalAveragePool", x, name=name) if pool else reduce_mean(x, name, opset)


def _folded_layer_norm(opset: int, x, pool: bool) -> Op:
    """tf2onnx's Keras LayerNormalization: one scale w, one shift."""
    mean = _mean(x, "mean", opset, pool)
    d = Op("Sub", x, mean, name="centered")
    var = _mean(Op("Mul", d, d, name="square"), "variance", opset, pool)
    inv = Op("Reciprocal", Op("Sqrt", Op("Add", var, Const("eps"), name="plus_eps", commutative=True), name="std"),
             name="inv_std")
    w = Op("Mul", inv, Const("scale"), name="scaled", commutative=True)
    shift = Op("Add", Op("Mul", Op("Neg", mean, name="neg_mean"), w, name="mean_scaled", commutative=True),
               Const("bias"), name="shift", commutative=True)
    return Op("Add", Op("Mul", x, w, name="x_scaled", commutative=True), shift, name="shifted", commutative=True)


class FuseLayerNormalization(Rule):
    name = "fuse_layer_normalization"
    description = "ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div [* scale + bias] -> LayerNormalization (opset 17)"
    # A scaled division (GELU's x * 0.5 * (1 + erf(x / sqrt 2)), any x / c * w)
    # matches the first two ops; a LayerNorm near miss has its centring too.
    near_miss_min_ops = 3

    def pattern(self, opset: int) -> list:
        # Largest first: scale and bias join the fused op whenever they can.
        tails = [(True, True), (True, False), (False, True), (False, False)]
        two_ways = (True, False)
        return [_layer_norm(opset, Var("x"), by_pow, div, scale, bias)
                for (scale, bias), by_pow, div in itertools.product(tails, two_ways, two_ways)] + [
                _folded_layer_norm(opset, Var("x"), pool) for pool in two_ways] + [
                _fast_layer_norm(opset, Var("x"), sq_pow, mean_pow, clamp, div, scale, bias)
                for (scale, bias), clamp, sq_pow, mean_pow, div in itertools.product(
                    tails, ("Max", "Clip", "Relu", ""), two_ways, two_ways, two_ways)]

    def check(self, m: Match) -> Optional[str]:
        why = opset_reason("LayerNormalization", m.opset)
        if why:
            return why
        k = _normalized_axes(m)
        if isinstance(k, str):
            return k
        eps = epsilon(m)
        if isinstance(eps, str):
            return eps
        for two in ("two", "two_mean"):
            if two in m:
                why = constant_reason(f"the exponent '{m[two].name}'", m.array(two), 2.0, 0)
                if why:
                    return why
        if "ceiling" in m and m["ceiling"] is not None and not np.all(m.array("ceiling") == np.inf):
            return f"the variance's Clip '{m['clamped'].name}' has a finite maximum"
        return check_affine(m, k, "scale", "bias") or dtype_reason("", "LayerNormalization",
                                                                    m.dtype("x") or m.dtype("eps"))

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        k = _normalized_axes(m)
        inputs = [m["x"], affine_input(m, edit, "scale", k, 1.0)]
        bias = affine_input(m, edit, "bias", k, None)
        if bias is not None:
            inputs.append(bias)
        edit.replace_root("LayerNormalization", inputs, {"axis": -k, "epsilon": epsilon(m)})
        return None


def _normalized_axes(m: Match):
    """How many trailing axes the means reduce, or why that is not so: a
    GlobalAveragePool all after the second."""
    shape = m.shape("x")
    rank = None if shape is None else len(shape)
    if m["mean"].op_type != "GlobalAveragePool":
        return trailing_axes(m, rank, "mean", "second_moment" if "second_moment" in m else "variance")
    if rank is None or rank < 3:
        return f"x's rank {rank} is not known to be 3 or more (GlobalAveragePool averages the axes after the second)"
    return rank - 2
