"""optimize(): passes + check + atomic save, from Python and the CLI."""

import json

import numpy as np
import onnx
import pytest

import pyonnxopt
from pyonnxopt.cli import main
from pyonnxopt.optimize import optimize
from pyonnxopt.passes import Pass, PassResult, register, unregister


def test_optimize_saves_a_checked_smaller_model(cnn_path, tmp_path):
    out = tmp_path / "out.onnx"
    model, report = optimize(cnn_path, out)
    assert report["nodes_before"] == 16 and report["nodes_after"] == 9
    assert report["op_counts_after"].get("Identity", 0) == 0 and report["op_counts_after"].get("Dropout", 0) == 0
    assert report["op_counts_after"].get("BatchNormalization", 0) == 0  # fuse_conv_batchnorm
    assert report["check"]["first_mismatch"] is None and report["check"]["outputs"] == 1
    assert report["converged"] and report["version"] == 2
    assert len(onnx.load(out).graph.node) == 9
    onnx.checker.check_model(str(out), full_check=True)
    assert len(onnx.load(cnn_path).graph.node) == 16  # input untouched


def test_optimize_takes_and_returns_protos(cnn_path):
    model, report = optimize(onnx.load(cnn_path))
    assert isinstance(model.to_onnx(), onnx.ModelProto) and report["output"] is None


class BreakRelu(Pass):
    """Turns the first Relu into a Neg: a wrong rewrite the check must catch."""
    name = "test_break_relu"
    description = "wrong on purpose"

    def run(self, model, options):
        relu = next((n for n in model.graph.nodes if n.op_type == "Relu"), None)
        if relu is None:
            return PassResult(False)
        model.graph.replace_node(relu, "Neg", relu.inputs)
        return PassResult(True, {"nodes_removed": 1, "nodes_added": 1})


@pytest.fixture
def broken_pass():
    register(BreakRelu())
    yield BreakRelu.name
    unregister(BreakRelu.name)


def test_a_wrong_result_is_not_written(cnn_path, tmp_path, broken_pass):
    out = tmp_path / "out.onnx"
    with pytest.raises(pyonnxopt.VerificationError, match="differs from the original at output probs"):
        optimize(cnn_path, out, passes=[broken_pass])
    assert not out.exists()
    _, report = optimize(cnn_path, out, passes=[broken_pass], force=True)
    assert out.exists() and report["check"]["first_mismatch"].startswith("probs")


def test_cli_in_place_with_report(cnn_path, tmp_path, capsys):
    report_path = tmp_path / "report.json"
    assert main(["optimize", str(cnn_path), str(cnn_path), "--report", str(report_path)]) == 0
    assert "outputs match" in capsys.readouterr().out
    assert json.loads(report_path.read_text())["nodes_after"] == 9
    assert len(onnx.load(cnn_path).graph.node) == 9


def test_cli_choices_and_errors(cnn_path, tmp_path, capsys, broken_pass):
    out = str(tmp_path / "o.onnx")
    assert main(["optimize", str(cnn_path), out, "--passes", "eliminate_identity", "--no-check", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in report["passes"]] == ["eliminate_identity"] * 2 and report["check"] is None
    assert report["nodes_after"] == 14
    for argv, needle in ([["optimize", "missing.onnx", out], "missing.onnx"],
                         [["optimize", str(cnn_path), out, "--skip", "nope"], "unknown pass 'nope'"],
                         [["optimize", str(cnn_path), out, "--passes", broken_pass], "differs from the original"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1


def test_a_model_onnxruntime_cannot_run_still_optimizes(tmp_path, capsys):
    from onnx import parser

    model = parser.parse_model('<ir_version: 8, opset_import: ["" : 17, "custom.ops" : 1]>' + """
        g (float[3] x) => (float[3] y) {
            a = Identity(x)
            b = custom.ops.Special(a)
            y = Relu(b)
        }""")
    path = tmp_path / "custom.onnx"
    onnx.save(model, path)
    assert main(["optimize", str(path), str(tmp_path / "out.onnx")]) == 0
    printed = capsys.readouterr()
    assert "not checked: onnxruntime cannot run the original" in printed.out
    assert "not checked" not in printed.err  # said once
    assert [n.op_type for n in onnx.load(tmp_path / "out.onnx").graph.node] == ["Special", "Relu"]


def _strided_stem(tmp_path, image: str):
    """A 4x4 stride-4 Conv of 3 channels read through an Identity, saved."""
    from onnx import parser

    model = parser.parse_model('<ir_version: 8, opset_import: ["" : 17]>' + f"""
        g (float[{image}] x) => (float[N,8,h,w] y) {{
            a = Identity(x)
            c = Conv <kernel_shape = [4, 4], strides = [4, 4]> (a, w)
            y = Relu(c)
        }}""")
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.ones((8, 3, 4, 4), np.float32), "w"))
    path = tmp_path / "stem.onnx"
    onnx.save(model, path)
    return path


def test_a_strided_stem_is_checked_on_inputs_large_enough(tmp_path, capsys, monkeypatch):
    # A 4x4 stride-4 Conv cannot run on the 1x1 image unknown dims give first.
    path = _strided_stem(tmp_path, "N,3,H,W")
    _, report = optimize(str(path), str(tmp_path / "out.onnx"))
    assert report["check"]["first_mismatch"] is None and report["check"]["unknown_dims"] == 32
    monkeypatch.setenv("COLUMNS", "300")
    assert main(["optimize", str(path), str(tmp_path / "out.onnx")]) == 0
    assert "(max abs diff 0.0e+00, seed 0, unknown dims 32; again with its dynamic dims doubled)" in \
        capsys.readouterr().out


def test_dims_the_weights_fix_are_checked_at_their_size(tmp_path):
    # optimum leaves an image's channels dynamic: [batch, num_channels, height, width]
    path = _strided_stem(tmp_path, "batch,num_channels,height,width")
    _, report = optimize(str(path), str(tmp_path / "out.onnx"))
    assert report["check"]["first_mismatch"] is None and report["check"]["unknown_dims"] == 32
    assert report["check"]["samples"] == 2  # the doubled sample keeps 3 channels too


def _conv_bn_with_initializer_inputs(tmp_path, ir_version: int, listed: tuple):
    """Conv + BatchNormalization whose `listed` initializers are graph inputs too."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = {"w": rng.standard_normal((4, 3, 3, 3)), "scale": rng.random(4) + 0.5, "bias": rng.standard_normal(4),
               "mean": rng.standard_normal(4), "var": rng.random(4) + 0.5}
    inits = [numpy_helper.from_array(a.astype(np.float32), name) for name, a in weights.items()]
    declared = [helper.make_tensor_value_info(t.name, onnx.TensorProto.FLOAT, list(t.dims)) for t in inits
                if t.name in listed]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["y"])], "g",
        declared[:2] + [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])] + declared[2:],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    path = tmp_path / "zoo.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)], ir_version=ir_version), path)
    return path


EVERY = ("w", "scale", "bias", "mean", "var")


@pytest.mark.parametrize("ir_version, listed, mode, folded", [
    (3, EVERY, "auto", True),  # IR 3 lists every initializer (the model zoo's opset-7 to 9 models): constants
    (3, EVERY, "inputs", True),  # there, whatever is asked
    (4, EVERY, "auto", True),  # every one listed from IR 4: torch's keep_initializers_as_inputs
    (4, EVERY, "inputs", False),
    (8, ("scale",), "auto", False),  # one listed: a default the user may override
    (8, ("scale",), "constants", True),
])
def test_initializers_listed_as_inputs(tmp_path, ir_version, listed, mode, folded):
    path = _conv_bn_with_initializer_inputs(tmp_path, ir_version, listed)
    _, report = optimize(str(path), str(tmp_path / "out.onnx"), initializer_inputs=mode)
    assert report["check"]["first_mismatch"] is None
    assert report["initializer_inputs"] == {"listed": len(listed), "as": "constants" if folded else "inputs",
                                            "every": listed == EVERY}
    out = onnx.load(tmp_path / "out.onnx")
    if folded:
        assert [n.op_type for n in out.graph.node] == ["Conv"] and [i.name for i in out.graph.input] == ["x"]
        assert out.ir_version == max(ir_version, 4) and out.graph.input[0].type.tensor_type.shape.dim[3].dim_value == 8
    else:
        assert [n.op_type for n in out.graph.node] == ["Conv", "BatchNormalization"]
        assert len(out.graph.input) == 1 + len(listed)


def test_the_cli_says_what_became_of_initializer_inputs(tmp_path, capsys):
    path = _conv_bn_with_initializer_inputs(tmp_path, 8, ("scale",))
    assert main(["optimize", str(path), str(tmp_path / "out.onnx")]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "1 initializers were also a graph input: kept as inputs" in said
    assert "--initializer-inputs constants folds them" in said
    with pytest.raises(SystemExit) as e:
        main(["optimize", str(path), str(tmp_path / "out.onnx"), "--initializer-inputs", "constant"])
    assert e.value.code == 2 and "--initializer-inputs: invalid choice" in capsys.readouterr().err
    assert main(["info", str(path)]) == 0
    assert ", 1 also graph inputs" in capsys.readouterr().out
    report = tmp_path / "report.json"
    assert main(["optimize", str(path), str(tmp_path / "out.onnx"), "--initializer-inputs", "constants",
                 "--report", str(report)]) == 0
    assert json.loads(report.read_text())["initializer_inputs"]["as"] == "constants"


def test_an_ir_3_model_without_initializer_inputs_keeps_its_inputs_typed(tmp_path):
    from onnx import helper

    graph = helper.make_graph([helper.make_node("And", ["a", "b"], ["y"])], "g",
                              [helper.make_tensor_value_info(n, onnx.TensorProto.BOOL, [3, 4]) for n in "ab"],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.BOOL, [3, 4])])
    path = tmp_path / "and.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 7)], ir_version=3), path)
    _, report = optimize(str(path), str(tmp_path / "out.onnx"))
    assert report["check"]["first_mismatch"] is None
    out = onnx.load(tmp_path / "out.onnx")
    assert [(i.name, i.type.tensor_type.elem_type) for i in out.graph.input] == [("a", 9), ("b", 9)]


def _cache_model(extra_column: bool, total: str = "total"):
    """A mask [batch, total] stacked under Concat(cache, x): total must be
    past + seq (+ 1 with `extra_column`, which no try of the check gives)."""
    from onnx import parser

    parts = "cache, a, one" if extra_column else "cache, a"
    model = parser.parse_model('<ir_version: 8, opset_import: ["" : 17]>' + f"""
        g (float[batch,seq] x, float[batch,past] cache, float[batch,"{total}"] mask) => (float[rows,"{total}"] y)
          <float[1,1] one = {{1.0}}> {{
            a = Identity(x)
            c = Concat <axis = 1> ({parts})
            y = Concat <axis = 0> (c, mask)
        }}""")
    return model


def test_a_cache_whose_mask_covers_past_and_new_tokens_is_checked(tmp_path, capsys, monkeypatch):
    # The mask's length is its own name, total, and must be past + seq: no
    # one size for every unknown dim runs the original; total 2 beside 1s does.
    path = tmp_path / "cache.onnx"
    onnx.save(_cache_model(False), path)
    _, report = optimize(str(path), str(tmp_path / "out.onnx"))
    check = report["check"]
    assert check["first_mismatch"] is None and check["named_dims"] == {"batch": 1, "seq": 1, "past": 1, "total": 2}
    monkeypatch.setenv("COLUMNS", "300")
    assert main(["optimize", str(path), str(tmp_path / "out.onnx")]) == 0
    assert "seed 0, batch 1, seq 1, past 1, total 2; again with its dynamic dims doubled)" in capsys.readouterr().out
    assert check["samples"] == 2  # batch 2, seq 2, past 2, total 4: the sum holds


def test_a_model_that_squeezes_its_batch_away_at_1_is_checked_at_a_batch_of_2(tmp_path, capsys, monkeypatch):
    # A Squeeze without axes drops every 1, the batch's too (hummingbird's
    # GEMM trees); the Transpose after it then has one axis for its two.
    model = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[N,3,1] x) => (float[3,N] y) <float two = {2.0}, float three = {3.0}> {
            s = Squeeze(x)
            t = Transpose <perm = [1, 0]> (s)
            a = Mul(t, two)
            y = Mul(a, three)
        }""")
    path = tmp_path / "squeeze.onnx"
    onnx.save(model, path)
    optimized, report = optimize(str(path), str(tmp_path / "out.onnx"))
    check = report["check"]
    assert check["first_mismatch"] is None and check["batch"] == 2 and check["samples"] == 2
    assert [n.op_type for n in onnx.load(tmp_path / "out.onnx").graph.node] == ["Squeeze", "Transpose", "Mul"]
    monkeypatch.setenv("COLUMNS", "300")
    assert main(["optimize", str(path), str(tmp_path / "out.onnx")]) == 0
    assert "(max abs diff 0.0e+00, seed 0, batch 2; again with its dynamic dims doubled)" in capsys.readouterr().out


def test_a_mask_named_as_the_sum_of_past_and_new_tokens_is_that_sum(tmp_path):
    # optimum names the mask's length `past_sequence_length + sequence_length`
    path = tmp_path / "cache.onnx"
    onnx.save(_cache_model(False, "past + seq"), path)
    _, report = optimize(str(path), str(tmp_path / "out.onnx"))
    check = report["check"]
    assert check["first_mismatch"] is None and "named_dims" not in check and "unknown_dims" not in check
    assert check["samples"] == 2


def test_a_rewrite_right_only_at_batch_1_is_caught_by_the_doubled_sample(tmp_path):
    # Averaging over a batch of 1 is the batch itself: equal on the first
    # sample, not on the second (batch 2).
    from onnx import parser

    from pyonnxopt.check import compare

    def model(body):
        return parser.parse_model('<ir_version: 8, opset_import: ["" : 17]>' + f"""
            g (float[N,4] x) => (float[M,4] y) {{ {body} }}""").SerializeToString()

    result = compare(model("y = ReduceMean <axes = [0]> (x)"), model("y = Identity(x)"))
    assert result.samples == 2 and "(seed 1, dynamic dims doubled: N 2)" in result.first_mismatch
    result = compare(model("y = ReduceMean <axes = [0]> (x)"), model("y = Identity(x)"), inputs={"x": np.ones((1, 4), np.float32)})
    assert result.samples == 1 and result.first_mismatch is None  # given inputs: only those


def test_a_mismatch_says_how_far_onnxruntimes_own_optimizations_move_the_original(monkeypatch):
    # A model quantizing its activations at run time moves by whole steps
    # under any re-rounding, onnxruntime's own fusions too: the check still
    # refuses, and measures that for the user. Here "onnxruntime's
    # optimizations" are a third model, 3x instead of 2x.
    from onnx import parser

    from pyonnxopt import check
    from pyonnxopt.optimize import _noise_note

    def model(scale):
        return parser.parse_model('<ir_version: 8, opset_import: ["" : 17]>' + f"""
            g (float[2,4] x) => (float[2,4] y) <float s = {{{scale}}}> {{ y = Mul(x, s) }}""").SerializeToString()

    unoptimized = check.session
    monkeypatch.setattr(check, "session", lambda source, external_folder=None, optimized=False:
                        unoptimized(model(3.0) if optimized else source, external_folder))
    assert check.compare(model(2.0), model(2.0)).onnxruntime_noise is None
    result = check.compare(model(2.0), model(2.5))
    x = np.random.default_rng(0).standard_normal((2, 4), dtype=np.float32)
    assert result.first_mismatch and result.onnxruntime_noise == pytest.approx(np.abs(x).max(), rel=1e-6)
    note = _noise_note({"max_abs_diff": result.max_abs_diff, "onnxruntime_noise": result.onnxruntime_noise})
    assert note.startswith("; onnxruntime's own optimizations move the original's outputs by up to ")
    assert _noise_note({"max_abs_diff": 1.0, "onnxruntime_noise": 0.5}) == ""  # less than the difference: no excuse


def test_a_result_that_cannot_load_from_an_original_that_cannot_run_says_the_original_was_broken(tmp_path,
                                                                                               monkeypatch):
    # A broken export (a Reshape of 4 elements a row into 5 x 3: no batch
    # fits) loads while its dims are unknown; a result whose dims are known
    # fails onnxruntime's load (Cohere's at a mismatched head count). Not
    # our doing, and the error says so.
    from onnx import parser

    from pyonnxopt import check

    def model(body, rows="N", c=3):
        return parser.parse_model('<ir_version: 8, opset_import: ["" : 17]>' + f"""
            g (float[{rows},4] x) => (float[?,?] y) <int64[2] s = {{5, 3}}, float[{c}] c = {{{", ".join(["1.0"] * c)}}}>
            {{ {body} }}""").SerializeToString()

    broken, unloadable = model("r = Reshape(x, s)  y = Add(r, c)"), model("y = Add(x, c)", rows="1")
    result = check.compare(broken, unloadable)
    assert result.unloadable and "Reshape" in result.original_fails
    result = check.compare(model("y = Add(x, c)", c=4), unloadable)
    assert result.unloadable and result.original_fails is None  # the original runs: ours to blame
    path = tmp_path / "broken.onnx"
    path.write_bytes(broken)
    real_compare = check.compare  # the passes leave this model valid: the check sees the unloadable one
    monkeypatch.setattr(check, "compare", lambda *a, **k: real_compare(broken, unloadable))
    with pytest.raises(pyonnxopt.Error) as e:
        optimize(str(path), str(tmp_path / "out.onnx"))
    assert "; the original loads but runs on none of the check's inputs either (" in str(e.value)
    assert "so it was broken before; nothing was written" in str(e.value)
    assert not (tmp_path / "out.onnx").exists()


def test_inputs_no_try_fits_are_reported_with_the_first_tries_error(tmp_path):
    path = tmp_path / "odd.onnx"
    onnx.save(_cache_model(True), path)
    _, report = optimize(str(path), str(tmp_path / "out.onnx"))
    skipped = report["check"]["skipped"]
    assert ("(tried: unknown dims 1, 32, 64, 128, 224, 256, 320, 384, 512, 640, 1024; each named dim 2 with the others 1; "
            "batches of 1 and 2)") in skipped
    assert "Concat" in skipped


def test_same_input_and_options_give_byte_identical_output(cnn_path, tmp_path):
    optimize(cnn_path, tmp_path / "a.onnx")
    optimize(cnn_path, tmp_path / "b.onnx")
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()


def test_excluded_nodes_are_left_alone(cnn_path, tmp_path, capsys):
    out = tmp_path / "o.onnx"
    model, report = optimize(cnn_path, out, exclude_nodes=["identity*"])
    assert [n.name for n in model.graph.nodes if n.op_type == "Identity"] == ["identity1", "identity2"]
    assert report["nodes_after"] == 11
    refused = [x for r in report["passes"] for x in r["refused"]]
    assert "'identity1' (Identity): excluded from optimization" in refused
    assert main(["optimize", str(cnn_path), str(out), "--exclude-node", "nothing_like_this"]) == 2
    assert "--exclude-node 'nothing_like_this' matches no node name" in capsys.readouterr().err


def test_pinned_nodes_survive_every_pass():
    from onnx import parser

    from pyonnxopt.passes import run_passes

    m = pyonnxopt.load(parser.parse_model('<ir_version: 8, opset_import: ["" : 17]>' + """
        g (float[3] x) => (float[3] y) {
            dead = Neg(x)
            a = Relu(x)
            b = Relu(x)
            t = Transpose <perm = [0]> (a)
            y = Add(t, b)
        }"""))
    for n in m.graph.nodes:
        n.pinned = True
    _, report = run_passes(m)
    assert len(m.graph) == 5 and not any(r.modified for r in report.runs)


def test_prune_outputs_drops_debug_branches(tmp_path, capsys):
    from onnx import parser

    model = parser.parse_model('<ir_version: 8, opset_import: ["" : 17]>' + """
        g (float[3] x) => (float[3] y, float[3] aux_debug, float[3] aux_stats) {
            a = Relu(x)
            y = Neg(a)
            aux_debug = Sigmoid(a)
            s = Exp(a)
            aux_stats = Log(s)
        }""")
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    m, report = optimize(path, tmp_path / "o.onnx", prune_outputs=["aux_*"])
    assert [v.name for v in m.graph.outputs] == ["y"] and [n.op_type for n in m.graph.nodes] == ["Relu", "Neg"]
    assert m.graph.outputs[0].type["shape"] == [3] and m.check_invariants() == []
    assert report["check"]["outputs"] == 1 and report["check"]["first_mismatch"] is None
    onnx.checker.check_model(str(tmp_path / "o.onnx"), full_check=True)
    for bad, needle in ((["--prune-outputs", "nope"], "matches no graph output"),
                        (["--prune-outputs", "*"], "would drop every graph output")):
        assert main(["optimize", str(path), str(tmp_path / "o2.onnx"), *bad]) == 2
        assert needle in capsys.readouterr().err


def test_a_model_edited_in_memory_is_optimized_as_edited(cnn_path):
    m = pyonnxopt.load(cnn_path)
    g = m.graph
    dropout = next(n for n in g.nodes if n.op_type == "Dropout")
    g.replace_node(dropout, "Identity", dropout.inputs[:1])
    optimized, report = optimize(m)
    assert report["nodes_before"] == 16 and report["op_counts_before"].get("Dropout", 0) == 0
    assert report["nodes_after"] == 9 and report["check"]["first_mismatch"] is None
    assert len(m.graph) == 16  # the caller's model is not changed


def test_a_model_with_random_outputs_is_said_to_be_uncheckable():
    from onnx import parser

    proto = parser.parse_model('<ir_version: 8, opset_import: ["" : 17]>' + """
        g (float[64] x) => (float[64] y) {
            a = Identity(x)
            r = RandomUniformLike(a)
            y = Add(a, r)
        }""")
    model, report = optimize(proto)
    assert "change from run to run" in report["check"]["skipped"]
    assert [n.op_type for n in model.graph.nodes] == ["RandomUniformLike", "Add"]


def test_string_inputs_are_given_or_generated():
    # A string input the model names no string for: the caller's file, or the fallback words.
    import numpy as np
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["s"], ["t"]), helper.make_node("StringConcat", ["t", "suffix"], ["y"])], "g",
        [helper.make_tensor_value_info("s", TensorProto.STRING, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.STRING, ["n"])],
        [helper.make_tensor("suffix", TensorProto.STRING, [], [b"_x"])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)
    model, report = optimize(proto, check_inputs={"s": np.array(["a", "bc"])})
    assert [n.op_type for n in model.graph.nodes] == ["StringConcat"]
    assert report["check"]["first_mismatch"] is None and report["check"]["outputs"] == 1
    assert report["check"]["seed"] is None
    _, generated = optimize(proto)
    assert generated["check"]["first_mismatch"] is None and generated["check"]["seed"] == 0


def test_inputs_too_large_to_generate_leave_the_model_unchecked(cnn_path, tmp_path):
    _, report = optimize(str(cnn_path), str(tmp_path / "o.onnx"), input_shapes={"image": [2_000_000_000, 3, 32, 32]})
    assert "input 'image' of shape [2000000000, 3, 32, 32] is too large to generate" in report["check"]["skipped"]


def _positions(tmp_path, out_len: str):
    """x [N, S, 4] plus an 8-position table, saved; y's length is `out_len`."""
    from onnx import parser

    model = parser.parse_model('<ir_version: 8, opset_import: ["" : 17]>' + f"""
        g (float[N,S,4] x) => (float[N,{out_len},4] y) <float[1,8,4] table = {{""" + ", ".join(["0.5"] * 32) + """}> {
            a = Identity(x)
            y = Add(a, table)
        }""")
    path = tmp_path / "positions.onnx"
    onnx.save(model, path)
    return path


def test_input_shapes_the_model_does_not_take_are_named_as_the_cause(tmp_path):
    from pyonnxopt.errors import VerificationError

    path = _positions(tmp_path, "S")
    with pytest.raises(VerificationError, match=r"cannot load the model with the input shapes given \(--input-shape"):
        optimize(str(path), str(tmp_path / "o.onnx"), input_shapes={"x": [1, 10, 4]})
    assert not (tmp_path / "o.onnx").exists()


def test_a_doubled_sample_the_original_cannot_take_is_said_to_be_left_out(tmp_path, capsys, monkeypatch):
    # An 8-position table: seq 1 broadcasts against it, seq 2 cannot.
    path = _positions(tmp_path, "P")
    _, report = optimize(str(path), str(tmp_path / "o.onnx"))
    assert "samples" not in report["check"] and "broadcast" in report["check"]["doubled_skipped"]
    monkeypatch.setenv("COLUMNS", "300")
    assert main(["optimize", str(path), str(tmp_path / "o.onnx")]) == 0
    assert "not with its dynamic dims doubled: the original does not run on them" in capsys.readouterr().out


def test_a_doubled_sample_past_its_size_limit_is_left_out(cnn_path, tmp_path, monkeypatch):
    monkeypatch.setattr("pyonnxopt.check.SECOND_SAMPLE_BYTES", 1000)  # the image alone is 12 KB
    _, report = optimize(str(cnn_path), str(tmp_path / "o.onnx"))
    assert report["check"]["first_mismatch"] is None and "samples" not in report["check"]
