"""Passes broken on purpose, and models to catch them on, for the bisection tests."""

import contextlib

import numpy as np
from onnx import TensorProto, helper

from pyonnxopt.fusion import Op, Rule, Var
from pyonnxopt.fusion.rule import node_id
from pyonnxopt.passes import Pass, PassOptions, PassResult, register, unregister

BAD_PASS = "test_turn_adds_into_sums"
BAD_RULE = "test_hoist_neg"


class TurnAddsIntoSums(Pass):
    """Add(a, b) -> Sum(a, b), except the node named "bad", which becomes
    Sub(a, b): wrong on purpose. Pinned nodes stay, as for every pass."""

    name = BAD_PASS
    description = "Add -> Sum (Sub for the node named 'bad': wrong on purpose)"

    def run(self, model, options=PassOptions()):
        rewrites = []
        for n in list(model.graph.nodes):
            if n.op_type != "Add" or n.pinned:
                continue
            consumed = node_id(n)
            new = model.graph.replace_node(n, "Sub" if n.name == "bad" else "Sum", list(n.inputs), name=n.name)
            rewrites.append({"what": "add to sum", "consumed": [consumed], "produced": [node_id(new)]})
        return PassResult(bool(rewrites), {"rewrites": rewrites, "nodes_removed": len(rewrites),
                                           "nodes_added": len(rewrites)})


class HoistNeg(Rule):
    """Tanh(Neg(x)) -> Neg(Tanh(x)) (Tanh is odd); at the Tanh named
    "bad_tanh" it drops the Neg: wrong on purpose."""

    name = BAD_RULE
    description = "Tanh(Neg(x)) -> Neg(Tanh(x)) (the Neg dropped at 'bad_tanh': wrong on purpose)"

    def pattern(self, opset):
        return Op("Tanh", Op("Neg", Var("x"), name="neg"), name="tanh")

    def rewrite(self, m, edit):
        if m["tanh"].name == "bad_tanh":
            edit.replace_root("Tanh", [m["x"]])
        else:
            (t,) = edit.node("Tanh", [m["x"]])
            edit.replace_root("Neg", [t])
        return None


@contextlib.contextmanager
def broken_passes_registered():
    """The two broken passes in the registry (so in the default pipeline,
    after the built-in ones) for the duration of the block."""
    register(TurnAddsIntoSums())
    register(HoistNeg())
    try:
        yield
    finally:
        unregister(BAD_PASS)
        unregister(BAD_RULE)


def chain(adds: int, bad_add: int = -1, negs: int = 0, bad_tanh_at: int = -1, identities: int = 3, batch=2):
    """x -> [Identity]* -> (Add c_i -> Tanh)* -> (Neg -> Tanh -> Sin)* -> y:
    every step changes the values, so any wrong rewrite shows in y."""
    rng = np.random.default_rng(1)
    nodes, inits, cur = [], [], "x"
    for i in range(identities):
        nodes.append(helper.make_node("Identity", [cur], [f"id{i}"], name=f"identity{i}"))
        cur = f"id{i}"
    for i in range(adds):
        c = f"c{i}"
        inits.append(helper.make_tensor(c, TensorProto.FLOAT, [4], (rng.random(4) + 0.5).astype(np.float32)))
        nodes.append(helper.make_node("Add", [cur, c], [f"a{i}"], name="bad" if i == bad_add else f"add{i}"))
        nodes.append(helper.make_node("Tanh", [f"a{i}"], [f"t{i}"], name=f"tanh{i}"))
        cur = f"t{i}"
    for i in range(negs):
        nodes.append(helper.make_node("Neg", [cur], [f"n{i}"], name=f"neg{i}"))
        tanh = "bad_tanh" if i == bad_tanh_at else f"tanh_n{i}"
        nodes.append(helper.make_node("Tanh", [f"n{i}"], [f"m{i}"], name=tanh))
        nodes.append(helper.make_node("Sin", [f"m{i}"], [f"u{i}"], name=f"sin{i}"))
        cur = f"u{i}"
    nodes.append(helper.make_node("Identity", [cur], ["y"], name="out"))
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
