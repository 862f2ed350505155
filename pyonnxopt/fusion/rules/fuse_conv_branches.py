"""fuse_conv_branches: Convs of one input whose outputs are added become one
Conv: the structural re-parameterization of RepVGG, MobileOne, RepGhost,
ACNet, FastViT and YOLOv6/v7's RepConv, for models exported as trained.

    y = Add(Conv(x, Wa, Ba), Conv(x, Wb, Bb))         ->  y = Conv(x, Wa ⊕ Wb, Ba + Bb)
    y = Add(Conv(x, Wa, Ba), BatchNormalization(x))  ->  y = Conv(x, Wa ⊕ s·I, Ba + t)
    y = Add(Conv(x, Wa, Ba), x)                       ->  y = Conv(x, Wa ⊕ I, Ba)

⊕ adds two kernels on a common grid, each zero-padded to it where its taps
fall, read from each Conv's pads (a 1x1 with pads 0 lands on the centre of
a 3x3 with pads 1; 1x3 and 3x1 nest in 3x3; two ranges that overlap in
part make a kernel as wide as both cover), so every output position reads
the inputs it read before with the weights summed. I is a 1x1 kernel with
one 1 per channel (input channel c feeds output channel c): x itself,
or, scaled by s = scale / sqrt(var + eps) and shifted by t = beta - mean *
s, an inference BatchNormalization of x. An Add chain of several
branches (MobileOne: a 1x1, k 3x3s and the identity) merges pairwise until
one Conv is left. Each weight element is the sum of at most two terms,
rounded once to the weight's type.

The one output change beyond rounding: an input of ±inf that both Convs
read with weights of opposite signs (or one of them 0) makes inf - inf, a
NaN, in the original and ±inf once the weights are summed; the result is
NaN only where the original's is. Model authors' own re-parameterization
(RepVGG's `switch_to_deploy`) makes the same change.

Refuses when:
1. a weight or bias is not a constant, or a branch's output has another
   reader or is a graph output (pattern);
2. the weights are not float16, float or double, or not of one type;
3. the Convs differ in group, strides or dilations, in output channels or
   in input channels per group;
4. an auto_pad other than NOTSET or VALID (padding that depends on the
   input size);
5. the outputs could differ in size (pads_begin + pads_end - dilation *
   (kernel - 1) not equal along an axis), or the taps do not line up: pads
   apart by other than a multiple of the dilation, or ranges with a gap
   between them (the merged kernel would read inputs neither Conv reads);
6. for the identity: output channels not the input's, a stride other than
   1, the Conv's output not at the input's positions (rule 5 against a 1x1
   with no padding), or the BatchNormalization refusals of
   fuse_conv_batchnorm (training mode, parameters not one per channel, not
   finite).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import numpy as np

from pyonnxopt.fusion.engine import run_rule
from pyonnxopt.fusion.pattern import Const, Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.rules._batchnorm import batchnorm, batchnorm_refusal, epsilon, parameters
from pyonnxopt.fusion.rules._channels import attribute, type_refusal
from pyonnxopt.passes.base import PassOptions, PassResult

# A merge that makes a Conv another merge reads (an Add chain) is found on
# the next sweep over the graph; MobileOne's longest chain has 6 branches.
MAX_SWEEPS = 64


@dataclass(frozen=True)
class Branch:
    """A Conv's kernel grid: weight [M, C/g, k...], per-axis pads and steps."""

    weight: np.ndarray  # as stored (the identity's: float64, summed into the others' type once)
    bias: Optional[np.ndarray]  # [M], or None
    dtype: np.dtype  # the merged weight's element type
    group: int
    strides: tuple
    dilations: tuple
    begin: tuple
    end: tuple

    @property
    def kernel(self) -> tuple:
        return self.weight.shape[2:]


class FuseConvBranches(Rule):
    name = "fuse_conv_branches"
    description = "merge Convs of one input whose outputs are added (RepVGG-style branches) into one Conv"
    pattern_near_misses = False  # every residual Add of a Conv would be an "almost": only checks report
    idempotent = True

    def pattern(self, opset: int) -> list:
        x = Var("x")
        a = Op("Conv", x, Const("wa"), Const("ba", optional=True), name="conv_a")
        b = Op("Conv", x, Const("wb"), Const("bb", optional=True), name="conv_b")
        return [Op("Add", a, b, name="add", commutative=True),
                Op("Add", a, batchnorm(x, opset), name="add", commutative=True),
                Op("Add", a, x, name="add", commutative=True)]

    def run(self, model, options: PassOptions = PassOptions()) -> PassResult:
        result = more = run_rule(self, model, options)
        for _ in range(MAX_SWEEPS):
            if not more.modified:
                break
            more = run_rule(self, model, options)
            for key in ("nodes_removed", "nodes_added", "rewrites", "refused", "near_misses"):
                result.stats[key] += more.stats[key]
        return result

    def check(self, m: Match) -> Optional[str]:
        plan = _plan(m)
        return plan if isinstance(plan, str) else None

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        plan = _plan(m)
        if isinstance(plan, str):
            return plan
        a, b, (kernel, begin, end, at_a, at_b) = plan
        weight = np.zeros(a.weight.shape[:2] + kernel, np.float64)
        for branch, at in ((a, at_a), (b, at_b)):
            taps = tuple(slice(o, o + k) for o, k in zip(at, branch.kernel))
            weight[(slice(None), slice(None)) + taps] += branch.weight
        biases = [x.bias.astype(np.float64) for x in (a, b) if x.bias is not None]
        conv = m["conv_a"]
        inputs = [m["x"], edit.constant(weight.astype(a.dtype), f"{m['wa'].name}_branches")]
        if biases:
            inputs.append(edit.constant(sum(biases).astype(a.dtype), f"{m['wa'].name}_branches_bias"))
        fused = edit.replace_root("Conv", inputs, {"pads": begin + end}, copy_attrs_from=conv)
        fused.remove_attribute("auto_pad")  # VALID: its pads are now explicit zeros
        if "kernel_shape" in conv.attributes:
            fused.set_attribute("kernel_shape", list(kernel))
        return None


def _plan(m: Match) -> Union[tuple, str]:
    """(branch a, branch b, their common grid) of the match, or why not."""
    a = _branch(m, "conv_a", "wa", "ba")
    if isinstance(a, str):
        return a
    b = _branch(m, "conv_b", "wb", "bb") if "conv_b" in m else _identity(m, a)
    if isinstance(b, str):
        return b
    if a.dtype != b.dtype:
        return f"the weights' element types differ ({a.dtype} and {b.dtype})"
    if a.group != b.group:
        return f"the Convs' groups differ ({a.group} and {b.group})"
    if a.strides != b.strides:
        return f"the Convs' strides differ ({list(a.strides)} and {list(b.strides)})"
    if a.dilations != b.dilations:
        return f"the Convs' dilations differ ({list(a.dilations)} and {list(b.dilations)})"
    if a.weight.shape[:2] != b.weight.shape[:2]:
        return (f"the weights' channels differ ({list(a.weight.shape[:2])} and {list(b.weight.shape[:2])} "
                "output and input channels per group)")
    grid = _grid(a, b)
    return grid if isinstance(grid, str) else (a, b, grid)


def _branch(m: Match, conv: str, w: str, b: str) -> Union[Branch, str]:
    node, weight = m[conv], m.array(w)
    why = type_refusal(m.dtype(w))
    if why:
        return why
    if weight.ndim < 3:
        return f"Conv weight has rank {weight.ndim}, needs at least 3"
    axes = weight.ndim - 2
    pad = attribute(node, "auto_pad", "NOTSET")
    if pad not in ("NOTSET", "VALID"):
        return f"Conv auto_pad is {pad!r}, not NOTSET or VALID: its padding depends on the input size"
    pads = list(attribute(node, "pads", [0] * 2 * axes)) if pad == "NOTSET" else [0] * 2 * axes
    strides = tuple(attribute(node, "strides", [1] * axes))
    dilations = tuple(attribute(node, "dilations", [1] * axes))
    if len(pads) != 2 * axes or len(strides) != axes or len(dilations) != axes or min(dilations) < 1:
        return f"Conv pads, strides or dilations do not fit its {axes}-d kernel"
    bias = None
    if m[b] is not None:
        if m.shape(b) != [weight.shape[0]]:
            return f"Conv B has shape {m.shape(b)}, not [{weight.shape[0]}]"
        bias = m.array(b)
    return Branch(weight, bias, weight.dtype, int(attribute(node, "group", 1)), strides, dilations,
                  tuple(pads[:axes]), tuple(pads[axes:]))


def _identity(m: Match, conv: Branch) -> Union[Branch, str]:
    """x itself, or its BatchNormalization, as a 1x1 Conv with no padding."""
    out_channels, per_group = conv.weight.shape[:2]
    channels = per_group * conv.group
    if out_channels != channels:
        return f"the Conv has {out_channels} output channels and {channels} input channels: no identity to add"
    scale, shift = np.ones(channels), None
    if "bn" in m:
        why = batchnorm_refusal(m, channels)
        if why:
            return why
        gamma, beta, mean, var = (p.astype(np.float64) for p in parameters(m))
        scale = gamma / np.sqrt(var + epsilon(m))
        shift = beta - mean * scale
    axes = len(conv.kernel)
    weight = np.zeros((channels, per_group) + (1,) * axes)
    c = np.arange(channels)
    weight[(c, c % per_group) + (0,) * axes] = scale
    return Branch(weight, shift, conv.dtype, conv.group, (1,) * axes, conv.dilations, (0,) * axes, (0,) * axes)


def _grid(a: Branch, b: Branch) -> Union[tuple, str]:
    """(kernel, pads begin, pads end, a's offset, b's offset) of the common
    grid along each spatial axis, or why the two do not share one."""
    kernel, begin, end, at_a, at_b = [], [], [], [], []
    for axis, d in enumerate(a.dilations):
        ka, kb = a.kernel[axis], b.kernel[axis]
        span_a = a.begin[axis] + a.end[axis] - d * (ka - 1)
        span_b = b.begin[axis] + b.end[axis] - d * (kb - 1)
        if span_a != span_b:
            return (f"along spatial axis {axis} the outputs could differ in size (pads {a.begin[axis]}+{a.end[axis]} "
                    f"for kernel {ka}, {b.begin[axis]}+{b.end[axis]} for kernel {kb})")
        first = max(a.begin[axis], b.begin[axis])
        oa, ob = first - a.begin[axis], first - b.begin[axis]
        if oa % d or ob % d:
            return f"along spatial axis {axis} the taps fall between each other's (pads apart by no multiple of {d})"
        oa, ob = oa // d, ob // d
        size = max(oa + ka, ob + kb)
        if size > ka + kb:  # a tap between the two ranges: 0 * x there is NaN for an infinite x
            return f"along spatial axis {axis} the taps leave a gap (kernels {ka} and {kb} read apart)"
        kernel.append(size)
        begin.append(first)
        end.append(span_a + d * (size - 1) - first)
        at_a.append(oa)
        at_b.append(ob)
    return tuple(kernel), begin, end, at_a, at_b
