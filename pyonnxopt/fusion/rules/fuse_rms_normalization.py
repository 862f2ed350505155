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

from pyonnxopt.fusion import Const, Op, Rule, Var
from pyonnxopt.fusion.rule import Edit, Match
from pyonnxopt.fusion.rules._normalization import affine_input, check_affine, epsilon, reduce_mean, trailing_axes
from pyonnxopt.fusion.targets import MS_DOMAIN, SINCE, dtype_reason, fits_skip_contract, import_ms_domain, opset_reason
from pyonnxopt.fusion.values import constant_reason, dims

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
            _residual(opset), (True, False), (True, False), ("reciprocal", "one_over", "div"))]

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
            return _check_skip(m, k)
        return (opset_reason("RMSNormalization", m.opset) or check_affine(m, k, "scale")
                or dtype_reason("", "RMSNormalization", m.dtype("x") or m.dtype("eps")))

    def emits_ort_op(self, m: Match) -> bool:
        return "a" in m and m.options.target == "ort"  # the residual form (below opset 23): SKIP_OP

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        if "a" in m:
            _emit_skip_norm(m, edit)
            return None
        shape = m.shape("x")
        k = trailing_axes(m, None if shape is None else len(shape), "mean_square")
        scale = affine_input(m, edit, "scale", k, 1.0)
        edit.replace_root("RMSNormalization", [m["x"], scale], {"axis": -k, "epsilon": epsilon(m)})
        return None


def _residual(opset: int) -> list:
    """The x of the pattern: a plain value, or (a form only --target ort
    uses, below opset 23) a residual Add(a, b) that something else may read
    too. Both are named "x"."""
    forms = [Var("x")]
    if opset < SINCE["RMSNormalization"]:
        forms.insert(0, Op("Add", Var("a"), Var("b"), name="x", commutative=True, exclusive=False))
    return forms


def _skip_order(m: Match) -> Optional[tuple]:
    """(input, skip) as bound names when the residual Add's operands fit
    onnxruntime's contract, else None."""
    total = dims(m["x"].outputs[0])
    for inp, skip in (("a", "b"), ("b", "a")):
        if total and isinstance(total[-1], int) and fits_skip_contract(dims(m[inp]), dims(m[skip]), total):
            return inp, skip
    return None


def _check_skip(m: Match, k: int) -> Optional[str]:
    """None when the residual form can become SKIP_OP: one normalized (last)
    axis, operands that fit, an [H] scale, a CPU kernel."""
    total = dims(m["x"].outputs[0])
    if k != 1 or _skip_order(m) is None:
        return f"the residual Add's shapes {dims(m['a'])} + {dims(m['b'])} over {k} axes do not provably fit {SKIP_OP}"
    if "scale" in m and list(m.array("scale").shape) != [total[-1]]:
        return f"'{m['scale'].name}' has shape {list(m.array('scale').shape)}, needs [{total[-1]}]"
    return dtype_reason(MS_DOMAIN, SKIP_OP, m.dtype("x") or m.dtype("eps"))


def _emit_skip_norm(m: Match, edit: Edit) -> None:
    """SKIP_OP in place of the residual Add and the norm; the sum is its
    fourth output when something else reads it (pre-norm blocks)."""
    total = m["x"].outputs[0]
    inside = set(m.nodes)
    read_elsewhere = total.is_graph_output or any(n not in inside for n, _ in total.uses)
    inp, skip = _skip_order(m)
    import_ms_domain(m.model)
    outs = edit.node(SKIP_OP, [m[inp], m[skip], affine_input(m, edit, "scale", 1, 1.0)], {"epsilon": epsilon(m)},
                     domain=MS_DOMAIN, outputs=4 if read_elsewhere else 1, omitted=(1, 2), before=m["x"])
    edit.replace_value(m.root.outputs[0], outs[0])
    if read_elsewhere:
        edit.replace_value(total, outs[3])
