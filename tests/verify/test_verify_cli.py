import json

import numpy as np
import onnx
import pytest
from verify_models import W2, chain, random_noise, reshaped_h1, save, with_custom_op

from pyonnxopt import optimize
from pyonnxopt.cli import main
from pyonnxopt.errors import Error
from pyonnxopt.verify import run as run_module
from pyonnxopt.verify import verify


@pytest.fixture
def models(tmp_path):
    """(original path, path of a copy, path of a copy with w2 changed)."""
    w2 = W2 + np.float32(0.5)
    return (save(chain(), tmp_path / "a.onnx"), save(chain(), tmp_path / "same.onnx"),
            save(chain(w2=w2), tmp_path / "changed.onnx"))


def without_seconds(result):
    return {k: v for k, v in result.items() if k != "seconds"}


def test_identical_models_verify_and_exit_0(models, capsys):
    original, same, _ = models
    r = verify(original, same)
    assert r["kind"] == "verify" and r["version"] == 1 and r["ok"] and r["first_mismatch"] is None
    assert [o["name"] for o in r["outputs"]] == ["y"] and [x["name"] for x in r["layers"]] == ["h1", "r1", "h2"]
    assert all(x["max_abs"] == 0 for x in r["outputs"] + r["layers"])
    assert r["layers"][0]["op_type"] == "MatMul" and r["layers"][0]["order"] == 0
    assert r["inputs"] == {"source": "random", "seed": 0, "samples": 1, "batch_sizes": [None]}
    assert main(["verify", original, same]) == 0
    assert "equivalent within tolerance" in capsys.readouterr().out


def test_a_changed_weight_is_found_at_its_first_layer_with_exit_1(models, tmp_path, capsys):
    original, _, changed = models
    r = verify(original, changed, samples=2)
    assert not r["ok"] and r["first_mismatch"] == "h2"  # mm2 reads w2; h1 and r1 are untouched
    by_name = {x["name"]: x for x in r["layers"]}
    assert by_name["h1"]["ok"] and by_name["r1"]["ok"] and not by_name["h2"]["ok"]
    assert sum(by_name["h2"]["histogram"]["counts"]) == 8  # 2 samples x 4 values
    report = tmp_path / "r.json"
    assert main(["verify", original, changed, "--report", str(report)]) == 1
    out = capsys.readouterr().out
    assert "mismatch, first at h2" in out
    assert json.loads(report.read_text())["first_mismatch"] == "h2"
    # loose enough tolerances make it pass
    assert main(["verify", original, changed, "--atol", "100", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tolerances"]["float32"]["atol"] == 100


def test_float16_tolerance_is_per_dtype(tmp_path, capsys):
    original = save(chain(dtype=np.float16, bias=0.0), tmp_path / "a16.onnx")
    shifted = save(chain(dtype=np.float16, bias=0.005), tmp_path / "b16.onnx")
    assert main(["verify", original, shifted, "--samples", "3", "--json"]) == 1
    r = json.loads(capsys.readouterr().out)
    assert r["first_mismatch"] == "y" and r["outputs"][0]["dtype"] == "float16"
    assert 0.004 < r["outputs"][0]["max_abs"] < 0.006
    assert main(["verify", original, shifted, "--samples", "3", "--tolerance", "float16:atol=1e-2,rtol=1e-2"]) == 0
    # --atol/--rtol cover float16 too, --tolerance wins over them
    assert main(["verify", original, shifted, "--samples", "3", "--atol", "1e-2"]) == 0
    assert main(["verify", original, shifted, "--samples", "3", "--atol", "1e-2",
                 "--tolerance", "float16:atol=1e-4"]) == 1
    assert verify(original, shifted, samples=3, tolerances={"float32": {"atol": 1.0}})["ok"] is False


def test_a_reshaped_intermediate_holding_the_same_elements_matches(tmp_path):
    r = verify(save(chain(), tmp_path / "a.onnx"), save(reshaped_h1(), tmp_path / "b.onnx"))
    by_name = {x["name"]: x for x in r["layers"]}
    assert by_name["h1"]["ok"] and by_name["h1"]["reshaped"] == [4] and by_name["h1"]["shape"] == [1, 4]
    assert r["ok"] and r["first_mismatch"] is None
    assert r["structure"]["added_nodes"] == [{"name": "flat", "op_type": "Reshape"},
                                             {"name": "unflat", "op_type": "Reshape"}]


def test_a_shape_change_with_other_elements_is_a_mismatch(tmp_path):
    from onnx import numpy_helper

    from verify_models import W1

    changed = reshaped_h1()
    changed.graph.initializer[0].CopyFrom(numpy_helper.from_array(W1 + 1, "w1"))
    r = verify(save(chain(), tmp_path / "a.onnx"), save(changed, tmp_path / "b.onnx"))
    by_name = {x["name"]: x for x in r["layers"]}
    assert by_name["h1"]["mismatch"] == "shape [1, 4] became [4]" and by_name["h1"]["max_abs"] is None
    assert r["first_mismatch"] == "h1" and not r["ok"]


def test_streaming_in_groups_gives_the_same_result(models, monkeypatch):
    original, _, changed = models
    runs = []
    real_run = run_module._run

    def counted(session, ref, names, *rest):
        runs.append((ref.label, list(names)))
        return real_run(session, ref, names, *rest)

    monkeypatch.setattr(run_module, "_run", counted)
    whole = verify(original, changed, samples=2)
    # once per model and sample, every tensor at once; the original once more
    # after the first mismatch (does it repeat itself?)
    every = ["y", "h1", "r1", "h2"]
    assert runs == [("original", every), ("optimized", every), ("original", every),
                    ("original", every), ("optimized", every)]
    runs.clear()
    grouped = verify(original, changed, samples=2, group_size=2)
    assert [names for _, names in runs] == [["y", "h1"]] * 5 + [["r1", "h2"]] * 4
    assert without_seconds(grouped) == without_seconds(whole)
    runs.clear()
    tiny = verify(original, changed, samples=2, byte_budget=40)  # 16 bytes per tensor, twice
    assert {len(names) for _, names in runs} == {1} and without_seconds(tiny) == without_seconds(whole)


def test_an_original_onnxruntime_cannot_load_is_one_line_naming_it(tmp_path, capsys):
    bad = save(with_custom_op(), tmp_path / "custom.onnx")
    good = save(chain(), tmp_path / "a.onnx")
    assert main(["verify", bad, good]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"pyonnxopt: error: original model ({bad}): onnxruntime cannot load it: ")
    assert "\n" not in err
    with pytest.raises(Error, match=r"^optimized model \(<memory>\): onnxruntime cannot load it"):
        verify(good, with_custom_op())


def test_an_original_that_changes_from_run_to_run_is_an_error(tmp_path):
    noisy = save(random_noise(), tmp_path / "noise.onnx")
    plain = random_noise()
    plain.graph.node[0].CopyFrom(onnx.helper.make_node("Identity", ["x"], ["n"], name="noise"))
    with pytest.raises(Error, match=r"^original model \(.*noise.onnx\): its outputs change from run to run"):
        verify(noisy, plain)


def test_partly_different_names_compare_what_is_shared(tmp_path):
    renamed = chain(names=("h1", "relu_out", "mm2_out"))
    r = verify(save(chain(), tmp_path / "a.onnx"), renamed)
    assert r["ok"] and [x["name"] for x in r["layers"]] == ["h1"]
    assert r["optimized"] == "<memory>"


def test_an_output_the_original_lacks_is_a_mismatch(tmp_path):
    optimized = chain()
    optimized.graph.output[0].name = "y"
    optimized.graph.output.append(onnx.helper.make_tensor_value_info("new_out", 1, [1, 4]))
    optimized.graph.node.append(onnx.helper.make_node("Identity", ["y"], ["new_out"]))
    r = verify(chain(), optimized)
    assert not r["ok"] and r["outputs"][1]["mismatch"] == "not in the original model"
    assert r["first_mismatch"] == "new_out"


def _initializer_model(ir_version: int, weight_is_input: bool, weight_is_output: bool) -> onnx.ModelProto:
    from onnx import TensorProto, helper, numpy_helper

    w = helper.make_tensor_value_info("W", TensorProto.FLOAT, [4])
    graph = helper.make_graph([helper.make_node("Mul", ["x", "W"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])] + [w] * weight_is_input,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])] + [w] * weight_is_output,
                              [numpy_helper.from_array(np.arange(4, dtype=np.float32), "W")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13 if ir_version > 3 else 7)],
                             ir_version=ir_version)


@pytest.mark.parametrize("ir_version, weight_is_input, weight_is_output", [(3, True, False), (8, False, True)])
def test_initializers_listed_as_inputs_or_outputs_verify(ir_version, weight_is_input, weight_is_output):
    # IR 3 lists every initializer among the graph inputs; any IR may return one.
    model = _initializer_model(ir_version, weight_is_input, weight_is_output)
    r = verify(model, model)
    assert r["ok"] and [o["name"] for o in r["outputs"]] == ["y"] + ["W"] * weight_is_output


def test_batch_sizes_and_given_inputs(tmp_path, capsys):
    dynamic = save(chain(batch="N"), tmp_path / "dyn.onnx")
    r = verify(dynamic, dynamic, batch_sizes=[1, 3])
    assert r["ok"] and r["inputs"]["batch_sizes"] == [1, 3]
    assert sum(r["outputs"][0]["histogram"]["counts"]) == 4 * (1 + 3)
    assert main(["verify", dynamic, dynamic, "--batch-size", "1,3", "--batch-size", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["inputs"]["batch_sizes"] == [1, 3, 2]
    x = np.full((2, 4), 0.5, np.float32)
    npz = tmp_path / "in.npz"
    np.savez(npz, x=x)
    r = verify(dynamic, dynamic, inputs=str(npz))
    assert r["inputs"]["source"] == str(npz) and r["inputs"]["seed"] is None
    assert r["outputs"][0]["shape"] == [2, 4]


def test_outputs_only(models):
    original, _, changed = models
    r = verify(original, changed, layers=False)
    assert r["layers"] == [] and r["first_mismatch"] == "y"


def test_external_data_models(tmp_path):
    path = tmp_path / "ext" / "m.onnx"
    path.parent.mkdir()
    onnx.save(chain(), str(path), save_as_external_data=True, location="m.data", size_threshold=0)
    listing = sorted(p.name for p in path.parent.iterdir())
    assert verify(str(path), chain())["ok"]
    assert sorted(p.name for p in path.parent.iterdir()) == listing  # nothing written beside it


@pytest.mark.parametrize("argv, message", [
    (["--tolerance", "float16"], "--tolerance 'float16': expected DTYPE:atol=A,rtol=R"),
    (["--tolerance", "float16:atol=x"], "is not atol=NUMBER"),
    (["--tolerance", "floaty:atol=1"], "tolerance for 'floaty': not a dtype name"),
    (["--batch-size", "0"], "--batch-size '0': expected positive integers"),
    (["--samples", "0"], "--samples 0: must be at least 1"),
    (["--rollback-output", "x.onnx"], "--rollback-output needs --bisect"),
    (["--memory-budget", "lots"], "--memory-budget 'lots'"),
])
def test_user_errors_exit_2(models, capsys, argv, message):
    original, same, _ = models
    assert main(["verify", original, same, *argv]) == 2
    assert message in capsys.readouterr().err


def test_missing_file_exit_2(models, capsys):
    assert main(["verify", models[0], "nowhere.onnx"]) == 2
    assert "optimized model (nowhere.onnx): no such file" in capsys.readouterr().err


def test_html_page_and_strict_json_report(models, tmp_path):
    page, report = tmp_path / "v.html", tmp_path / "v.json"
    assert main(["verify", models[0], models[1], "--html", str(page), "--report", str(report)]) == 0
    assert "<table" in page.read_text() and "http://" not in page.read_text()
    data = json.loads(report.read_text(), parse_constant=lambda c: pytest.fail(f"non-strict JSON: {c}"))
    assert data["kind"] == "verify" and data["ok"]



def test_dim_sets_a_named_dynamic_dim(tmp_path, capsys):
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq"])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    assert main(["verify", str(path), str(path), "--dim", "seq=7", "--batch-size", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["outputs"][0]["shape"] == [3, 7]
    assert main(["verify", str(path), str(path), "--dim", "seq"]) == 2
    assert "--dim 'seq': expected SYMBOL=N" in capsys.readouterr().err
    assert main(["verify", str(path), str(path), "--dim", "len=4"]) == 2
    assert "no dynamic dim named 'len'" in capsys.readouterr().err


def test_an_image_too_small_for_its_stem_says_to_size_it(tmp_path, capsys):
    # optimum leaves pixel_values all dynamic: the channels come from the weights, the size needs --dim
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "channels", "height", "width"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = numpy_helper.from_array(np.ones((2, 3, 4, 4), np.float32), "w")
    model = helper.make_model(helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], strides=[4, 4])],
                                                "g", [x], [y], [w]), opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    assert main(["verify", str(path), str(path)]) == 2
    err = capsys.readouterr().err
    assert "cannot run it on sample 1" in err and "a dynamic dim is 1 unless named in --dim NAME=SIZE" in err
    assert main(["verify", str(path), str(path), "--dim", "height=8", "--dim", "width=8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["outputs"][0]["shape"] == [1, 2, 2, 2]  # 3 channels, as w says


def test_a_transposed_intermediate_is_compared_in_its_new_layout(tmp_path):
    from onnx import TensorProto, helper

    def model(nodes):
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)

    original = model([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Transpose", ["h"], ["y"], perm=[1, 0])])
    moved = model([helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]), helper.make_node("Relu", ["xt"], ["h"]),
                   helper.make_node("Identity", ["h"], ["y"])])
    r = verify(save(original, tmp_path / "a.onnx"), save(moved, tmp_path / "b.onnx"))
    h = {x["name"]: x for x in r["layers"]}["h"]
    assert r["ok"] and h["ok"] and h["layout"] == [1, 0]


def test_a_region_run_on_rows_verifies(tmp_path):
    # flatten_linear_rows restates [2, 12, 64] values as [24, 64] under their names
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = {f"w{i}": rng.standard_normal((64, 64)).astype(np.float32) for i in (1, 2, 3)}
    weights.update({f"b{i}": rng.standard_normal(64).astype(np.float32) for i in (1, 2, 3)})
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"]), helper.make_node("Add", ["m1", "b1"], ["a1"]),
             helper.make_node("Relu", ["a1"], ["r1"]), helper.make_node("MatMul", ["r1", "w2"], ["m2"]),
             helper.make_node("Add", ["m2", "b2"], ["a2"]), helper.make_node("Relu", ["a2"], ["r2"]),
             helper.make_node("MatMul", ["r2", "w3"], ["m3"]), helper.make_node("Add", ["m3", "b3"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 12, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 12, 64])],
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    original = save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
                    tmp_path / "a.onnx")
    optimized = str(tmp_path / "b.onnx")
    optimize(original, optimized)
    assert [n.op_type for n in onnx.load(optimized).graph.node].count("Gemm") == 3
    r = verify(original, optimized)
    assert r["ok"], [x for x in r["layers"] if not x["ok"]]
    assert any(x.get("reshaped") == [24, 64] for x in r["layers"])
