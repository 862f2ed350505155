"""run_passes: order, fixed point, skip, errors, Python-registered passes."""

import pytest
from onnx import parser

import pyonnxopt
from pyonnxopt.passes import Pass, PassResult, register, run_passes, unregister

MODEL = parser.parse_model('<ir_version: 8, opset_import: ["" : 17]>' + """
    g (float[3] x) => (float[3] y) {
        a = Relu(x)
        b = Neg(a)
        y = Abs(a)
    }""")


def test_runs_to_a_fixed_point():
    m, report = run_passes(MODEL, passes=["eliminate_dead_code"])
    assert report.converged and report.iterations == 2
    assert [(r.name, r.iteration, r.modified) for r in report.runs] == [
        ("eliminate_dead_code", 1, True), ("eliminate_dead_code", 2, False)]
    assert [n.op_type for n in m.graph.nodes] == ["Relu", "Abs"]


def test_skip_and_unknown_names():
    m, report = run_passes(MODEL, passes=["eliminate_dead_code"], skip=["eliminate_dead_code"])
    assert report.runs == [] and len(m.graph) == 3
    with pytest.raises(KeyError, match="unknown pass 'no_such_pass'; known: .*eliminate_dead_code"):
        run_passes(MODEL, passes=["no_such_pass"])


class Broken(Pass):
    name = "test_broken_pass"
    description = "fails on purpose"

    def run(self, model, options):
        raise RuntimeError("boom")


class CountNodes(Pass):
    name = "test_count_nodes"
    description = "changes nothing, counts nodes"

    def run(self, model, options):
        return PassResult(False, {"nodes": len(model.graph)})


@pytest.fixture
def python_passes():
    register(Broken())
    register(CountNodes())
    yield
    unregister(Broken.name)
    unregister(CountNodes.name)


def test_python_passes_and_errors_name_the_pass_and_those_before(python_passes):
    m, report = run_passes(MODEL, passes=["eliminate_dead_code", "test_count_nodes"])
    assert report.runs[1].stats == {"nodes": 2, "nodes_removed": 0, "nodes_added": 0, "refused": [], "rewrites": []}
    with pytest.raises(pyonnxopt.PassError, match="pass test_broken_pass failed after eliminate_dead_code: boom"):
        run_passes(MODEL, passes=["eliminate_dead_code", "test_broken_pass"])
    with pytest.raises(ValueError, match="taken"):
        register(CountNodes())
    with pytest.raises(ValueError, match="native"):
        unregister("eliminate_dead_code")


class WaitingCount(CountNodes):
    name = "test_waiting_count"
    description = "waits for cleanup, counts nodes"
    after_cleanup = True


def test_a_pass_that_waits_sees_the_cleaned_graph():
    register(WaitingCount())
    try:
        m, report = run_passes(MODEL, passes=["eliminate_dead_code", "test_waiting_count"])
        # iteration 1: dead code went, so the waiting pass sat out; iteration 2: nothing changed first
        assert [(r.name, r.iteration) for r in report.runs] == [
            ("eliminate_dead_code", 1), ("eliminate_dead_code", 2), ("test_waiting_count", 2)]
        assert report.runs[-1].stats["nodes"] == 2 and report.converged
        # the last allowed iteration runs it anyway
        _, capped = run_passes(MODEL, passes=["eliminate_dead_code", "test_waiting_count"], max_iterations=1)
        assert [r.name for r in capped.runs] == ["eliminate_dead_code", "test_waiting_count"]
        assert capped.runs[-1].stats["nodes"] == 2
    finally:
        unregister(WaitingCount.name)


class FusionLike(Pass):
    """Waits for cleanup; its first run changes the model (a fusion firing)."""

    name = "test_fusion_like"
    description = "reports a change once"
    after_cleanup = True

    def __init__(self):
        self.fired = False

    def run(self, model, options):
        fired, self.fired = not self.fired, True
        return PassResult(fired, {})


class AfterFusions(CountNodes):
    name = "test_after_fusions"
    description = "waits for the fusions, counts nodes"
    after_cleanup = True
    after_fusions = True


def test_a_pass_that_waits_for_the_fusions_needs_a_whole_quiet_round():
    register(FusionLike())
    register(AfterFusions())
    try:
        order = ["test_fusion_like", "test_after_fusions", "eliminate_dead_code"]
        _, report = run_passes(MODEL, passes=order)
        # 1: the fusion fires, test_after_fusions has had no turn yet, dead
        # code goes; 2: nothing changes, but dead code did after its turn in
        # 1, so it waits again; 3: a whole quiet round since its turn in 2
        assert [(r.name, r.iteration) for r in report.runs if r.name == "test_after_fusions"] == [
            ("test_after_fusions", 3)]
        assert report.converged and report.iterations == 3
        # an iteration in which a pass waited is not the fixed point, even if nothing changed
        assert all(not r.modified for r in report.runs if r.iteration == 3)
    finally:
        unregister(FusionLike.name)
        unregister(AfterFusions.name)


class AddIdentity(Pass):
    """Puts an Identity before the graph output every time: with
    eliminate_identity after it, each iteration ends where the last did."""

    name = "test_add_identity"
    description = "an Identity before the output"

    def run(self, model, options):
        g = model.graph
        out = g.outputs[0]
        node = out.producer
        fresh = g.unique_name("again")
        g.add_node("Identity", [node.inputs[0]], [fresh], name=g.unique_name("again"), before=node)
        g.set_input(node, 0, g.value(fresh))
        return PassResult(True, {"nodes_added": 1})


def test_an_iteration_that_gives_back_an_earlier_model_ends_the_run():
    register(AddIdentity())
    try:
        m, report = run_passes(MODEL, passes=["test_add_identity", "eliminate_identity"], max_iterations=20)
        # 1 and 2 both end with the model they started with; 3 runs every pass once more, as the last would
        assert report.cycled and not report.converged and report.iterations == 3
        assert [n.op_type for n in m.graph.nodes] == ["Relu", "Neg", "Abs"]
    finally:
        unregister(AddIdentity.name)


def test_a_pass_with_nothing_new_since_its_last_run_is_skipped(python_passes):
    register(AfterFusions())
    try:
        _, report = run_passes(MODEL, passes=["eliminate_dead_code", "test_count_nodes", "test_after_fusions"])
        # 1: dead code goes, the count sees it, test_after_fusions waits; 2: dead
        # code looks again (its own change), the count has seen every change: skipped
        assert [(r.name, r.iteration) for r in report.runs] == [
            ("eliminate_dead_code", 1), ("test_count_nodes", 1), ("eliminate_dead_code", 2),
            ("test_after_fusions", 2)]
        assert report.converged
    finally:
        unregister(AfterFusions.name)


class Retype(Pass):
    """States a value's type on its first run (modified=False, retyped=True)."""

    name = "test_retype"
    description = "types a value once"

    def __init__(self, idempotent: bool):
        self.idempotent = idempotent
        self.runs = 0

    def run(self, model, options):
        self.runs += 1
        return PassResult(False, {}, retyped=self.runs == 1)


@pytest.mark.parametrize("idempotent", [False, True])
def test_a_retyped_model_is_new_to_the_passes_after(python_passes, idempotent):
    register(Retype(idempotent))
    try:
        _, report = run_passes(MODEL, passes=["eliminate_dead_code", "test_count_nodes", "test_retype"])
        # 2: the count runs again, since the types changed after its turn;
        # an idempotent pass does not, after its own change
        assert [r.name for r in report.runs if r.iteration == 2] == [
            "eliminate_dead_code", "test_count_nodes", *([] if idempotent else ["test_retype"])]
    finally:
        unregister(Retype.name)
