"""fuse_rms_normalization: the decomposed RMS norm (LLaMA, T5) -> RMSNormalization.

    ms = ReduceMean(Pow(x, 2), axes)             (or Mul(x, x))
    r  = Sqrt(Add(ms, eps))
    n  = Mul(x, Reciprocal(r))                   (or Mul(x, Div(1, r)), or Div(x, r))
    y  = Mul(n, scale)                           (scale optional)
->  y = RMSNormalization(x, scale, axis=-len(axes), epsilon=eps)   opset 23, both targets

--target ort below opset 23: onnxruntime's SimplifiedLayerNormalization is
registered only in the ONNX domain, which onnx.checker rejects, so the
plain norm stays; when x is a residual Add(input, skip), the two become
com.microsoft SkipSimplifiedLayerNormalization (the sum as its fourth
output when the next residual reads it, as in every pre-norm block).

Refuses when:
 1. target onnx and the opset is below 23; target ort below 23 and x is not
    an Add whose inputs provably fit onnxruntime's skip contract (see
    targets.fits_skip_contract), or the norm is not over the last axis alone;
 2. the ReduceMean's axes are not the trailing ones (or need x's rank, unknown);
 3. eps is not a scalar float constant; the exponent is not 2; the 1 of 1/r is not 1;
 4. scale varies outside the normalized axes or would broadcast x, or a
    Scale must be materialized while x's normalized dims are unknown;
 5. onnxruntime's CPU provider has no kernel for the element type.
"""

from __future__ import annotations

import itertools
from typing import Optional

from pyonnxopt.fusion import Const, Op, Rule
from pyonnxopt.fusion.rule import Edit, Match
from pyonnxopt.fusion.rules._normalization import (affine_input, check_affine, check_skip, emit_skip_norm, epsilon,
                                                  reduce_mean, residual, skip_order, skip_weight, trailing_axes)
from pyonnxopt.fusion.targets import SINCE, dtype_reason, opset_reason
from pyonnxopt.fusion.values import constant_reason

SKIP_OP = "SkipSimplifiedLayerNormalization"


def _rms_norm(opset: int, x, square_by_pow: bool, inverse: str, scale: bool) -> Op:
    sq = Op("Pow", x, Const("two"), name="square") if square_by_pow else Op("Mul", x, x, name="square")
    r = Op("Sqrt", Op("Add", reduce_mean(sq, "mean_square", opset), Const("eps"), name="plus_eps", commutative=True),
           name="rms")
    if inverse == "div":
        out = Op("Div", x, r, name="normed")
    else:
        inv = (Op("Reciprocal", r, name="inv_rms") if inverse == "reciprocal"
               else Op("Div", Const("one"), r, name="inv_rms"))
        out = Op("Mul", x, inv, name="normed", commutative=True)
    if scale:
        out = Op("Mul", out, Const("scale"), name="scaled", commutative=True)
    return out


class FuseRmsNormalization(Rule):
    name = "fuse_rms_normalization"
    description = ("Pow/ReduceMean/Add/Sqrt/Reciprocal/Mul [* scale] -> RMSNormalization (opset 23); "
                   "with a residual Add, com.microsoft SkipSimplifiedLayerNormalization (--target ort)")

    def pattern(self, opset: int) -> list:
        # Residual forms (only --target ort below 23 uses them) first: they fuse
        # one node more; the scaled forms before the bare ones.
        return [_rms_norm(opset, x, by_pow, inverse, scale) for x, scale, by_pow, inverse in itertools.product(
            residual(opset, SINCE["RMSNormalization"]), (True, False), (True, False), ("reciprocal", "one_over", "div"))]

    def check(self, m: Match) -> Optional[str]:
        skip = m.options.target == "ort" and m.opset < SINCE["RMSNormalization"]
        if "a" in m and not skip:
            return opset_reason("RMSNormalization", m.opset)  # as the plain form at the same root says
        shape = m.shape("x")
        k = trailing_axes(m, None if shape is None else len(shape), "mean_square")
        if isinstance(k, str):
            return k
        eps = epsilon(m)
        if isinstance(eps, str):
            return eps
        for name, want in (("two", 2.0), ("one", 1.0)):
            if name in m:
                why = constant_reason(f"'{m[name].name}'", m.array(name), want, 0)
                if why:
                    return why
        if skip:
            if "a" not in m:
                return (f"RMSNormalization needs opset 23; the model imports {m.opset} (onnxruntime's "
                        "SimplifiedLayerNormalization is in the ONNX domain, which onnx.checker rejects)")
            return check_skip(m, SKIP_OP, k, ("scale",))
        return (opset_reason("RMSNormalization", m.opset) or check_affine(m, k, "scale")
                or dtype_reason("", "RMSNormalization", m.dtype("x") or m.dtype("eps")))

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        if "a" in m:
            inp, skip = skip_order(m)
            inputs = [m[inp], m[skip], skip_weight(m, edit, "scale", 1.0)]
            emit_skip_norm(m, edit, SKIP_OP, inputs, epsilon(m), m["x"], m.root.outputs[0])
            return None
        shape = m.shape("x")
        k = trailing_axes(m, None if shape is None else len(shape), "mean_square")
        scale = affine_input(m, edit, "scale", k, 1.0)
        edit.replace_root("RMSNormalization", [m["x"], scale], {"axis": -k, "epsilon": epsilon(m)})
        return None
