"""fuse_gelu: the exporters' GELU decompositions -> one Gelu.

    erf form   y = x * 0.5 * (1 + Erf(x / sqrt(2)))               (or x * 0.7071...)
    tanh form  y = x * 0.5 * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
                                                           (x^3 as Pow(x, 3) or x*x*x)
               or factored: Tanh(x * sqrt(2/pi) * (1 + 0.044715 * x * x))
                                                           (Hugging Face's FastGELUActivation)
->  target onnx: Gelu(x) (approximate "none" / "tanh"), opset 20 and later
    target ort:  com.microsoft Gelu(x) / FastGelu(x), any opset

The product x * 0.5 * (1 + ...) comes in any association and order, and
0.5 as a final Div by 2; every constant operand may come first or second.
Constants are compared with a tolerance suited to their element type.

Refuses when:
 1. a constant is not its GELU value (one element), or has more dims than x
    (it would broadcast x to a bigger shape) or x's rank is unknown;
 2. target onnx and the model's opset is below 20;
 3. onnxruntime's CPU provider has no kernel for x's element type.
"""

from __future__ import annotations

import itertools
import math
from typing import Optional

from pyonnxopt.fusion import Const, Op, Rule, Var
from pyonnxopt.fusion.rule import Edit, Match
from pyonnxopt.fusion.values import constants_refusal
from pyonnxopt.fusion.targets import MS_DOMAIN, dtype_reason, import_ms_domain, opset_reason

SQRT2 = math.sqrt(2.0)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
TANH_CUBIC = 0.044715


def _mul(a, b, name: str) -> Op:
    return Op("Mul", a, b, name=name, commutative=True)


def _erf_core(x: Var, scale_by_div: bool) -> Op:
    """1 + Erf(x / sqrt(2)) (or Erf(x * 1/sqrt(2)))."""
    arg = Op("Div", x, Const("c_erf"), name="erf_arg") if scale_by_div else _mul(x, Const("c_erf"), "erf_arg")
    return Op("Add", Op("Erf", arg, name="erf"), Const("one"), name="plus_one", commutative=True)


def _tanh_core(x: Var, cube_by_pow: bool) -> Op:
    """1 + Tanh(k * (x + c * x^3))."""
    cube = Op("Pow", x, Const("three"), name="cube") if cube_by_pow else _mul(x, _mul(x, x, "square"), "cube")
    inner = Op("Add", x, _mul(cube, Const("c_cubic"), "cubic_term"), name="inner", commutative=True)
    arg = _mul(inner, Const("k_tanh"), "tanh_arg")
    return Op("Add", Op("Tanh", arg, name="tanh"), Const("one"), name="plus_one", commutative=True)


def _factored_tanh_core(x: Var, square_first: bool, scale_first: bool) -> Op:
    """1 + Tanh(x * k * (1 + c * x * x)), with c * x * x as (x * c) * x or (x * x) * c
    and the product as (x * k) * (...) or (x * (...)) * k."""
    square = _mul(_mul(x, x, "square"), Const("c_cubic"), "cubic_term") if square_first \
        else _mul(_mul(x, Const("c_cubic"), "cx"), x, "cubic_term")
    factor = Op("Add", square, Const("one_inner"), name="inner", commutative=True)
    arg = _mul(_mul(x, Const("k_tanh"), "kx"), factor, "tanh_arg") if scale_first \
        else _mul(_mul(x, factor, "x_factor"), Const("k_tanh"), "tanh_arg")
    return Op("Add", Op("Tanh", arg, name="tanh"), Const("one"), name="plus_one", commutative=True)


def _products(x: Var, core: Op) -> list:
    """x * 0.5 * core in its associations, and (x * core) / 2."""
    return [
        _mul(_mul(x, core, "x_core"), Const("half"), "root"),
        _mul(_mul(x, Const("half"), "x_half"), core, "root"),
        _mul(x, _mul(core, Const("half"), "core_half"), "root"),
        Op("Div", _mul(x, core, "x_core"), Const("two"), name="root"),
    ]


class FuseGelu(Rule):
    name = "fuse_gelu"
    description = "the erf and tanh GELU decompositions -> Gelu (opset 20), or com.microsoft Gelu/FastGelu (--target ort)"

    def pattern(self, opset: int) -> list:
        variants = []
        for by_div, outer in itertools.product((True, False), range(4)):
            x = Var("x")
            variants.append(_products(x, _erf_core(x, by_div))[outer])
        for by_pow, outer in itertools.product((True, False), range(4)):
            x = Var("x")
            variants.append(_products(x, _tanh_core(x, by_pow))[outer])
        for square_first, scale_first, outer in itertools.product((True, False), (True, False), range(4)):
            x = Var("x")
            variants.append(_products(x, _factored_tanh_core(x, square_first, scale_first))[outer])
        return variants

    def check(self, m: Match) -> Optional[str]:
        tanh = "tanh" in m
        dtype = m.dtype("x") or m.dtype("one")
        wanted = {"one": 1.0, "half": 0.5, "two": 2.0}
        if tanh:
            wanted.update(three=3.0, c_cubic=TANH_CUBIC, k_tanh=SQRT_2_OVER_PI, one_inner=1.0)
        else:
            wanted["c_erf"] = SQRT2 if m["erf_arg"].op_type == "Div" else 1 / SQRT2
        why = constants_refusal(m, wanted, dtype)
        if why:
            return why
        if m.options.target == "ort":
            return dtype_reason(MS_DOMAIN, "FastGelu" if tanh else "Gelu", dtype)
        return opset_reason("Gelu", m.opset) or dtype_reason("", "Gelu", dtype)

    def emits_ort_op(self, m: Match) -> bool:
        return m.options.target == "ort"

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        tanh = "tanh" in m
        if m.options.target == "ort":
            import_ms_domain(m.model)
            edit.replace_root("FastGelu" if tanh else "Gelu", [m["x"]], domain=MS_DOMAIN)
        else:
            edit.replace_root("Gelu", [m["x"]], {"approximate": "tanh" if tanh else "none"})
        return None
