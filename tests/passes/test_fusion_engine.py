"""The fusion engine: native matching (DAGs, commutative inputs, constraints,
exclusivity), near misses with the failed condition, rewrites through Edit,
user-registered rules in the pipeline, and --explain."""

import numpy as np
import onnx
import pytest

import pyonnxopt
from pyonnxopt import passes
from pyonnxopt.fusion import Const, Op, Rule, Var
from pyonnxopt.passes import PassOptions

from helpers import ops, outputs, parse, structure


class DoubleRelu(Rule):
    name = "test_double_relu"
    description = "Relu(Relu(x)) -> Relu(x)"

    def pattern(self, opset):
        return Op("Relu", Op("Relu", Var("x"), name="inner"), name="outer")

    def rewrite(self, m, edit):
        edit.replace_root("Relu", [m["x"]])


class MulByOne(Rule):
    name = "test_mul_by_one"
    description = "x * 1 -> x"

    def pattern(self, opset):
        return Op("Mul", Var("x"), Const("one", value=1.0), commutative=True)

    def rewrite(self, m, edit):
        if m.shape("x") != m.shape("Mul"):
            return "the constant broadcasts x"
        return edit.bypass_root(m["x"])


def run(rule, text, opset=17, **options):
    m = pyonnxopt.load(parse(text, opset))
    r = rule.run(m, PassOptions(**options))
    assert m.check_invariants() == []
    onnx.checker.check_model(m.to_onnx(), full_check=True)
    return m, r


def test_chain_fuses_and_leaves_shared_intermediates():
    m, r = run(DoubleRelu(), """g (float[2,3] x) => (float[2,3] y, float[2,3] z) {
        a = Relu(x)
        b = Relu(a)
        y = Relu(b)
        z = Relu(a)
    }""")
    # Relu(Relu(b)) fused; a is read twice, so Relu(a) pairs do not fuse.
    assert structure(m) == [("Relu", ["x"], ["a"]), ("Relu", ["a"], ["y"]), ("Relu", ["a"], ["z"])]
    assert r.stats["rewrites"] == [{"what": "test_double_relu", "consumed": ["Relu->y", "Relu->b"], "produced": ["Relu->y"]}]
    assert "Relu->b: 'inner': its output 'a' is also read by 'Relu->z'" in r.stats["near_misses"]


class NegOfSum(Rule):
    name = "test_neg_of_sum"
    description = "Add(Neg(a), b) -> Sub(b, a)"

    def pattern(self, opset):
        return Op("Add", Op("Neg", Var("a"), name="neg"), Var("b"), name="add")

    def rewrite(self, m, edit):
        edit.replace_root("Sub", [m["b"], m["a"]])


def test_a_matched_node_reading_an_exclusive_output_through_a_variable_is_another_reader():
    # Add(n, n): the Add reads n where the pattern has the Neg and again as
    # b. A rule may remake an exclusive value for all its readers
    # (Edit.replace_value), trusting that only the pattern's edges read it:
    # fuse_matmul_scale scaled P in MatMul(P, Transpose(P)) twice that way.
    m, r = run(NegOfSum(), """g (float[3] a) => (float[3] y) {
        n = Neg(a)
        y = Add(n, n)
    }""")
    assert not r.modified and ops(m) == ["Neg", "Add"]
    assert "Add->y: 'neg': its output 'n' is also read by 'Add->y'" in r.stats["near_misses"]


def test_commutative_constant_value_and_graph_output_name_kept():
    m, r = run(MulByOne(), """g (float[2,3] x) => (float[2,3] y) {
        a = Relu(x)
        one = Constant <value = float[1] {1.0}> ()
        y = Mul(one, a)
    }""")
    passes.get("fold_constants").run(m)
    passes.get("infer_shapes").run(m)
    r = MulByOne().run(m)
    assert r.modified and ops(m) == ["Relu"] and m.graph.nodes[0].outputs[0].name == "y"


def test_value_constraint_fails_with_reason():
    m, r = run(MulByOne(), """g (float[2,3] x) => (float[2,3] y) <float[1] two = {2.0}> {
        y = Mul(x, two)
    }""")
    assert not r.modified
    assert r.stats["near_misses"] == ["Mul->y: 'one': 'two' holds 2.000000, needs every element 1.000000"]


def test_check_refusal_is_a_near_miss():
    m, r = run(MulByOne(), """g (float[3] x) => (float[2,3] y) <float[2,1] one = {1.0, 1.0}> {
        y = Mul(x, one)
    }""")
    assert not r.modified and r.stats["near_misses"] == ["Mul->y: the constant broadcasts x"]



class QuietMulByOne(MulByOne):
    """A cleanup-like rule: pattern misses are no near misses, and a
    refusal with an empty reason is quiet."""
    name = "test_quiet_mul_by_one"
    pattern_near_misses = False

    def rewrite(self, m, edit):
        if m.shape("x") != m.shape("Mul"):
            return ""
        return edit.bypass_root(m["x"])


def test_quiet_refusals_and_pattern_misses_are_no_near_misses():
    m, r = run(QuietMulByOne(), """g (float[2,3] x) => (float[2,3] y) <float[1] two = {2.0}> {
        y = Mul(x, two)
    }""")
    assert not r.modified and r.stats["near_misses"] == []
    m, r = run(QuietMulByOne(), """g (float[3] x) => (float[2,3] y) <float[2,1] one = {1.0, 1.0}> {
        y = Mul(x, one)
    }""")
    assert not r.modified and r.stats["near_misses"] == []

class LayerNormShape(Rule):
    """A DAG: x is read by ReduceMean and Sub; d by Mul twice."""

    name = "test_dag"
    description = "variance of x"

    def pattern(self, opset):
        x = Var("x")
        d = Op("Sub", x, Op("ReduceMean", x, name="mean"), name="d")
        return Op("ReduceMean", Op("Mul", d, d, name="sq"), name="var")

    def rewrite(self, m, edit):
        d = m["d"].outputs[0]
        edit.replace_root("ReduceMean", [edit.node("Mul", [d, d])[0]], copy_attrs_from=m.root)


def test_dag_binds_shared_elements_once():
    text = """g (float[2,3] x, float[2,3] w) => (float[2,1] y, float[2,1] z) {
        m = ReduceMean <axes = [1]> (x)
        d = Sub(x, m)
        s = Mul(d, d)
        y = ReduceMean <axes = [1]> (s)
        m2 = ReduceMean <axes = [1]> (w)
        d2 = Sub(x, m2)
        s2 = Mul(d2, d2)
        z = ReduceMean <axes = [1]> (s2)
    }"""
    m, r = run(LayerNormShape(), text, opset=17)
    assert len(r.stats["rewrites"]) == 1  # the second reads the mean of w, not of x
    assert any("not the same value both times" in x for x in r.stats["near_misses"])


def test_attribute_defaults_decide_absent_attributes():
    class BnInference(Rule):
        name = "test_bn"
        description = "matches inference BatchNormalization only"

        def pattern(self, opset):
            return Op("BatchNormalization", Var("x"), Var("s"), Var("b"), Var("m"), Var("v"),
                      attrs={"training_mode": 0})

        def rewrite(self, m, edit):
            return "recognised"

    text = """g (float[1,2,3] x, float[2] s) => (float[1,2,3] y, float[1,2,3] z, float[2] zm, float[2] zv) {
        y = BatchNormalization(x, s, s, s, s)
        z, zm, zv = BatchNormalization <training_mode = 1> (x, s, s, s, s)
    }"""
    m, r = run(BnInference(), text, opset=15)
    assert sorted(r.stats["near_misses"]) == ["BatchNormalization->y: recognised",
                                             "BatchNormalization->z: 'BatchNormalization': 'BatchNormalization->z' attribute training_mode is not 0"]


def test_pinned_nodes_never_match():
    m = pyonnxopt.load(parse("""g (float[2] x) => (float[2] y) { a = Relu(x)  y = Relu(a) }"""))
    m.graph.nodes[0].pinned = True
    r = DoubleRelu().run(m)
    assert not r.modified and "pinned" in r.stats["near_misses"][0]


def test_edit_constant_and_attributes_are_written():
    class MulToScaledRelu(Rule):
        name = "test_edit"
        description = "Relu(x) * c -> LeakyRelu-free form: Mul(Relu(x), 2c)/2 (exercise Edit)"

        def pattern(self, opset):
            return Op("Mul", Op("Relu", Var("x"), name="relu"), Const("c"))

        def rewrite(self, m, edit):
            c2 = edit.constant(m.array("c") * 2, "c2")
            half = edit.constant(np.array(0.5, np.float32), "half")
            (t,) = edit.node("Mul", [m["relu"].outputs[0], c2])
            edit.replace_root("Mul", [t, half])

    text = """g (float[2,3] x) => (float[2,3] y) <float[3] c = {1.0, 2.0, 3.0}> { a = Relu(x)  y = Mul(a, c) }"""
    before = parse(text)
    m, r = run(MulToScaledRelu(), text)
    assert ops(m) == ["Relu", "Mul", "Mul"] and m.graph.nodes[-1].outputs[0].name == "y"
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(outputs(m, {"x": x})[0], outputs(before, {"x": x})[0], rtol=1e-6)


def test_user_rule_runs_in_the_pipeline_and_explain(tmp_path, capsys):
    from pyonnxopt.cli import main

    passes.register(DoubleRelu())
    try:
        path = tmp_path / "m.onnx"
        onnx.save(parse("""g (float[2] x) => (float[2] y, float[2] z) { a = Relu(x)  b = Relu(a)  y = Relu(b)  z = Relu(a) }"""), path)
        # simplify_algebra would fold Relu(Relu(x)) before the user rule sees it.
        assert main(["optimize", str(path), str(tmp_path / "o.onnx"), "--explain", "test_double_relu",
                     "--skip", "simplify_algebra"]) == 0
        text = capsys.readouterr().out
        assert "test_double_relu: 1 fired" in text and "is also read by" in text
        assert main(["optimize", str(path), str(tmp_path / "o.onnx"), "--explain", "nope"]) == 2
        assert "--explain nope: not a fusion rule" in capsys.readouterr().err
    finally:
        passes.unregister("test_double_relu")


def test_pattern_errors_are_plain():
    with pytest.raises(ValueError, match="two elements named"):
        from pyonnxopt.fusion.pattern import compile_pattern

        compile_pattern(Op("Add", Var("x"), Var("x", dtype=np.float32)), 17)


class ScaledRelu(Rule):
    """Two spellings of one thing: Relu(x) * 2 and Relu(x) + Relu(x)."""

    name = "test_variants"
    description = "Relu(x)*2 or Relu(x)+Relu(x) -> Relu(x*2)"

    def pattern(self, opset):
        relu = Op("Relu", Var("x"), name="relu")
        return [Op("Mul", Op("Relu", Var("x"), name="relu"), Const("two", value=2.0), name="root"),
                Op("Add", relu, relu, name="root")]

    def rewrite(self, m, edit):
        (t,) = edit.node("Mul", [m["x"], edit.constant(np.array(2.0, np.float32), "two")])
        edit.replace_root("Relu", [t])


def test_variant_patterns_each_fire_and_the_closest_miss_is_reported():
    text = """g (float[2] x) => (float[2] y, float[2] z, float[2] w) <float two = {2.0}, float three = {3.0}> {
        a = Relu(x)
        y = Mul(a, two)
        b = Relu(x)
        z = Add(b, b)
        c = Exp(x)
        w = Mul(c, three)
    }"""
    before = parse(text)
    m, r = run(ScaledRelu(), text)
    assert [rw["consumed"] for rw in r.stats["rewrites"]] == [["Mul->y", "Relu->a"], ["Add->z", "Relu->b"]]
    # Only the Mul variant can root at Mul->w; it fails at its first input,
    # so only the root's type fits: a Mul, not an almost-match.
    assert r.stats["near_misses"] == []
    x = np.array([-1.0, 2.0], np.float32)
    for have, want in zip(outputs(m, {"x": x}), outputs(before, {"x": x})):
        np.testing.assert_array_equal(have, want)


def test_the_variant_that_bound_most_explains_the_miss():
    class TwoMuls(ScaledRelu):
        name = "test_closest"

        def pattern(self, opset):
            return [Op("Mul", Op("Exp", Var("x"), name="exp"), Const("two", value=2.0)),
                    Op("Mul", Op("Relu", Var("x"), name="relu"), Const("two", value=2.0))]

    m, r = run(TwoMuls(), """g (float[2] x) => (float[2] y) <float three = {3.0}> { a = Relu(x)  y = Mul(a, three) }""")
    assert not r.modified
    assert r.stats["near_misses"] == ["Mul->y: 'two': 'three' holds 3.000000, needs every element 2.000000"]


NEAR_MISS_GRAPH = """g (float[2] x) => (float[2] y, float[2] z, float[2] w) <float two = {2.0}, float three = {3.0}> {
    a = Relu(x)
    y = Mul(a, three)
    b = Exp(x)
    z = Mul(b, two)
    w = Mul(x, three)
}"""


def test_a_near_miss_needs_two_of_the_patterns_ops_by_default():
    class ReluTimesTwo(ScaledRelu):
        name = "test_min_ops"

        def pattern(self, opset):
            return Op("Mul", Op("Relu", Var("x"), name="relu"), Const("two", value=2.0))

    # Mul->y: the Relu fits too, so its constant is the reason; Mul->z and
    # Mul->w: only the root's type fits.
    _, r = run(ReluTimesTwo(), NEAR_MISS_GRAPH)
    assert r.stats["near_misses"] == ["Mul->y: 'two': 'three' holds 3.000000, needs every element 2.000000"]

    class EveryMul(ReluTimesTwo):
        near_miss_min_ops = 1

    _, r = run(EveryMul(), NEAR_MISS_GRAPH)
    assert r.stats["near_misses"] == ["Mul->y: 'two': 'three' holds 3.000000, needs every element 2.000000",
                                      "Mul->z: 'relu': 'Exp->b' is not Relu",
                                      "Mul->w: 'relu': 'x' is not produced by a node"]


def test_a_one_op_pattern_needs_only_its_root():
    class TimesTwo(ScaledRelu):
        name = "test_one_op"

        def pattern(self, opset):
            return Op("Mul", Var("x"), Const("two", value=2.0))

    _, r = run(TimesTwo(), NEAR_MISS_GRAPH)
    assert sorted(r.stats["near_misses"]) == [
        "Mul->w: 'two': 'three' holds 3.000000, needs every element 2.000000",
        "Mul->y: 'two': 'three' holds 3.000000, needs every element 2.000000"]
    assert [rw["consumed"] for rw in r.stats["rewrites"]] == [["Mul->z"]]


def test_variants_whose_ops_the_graph_lacks_are_not_tried_unless_they_could_come_near():
    class CountedReluTimesTwo(ScaledRelu):
        name = "test_counted"

        def pattern(self, opset):
            return [Op("Mul", Op("Softplus", Var("x"), name="sp"), Const("two", value=2.0)),
                    Op("Mul", Op("Relu", Var("x"), name="relu"), Const("two", value=2.0))]

    # No Softplus in the graph: the first variant is skipped; the Relu one
    # still fires and explains its miss as before.
    _, r = run(CountedReluTimesTwo(), NEAR_MISS_GRAPH)
    assert r.stats["near_misses"] == ["Mul->y: 'two': 'three' holds 3.000000, needs every element 2.000000"]

    class EveryMul(CountedReluTimesTwo):
        near_miss_min_ops = 1  # the Mul alone is near: the Softplus variant still runs and explains

    _, r = run(EveryMul(), NEAR_MISS_GRAPH)
    assert any("is not Softplus" in x or "is not Relu" in x for x in r.stats["near_misses"])
    from pyonnxopt.fusion.engine import _cannot_fit

    needs = [frozenset({"Mul"}), frozenset({"Softplus"})]
    assert _cannot_fit(needs, {"Mul", "Relu"}, 2, True) and not _cannot_fit(needs, {"Mul", "Relu"}, 1, True)
    assert _cannot_fit(needs, {"Mul"}, 1, False) and not _cannot_fit(needs, {"Mul", "Softplus"}, 2, False)


class NegAbs(Rule):
    """Abs(Neg(x)) -> Abs(x), made with edit.node + edit.replace_value."""

    name = "test_replace_value"
    description = "Abs(Neg(x)) -> Abs(x)"

    def pattern(self, opset):
        return Op("Abs", Op("Neg", Var("x"), name="neg"), name="abs")

    def rewrite(self, m, edit):
        (t,) = edit.node("Abs", [m["x"]], before=m["neg"])
        edit.replace_value(m.root.outputs[0], t)


def test_replace_value_keeps_names_and_types_and_stale_matches_are_matched_again():
    text = """g (float[2] x) => (float[2] z, float[2] y) { a = Neg(x)  y = Abs(a)  b = Neg(y)  c = Abs(b)  z = Relu(c) }"""
    before = parse(text)
    m = pyonnxopt.load(before)
    passes.get("infer_shapes").run(m)
    r = NegAbs().run(m)
    assert m.check_invariants() == []
    # The second match read y, which the first rewrite replaced: it is matched
    # again in a second round, not left for the next pipeline iteration.
    assert structure(m) == [("Abs", ["x"], ["y"]), ("Abs", ["y"], ["c"]), ("Relu", ["c"], ["z"])]
    assert len(r.stats["rewrites"]) == 2
    assert m.graph.value("c").type["shape"] == [2]  # the replaced value's stated type stays
    x = np.array([-1.0, 2.0], np.float32)
    for have, want in zip(outputs(m, {"x": x}), outputs(before, {"x": x})):
        np.testing.assert_array_equal(have, want)


def test_rules_run_in_subgraphs():
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    branch_out = helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Relu", ["r"], ["t"])],
                               "then", [], [branch_out])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "else", [], [branch_out])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)], "g", [x, c], [y])
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m = pyonnxopt.load(proto)
    r = DoubleRelu().run(m)
    assert r.modified and m.check_invariants() == []
    then_branch = next(s for s in m.graph.nodes[0].subgraphs if s.name == "then")
    assert [n.op_type for n in then_branch.nodes] == ["Relu"] and then_branch.nodes[0].outputs[0].name == "t"
    feeds = {"x": np.array([-1.0, 2.0], np.float32), "c": np.array(True)}
    assert np.array_equal(outputs(m, feeds)[0], outputs(proto, feeds)[0])


def test_readme_rule_example_works():
    import os
    import re

    readme = open(os.path.join(os.path.dirname(__file__), "..", "..", "README.md")).read()
    code = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "class MulByOne" in b)
    scope: dict = {}
    exec(code, scope)
    try:
        proto = parse("""g (float[2,3] x) => (float[2,3] y) <float[1] one = {1.0}> { a = Relu(x)  y = Mul(a, one) }""")
        # simplify_algebra would remove x * 1 before the user rule sees it.
        optimized, report = pyonnxopt.optimize(proto, skip=["simplify_algebra"])
        assert ops(optimized) == ["Relu"] and optimized.graph.outputs[0].name == "y"
        assert any(r["name"] == "fuse_mul_by_one" and r["rewrites"] for r in report["passes"])
    finally:
        passes.unregister("fuse_mul_by_one")


def test_commutative_order_is_retried_when_exclusivity_fails():
    class AddOfRelu(Rule):
        name = "test_add_relu"
        description = "Add(Relu(x), y)"

        def pattern(self, opset):
            return Op("Add", Op("Relu", Var("x"), name="relu"), Var("y"), commutative=True)

        def rewrite(self, m, edit):
            return f"matched relu={m['relu'].outputs[0].name}"

    m, r = run(AddOfRelu(), """g (float[2] a, float[2] b) => (float[2] y, float[2] z) {
        ra = Relu(a)
        rb = Relu(b)
        y = Add(ra, rb)
        z = Neg(ra)
    }""")
    # Relu(a) is read by Neg too, so only the swapped order (Relu(b)) may match.
    assert r.stats["near_misses"] == ["Add->y: matched relu=rb"]


def test_quantized_guard_reads_past_an_omitted_output():
    """An --target ort rule matching a node whose middle output is omitted
    (LayerNormalization's Mean): the QDQ guard skips the empty slot."""

    class LnToIdentity(Rule):
        name = "test_ln_to_identity"
        description = "LayerNormalization -> Identity (test only)"
        only_target = "ort"

        def pattern(self, opset):
            return Op("LayerNormalization", Var("x"), Var("s"), Var("b"), name="ln")

        def rewrite(self, m, edit):
            return "test: never rewrites"

    m = pyonnxopt.load(parse("""g (float[2,4] x, float[4] s, float[4] b) => (float[2,4] y, float[2,1] isd) {
        y, , isd = LayerNormalization <axis = -1> (x, s, b)
    }"""))
    r = LnToIdentity().run(m, PassOptions(target="ort"))
    assert not r.modified


def test_a_check_that_raises_refuses_that_match_only():
    """check() changes nothing, so a bug there costs the one rewrite, named as
    a bug, not the whole optimization."""
    class Buggy(DoubleRelu):
        name = "test_buggy_check"

        def check(self, m):
            return {}["missing"]

    m, r = run(Buggy(), """g (float[2,3] x) => (float[2,3] y) {
        a = Relu(x)
        y = Relu(a)
    }""")
    assert ops(m) == ["Relu", "Relu"] and not r.modified
    assert any("the rule's check failed (KeyError: 'missing'): a bug in the rule" in x for x in r.stats["near_misses"])
