"""Fusion rules: a pattern (pattern.py), an optional check, and a
replacement written in Python. A rule is a pass: it has a name, runs in the
pipeline, can be skipped with --skip, and reports where it fired and where
it almost did (`near_misses`, shown by `--explain NAME`).

    class DoubleRelu(Rule):
        name = "fuse_double_relu"
        description = "Relu(Relu(x)) -> Relu(x)"

        def pattern(self, opset):
            return Op("Relu", Op("Relu", Var("x"), name="inner"), name="outer")

        def rewrite(self, m, edit):
            edit.replace_root("Relu", [m["x"]])

    pyonnxopt.passes.register(DoubleRelu())
"""

from __future__ import annotations

from typing import Optional, Union

import numpy as np

from pyonnxopt.fusion.pattern import Op
from pyonnxopt.fusion.values import dims
from pyonnxopt.model import Model, Node, Value, raw_data
from pyonnxopt.opset import default_opset
from pyonnxopt.passes.base import Pass, PassOptions, PassResult


def _given(inputs: list) -> list:
    """`inputs` without trailing omitted ones: onnxruntime treats a FusedConv
    with an empty bias input as a different node (its NCHWc transform skips
    it, 1.4x slower), and ONNX lets trailing optional inputs go unwritten."""
    inputs = list(inputs)
    while inputs and inputs[-1] is None:
        inputs.pop()
    return inputs


def node_id(n: Node) -> str:
    """How reports name a node (as the native passes do)."""
    if n.name:
        return n.name
    out = next((v for v in n.outputs if v is not None), None)
    return f"{n.op_type}->{out.name}" if out is not None else n.op_type


def opset_of(model: Model, graph, domain: str = "") -> int:
    """The opset of `domain` the graph's nodes follow (0 when not imported)."""
    return default_opset(model) if domain == "" else model.opset_imports.get(domain, 0)


def known_shape(v: Optional[Value]) -> Optional[list]:
    """The value's shape as the model states it (ints, or None per unknown
    dim), or None when not even the rank is known; `values.dims` keeps the
    symbols."""
    shape = dims(v)
    return None if shape is None else [d if isinstance(d, int) else None for d in shape]


def known_dtype(v: Optional[Value]) -> int:
    """The value's ONNX element type when stated, else 0."""
    if v is None:
        return 0
    if v.initializer is not None:
        return v.initializer.data_type
    return v.type.get("elem_type", 0) or 0


def take_over(graph, old: Value, new: Value, old_suffix: str = "_replaced") -> None:
    """Readers of `old` read `new` (defined before them), and `new` takes
    `old`'s name and, when it has none, its stated type: a graph output
    keeps its name. `old` lives on, renamed with `old_suffix`."""
    name, type_proto = old.name, old.type_proto
    old.name = graph.unique_name(f"{name}{old_suffix}")
    graph.replace_all_uses(old, new)
    new.name = name
    if type_proto is not None and new.type_proto is None:
        graph.set_value_type(new, type_proto)


def reshape_attrs(allowzero) -> Optional[dict]:
    """A new Reshape's attributes: `allowzero` only where set (the attribute
    exists from opset 14; 0 is its default)."""
    return {"allowzero": 1} if allowzero else None


def shape_from_dims(graph, parts: list, before: Node, hint: str) -> tuple:
    """A 1-D int64 shape built before `before` from `parts`: ints, each run
    of them one constant, and (value, axis) entries, that dim of value read
    at run time (Gather(Shape(value), [axis])); a Concat of the pieces, or
    the one piece. Returns (the shape, the nodes added)."""
    pieces, run, added = [], [], []

    def add(op_type: str, inputs: list, name: str) -> Value:
        n = graph.add_node(op_type, inputs, [graph.unique_name(name)], name=graph.unique_name(name), before=before)
        added.append(n)
        return n.outputs[0]

    def flush():
        if run:
            pieces.append(graph.add_initializer(graph.unique_name(f"{hint}_part"), *raw_data(np.array(run, np.int64))))
            run.clear()

    for e in parts:
        if isinstance(e, int):
            run.append(e)
            continue
        flush()
        value, axis = e
        shape = add("Shape", [value], f"{value.name}_shape")
        index = graph.add_initializer(graph.unique_name(f"{value.name}_axis{axis}"),
                                      *raw_data(np.array([axis], np.int64)))
        pieces.append(add("Gather", [shape, index], f"{value.name}_dim{axis}"))
    flush()
    if len(pieces) == 1:
        return pieces[0], added
    concat = add("Concat", pieces, hint)
    concat.producer.set_attribute("axis", 0)
    return concat, added


class Match:
    """One place the pattern matched: bindings by element name."""

    def __init__(self, model: Model, graph, names: list, bound: list, opset: int, options: PassOptions):
        self.model, self.graph, self.opset, self.options = model, graph, opset, options
        self._by_name = dict(zip(names, bound))
        self.root: Node = bound[0]
        self.nodes = [b for b in bound if isinstance(b, Node)]

    def __getitem__(self, name: str):
        return self._by_name[name]

    def __contains__(self, name: str) -> bool:
        """Whether the matched variant has an element of this name."""
        return name in self._by_name

    def array(self, name: str) -> np.ndarray:
        """A bound constant's data (read-only, no copy where possible)."""
        return self._by_name[name].initializer.numpy()

    def shape(self, name: str) -> Optional[list]:
        return known_shape(self._value(name))

    def dtype(self, name: str) -> int:
        return known_dtype(self._value(name))

    def _value(self, name: str) -> Optional[Value]:
        b = self._by_name[name]
        return b.outputs[0] if isinstance(b, Node) else b


class Edit:
    """The graph edits a replacement may make. New nodes go before the root,
    where every input the pattern saw is defined."""

    def __init__(self, m: Match):
        self._m = m
        self.graph = m.graph
        self.added: list = []

    def constant(self, array: np.ndarray, hint: str) -> Value:
        """A new initializer holding `array` (named after `hint`)."""
        return self.graph.add_initializer(self.graph.unique_name(hint), *raw_data(array))

    def node(self, op_type: str, inputs: list, attrs: Optional[dict] = None, *, domain: str = "",
             outputs: int = 1, hint: str = "", before: Optional[Node] = None, omitted: tuple = ()) -> list:
        """A new node before the root (or `before`, a matched node whose
        inputs the new node reads); returns its output values (None at the
        `omitted` output indices, left empty)."""
        hint = hint or f"{node_id(self._m.root)}_{op_type}"
        names = ["" if i in omitted else self.graph.unique_name(f"{hint}_out{i}" if outputs > 1 else hint)
                 for i in range(outputs)]
        n = self.graph.add_node(op_type, _given(inputs), names, name=self.graph.unique_name(hint), domain=domain,
                                before=before or self._m.root)
        self._set_attrs(n, attrs)
        self.added.append(n)
        return list(n.outputs)

    def squeeze(self, op_type: str, value: Value, axes: list, *, root: bool = False, hint: str = "") -> Value:
        """Squeeze or Unsqueeze of `value` along constant `axes` (an input
        from opset 13, an attribute before): a new node, or the root's
        replacement when `root`. Returns its output."""
        if self._m.opset >= 13:
            inputs, attrs = [value, self.constant(np.array(axes, np.int64), f"{op_type.lower()}_axes")], None
        else:
            inputs, attrs = [value], {"axes": list(axes)}
        if root:
            return self.replace_root(op_type, inputs, attrs).outputs[0]
        return self.node(op_type, inputs, attrs, hint=hint)[0]

    def dims_at_run_time(self, value: Value, start: int, end: int, hint: str) -> Value:
        """A 1-D int64 value: `value`'s dims start..end as they are at run
        time (Shape with start and end from opset 15, Shape and a Slice
        before; the caller makes sure of opset 10)."""
        if self._m.opset >= 15:
            return self.node("Shape", [value], {"start": start, "end": end}, hint=hint)[0]
        (whole,) = self.node("Shape", [value], hint=f"{hint}_shape")
        bounds = [self.constant(np.array([i], np.int64), f"{hint}_{i}") for i in (start, end)]
        return self.node("Slice", [whole, *bounds], hint=hint)[0]

    def shape_from_dims(self, parts: list, hint: str) -> Value:
        """`shape_from_dims` before the root: ints and (value, axis) reads."""
        shape, added = shape_from_dims(self.graph, parts, self._m.root, hint)
        self.added.extend(added)
        return shape

    def replace_value(self, old: Value, new: Value) -> None:
        """Readers of `old` (a matched node's output) read `new` (an output
        of a node made here, defined before them) instead, and `new` takes
        `old`'s name and stated type: a graph output keeps its name, and the
        rules after this one still see the shape (shape inference may not
        know a com.microsoft op). `old`'s node goes once nothing reads it."""
        take_over(self.graph, old, new)

    def replace_root(self, op_type: str, inputs: list, attrs: Optional[dict] = None, *, domain: str = "",
                     copy_attrs_from: Optional[Node] = None) -> Node:
        """A new node computing the root's outputs (same values, same names)."""
        root = self._m.root
        n = self.graph.replace_node(root, op_type, _given(inputs), name=root.name, domain=domain)
        if copy_attrs_from is not None:
            n.copy_attributes(copy_attrs_from)
        self._set_attrs(n, attrs)
        self.added.append(n)
        return n

    def bypass_root(self, value: Value) -> Optional[str]:
        """The root's readers read `value` instead and the root goes; a
        graph output keeps its name. None, or why not (graph unchanged):
        return that from `rewrite`."""
        root = self._m.root
        return self.graph.bypass(root, value, root.outputs[0])

    @staticmethod
    def _set_attrs(n: Node, attrs: Optional[dict]) -> None:
        for k, v in (attrs or {}).items():
            n.set_attribute(k, ("tensor", *raw_data(v)) if isinstance(v, np.ndarray) else v)


class Rule(Pass):
    """A fusion: `pattern(opset)` says where (one Op, or a list of variant
    Ops tried in order: the same math as exporters spell it), `check` may
    refuse with a reason, `rewrite` edits the graph (or returns a reason, having changed
    nothing). Matched nodes nobody reads afterwards are removed. A reason
    is a near miss (`--explain`); an empty one refuses quietly: the match
    is not the rule's case at all (a Reshape that changes dims, for a rule
    removing those that do not)."""

    min_opset: int = 1  # the rule does not run below this default-domain opset
    only_target: Optional[str] = None  # "ort": the rule does nothing for another --target
    after_cleanup = True
    # Whether a node of the root's type that the pattern did not fit is a near miss
    # (False for cleanups whose pattern every Reshape starts: that is no "almost").
    pattern_near_misses = True
    # ... and only once this many of the pattern's ops fit (at most all of them):
    # a Conv whose input is no Pad, an Add of no Mul, is no "almost" either.
    # 1 where the root is itself what the rule removes (a BatchNormalization).
    near_miss_min_ops = 2

    def pattern(self, opset: int) -> Union[Op, list]:
        """Called once per opset: the compiled pattern is kept on the rule."""
        raise TypeError(f"{type(self).__name__} must define pattern()")

    def check(self, m: Match) -> Optional[str]:
        return None

    def emits_ort_op(self, m: Match) -> bool:
        """Whether this match would become a com.microsoft op: the engine
        then refuses it inside a quantized (QDQ) group."""
        return self.only_target == "ort"

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        raise TypeError(f"{type(self).__name__} must define rewrite()")

    def run(self, model: Model, options: PassOptions = PassOptions()) -> PassResult:
        from pyonnxopt.fusion.engine import run_rule

        return run_rule(self, model, options)
