"""Random well-formed ONNX graphs, for testing the whole pipeline against
onnxruntime (fuzz/fuzz_pipeline.py, tests/test_random_graphs.py).

A graph grows one op at a time from one to three float inputs. Each op's
output shape is worked out as it is added (numpy's broadcasting and
slicing rules, which are ONNX's), so every graph is valid and runs.
Besides single ops (elementwise with constants of every broadcastable
shape, layout ops, reductions, MatMul, casts) it grows the motifs the
rules look for, written as exporters write them, on random shapes and with
random extra readers of their intermediates: Conv with BatchNormalization
and activations, Pad before a Conv or pool, MatMul and bias, LayerNorm,
RMSNorm and GELU decompositions, attention blocks, shape arithmetic
feeding a Reshape, residual Conv and MLP blocks, If branches, Loops and
Scans, quantized (QDQ) Conv and MatMul, Resize and Upsample (also between
a Transpose and its inverse); one graph in ten lists every initializer
among its inputs too. Constants
are 0, 1 and other values the identities look for about a third of the
time, and sometimes a value close to them (which must not be taken for
them). A third of the graphs are size-agnostic (see Builder).

`random_model(seed)` returns (onnx.ModelProto, feeds): the same seed gives
the same model on every machine.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# Below 13 Softmax flattens and axes are attributes; below 11 Pad's pads and
# Clip's bounds are attributes, Gemm needs its C and no axis is negative;
# below 10 so are Slice's starts and ends; below 9 there is no Erf or Where,
# below 8 Max and Min do not broadcast and there is no Expand. Opsets 7 and
# 8 are the model zoo's IR-3 models, every initializer among the inputs.
OPSETS = (7, 8, 9, 10, 11, 12, 13, 15, 17, 18, 21)
SPECIAL = (0.0, 1.0, -1.0, 2.0, 0.5, 1.0000001)
MAX_ELEMENTS = 4096


class Builder:
    def __init__(self, rng: np.random.Generator, opset: int, agnostic: bool = False):
        self.rng = rng
        self.opset = opset
        # Size-agnostic: named dims everywhere but the features (channels),
        # and ops that fix no size, so that the result is compared at other
        # sizes too (fuzz_pipeline.other_sizes).
        self.agnostic = agnostic
        self.nodes: list = []
        self.initializers: list = []
        self.inputs: list = []
        self.feeds: dict = {}
        self.shapes: dict = {}  # name -> shape: node outputs (floats) and constants
        self.order: list = []  # float values, oldest first
        self.count = 0

    # ---- names, constants, nodes ----

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def const(self, array, prefix: str = "c") -> str:
        name = self.name(prefix)
        array = np.asarray(array)
        if self.rng.random() < 0.15:  # exporters write both forms
            self.nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array, name)))
        else:
            self.initializers.append(numpy_helper.from_array(array, name))
        self.shapes[name] = array.shape
        return name

    def ints(self, values) -> str:
        return self.const(np.array(values, np.int64), "i")

    def node(self, op: str, inputs: list, shapes, **attrs):
        """Adds a node; `shapes` are its float outputs' shapes (None for a
        non-float output). Returns the output names."""
        shapes = shapes if isinstance(shapes, list) else [shapes]
        outputs = [self.name(op.lower()[:6] + "_") for _ in shapes]
        self.nodes.append(helper.make_node(op, inputs, outputs, name=self.name("n"), **attrs))
        for out, shape in zip(outputs, shapes):
            if shape is not None:
                self.shapes[out] = tuple(int(d) for d in shape)
                if self.shapes[out]:  # a scalar stays unread (most ops here want an axis)
                    self.order.append(out)
        return outputs if len(outputs) > 1 else outputs[0]

    def add_input(self, shape, static_axes=()) -> str:
        name = f"x{len(self.inputs)}"
        named = 1.0 if self.agnostic else 0.3
        dims = [d if i in static_axes or self.rng.random() >= named else f"d{d}"  # equal sizes share a name
                for i, d in enumerate(shape)]
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, dims))
        feed = self.rng.standard_normal(shape).astype(np.float32)
        if self.chance(0.1):  # x * 0 is not 0 for these, nor x - x
            feed.flat[self.rng.integers(feed.size, size=2)] = self.rng.choice([np.nan, np.inf, -np.inf], 2)
        self.feeds[name] = feed
        self.shapes[name] = tuple(shape)
        self.order.append(name)
        return name

    # ---- random choices ----

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def pick(self, where=None) -> str | None:
        """A float value, the recent ones likelier; `where(shape)` filters."""
        names = [n for n in self.order if where is None or where(self.shapes[n])]
        if not names:
            return None
        if self.chance(0.6):
            names = names[-4:]
        return names[int(self.rng.integers(len(names)))]

    def pick_input(self) -> str:
        """A graph input: a value no rewrite computes differently."""
        inputs = [n for n in self.order if n in self.feeds]
        return inputs[int(self.rng.integers(len(inputs)))]

    def value(self, shape, special: bool = True, positive: bool = False) -> np.ndarray:
        if special and self.chance(0.35):
            v = np.full(shape, self.rng.choice(SPECIAL), np.float32)
        else:
            v = self.rng.standard_normal(shape).astype(np.float32)
        return np.abs(v) + 0.5 if positive else v

    def broadcastable(self, shape, widen: bool = True) -> tuple:
        """A shape that broadcasts to `shape` (rarely one that widens it)."""
        if self.agnostic and shape:  # one number, or one per feature
            return [(), (shape[-1],), (1,) * (len(shape) - 1) + (shape[-1],)][int(self.rng.integers(3))]
        rank = int(self.rng.integers(0, len(shape) + 1))
        dims = [d if self.chance(0.6) else 1 for d in shape[len(shape) - rank:]]
        if widen and self.chance(0.05) and rank == len(shape) < 4:
            dims = [2] + dims
        return tuple(dims)

    def axis(self, rank: int) -> int:
        a = int(self.rng.integers(rank))
        return a - rank if self.chance(0.3) and self.opset >= 11 else a

    def negative(self, axes: list, rank: int) -> list:
        """Some of the axes counted from the end, where the opset allows it."""
        return [a - rank if self.chance(0.3) and self.opset >= 11 else a for a in axes]

    def axes_input(self, axes, since: int):
        """axes as an input from `since`, an attribute before: (inputs, attrs)."""
        if self.opset >= since:
            return [self.ints(axes)], {}
        return [], {"axes": list(axes)}

    def positive(self, x: str) -> str:
        """|x| + 0.5: never 0, never negative."""
        shape = self.shapes[x]
        return self.node("Add", [self.node("Abs", [x], shape), self.const(np.float32(0.5))], shape)

    def batchnorm(self, y: str, channels: int, random_epsilon: bool = False) -> str:
        """An inference BatchNormalization of y, random statistics (the
        variance positive), along axis 1."""
        stats = [self.value((channels,), special=False) for _ in range(3)]
        stats.append(self.value((channels,), special=False, positive=True))
        inputs = [y] + [self.const(v) for v in stats]
        attrs = {"epsilon": float(self.rng.choice([1e-5, 1e-3]))} if random_epsilon else {}
        return self.node("BatchNormalization", inputs, self.shapes[y], **attrs)

    def slice_node(self, x: str, starts: list, ends: list, axes: list, shape, steps=None):
        """Slice with inputs from opset 10, attributes (and steps of 1) before."""
        if self.opset >= 10:
            inputs = [x, self.ints(starts), self.ints(ends), self.ints(axes)] + ([self.ints(steps)] if steps else [])
            return self.node("Slice", inputs, shape)
        assert not steps or all(s == 1 for s in steps)
        return self.node("Slice", [x], shape, starts=list(starts), ends=list(ends), axes=list(axes))

    def pad_node(self, x: str, pads: list, value: float | None, shape, **attrs):
        """Pad with inputs from opset 11, attributes before."""
        if self.opset >= 11:
            inputs = [x, self.ints(pads)] + ([self.const(np.float32(value))] if value is not None else [])
            return self.node("Pad", inputs, shape, **attrs)
        return self.node("Pad", [x], shape, pads=list(pads), **({"value": value} if value is not None else {}), **attrs)

    def clip_node(self, x: str, lo: float | None, hi: float | None, shape):
        """Clip with its bounds as inputs from opset 11, attributes before."""
        if self.opset >= 11:
            inputs = [x, "" if lo is None else self.const(np.float32(lo))]
            return self.node("Clip", inputs + ([] if hi is None else [self.const(np.float32(hi))]), shape)
        bounds = {k: float(v) for k, v in (("min", lo), ("max", hi)) if v is not None}
        return self.node("Clip", [x], shape, **bounds)

    def resize_on(self, x: str):
        """x upsampled by 1 or 2 along each axis (never the first), nearest
        (linear where only the last two axes of a 4-d value grow), as
        detection necks do: Resize with scales or sizes from opset 10 (its
        coordinate modes from 11), Upsample before. None where it would be
        too big."""
        shape = self.shapes[x]
        factors = [1] + [int(self.rng.choice([1, 2])) for _ in shape[1:]]
        out = tuple(d * f for d, f in zip(shape, factors))
        if math.prod(out) > MAX_ELEMENTS or out == shape:
            return None
        linear = len(shape) == 4 and factors[:2] == [1, 1] and self.chance(0.4)
        mode = "linear" if linear else "nearest"
        scales = self.const(np.array(factors, np.float32))
        if self.opset < 9:
            return self.node("Upsample", [x], out, mode=mode, scales=[float(f) for f in factors])
        if self.opset < 10:
            return self.node("Upsample", [x, scales], out, mode=mode)
        if self.opset < 11:
            return self.node("Resize", [x, scales], out, mode=mode)
        attrs = {"mode": mode, "coordinate_transformation_mode": str(self.rng.choice(
            ["half_pixel", "asymmetric", "pytorch_half_pixel", "align_corners"]))}
        if not linear:
            attrs["nearest_mode"] = str(self.rng.choice(["round_prefer_floor", "floor", "round_prefer_ceil"]))
        roi = self.const(np.zeros(0, np.float32)) if self.opset < 13 or self.chance(0.3) else ""
        if self.chance(0.3):  # sizes instead of scales
            return self.node("Resize", [x, roi, "" if self.opset >= 13 else self.const(np.zeros(0, np.float32)),
                                        self.ints(list(out))], out, **attrs)
        return self.node("Resize", [x, roi, scales], out, **attrs)

    def resize(self):
        x = self.pick(lambda s: len(s) >= 2)
        if x is not None and not self.agnostic:
            self.resize_on(x)

    def unsqueeze0(self, x: str, shape):
        inputs, attrs = self.axes_input([0], 13)
        return self.node("Unsqueeze", [x] + inputs, shape, **attrs)

    # ---- ops ----

    def unary(self):
        x = self.pick()
        op = self.rng.choice(["Relu", "Neg", "Abs", "Sigmoid", "Tanh", "Identity", "Erf", "LeakyRelu", "Softplus",
                              "HardSigmoid", "Sqrt", "Exp", "Reciprocal"])
        op = "Softplus" if op == "Erf" and self.opset < 9 else op
        shape = self.shapes[x]
        if op in ("Sqrt", "Reciprocal"):  # of a positive value
            x = self.positive(x)
        if op == "Exp":
            x = self.node("Tanh", [x], shape)
        attrs = {"alpha": float(self.rng.choice([0.01, 0.2]))} if op == "LeakyRelu" else {}
        self.node(op, [x], shape, **attrs)

    def binary_const(self):
        x = self.pick()
        shape = self.shapes[x]
        op = self.rng.choice(["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"])
        op = "Add" if op in ("Max", "Min") and self.opset < 8 else op  # (they broadcast from 8)
        cshape = self.broadcastable(shape)
        c = self.value(cshape, positive=op == "Div")
        if op == "Pow":
            c = np.full(cshape, self.rng.choice([1.0, 2.0, 3.0]), np.float32)
        operands = [x, self.const(c)]
        if op != "Pow" and self.chance(0.3):
            operands.reverse()
            if op == "Div":  # a value that is never 0 below
                operands[1] = self.positive(x)
        self.node(op, operands, np.broadcast_shapes(shape, cshape))

    def binary_values(self):
        x = self.pick()
        shape = self.shapes[x]
        y = self.pick(lambda s: s == shape if self.agnostic else _broadcasts(s, shape))
        op = self.rng.choice(["Add", "Sub", "Mul", "Max", "Min"])
        op = "Mul" if op in ("Max", "Min") and self.opset < 8 else op
        out = np.broadcast_shapes(self.shapes[x], self.shapes[y])
        if math.prod(out) <= MAX_ELEMENTS:
            self.node(op, [x, y] if self.chance(0.5) else [y, x], out)

    def transpose(self):
        x = self.pick()
        shape = self.shapes[x]
        perm = [int(p) for p in self.rng.permutation(len(shape))]
        if self.agnostic:  # the features stay last
            perm = [int(p) for p in self.rng.permutation(len(shape) - 1)] + [len(shape) - 1]
        attrs = {} if self.chance(0.1) and not self.agnostic else {"perm": perm}
        perm = perm if attrs else list(reversed(range(len(shape))))
        y = self.node("Transpose", [x], tuple(shape[p] for p in perm), **attrs)
        if self.chance(0.4):
            self.inverse_transpose(y, perm)

    def inverse_transpose(self, y: str, perm: list):
        """One to three ops that a transpose passes through, then its
        inverse: the layout flips that optimize_transposes cancels."""
        rank = len(perm)
        for _ in range(int(self.rng.integers(1, 4))):
            shape = self.shapes[y]
            kind = int(self.rng.choice([0, 1, 3, 5, 6] if self.agnostic else range(9)))
            if kind == 8:
                y = self.resize_on(y) or y
            elif kind == 0:
                y = self.node(str(self.rng.choice(["Relu", "Neg", "Sigmoid", "Abs"])), [y], shape)
            elif kind == 6:
                y = self.node("Softmax", [y], shape, axis=self.axis(rank))
            elif kind == 7:
                axis = int(self.rng.integers(rank))
                if shape[axis] < 2:
                    continue
                first = shape[axis] // 2
                outs = [tuple(first if i == axis else d for i, d in enumerate(shape)),
                        tuple(shape[axis] - first if i == axis else d for i, d in enumerate(shape))]
                parts = self.split_node(y, [first, shape[axis] - first], outs, axis)
                y = parts[int(self.rng.integers(2))]
            elif kind == 1:
                cshape = self.broadcastable(shape, widen=False)
                y = self.node(str(self.rng.choice(["Add", "Mul", "Sub"])), [y, self.const(self.value(cshape))], shape)
            elif kind == 2:
                axis = self.axis(rank)
                other = list(shape)
                other[axis] = 2
                out = list(shape)
                out[axis] += 2
                y = self.node("Concat", [y, self.const(self.value(tuple(other)))], tuple(out), axis=axis)
            elif kind == 3:
                axes = sorted(int(a) for a in self.rng.permutation(rank)[:int(self.rng.integers(1, rank + 1))])
                inputs, attrs = self.axes_input(axes, 13)
                y = self.node("ReduceSum", [y] + inputs, tuple(1 if i in axes else d for i, d in enumerate(shape)),
                              keepdims=1, **attrs)
            elif kind == 4:
                axis = int(self.rng.integers(rank))
                if shape[axis] < 2:
                    continue
                out = list(shape)
                out[axis] -= 1
                y = self.slice_node(y, [1], [shape[axis]], [axis], tuple(out))
            else:
                pads = [int(p) for p in self.rng.integers(0, 2, 2 * rank)]
                out = tuple(d + pads[i] + pads[i + rank] for i, d in enumerate(shape))
                y = self.pad_node(y, pads, None, out)
        inverse = [int(i) for i in np.argsort(perm)]
        self.node("Transpose", [y], tuple(self.shapes[y][p] for p in inverse), perm=inverse)

    def reshape(self):
        x = self.pick()
        shape = self.shapes[x]
        target = _factor(self.rng, math.prod(shape), int(self.rng.integers(1, 5)))
        tokens = list(target)
        for i, d in enumerate(tokens):
            if i < len(shape) and shape[i] == d and self.chance(0.3):
                tokens[i] = 0
        if self.chance(0.3):
            tokens[int(self.rng.integers(len(tokens)))] = -1
        self.node("Reshape", [x, self.ints(tokens)], target)

    def flatten(self):
        x = self.pick()
        shape = self.shapes[x]
        axis = int(self.rng.integers(0, len(shape) + 1))
        self.node("Flatten", [x], (math.prod(shape[:axis]), math.prod(shape[axis:])), axis=axis)

    def unsqueeze(self):
        x = self.pick(lambda s: len(s) < 5)
        shape = list(self.shapes[x])
        n = int(self.rng.integers(1, 3))
        rank = len(shape) + n
        axes = sorted(int(a) for a in self.rng.choice(rank, n, replace=False))
        for a in axes:
            shape.insert(a, 1)
        inputs, attrs = self.axes_input(self.negative(axes, rank), 13)
        self.node("Unsqueeze", [x] + inputs, tuple(shape), **attrs)

    def squeeze(self):
        x = self.pick(lambda s: 1 in s)
        if x is None:
            return
        shape = self.shapes[x]
        ones = [i for i, d in enumerate(shape) if d == 1]
        if self.chance(0.2):
            self.node("Squeeze", [x], tuple(d for d in shape if d != 1))
            return
        axes = sorted(int(a) for a in self.rng.choice(ones, int(self.rng.integers(1, len(ones) + 1)), replace=False))
        out = tuple(d for i, d in enumerate(shape) if i not in axes)
        inputs, attrs = self.axes_input(self.negative(axes, len(shape)), 13)
        self.node("Squeeze", [x] + inputs, out, **attrs)

    def expand(self):
        if self.opset < 8:
            return
        x = self.pick()
        shape = self.shapes[x]
        grown = [d if d != 1 or self.chance(0.5) else int(self.rng.integers(2, 4)) for d in shape]
        if self.chance(0.3) and len(grown) < 4:
            grown = [int(self.rng.integers(1, 3))] + grown
        target = [1 if self.chance(0.2) and i >= len(grown) - len(shape) else d for i, d in enumerate(grown)]
        out = np.broadcast_shapes(shape, tuple(target))
        if math.prod(out) <= MAX_ELEMENTS:
            self.node("Expand", [x, self.ints(target)], out)

    def concat(self):
        x = self.pick()
        shape = self.shapes[x]
        axis = self.axis(len(shape))
        parts = [x]
        for _ in range(int(self.rng.integers(1, 3))):
            other = list(shape)
            other[axis] = int(self.rng.integers(1, 4))
            same = self.pick(lambda s: len(s) == len(shape) and all(
                a == b for i, (a, b) in enumerate(zip(s, shape)) if i != axis % len(shape)))
            if self.agnostic:
                same = self.pick(lambda s: s == shape)
                parts.append(same)
                continue
            parts.append(same if same is not None and self.chance(0.6) else self.const(self.value(tuple(other))))
        out = list(shape)
        out[axis] = sum(self.shapes[p][axis] for p in parts)
        y = self.node("Concat", parts, tuple(out), axis=axis)
        if self.chance(0.5):  # take a part back out
            k = int(self.rng.integers(len(parts)))
            start = sum(self.shapes[p][axis] for p in parts[:k])
            size = self.shapes[parts[k]][axis]
            out[axis] = size
            self.slice_node(y, [start], [start + size], [axis], tuple(out))

    def split(self):
        x = self.pick(lambda s: max(s) >= 2)
        if x is None:
            return
        shape = self.shapes[x]
        axis = int(self.rng.choice([i for i, d in enumerate(shape) if d >= 2]))
        n = int(self.rng.integers(2, min(shape[axis], 3) + 1))
        cuts = sorted(int(c) for c in self.rng.choice(np.arange(1, shape[axis]), n - 1, replace=False))
        sizes = [b - a for a, b in zip([0] + cuts, cuts + [shape[axis]])]
        outs = [tuple(s if i == axis else d for i, d in enumerate(shape)) for s in sizes]
        self.split_node(x, sizes, outs, axis)

    def split_node(self, x: str, sizes: list, outs: list, axis: int) -> list:
        if self.opset >= 13:
            return self.node("Split", [x, self.ints(sizes)], outs, axis=axis)
        return self.node("Split", [x], outs, axis=axis, split=sizes)

    def slice(self):
        x = self.pick()
        shape = self.shapes[x]
        k = int(self.rng.integers(1, len(shape) + 1))
        axes = [int(a) for a in self.rng.permutation(len(shape))[:k]]
        starts, ends, steps, index = [], [], [], [slice(None)] * len(shape)
        for a in axes:
            d = shape[a]
            step = int(self.rng.choice([1, 1, 1, 2, -1, -2]))
            lo, hi = (0, d) if step > 0 else (d - 1, -d - 1)
            start = int(self.rng.integers(0, d)) if self.chance(0.7) else lo
            end = int(self.rng.integers(-d, d + 1)) if self.chance(0.5) else (hi if self.chance(0.5) else
                                                                                (2**63 - 1 if step > 0 else -2**63))
            starts.append(start)
            ends.append(end)
            steps.append(step)
            index[a] = slice(start, None if abs(end) > 2**40 else end, step)
        out = np.empty(shape)[tuple(index)].shape
        if 0 in out or (self.opset < 10 and any(s != 1 for s in steps)):
            return
        stated = self.chance(0.7) or any(s != 1 for s in steps)
        self.slice_node(x, starts, ends, axes, out, steps if stated and self.opset >= 10 else None)

    def gather(self):
        x = self.pick()
        shape = self.shapes[x]
        axis = self.axis(len(shape))
        d = shape[axis]
        ishape = [(), (int(self.rng.integers(1, 4)),), (2, 2)][int(self.rng.integers(3))]
        indices = self.rng.integers(-d if self.opset >= 11 else 0, d, ishape).astype(np.int64)
        a = axis % len(shape)
        out = shape[:a] + ishape + shape[a + 1:]
        if out and math.prod(out) <= MAX_ELEMENTS:
            self.node("Gather", [x, self.const(indices, "i")], out, axis=axis)

    def reduce(self):
        x = self.pick()
        shape = self.shapes[x]
        op = str(self.rng.choice(["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2"]))
        k = int(self.rng.integers(1, len(shape) + 1))
        axes = sorted(int(a) for a in self.rng.permutation(len(shape))[:k])
        keep = int(self.chance(0.6))
        out = tuple(1 if i in axes else d for i, d in enumerate(shape)) if keep else \
            tuple(d for i, d in enumerate(shape) if i not in axes)
        if not out:
            return
        inputs, attrs = self.axes_input(self.negative(axes, len(shape)), 13 if op == "ReduceSum" else 18)
        self.node(op, [x] + inputs, out, keepdims=keep, **attrs)

    def softmax(self):
        x = self.pick()
        shape = self.shapes[x]
        self.node(str(self.rng.choice(["Softmax", "LogSoftmax"])), [x], shape, axis=self.axis(len(shape)))

    def matmul(self):
        x = self.pick()
        shape = self.shapes[x]
        m = int(self.rng.integers(1, 7))
        if len(shape) == 1:
            w = self.const(self.value((shape[0], m), special=False))
            self.node("MatMul", [x, w], (m,))
            return
        other = self.pick(lambda s: len(s) >= 2 and s[-2] == shape[-1] and _broadcasts(s[:-2], shape[:-2]))
        if other is not None and self.chance(0.4) and not self.agnostic:
            out = np.broadcast_shapes(shape[:-2], self.shapes[other][:-2]) + (shape[-2], self.shapes[other][-1])
            if math.prod(out) <= MAX_ELEMENTS:
                self.node("MatMul", [x, other], out)
            return
        wshape = (shape[-1], m) if self.chance(0.8) else self.broadcastable(shape[:-2])[-1:] + (shape[-1], m)
        out = np.broadcast_shapes(shape[:-2], wshape[:-2]) + (shape[-2], m)
        y = self.node("MatMul", [x, self.const(self.value(wshape, special=False))], out)
        if self.chance(0.6):  # its bias
            b = self.const(self.value((m,) if self.chance(0.7) else self.broadcastable(out)))
            self.node("Add", [y, b] if self.chance(0.7) else [b, y], np.broadcast_shapes(out, self.shapes[b]))

    def gemm(self):
        x = self.pick(lambda s: len(s) == 2)
        if x is None:
            return
        k, n = self.shapes[x][1], self.shapes[x][0]
        m = int(self.rng.integers(1, 7))
        trans_a, trans_b = int(self.chance(0.2)), int(self.chance(0.5))
        if trans_a:
            x = self.node("Transpose", [x], (k, n))
        w = self.const(self.value((m, k) if trans_b else (k, m), special=False))
        inputs = [x, w]
        if self.chance(0.7) or self.opset < 11:  # (C is optional from 11)
            inputs.append(self.const(self.value(self.broadcastable((n, m), widen=False))))
        attrs = {"alpha": float(self.rng.choice([1.0, 0.5]))} if self.chance(0.3) else {}
        self.node("Gemm", inputs, (n, m), transA=trans_a, transB=trans_b, **attrs)

    def where(self):
        if self.opset < 9:
            return
        x = self.pick()
        shape = self.shapes[x]
        cshape = self.broadcastable(shape)
        cond = self.const(self.rng.random(cshape) < 0.5 if self.chance(0.7) else np.full(cshape, self.chance(0.5)))
        other = self.pick(lambda s: _broadcasts(s, shape))
        if other is None or self.chance(0.5):
            other = self.const(self.value(self.broadcastable(shape)))
        if not _broadcasts(shape, cshape, self.shapes[other]):
            return
        out = np.broadcast_shapes(shape, cshape, self.shapes[other])
        if math.prod(out) <= MAX_ELEMENTS:
            self.node("Where", [cond, x, other] if self.chance(0.5) else [cond, other, x], out)

    def clip(self):
        x = self.pick()
        shape = self.shapes[x]
        lo, hi = sorted(self.rng.standard_normal(2).astype(np.float32).tolist())
        if self.chance(0.5) and self.opset >= 8:
            y = self.node("Max", [x, self.const(np.float32(lo))], shape)
            self.node("Min", [y, self.const(np.float32(hi))], shape)
        else:
            lo = lo if self.chance(0.8) else None
            self.clip_node(x, lo, None if self.chance(0.2) and lo is not None else hi, shape)

    def cast(self):
        x = self.pick()
        to = int(self.rng.choice([TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT32, TensorProto.FLOAT]))
        if to == TensorProto.INT32:
            # Of a graph input only: after float math a value a rewrite rounds
            # differently may cross an integer (a saturated Sigmoid's 1.0).
            x = self.pick_input()
        shape = self.shapes[x]
        y = self.node("Cast", [x], None, to=to)
        self.node("Cast", [y], shape, to=TensorProto.FLOAT)

    def dropout(self):
        x = self.pick()
        shape = self.shapes[x]
        inputs = [x] + ([self.const(np.float32(0.3))] if self.chance(0.5) and self.opset >= 12 else [])
        # (onnxruntime's Dropout-10 returns a mask of False at inference, -12 and
        # the spec True: a read mask would differ once --opset upgrades it)
        if self.chance(0.3) and self.opset >= 12:
            y, mask = self.node("Dropout", inputs, [shape, None])
            self.node("Where", [mask, y, self.const(np.float32(0.0))], shape)
        else:
            self.node("Dropout", inputs, shape)

    def dynamic_reshape(self):
        """A Reshape whose target is computed from the input's Shape, as
        exporters write it for dynamic sizes: axes merged (-1) or one split
        in two (by a constant, the rest computed with a Div)."""
        x = self.pick(lambda s: len(s) >= 2)
        if x is None:
            return
        shape = self.shapes[x]
        r = len(shape)
        i = int(self.rng.integers(r))
        j = int(self.rng.integers(i, r))
        divisors = [f for f in range(2, shape[i] + 1) if shape[i] % f == 0]
        if j > i or not divisors:  # merge axes i..j
            middle, out = [self.ints([-1])], (math.prod(shape[i:j + 1]),)
        else:  # split axis i by f
            f = int(self.rng.choice(divisors))
            if self.chance(0.5):
                middle = [self.ints([f, -1])]
            else:
                size = self.node("Gather", [self.node("Shape", [x], None), self.const(np.array([i], np.int64), "i")],
                                 None, axis=0)
                middle = [self.ints([f]), self.node("Div", [size, self.ints([f])], None)]
            out = (f, shape[i] // f)
        pieces = [self.dims_of(x, 0, i)] + middle + [self.dims_of(x, j + 1, r)]
        target = self.node("Concat", [p for p in pieces if p is not None], None, axis=0)
        self.node("Reshape", [x, target], shape[:i] + out + shape[j + 1:])

    def dims_of(self, x: str, a: int, b: int):
        """Shape(x)[a:b] as a 1-d int64 value, written one of the ways
        exporters write it; None when empty."""
        if a >= b:
            return None
        kind = int(self.rng.integers(3))
        if kind == 0 and self.opset >= 15:
            return self.node("Shape", [x], None, start=a, end=b)
        dims = self.node("Shape", [x], None)
        if kind != 2:
            return self.slice_node(dims, [a], [b], [0], None)
        picked = [self.unsqueeze0(self.node("Gather", [dims, self.const(np.array(k, np.int64), "i")], None), None)
                  for k in range(a, b)]
        return picked[0] if len(picked) == 1 else self.node("Concat", picked, None, axis=0)

    # ---- motifs ----

    def computed_weight(self):
        """A MatMul whose weight is computed from constants (a transposed,
        cast, reshaped or scaled tensor, as exporters leave them): folding."""
        x = self.pick()
        shape = self.shapes[x]
        k, m = shape[-1], int(self.rng.integers(1, 6))
        w = self.const(self.value((m, k), special=False))
        w = self.node("Transpose", [w], None, perm=[1, 0])
        for _ in range(int(self.rng.integers(1, 3))):
            kind = int(self.rng.integers(4))
            if kind == 0:
                w = self.node("Mul", [w, self.const(np.float32(self.rng.choice([0.5, 2.0, 1.0])))], None)
            elif kind == 1:
                half = self.node("Cast", [w], None, to=TensorProto.FLOAT16)
                w = self.node("Cast", [half], None, to=TensorProto.FLOAT)
            elif kind == 2:
                w = self.node("Reshape", [self.node("Reshape", [w, self.ints([-1])], None), self.ints([k, m])], None)
            else:
                w = self.node("Add", [w, self.const(self.value((m,), special=False))], None)
        self.node("MatMul", [x, w], shape[:-1] + (m,))

    def branch(self):
        """An If on a value of the graph: both branches read outer values."""
        if self.opset < 9:  # (IR 3 would list the branches' initializers as their inputs)
            return
        x = self.pick()
        shape = self.shapes[x]
        # (not the sign of a sum: a normalized value sums to 0 give or take
        # rounding, which a fused kernel rounds differently)
        top = self.node("ReduceMax", [x], None, keepdims=0)
        cond = self.node("Greater", [top, self.const(np.float32(self.rng.standard_normal()))], None)
        bodies = []
        for which in ("then", "else"):
            sub = self.body({x: shape}, int(self.rng.integers(1, 4)), ("unary", "binary_const", "clip"),
                            1000 if which == "else" else 0)
            last = sub.order[-1]
            if sub.shapes[last] != shape:  # a constant widened it
                return
            out = sub.name(f"{which}_out")
            sub.nodes.append(helper.make_node("Identity", [last], [out]))
            bodies.append(helper.make_graph(sub.nodes, which, [], [helper.make_tensor_value_info(
                out, TensorProto.FLOAT, shape)], sub.initializers))
            self.count = sub.count
        self.node("If", [cond], shape, then_branch=bodies[0], else_branch=bodies[1])

    def body(self, inputs: dict, steps: int, ops=("unary", "binary_const", "binary_values"),
             offset: int = 2000) -> "Builder":
        """A subgraph's builder whose values start as `inputs` (name ->
        shape: its own and the outer values it reads), grown by `steps` of
        `ops`; its names numbered from `offset` past the graph's."""
        sub = Builder(self.rng, self.opset)
        sub.count = self.count + offset
        for name, shape in inputs.items():
            sub.shapes[name] = shape
            sub.order.append(name)
        for _ in range(steps):
            getattr(sub, ops[int(self.rng.integers(len(ops)))])()
        return sub

    def loop(self):
        """A Loop of a few trips carrying a value, reading the iteration
        number and an outer value, with a scan output of every trip's."""
        if self.opset < 11:
            return
        x = self.pick()
        shape = self.shapes[x]
        outer = self.pick(lambda s: s == shape)
        trips = int(self.rng.integers(1, 4))
        if math.prod(shape) * trips > MAX_ELEMENTS:
            return
        names = [self.name(n) for n in ("iteration", "going", "carried")]
        sub = self.body({names[2]: shape, **({outer: shape} if outer != x else {})}, int(self.rng.integers(1, 4)))
        last = sub.order[-1]
        if sub.shapes[last] != shape:  # a constant widened it
            return
        if self.chance(0.5):  # the iteration number as a float
            count = sub.node("Cast", [names[0]], None, to=TensorProto.FLOAT)
            last = sub.node("Add", [last, count], shape)
        outs = [sub.name("going_out"), sub.name("carried_out"), sub.name("scanned")]
        sub.nodes += [helper.make_node("Identity", [names[1]], [outs[0]]),
                      helper.make_node("Identity", [last], [outs[1]]),
                      helper.make_node("Identity", [sub.order[-2] if self.chance(0.3) and
                                                    sub.shapes[sub.order[-2]] == shape else last], [outs[2]])]
        body = helper.make_graph(
            sub.nodes, "loop_body",
            [helper.make_tensor_value_info(names[0], TensorProto.INT64, []),
             helper.make_tensor_value_info(names[1], TensorProto.BOOL, []),
             helper.make_tensor_value_info(names[2], TensorProto.FLOAT, shape)],
            [helper.make_tensor_value_info(outs[0], TensorProto.BOOL, []),
             helper.make_tensor_value_info(outs[1], TensorProto.FLOAT, shape),
             helper.make_tensor_value_info(outs[2], TensorProto.FLOAT, shape)], sub.initializers)
        self.count = sub.count
        self.node("Loop", [self.const(np.int64(trips), "i"), self.const(np.bool_(True), "b"), x],
                  [shape, (trips,) + shape], body=body)

    def scan(self):
        """A Scan over axis 0 of a value, a running state added up from each
        slice (a cumulative sum and what it passes through)."""
        x = self.pick(lambda s: len(s) >= 2)
        if x is None or self.opset < 9:
            return
        shape = self.shapes[x]
        element = shape[1:]
        names = [self.name("state"), self.name("slice")]
        sub = self.body({names[1]: element}, int(self.rng.integers(0, 3)))
        last = sub.order[-1]
        if sub.shapes[last] != element:
            return
        state = sub.node("Add", [names[0], last], element)
        outs = [sub.name("state_out"), sub.name("scanned")]
        sub.nodes += [helper.make_node("Identity", [state], [outs[0]]),
                      helper.make_node("Identity", [last if self.chance(0.5) else state], [outs[1]])]
        body = helper.make_graph(
            sub.nodes, "scan_body",
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, element) for n in names],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, element) for o in outs], sub.initializers)
        self.count = sub.count
        start = self.const(np.zeros(element, np.float32) if self.chance(0.5) else self.value(element, special=False))
        self.node("Scan", [start, x], [element, shape], body=body, num_scan_inputs=1)

    def logic(self):
        """Integer and boolean chains: comparisons, Not, And, casts to int."""
        x = self.pick()
        shape = self.shapes[x]
        c = self.const(self.value(self.broadcastable(shape, widen=False), special=False))
        # (Equal takes floats from opset 11)
        compare = ["Greater", "Less", "Equal"][:3 if self.opset >= 11 else 2]
        mask = self.node(str(self.rng.choice(compare)), [x, c], None)
        if self.chance(0.5):
            mask = self.node("Not", [self.node("Not", [mask], None)], None)
        if self.chance(0.5):
            mask = self.node("And", [mask, self.const(np.ones(self.broadcastable(shape, widen=False), bool))], None)
        if self.chance(0.5) or self.opset < 9:
            n = self.node("Cast", [mask], None, to=TensorProto.INT64)
            n = self.node(str(self.rng.choice(["Add", "Mul", "Div"])), [n, self.const(np.int64(
                self.rng.choice([1, 2, 3])))], None)
            self.node("Cast", [n], shape, to=TensorProto.FLOAT)
        else:
            self.node("Where", [mask, x, self.const(np.float32(0.0))], shape)

    def image(self) -> str:
        """A 4-d value [N, C, H, W], made from another if none is at hand;
        size-agnostic graphs keep images channels-last [N, H, W, C] and
        transpose them (grow() transposes the result back)."""
        if self.agnostic:
            x = self.pick(lambda s: len(s) == 4 and s[1] >= 2 and s[2] >= 2)
            if x is None:
                return None
            n, h, w, c = self.shapes[x]
            return self.node("Transpose", [x], (n, c, h, w), perm=[0, 3, 1, 2])
        x = self.pick(lambda s: len(s) == 4 and s[2] >= 2 and s[3] >= 2)
        if x is not None:
            return x
        x = self.pick()
        size = math.prod(self.shapes[x])
        c = int(self.rng.integers(1, 4))
        h = int(self.rng.integers(3, 7))
        w = self.const(self.value((size, c * h * h), special=False))
        flat = self.node("Reshape", [x, self.ints([1, size])], (1, size))
        return self.node("Reshape", [self.node("MatMul", [flat, w], (1, c * h * h)), self.ints([1, c, h, h])],
                         (1, c, h, h))

    def conv(self):
        x = self.image()
        if x is None:
            return
        n, c, h, w = self.shapes[x]
        group = int(self.rng.choice([g for g in (1, 2, c) if c % g == 0]))
        m = group * int(self.rng.integers(1, 3))
        k = int(self.rng.choice([1, 3])) if min(h, w) >= 3 else 1
        stride = int(self.rng.choice([1, 1, 2]))
        dilation = int(self.rng.choice([1, 1, 2])) if k == 3 and min(h, w) >= 5 else 1
        pad = int(self.rng.integers(0, 2))
        if self.chance(0.3):  # a Pad before it
            mode = str(self.rng.choice(["constant", "constant", "reflect", "edge"]))
            pads = [0, 0, int(self.rng.integers(0, 2)), int(self.rng.integers(0, 2))] * 2
            value = float(self.rng.choice([0.0, 0.0, 1.5])) if mode == "constant" else None
            h, w = h + pads[2] + pads[6], w + pads[3] + pads[7]
            x = self.pad_node(x, pads, value, (n, c, h, w), mode=mode)
        span = dilation * (k - 1) + 1
        oh, ow = (h + 2 * pad - span) // stride + 1, (w + 2 * pad - span) // stride + 1
        if min(oh, ow) < 1:
            return
        inputs = [x, self.const(self.value((m, c // group, k, k), special=False))]
        if self.chance(0.6):
            inputs.append(self.const(self.value((m,), special=False)))
        y = self.node("Conv", inputs, (n, m, oh, ow), group=group, kernel_shape=[k, k], strides=[stride] * 2,
                      dilations=[dilation] * 2, pads=[pad] * 4)
        if self.chance(0.6):
            y = self.batchnorm(y, m, random_epsilon=True)
        if self.chance(0.4):
            cshape = [(m, 1, 1), (1, m, 1, 1), (1,), ()][int(self.rng.integers(4))]
            y = self.node(str(self.rng.choice(["Add", "Mul"])), [y, self.const(self.value(cshape))],
                          (n, m, oh, ow))
        if self.chance(0.6):
            self.node(str(self.rng.choice(["Relu", "Sigmoid", "LeakyRelu", "HardSigmoid", "Tanh"])), [y],
                      (n, m, oh, ow))

    def activation(self):
        """SiLU, quick GELU and the hard swish forms, as exporters write them."""
        x = self.pick()
        shape = self.shapes[x]
        kind = int(self.rng.integers(4))
        if kind == 0:
            g = self.node("Sigmoid", [x], shape)
        elif kind == 1:
            g = self.node("Sigmoid", [self.node("Mul", [x, self.const(np.float32(1.702))], shape)], shape)
        elif kind == 2:
            g = self.node("HardSigmoid", [x], shape, alpha=float(self.rng.choice([1 / 6, 0.2])), beta=0.5)
        else:
            g = self.clip_node(self.node("Add", [x, self.const(np.float32(3.0))], shape), 0.0,
                               float(self.rng.choice([6.0, 5.0])), shape)
            g = self.node("Div", [g, self.const(np.float32(6.0))], shape)
        self.node("Mul", [x, g] if self.chance(0.5) else [g, x], shape)

    def residual_conv(self):
        """act(Conv(x) [+ BN] + x): ResNet's block, FusedConv's residual."""
        x = self.image()
        if x is None:
            return
        n, c, h, w = self.shapes[x]
        k = int(self.rng.choice([1, 3]))
        y = self.node("Conv", [x, self.const(self.value((c, c, k, k), special=False)),
                               self.const(self.value((c,), special=False))], (n, c, h, w),
                      kernel_shape=[k, k], pads=[k // 2] * 4)
        if self.chance(0.5):
            y = self.batchnorm(y, c)
        y = self.node("Add", [y, x] if self.chance(0.5) else [x, y], (n, c, h, w))
        self.node(str(self.rng.choice(["Relu", "Relu", "Sigmoid", "LeakyRelu"])), [y], (n, c, h, w))

    def mlp_block(self):
        """A transformer's residual MLP on [.., E]: LayerNorm, Linear, GELU,
        Linear, the residual Add (pre- or post-norm), as BERT and GPT-2 run."""
        x = self.pick(lambda s: len(s) >= 2)
        if x is None:
            return
        shape = self.shapes[x]
        e, hidden = shape[-1], int(self.rng.integers(2, 9))
        pre = self.chance(0.5)
        start = x
        if pre:
            self.layer_norm_on(x)
            x = self.order[-1]
        h = self.node("MatMul", [x, self.const(self.value((e, hidden), special=False))], shape[:-1] + (hidden,))
        h = self.node("Add", [h, self.const(self.value((hidden,), special=False))], shape[:-1] + (hidden,))
        self.gelu_on(h)
        h = self.order[-1]
        h = self.node("MatMul", [h, self.const(self.value((hidden, e), special=False))], shape)
        h = self.node("Add", [h, self.const(self.value((e,), special=False))], shape)
        y = self.node("Add", [start, h], shape)
        if not pre:
            self.layer_norm_on(y)

    def conv_transpose(self):
        x = self.image()
        if x is None:
            return
        n, c, h, w = self.shapes[x]
        m, k, stride = int(self.rng.integers(1, 4)), int(self.rng.choice([1, 2, 3])), int(self.rng.choice([1, 2]))
        out = (n, m, (h - 1) * stride + k, (w - 1) * stride + k)
        if math.prod(out) > MAX_ELEMENTS:
            return
        y = self.node("ConvTranspose", [x, self.const(self.value((c, m, k, k), special=False))], out,
                      kernel_shape=[k, k], strides=[stride, stride])
        if self.chance(0.7):
            self.batchnorm(y, m)

    def gemm_batchnorm(self):
        x = self.pick(lambda s: len(s) == 2)
        if x is None:
            return
        n, k = self.shapes[x]
        m = int(self.rng.integers(1, 6))
        y = self.node("Gemm", [x, self.const(self.value((k, m), special=False)),
                               self.const(self.value((m,), special=False))], (n, m))
        self.batchnorm(y, m)

    def recurrent(self):
        """An LSTM or GRU over [T, B, I], its initial states zeros (or not)."""
        x = self.pick(lambda s: len(s) == 3)
        if x is None:
            return
        t, b, i = self.shapes[x]
        op = str(self.rng.choice(["LSTM", "GRU"]))
        gates, hidden = (4 if op == "LSTM" else 3), int(self.rng.integers(1, 4))
        inputs = [x, self.const(self.value((1, gates * hidden, i), special=False)),
                  self.const(self.value((1, gates * hidden, hidden), special=False)),
                  self.const(self.value((1, 2 * gates * hidden), special=False)), ""]
        states = 2 if op == "LSTM" else 1
        for _ in range(states):
            zero = self.chance(0.7)
            inputs.append(self.const(np.zeros((1, b, hidden), np.float32) if zero else
                                     self.value((1, b, hidden), special=False)))
        outs = self.node(op, inputs, [(t, 1, b, hidden), (1, b, hidden)], hidden_size=hidden)
        self.node("Squeeze", [outs[0]] + self.axes_input([1], 13)[0], (t, b, hidden), **self.axes_input([1], 13)[1])

    def einsum(self):
        """Batched matrix products as Einsum (lower_einsum's case), and one
        reduction it must leave."""
        x = self.pick(lambda s: len(s) == 3)
        if x is None or self.opset < 12:
            return
        b, s_, e = self.shapes[x]
        m = int(self.rng.integers(1, 5))
        kind = int(self.rng.integers(3))
        if kind == 0:
            self.node("Einsum", [x, self.const(self.value((e, m), special=False))], (b, s_, m), equation="bse,em->bsm")
        elif kind == 1:
            self.node("Einsum", [x, x], (b, s_, s_), equation="bie,bje->bij")
        else:
            self.node("Einsum", [x], (b, e), equation="bse->be")

    def pool(self):
        x = self.image()
        if x is None:
            return
        n, c, h, w = self.shapes[x]
        if self.chance(0.5):
            pads = [0, 0, 1, 1] * 2
            value = float(self.rng.choice([0.0, -1e30]))
            x = self.pad_node(x, pads, value, (n, c, h + 2, w + 2))
            h, w = h + 2, w + 2
        op = str(self.rng.choice(["MaxPool", "AveragePool"]))
        attrs = {"count_include_pad": int(self.chance(0.5))} if op == "AveragePool" else {}
        self.node(op, [x], (n, c, h - 1, w - 1), kernel_shape=[2, 2], **attrs)

    def layer_norm(self):
        self.layer_norm_on(self.pick())

    def layer_norm_on(self, x: str):
        shape = self.shapes[x]
        k = 1 if self.agnostic else int(self.rng.integers(1, min(2, len(shape)) + 1))
        axes = list(range(len(shape) - k, len(shape)))
        if self.chance(0.15) and not self.agnostic:  # not the trailing axes
            axes = [0]
        kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
        # A row of (nearly) equal values (a saturated Clip, a Where's fill)
        # has a variance below eps: (x - mean) / sqrt(eps) then magnifies
        # rounding 300x, differently in the fused kernel (E[x^2] - E[x]^2).
        # A spread of its own keeps every row well conditioned.
        spread = np.linspace(-2, 2, math.prod(shape[a] for a in axes), dtype=np.float32)
        spread = self.rng.permutation(spread).reshape([shape[a] if a in axes else 1 for a in range(len(shape))])
        x = self.node("Add", [x, self.const(spread)], shape)
        inputs, attrs = self.axes_input(axes, 18)
        mean = self.node("ReduceMean", [x] + inputs, kept, keepdims=1, **attrs)
        d = self.node("Sub", [x, mean], shape)
        sq = self.node("Pow", [d, self.const(np.float32(2.0))], shape) if self.chance(0.5) else \
            self.node("Mul", [d, d], shape)
        inputs, attrs = self.axes_input(axes, 18)
        var = self.node("ReduceMean", [sq] + inputs, kept, keepdims=1, **attrs)
        eps = self.node("Add", [var, self.const(np.float32(self.rng.choice([1e-5, 1e-6])))], kept)
        y = self.node("Div", [d, self.node("Sqrt", [eps], kept)], shape)
        norm = tuple(shape[a] for a in axes) if axes != [0] else shape
        if self.chance(0.8):
            y = self.node("Mul", [y, self.const(self.value(norm, special=False))], shape)
        if self.chance(0.8):
            self.node("Add", [y, self.const(self.value(norm, special=False))], shape)

    def rms_norm(self):
        x = self.pick()
        shape = self.shapes[x]
        inputs, attrs = self.axes_input(self.negative([len(shape) - 1], len(shape)), 18)
        kept = shape[:-1] + (1,)
        ms = self.node("ReduceMean", [self.node("Pow", [x, self.const(np.float32(2.0))], shape)] + inputs, kept,
                       keepdims=1, **attrs)
        r = self.node("Sqrt", [self.node("Add", [ms, self.const(np.float32(1e-6))], kept)], kept)
        y = self.node("Mul", [x, self.node("Reciprocal", [r], kept)], shape) if self.chance(0.5) else \
            self.node("Div", [x, r], shape)
        self.node("Mul", [self.const(self.value(shape[-1:], special=False)), y], shape)

    def gelu(self):
        self.gelu_on(self.pick())

    def gelu_on(self, x: str):
        shape = self.shapes[x]
        if self.chance(0.7) and self.opset >= 9:  # erf form
            root = 1.4142135 if self.chance(0.9) else 1.5
            e = self.node("Erf", [self.node("Div", [x, self.const(np.float32(root))], shape)], shape)
            one = self.node("Add", [e, self.const(np.float32(1.0))], shape)
            half = self.node("Mul", [x, self.const(np.float32(0.5))], shape)
            self.node("Mul", [half, one] if self.chance(0.5) else [one, half], shape)
        else:  # tanh form
            cube = self.node("Pow", [x, self.const(np.float32(3.0))], shape)
            inner = self.node("Add", [x, self.node("Mul", [cube, self.const(np.float32(0.044715))], shape)], shape)
            t = self.node("Tanh", [self.node("Mul", [inner, self.const(np.float32(0.7978846))], shape)], shape)
            one = self.node("Add", [t, self.const(np.float32(1.0))], shape)
            self.node("Mul", [self.node("Mul", [x, self.const(np.float32(0.5))], shape), one], shape)

    def attention(self):
        """Heads split and merged around scaled dot-product attention, in
        the forms the exporters write: constant or computed head shapes,
        K^T as one Transpose or two, the scale after the scores or its root
        on q and k (torch's SDPA), with or without a mask."""
        x = self.pick(lambda s: len(s) == 3)
        if x is None:
            x = self.pick(lambda s: len(s) == 2)
            if x is None:
                return
            s, e = self.shapes[x]
            x = self.unsqueeze0(x, (1, s, e))
        b, s, e = self.shapes[x]
        heads = int(self.rng.choice([1, 2, 3]))
        d = int(self.rng.choice([1, 2, 4]))
        if b * s * heads * d > MAX_ELEMENTS or b * heads * s * s > MAX_ELEMENTS:
            return
        computed = self.agnostic or self.chance(0.4)
        split_shape = (b, s, heads, d)
        proj = []
        for which in "qkv":
            p = self.node("MatMul", [x, self.const(self.value((e, heads * d), special=False))], (b, s, heads * d))
            if self.chance(0.7):
                p = self.node("Add", [p, self.const(self.value((heads * d,), special=False))], (b, s, heads * d))
            if computed:
                target = self.node("Concat", [self.dims_of(p, 0, 2), self.ints([heads, d])], None, axis=0)
            else:
                target = self.ints([b if self.chance(0.5) else 0, s, heads, d])
            split = self.node("Reshape", [p, target], split_shape)
            if which == "k" and self.chance(0.5):
                split = self.node("Transpose", [split], (b, heads, s, d), perm=[0, 2, 1, 3])
                proj.append(self.node("Transpose", [split], (b, heads, d, s), perm=[0, 1, 3, 2]))
            else:
                perm = [0, 2, 3, 1] if which == "k" else [0, 2, 1, 3]
                proj.append(self.node("Transpose", [split], tuple(split_shape[i] for i in perm), perm=perm))
        q, k, v = proj
        scale = float(math.sqrt(d)) if self.chance(0.8) else 3.0
        if self.chance(0.3):  # the root of the scale on each side
            root = self.const(np.float32(1 / math.sqrt(scale)))
            q = self.node("Mul", [q, root], self.shapes[q])
            k = self.node("Mul", [k, root], self.shapes[k])
            scores = self.node("MatMul", [q, k], (b, heads, s, s))
        else:
            scores = self.node("MatMul", [q, k], (b, heads, s, s))
            scores = self.node("Div", [scores, self.const(np.float32(scale))], (b, heads, s, s))
        if self.chance(0.5):
            mask = self.value(self.broadcastable((b, heads, s, s), widen=False), special=False)
            scores = self.node("Add", [scores, self.const(np.where(mask > 1, -10000.0, 0.0).astype(np.float32))],
                               (b, heads, s, s))
        last = self.negative([3], 4)[0]
        probs = self.node("Softmax", [scores], (b, heads, s, s), axis=last if self.chance(0.9) else 2)
        ctx = self.node("MatMul", [probs, v], (b, heads, s, d))
        merged = self.node("Transpose", [ctx], (b, s, heads, d), perm=[0, 2, 1, 3])
        if computed:
            target = self.node("Concat", [self.dims_of(merged, 0, 2), self.ints([heads * d])], None, axis=0)
        else:
            target = self.ints([b, s, heads * d] if self.chance(0.5) else [0, 0, -1])
        self.node("Reshape", [merged, target], (b, s, heads * d))

    def quantized(self):
        """A QDQ group as quantization tools write it: a graph input through
        QuantizeLinear and DequantizeLinear (u)int8, a layout op or none, a
        Conv or MatMul whose weight is an int8 constant dequantized (per
        output channel from opset 13), its result quantized and dequantized
        again. The rounding points read only a graph input or a Conv or
        MatMul's own result, which no rewrite computes differently."""
        if self.opset < 10:
            return
        x = self.pick_input()
        shape = self.shapes[x]
        y = self.qdq(x, shape)
        if len(shape) == 4 and not self.agnostic and self.chance(0.6):  # a Conv over [N, C, H, W]
            n, c, h, w = shape
            k = 3 if min(h, w) >= 3 and self.chance(0.5) else 1
            m = int(self.rng.integers(1, 5))
            weight = self.dequantized_weight((m, c, k, k), axis=0)
            out = (n, m, h - k + 1, w - k + 1)
            y = self.node("Conv", [y, weight] + ([self.const(self.value((m,), special=False))] if self.chance(0.5)
                                                 else []), out, kernel_shape=[k, k])
        else:
            if len(shape) >= 2 and not self.agnostic and self.chance(0.4):  # a layout op between, as exporters leave
                perm = list(range(len(shape) - 2)) + [len(shape) - 1, len(shape) - 2]
                y = self.node("Transpose", [y], tuple(shape[p] for p in perm), perm=perm)
                shape = self.shapes[y]
            m = int(self.rng.integers(1, 6))
            weight = self.dequantized_weight((shape[-1], m), axis=1)
            out = shape[:-1] + (m,)
            y = self.node("MatMul", [y, weight], out)
        y = self.qdq(y, out)
        if self.chance(0.3):
            self.node("Flatten", [y], (out[0], math.prod(out[1:])), axis=1)
        elif self.chance(0.5):
            self.node(str(self.rng.choice(["Relu", "Identity"])), [y], out)

    def qdq(self, x: str, shape) -> str:
        """Quantized and dequantized per tensor, uint8 or int8."""
        zero = np.uint8(128) if self.chance(0.5) else np.int8(int(self.rng.integers(-3, 4)))
        scale = self.const(np.float32(self.rng.choice([0.05, 0.1, 0.25])))
        point = self.const(zero, "z")
        q = self.node("QuantizeLinear", [x, scale, point], None)
        return self.node("DequantizeLinear", [q, scale, point], shape)

    def dequantized_weight(self, shape: tuple, axis: int) -> str:
        """An int8 constant dequantized, per `axis` from opset 13."""
        w = self.const(self.rng.integers(-127, 128, shape).astype(np.int8), "w")
        if self.opset >= 13 and self.chance(0.6):
            scale = self.const((self.rng.random(shape[axis]) * 0.02 + 0.005).astype(np.float32))
            point = self.const(np.zeros(shape[axis], np.int8), "z")
            return self.node("DequantizeLinear", [w, scale, point], shape, axis=axis)
        return self.node("DequantizeLinear", [w, self.const(np.float32(0.01)), self.const(np.int8(0), "z")], shape)

    OPS = [("unary", 8), ("binary_const", 10), ("binary_values", 6), ("transpose", 6), ("reshape", 5),
           ("flatten", 1), ("unsqueeze", 3), ("squeeze", 3), ("expand", 2), ("concat", 4), ("split", 3),
           ("slice", 4), ("gather", 2), ("reduce", 3), ("softmax", 2), ("matmul", 5), ("gemm", 2), ("where", 2),
           ("clip", 2), ("cast", 2), ("dropout", 1), ("dynamic_reshape", 2), ("conv", 4), ("pool", 1),
           ("layer_norm", 3), ("rms_norm", 1), ("gelu", 3), ("attention", 3), ("computed_weight", 2), ("branch", 1),
           ("logic", 2), ("activation", 2), ("conv_transpose", 1), ("gemm_batchnorm", 1), ("recurrent", 1),
           ("einsum", 1), ("residual_conv", 2), ("mlp_block", 2), ("quantized", 2), ("loop", 1),
           ("scan", 1), ("resize", 2)]

    # Ops that fix a size (a constant target or range): left out when agnostic.
    PINNING = {"reshape", "expand", "split", "slice", "gather", "squeeze", "gemm", "gemm_batchnorm", "where",
               "recurrent", "computed_weight", "branch", "loop", "scan"}

    def grow(self, steps: int):
        ops = [(n, w) for n, w in self.OPS if not (self.agnostic and n in self.PINNING)]
        names = [n for n, _ in ops]
        weights = np.array([w for _, w in ops], float)
        for _ in range(steps):
            op = str(self.rng.choice(names, p=weights / weights.sum()))
            made = len(self.order)
            getattr(self, op)()
            last = self.order[-1]
            if self.agnostic and op in ("conv", "conv_transpose", "pool") and len(self.order) > made:
                n, c, h, w = self.shapes[last]  # back to channels-last: the NHWC <-> NCHW flips of detection heads
                self.node("Transpose", [last], (n, h, w, c), perm=[0, 2, 3, 1])

    def model(self) -> onnx.ModelProto:
        last = self.order[-1]
        extra = [n for n in self.order[:-1] if n not in self.feeds and self.chance(0.15)]
        outputs = []
        for name in extra + [last]:
            shape = self.shapes[name]
            # (onnx's checker wants a rank)
            dims = shape if self.chance(0.7) and not self.agnostic else [None] * len(shape)
            outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, dims))
        stated = []  # exporters state intermediate shapes too: the passes may rely on them
        if not self.agnostic and self.chance(0.3):
            stated = [helper.make_tensor_value_info(n, TensorProto.FLOAT, self.shapes[n] if self.chance(0.8) else
                                                    [None] * len(self.shapes[n]))
                      for n in self.order if n not in self.feeds and n not in extra + [last] and self.chance(0.3)]
        inputs = list(self.inputs)
        ir = {7: 3, 8: 3, 9: 4, 10: 5}.get(self.opset, 10)  # (what the exporters of the time wrote)
        if self.chance(0.1) or ir == 3:  # every initializer listed as an input too (IR 3, keep_initializers_as_inputs)
            inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in self.initializers]
        graph = helper.make_graph(self.nodes, "random", inputs, outputs, self.initializers, value_info=stated)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)], ir_version=ir,
                                 producer_name="random_graphs")


def random_model(seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    builder = Builder(rng, int(rng.choice(OPSETS)), agnostic=bool(rng.random() < 0.3))
    for _ in range(int(rng.integers(1, 4))):
        if builder.agnostic:  # [B, S, E] or [N, H, W, C], the features fixed
            rank = int(rng.choice([3, 4]))
            # (no 1s: a named dim of 1 would broadcast by chance)
            builder.add_input(tuple(int(d) for d in rng.integers(2, 7, rank)), static_axes=(rank - 1,))
        else:
            rank = int(rng.integers(1, 5))
            builder.add_input(tuple(int(d) for d in rng.integers(1, 7, rank)))
    builder.grow(int(rng.integers(3, 40)))
    return builder.model(), builder.feeds


def _broadcasts(*shapes) -> bool:
    try:
        np.broadcast_shapes(*shapes)
        return True
    except ValueError:
        return False


def _factor(rng, size: int, rank: int) -> tuple:
    """`rank` dims whose product is `size`."""
    dims = []
    for _ in range(rank - 1):
        divisors = [d for d in range(1, size + 1) if size % d == 0]
        d = int(rng.choice(divisors))
        dims.append(d)
        size //= d
    return tuple(dims + [size])
