"""The native matcher against a plain Python reference, on random graphs and
random patterns: the same root nodes match, with the same bindings."""

import itertools

import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import pyonnxopt
from pyonnxopt import _core
from pyonnxopt.fusion import Op, Var
from pyonnxopt.fusion.pattern import compile_pattern, elements

UNARY, BINARY = ["Relu", "Neg"], ["Add", "Mul", "Sub"]


@st.composite
def graphs(draw):
    """A random DAG over two inputs; every value is a graph output so all are live."""
    values, nodes = ["a", "b"], []
    for i in range(draw(st.integers(1, 9))):
        op = draw(st.sampled_from(UNARY + BINARY))
        ins = [draw(st.sampled_from(values)) for _ in range(1 if op in UNARY else 2)]
        nodes.append(helper.make_node(op, ins, [f"v{i}"], name=f"n{i}"))
        values.append(f"v{i}")
    # Only some values are outputs, so exclusivity varies.
    outs = [values[-1]] + [v for v in values[2:-1] if draw(st.booleans())]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in "ab"],
                          [helper.make_tensor_value_info(v, TensorProto.FLOAT, [2]) for v in outs])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


_names = itertools.count()


@st.composite
def patterns(draw, depth=0, leaves=None):
    leaves = leaves if leaves is not None else [Var("x"), Var("y")]
    if depth > 0 and (depth >= 3 or draw(st.booleans())):
        return draw(st.sampled_from(leaves))
    op = draw(st.sampled_from(UNARY + BINARY + ["Add|Mul"]))
    n = 1 if op in UNARY else 2
    ins = [draw(patterns(depth + 1, leaves)) for _ in range(n)]
    return Op(op, *ins, name=f"p{next(_names)}", commutative=op in ("Add", "Mul", "Add|Mul"))


def reference(model: onnx.ModelProto, root: Op) -> set:
    """Root node names where `root` matches, by exhaustive search."""
    g = model.graph
    producer = {o: n for n in g.node for o in n.output}
    readers = {}
    for n in g.node:
        for i in n.input:
            readers.setdefault(i, []).append(n.name)
    outputs = {o.name for o in g.output}
    order = elements(root)

    def bind(e, value, b):
        """Yields every extension of bindings b that binds element e to `value`."""
        if isinstance(e, Var):
            if e.name in b and b[e.name] != value:
                return
            yield {**b, e.name: value}
            return
        n = producer.get(value)
        if n is None or n.op_type not in e.op_types:
            return
        if e.name in b and b[e.name] != n.name:
            return
        b = {**b, e.name: n.name}
        orders = [list(n.input)] + ([list(n.input)[::-1]] if e.commutative and len(n.input) == 2 else [])
        for ins in orders:
            if len(ins) != len(e.inputs):
                continue
            partial = [b]
            for pe, v in zip(e.inputs, ins):
                partial = [x for pb in partial for x in bind(pe, v, pb)]
            yield from partial

    found = set()
    for n in g.node:
        for b in bind(root, n.output[0], {}):
            matched = {b[e.name] for e in order if isinstance(e, Op)}
            ok = all(o not in outputs and all(r in matched for r in readers.get(o, []))
                     for e in order[1:] if isinstance(e, Op) for o in [producer_output(g, b[e.name])])
            if ok:
                found.add(n.name)
                break
    return found


def producer_output(g, node_name):
    return next(n.output[0] for n in g.node if n.name == node_name)


@settings(max_examples=300, deadline=None)
@given(graphs(), patterns())
def test_native_matcher_agrees_with_reference(model, root):
    m = pyonnxopt.load(model)
    pattern, names = compile_pattern(root, 17)
    found, near = m.graph.match(pattern)
    native = {bound[0].name for bound in found}
    assert native == reference(model, root)
    roots = {n.name for n in m.graph.nodes if n.op_type in root.op_types}
    assert native | {n.name for n, *_ in near} == roots and not native & {n.name for n, *_ in near}
    for bound in found:  # bindings are consistent: each op element's node has the bound op type
        for e, b in zip(elements(root), bound):
            if isinstance(e, Op):
                assert b.op_type in e.op_types


@settings(max_examples=200, deadline=None)
@given(graphs(), st.lists(patterns(), min_size=1, max_size=4), st.integers(0, 3))
def test_near_miss_book_keeps_the_deepest_of_every_pattern(model, roots, min_ops):
    """find_matches with a NearMisses book, over several patterns (a rule's
    variants), keeps at each root what match()'s near misses would give:
    the first of the deepest with at least `min_ops` ops, roots in the order
    they first came."""
    m = pyonnxopt.load(model)
    book, expected = _core.NearMisses(), {}
    for root in roots:
        pattern, _ = compile_pattern(root, 17)
        found, near = m.graph.match(pattern)
        assert [[b.name if b is not None else None for b in bound] for bound in
                m.graph.find_matches(pattern, book, min_ops)] == \
            [[b.name if b is not None else None for b in bound] for bound in found]
        assert m.graph.find_matches(pattern) == found  # without a book: the matches alone
        for anchor, why, depth, ops in near:
            if ops >= min_ops and depth > expected.get(anchor.name, (-1, ""))[0]:
                expected[anchor.name] = (depth, why)
    assert [(a.name, why) for a, why in book.items()] == [(a, why) for a, (_, why) in expected.items()]
    assert len(book) == len(expected)


def test_near_miss_book_holds_one_model():
    a, b = (pyonnxopt.load(helper.make_model(
        helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])]))) for _ in range(2))
    pattern, _ = compile_pattern(Op("Relu", Op("Neg", Var("x"))), 17)
    book = _core.NearMisses()
    a.graph.find_matches(pattern, book)
    assert [n.name for n, _ in book.items()] == [a.graph.nodes[0].name]
    with pytest.raises(ValueError, match="another model"):
        b.graph.find_matches(pattern, book)
