"""Per-pass bisection: a pass broken on purpose among correct ones must be
named, with the one rewrite of it that is wrong, in O(log n) checks; the
rollback model keeps every other rewrite and matches the original."""

import dataclasses
from collections import Counter

import onnx
import pytest
from bisect_helpers import BAD_PASS, BAD_RULE, broken_passes_registered, chain

import pyonnxopt
from pyonnxopt import check
from pyonnxopt.errors import VerificationError
from pyonnxopt.passes import Pass, PassOptions, PassResult, register, run_passes, unregister
from pyonnxopt.verify.bisect import bisect, describe, log2_bound, render_bisect


@pytest.fixture
def broken_passes():
    with broken_passes_registered():
        yield

def test_names_the_pass_and_the_wrong_rewrite_and_rolls_it_back(broken_passes, tmp_path):
    model = chain(adds=8, bad_add=5)
    out = tmp_path / "rolled_back.onnx"
    result = bisect(model, rollback_output=out)
    assert not result["ok"]
    assert result["pass"] == BAD_PASS and result["iteration"] == 1
    assert result["first_mismatch"].startswith("y:")
    assert result["rewrite"] == {"what": "add to sum", "consumed": ["bad"], "produced": ["bad"]}
    assert result["rewrites"] == 8
    assert result["isolation_checks"] <= log2_bound(8) == 4
    rb = result["rollback"]
    assert rb["ok"] and rb["complete"] and rb["path"] == str(out)
    rolled_back = [(r["what"], r["pass"], r["rewrite"]["consumed"]) for r in rb["rolled_back"]]
    assert rolled_back == [("rewrite", BAD_PASS, ["bad"])]
    # Only that rewrite is rolled back: the other Adds became Sums, the
    # Identities are gone, and the result matches the original.
    rolled = onnx.load(out)
    ops = Counter(n.op_type for n in rolled.graph.node)
    assert ops == {"Sum": 7, "Add": 1, "Tanh": 8}
    assert [n.name for n in rolled.graph.node if n.op_type == "Add"] == ["bad"]
    assert check.compare(model.SerializeToString(), str(out)).first_mismatch is None


def test_wrong_rewrite_inside_a_rule(broken_passes, tmp_path):
    model = chain(adds=0, negs=6, bad_tanh_at=2)
    result = bisect(model, rollback_output=tmp_path / "rb.onnx")
    assert result["pass"] == BAD_RULE
    assert result["rewrites"] == 6
    assert set(result["rewrite"]["consumed"]) == {"neg2", "bad_tanh"}
    assert result["isolation_checks"] <= log2_bound(6)
    assert result["rollback"]["ok"]
    ops = Counter(n.op_type for n in onnx.load(tmp_path / "rb.onnx").graph.node)
    # The other five hoisted (Neg after Tanh), the wrong one left as it was.
    assert ops == {"Neg": 6, "Tanh": 6, "Sin": 6}
    kinds = {n.name: n.op_type for n in onnx.load(tmp_path / "rb.onnx").graph.node}
    assert kinds["bad_tanh"] == "Tanh" and kinds["neg2"] == "Neg" and kinds["tanh_n0"] == "Neg"
    assert BAD_RULE in describe(result) and "bad_tanh" in describe(result)


def test_two_broken_passes_first_named_both_rolled_back(broken_passes, tmp_path):
    # The Add pass runs before the rule in the pipeline (registration order).
    result = bisect(chain(adds=3, bad_add=0, negs=3, bad_tanh_at=1), rollback_output=tmp_path / "rb.onnx")
    assert result["pass"] == BAD_PASS and result["rewrite"]["consumed"] == ["bad"]
    rb = result["rollback"]
    assert [(r["pass"], sorted(r["rewrite"]["consumed"])) for r in rb["rolled_back"]] == [
        (BAD_PASS, ["bad"]), (BAD_RULE, ["bad_tanh", "neg1"])]
    assert rb["ok"] and rb["complete"]
    ops = Counter(n.op_type for n in onnx.load(tmp_path / "rb.onnx").graph.node)
    assert ops == {"Sum": 2, "Add": 1, "Tanh": 6, "Neg": 3, "Sin": 3}
    assert check.compare(chain(adds=3, bad_add=0, negs=3, bad_tanh_at=1).SerializeToString(),
                         str(tmp_path / "rb.onnx")).first_mismatch is None


def test_clean_pipeline_is_ok(broken_passes, cnn_path):
    result = bisect(chain(adds=4, negs=2))  # no node named bad: every rewrite is right
    assert result["ok"] and result["pass"] is None and result["rewrite"] is None and result["rollback"] is None
    assert result["checks"] == result["passes_checked"] >= 3  # identities, adds, negs at least
    cnn = bisect(str(cnn_path))
    assert cnn["ok"] and cnn["checks"] >= 1 and cnn["original"] == str(cnn_path)


def test_checks_grow_with_log_of_rewrites(broken_passes):
    costs = {}
    for n in (4, 32):
        result = bisect(chain(adds=n, bad_add=n - 2, identities=0), passes=[BAD_PASS])
        assert result["rewrite"]["consumed"] == ["bad"]
        costs[n] = result["isolation_checks"]
        assert costs[n] <= log2_bound(n)
    assert costs[32] <= costs[4] + 3  # 8x the rewrites: 3 more checks, not 28


def test_user_pins_are_kept_through_the_search(broken_passes, tmp_path):
    # "add1" is excluded from optimization: it must stay an Add in the rollback too.
    result = bisect(chain(adds=4, bad_add=2), exclude_nodes=["add1"], rollback_output=tmp_path / "rb.onnx")
    assert result["rewrite"]["consumed"] == ["bad"] and result["rewrites"] == 3
    adds = sorted(n.name for n in onnx.load(tmp_path / "rb.onnx").graph.node if n.op_type == "Add")
    assert adds == ["add1", "bad"]


class SubEverything(Pass):
    """Turns every Add into Sub, listing no rewrites: nothing to isolate."""

    name = "test_silent_subs"
    description = "Add -> Sub, unlisted (wrong on purpose)"

    def run(self, model, options=PassOptions()):
        adds = [n for n in model.graph.nodes if n.op_type == "Add" and not n.pinned]
        for n in adds:
            model.graph.replace_node(n, "Sub", list(n.inputs), name=n.name)
        return PassResult(bool(adds), {"nodes_removed": len(adds), "nodes_added": len(adds)})


def test_says_so_when_no_rewrite_can_be_isolated(tmp_path):
    register(SubEverything())
    try:
        result = bisect(chain(adds=3), rollback_output=tmp_path / "rb.onnx")
    finally:
        unregister(SubEverything.name)
    assert result["pass"] == SubEverything.name and result["rewrite"] is None
    assert "lists no rewrites" in result["note"]
    # Rolled back: the whole pass (the rest of the pipeline still ran).
    rb = result["rollback"]
    assert [r["what"] for r in rb["rolled_back"]] == ["pass"] and rb["ok"]
    ops = Counter(n.op_type for n in onnx.load(tmp_path / "rb.onnx").graph.node)
    assert ops == {"Add": 3, "Tanh": 3}


def test_reference_agrees_with_check_compare():
    model = chain(adds=2, identities=1)
    good, _ = run_passes(pyonnxopt.load(model), passes=["eliminate_identity"])
    bad = onnx.load_from_string(good.to_bytes())
    bad.graph.node[0].op_type = "Sub"
    ref = check.Reference(model.SerializeToString(), seed=3, required=["y"], rtol=1e-4, atol=1e-5)
    for candidate in (good.to_bytes(), bad.SerializeToString()):
        # check.compare also measures, on a mismatch, how far onnxruntime's own optimizations move the original
        full = dataclasses.replace(check.compare(model.SerializeToString(), candidate, seed=3), onnxruntime_noise=None)
        assert ref.compare(candidate) == full
    assert ref.compare(bad.SerializeToString()).first_mismatch


def test_after_pass_can_stop_the_pipeline():
    seen = []

    def after(model, run):
        seen.append(run.name)
        return run.name != "eliminate_identity"

    _, report = run_passes(pyonnxopt.load(chain(adds=1)), passes=["eliminate_identity", "eliminate_dead_code"],
                           after_pass=after)
    assert seen == ["eliminate_identity"] and report.stopped and not report.converged
    _, report = run_passes(pyonnxopt.load(chain(adds=1)), passes=["eliminate_identity", "eliminate_dead_code"],
                           after_pass=lambda m, r: None)
    assert report.converged and not report.stopped


def test_optimize_verify_each_pass(broken_passes, tmp_path):
    out = tmp_path / "out.onnx"
    _, report = pyonnxopt.optimize(chain(adds=3, negs=2), str(out), verify_each_pass=True)
    assert report["verified_each_pass"] >= 3 and out.exists()
    bad = tmp_path / "bad.onnx"
    with pytest.raises(VerificationError, match=rf"pass {BAD_RULE} \(iteration \d+\).*bad_tanh"):
        pyonnxopt.optimize(chain(adds=3, negs=2, bad_tanh_at=0), str(bad), verify_each_pass=True)
    assert not bad.exists()


def test_render(broken_passes, tmp_path):
    from rich.console import Console

    console = Console(record=True, width=200)
    render_bisect(bisect(chain(adds=4, bad_add=1), rollback_output=tmp_path / "rb.onnx"), console)
    text = console.export_text()
    assert BAD_PASS in text and "bad" in text and "matches the original" in text
    console = Console(record=True, width=200)
    render_bisect(bisect(chain(adds=2)), console)
    assert "every pass keeps the outputs" in console.export_text()


def test_fixed_batch_and_no_leftover_files(broken_passes, tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = bisect(chain(adds=4, bad_add=1, batch="N"), batch=3, rollback_output=tmp_path / "rb.onnx")
    assert result["rewrite"]["consumed"] == ["bad"] and result["rollback"]["ok"]
    rolled = onnx.load(tmp_path / "rb.onnx")
    assert [d.dim_value for d in rolled.graph.input[0].type.tensor_type.shape.dim] == [3, 4]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rb.onnx"]  # the states' folder is gone
