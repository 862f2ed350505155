"""--opset: the model is upgraded by onnx's version converter before the
passes, its weights shared with the original (never copied), and the newer
standard ops become fusion targets (Attention at 23)."""

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import numpy_helper, parser

import pyonnxopt
from pyonnxopt.check import session
from pyonnxopt.errors import Error
from pyonnxopt.opset import default_opset, newest_opset, upgrade

# ReduceMean and Split change between opsets 17 and 18 (axes and split
# attributes become inputs); w is 16 KiB, so it travels as a reference.
CHANGING = """
<ir_version: 8, opset_import: ["" : 13]>
g (float[2,64] x) => (float[2] m, float[2,32] a, float[2,32] b) {
    y = MatMul(x, w)
    m = ReduceMean <axes = [1], keepdims = 0> (y)
    a, b = Split <axis = 1> (y)
}"""

# Heads split and merged around MatMul/Softmax/MatMul, as torch exports
# attention at opset 17: only opset 23's Attention absorbs the Transposes.
ATTENTION = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[2,5,32] q3, float[2,6,32] k3, float[2,6,32] v3) => (float[2,5,32] y)
    <int64[4] qsh = {2, 5, -1, 8}, int64[4] ksh = {2, 6, -1, 8}, int64[3] osh = {2, 5, -1},
     float c = {0.35355339}> {
    qr = Reshape(q3, qsh)  qh = Transpose <perm = [0, 2, 1, 3]> (qr)
    kr = Reshape(k3, ksh)  kt = Transpose <perm = [0, 2, 3, 1]> (kr)
    vr = Reshape(v3, ksh)  vh = Transpose <perm = [0, 2, 1, 3]> (vr)
    qk = MatMul(qh, kt)  s = Mul(qk, c)  p = Softmax <axis = -1> (s)  ctx = MatMul(p, vh)
    ct = Transpose <perm = [0, 2, 1, 3]> (ctx)  y = Reshape(ct, osh)
}"""


def changing_model() -> onnx.ModelProto:
    proto = parser.parse_model(CHANGING)
    w = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    proto.graph.initializer.append(numpy_helper.from_array(w, "w"))
    return proto


def run(model, feeds: dict) -> list:
    data = model if isinstance(model, (str, bytes)) else model.to_bytes()
    return session(data).run(None, feeds)


def feeds_for(proto: onnx.ModelProto) -> dict:
    rng = np.random.default_rng(1)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in proto.graph.input}


def test_changed_ops_are_rewritten_and_outputs_kept(tmp_path):
    proto = changing_model()
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    original = pyonnxopt.load(str(path))
    up = upgrade(original, 18)
    assert default_opset(up) == 18 and up.ir_version >= 8
    by_op = {n.op_type: n for n in up.nodes()}
    assert len(by_op["ReduceMean"].inputs) == 2 and "axes" not in by_op["ReduceMean"].attributes
    assert len(by_op["Split"].outputs) == 2
    feeds = feeds_for(proto)
    for want, got in zip(run(str(path), feeds), run(up, feeds)):
        np.testing.assert_array_equal(want, got)
    onnx.checker.check_model(up.to_onnx(), full_check=True)


def resizing_model(opset: int, ops: str, scales: dict) -> onnx.ModelProto:
    proto = parser.parse_model(f'<ir_version: 5, opset_import: ["" : {opset}]>' + """
        g (float[1,2,6,6] x) => (float[1,2,H,W] y) {""" + ops + "}")
    for name, values in scales.items():
        proto.graph.initializer.append(numpy_helper.from_array(np.array(values, np.float32), name))
    return proto


@pytest.mark.parametrize("opset, ops, scales, nearest", [
    (9, "a = Upsample <mode = \"linear\"> (x, up)\n y = Upsample <mode = \"nearest\"> (a, up)",
     {"up": [1, 1, 2, 1.5]}, [None, b"floor"]),
    (10, "a = Resize <mode = \"nearest\"> (x, down)\n y = Resize <mode = \"linear\"> (a, up)",
     {"down": [1, 1, 0.5, 0.7], "up": [1, 1, 3, 2.5]}, [b"ceil", None]),
])
def test_opset_10_resizes_keep_their_rounding(opset, ops, scales, nearest):
    # onnx's converter leaves Resize-11's defaults (half_pixel, round_prefer_floor): every pixel moves
    proto = resizing_model(opset, ops, scales)
    up = upgrade(pyonnxopt.load(proto), 13)
    resizes = [n for n in up.nodes() if n.op_type == "Resize"]
    assert [n.attributes["coordinate_transformation_mode"] for n in resizes] == [b"asymmetric"] * 2
    assert [n.attributes.get("nearest_mode") for n in resizes] == nearest
    feeds = {"x": np.random.default_rng(2).standard_normal((1, 2, 6, 6)).astype(np.float32)}
    np.testing.assert_array_equal(run(proto.SerializeToString(), feeds)[0], run(up, feeds)[0])


@pytest.mark.parametrize("case", ["1d", "2d", "3d"])
def test_an_opset_6_prelu_keeps_its_slope_per_channel(case):
    # PRelu-6 applies a (C,) slope along axis 1, PRelu-7 broadcasts it along the last axis; onnxruntime has no
    # PRelu-6 to compare with: the onnx wheel's stored output is the reference
    folder = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "pytorch-converted",
                          f"test_PReLU_{case}_multiparam")
    x = numpy_helper.to_array(onnx.load_tensor(os.path.join(folder, "test_data_set_0", "input_0.pb")))
    want = numpy_helper.to_array(onnx.load_tensor(os.path.join(folder, "test_data_set_0", "output_0.pb")))
    up = upgrade(pyonnxopt.load(os.path.join(folder, "model.onnx")), 13)
    np.testing.assert_allclose(run(up, {"0": x})[0], want, rtol=1e-6)


def test_an_opset_10_nearest_resize_with_computed_scales_is_refused():
    proto = resizing_model(10, "s = Concat <axis = 0> (one, k)\n y = Resize <mode = \"nearest\"> (x, s)",
                           {"one": [1, 1], "k": [2, 0.5]})
    proto.graph.input.append(onnx.helper.make_tensor_value_info("k", onnx.TensorProto.FLOAT, [2]))
    with pytest.raises(Error, match="Resize 'y' .* \\(opset 10, nearest\\) has scales that are computed"):
        upgrade(pyonnxopt.load(proto), 13)


FLOAT16_PAD = '''<ir_version: 5, opset_import: ["" : 10]>
    g (float16[1, 2, 3, 3] x) => (float16[1, 2, 5, 5] y, float16[1, 2, 3, 3] low, float16[1, 2, 3, 3] both) {
        y = Pad <pads = [0, 0, 1, 1, 0, 0, 1, 1], value = 1.5> (x)
        low = Clip <max = 0.25> (x)
        both = Clip <min = -0.5, max = 0.5> (x)
    }'''


def test_float16_pad_and_clip_keep_their_bounds_in_their_type():
    # The converter makes Pad-2's `value` and Clip-6's `min`/`max` float32 constants, which Pad-11 and Clip-11
    # refuse beside float16 data
    up = upgrade(pyonnxopt.load(parser.parse_model(FLOAT16_PAD)), 13)
    onnx.checker.check_model(up.to_onnx(), full_check=True)
    x = np.linspace(-2, 2, 18, dtype=np.float16).reshape(1, 2, 3, 3)
    y, low, both = run(up, {"x": x})
    assert y.dtype == np.float16 and y[0, 0, 0, 0] == 1.5 and y[0, 0, 1, 1] == x[0, 0, 0, 0]
    np.testing.assert_array_equal(low, np.minimum(x, np.float16(0.25)))
    np.testing.assert_array_equal(both, np.clip(x, np.float16(-0.5), np.float16(0.5)))


def test_a_converter_result_onnx_refuses_is_refused(monkeypatch):
    from onnx import version_converter

    convert = version_converter.convert_version

    def breaking(model, version):  # a converter bug: an output typed apart from what computes it
        out = convert(model, version)
        out.graph.node[-1].op_type = "Shape"
        return out

    monkeypatch.setattr(version_converter, "convert_version", breaking)
    proto = parser.parse_model(FLOAT16_PAD)
    onnx.checker.check_model(proto, full_check=True)
    with pytest.raises(Error, match="--opset 13: onnx's version converter wrote a model that onnx's checker refuses "
                                    "\\(.*\\); leave --opset out"):
        upgrade(pyonnxopt.load(proto), 13)


def test_what_the_converter_inferred_is_not_kept_as_value_info():
    # It infers at the old opset, where onnx's Slice-10 inference gives x[:, 4:6] the input's symbol N
    proto = parser.parse_model('''<ir_version: 5, opset_import: ["" : 10]>
        g (float[5, N] x) => (float[5, M] y, float[5, ?] z) <int64[1] s = {4}, int64[1] e = {6}, int64[1] a = {1}> {
            part = Slice (x, s, e, a)
            y = Relu(part)
            z = Sigmoid(part)
        }''')
    up = upgrade(pyonnxopt.load(proto), 13).to_onnx()
    assert list(up.graph.value_info) == []
    unknown = up.graph.output[1].type.tensor_type.shape.dim[1]  # the outputs' dims as declared
    assert not unknown.HasField("dim_param") and not unknown.HasField("dim_value")
    proto.graph.value_info.append(onnx.helper.make_tensor_value_info("part", onnx.TensorProto.FLOAT, [5, "P"]))
    up = upgrade(pyonnxopt.load(proto), 13).to_onnx()  # what the model states stays
    assert [(v.name, v.type.tensor_type.shape.dim[1].dim_param) for v in up.graph.value_info] == [("part", "P")]


def test_weights_are_shared_with_the_original_not_copied(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(changing_model(), path)
    original = pyonnxopt.load(str(path))
    up = upgrade(original, 18)
    before = {t.name: t.numpy() for t in original.initializers()}["w"]
    after = {t.name: t.numpy() for t in up.initializers()}["w"]
    assert np.shares_memory(before, after)  # both views of the memory-mapped file


def test_external_data_stays_external_and_the_input_is_untouched(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    onnx.save(changing_model(), src / "m.onnx", save_as_external_data=True, location="m.data", size_threshold=0)
    before = {p.name: p.read_bytes() for p in src.iterdir()}
    out = tmp_path / "out" / "o.onnx"
    out.parent.mkdir()
    model, report = pyonnxopt.optimize(str(src / "m.onnx"), str(out), opset=18)
    assert report["opset_before"] == 13 and report["opset_after"] == 18
    assert report["check"]["first_mismatch"] is None
    assert {p.name: p.read_bytes() for p in src.iterdir()} == before
    written = onnx.load(str(out), load_external_data=False)
    assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in written.graph.initializer)
    assert [o.version for o in written.opset_import if o.domain == ""] == [18]


def test_the_same_version_returns_the_model_itself():
    model = pyonnxopt.load(changing_model())
    assert upgrade(model, 13) is model


@pytest.mark.parametrize("version, words", [
    (12, "is at opset 13; pyonnxopt only upgrades"),
    (10_000, "knows opsets up to"),
])
def test_downgrades_and_unknown_versions_are_refused(version, words):
    with pytest.raises(Error, match=words):
        upgrade(pyonnxopt.load(changing_model()), version)


def ml_model(imports: list) -> onnx.ModelProto:
    """A Scaler (ai.onnx.ml) and a Relu, with `imports` as the file lists them."""
    proto = parser.parse_model("""
    <ir_version: 8, opset_import: ["ai.onnx.ml" : 1]>
    g (float[N,3] x) => (float[N,3] y) { s = ai.onnx.ml.Scaler <offset = [1.0, 2.0, 3.0], scale = [2.0, 2.0, 2.0]> (x)
                                         y = Relu(s) }""")
    del proto.opset_import[:]
    proto.opset_import.extend(onnx.helper.make_opsetid(d, v) for d, v in imports)
    return proto


def test_a_domain_imported_twice_is_upgraded_where_it_counts():
    # skl2onnx writes '' twice; onnxruntime reads the last entry, the
    # converter the first: the result imports it once, at the new version.
    proto = ml_model([("ai.onnx.ml", 1), ("", 13), ("", 13)])
    up = upgrade(pyonnxopt.load(proto), 23)
    assert [(o.domain, o.version) for o in up.to_onnx().opset_import] == [("ai.onnx.ml", 1), ("", 23)]
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 3
    np.testing.assert_array_equal(run(up, {"x": x})[0], run(proto.SerializeToString(), {"x": x})[0])


def test_a_model_of_other_domains_alone_gains_the_import():
    # an XGBoost model: ai.onnx.ml ops only, no ai.onnx import to convert
    proto = ml_model([("ai.onnx.ml", 1)])
    proto.graph.node.pop()
    proto.graph.node[0].output[0] = "y"
    up = upgrade(pyonnxopt.load(proto), 23)
    assert dict((o.domain, o.version) for o in up.to_onnx().opset_import) == {"ai.onnx.ml": 1, "": 23}
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(run(up, {"x": x})[0], run(proto.SerializeToString(), {"x": x})[0])


def test_an_ai_onnx_op_without_its_import_is_named():
    with pytest.raises(Error, match="is an ai.onnx op \\(Relu\\) but the model imports no ai.onnx opset"):
        upgrade(pyonnxopt.load(ml_model([("ai.onnx.ml", 1)])), 23)


def test_a_model_with_functions_is_refused_rather_than_broken():
    proto = parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17, "local" : 1]>
    g (float[2] x) => (float[2] y) { y = local.twice(x) }
    <domain: "local", opset_import: ["" : 17]>
    twice (a) => (b) { b = Add(a, a) }""")
    with pytest.raises(Error, match="model-local functions \\(twice"):
        upgrade(pyonnxopt.load(proto), 23)


def test_an_op_onnx_does_not_know_is_named():
    proto = parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x) => (float[2] y) { y = Frobnicate(x) }""")
    proto.graph.node[0].name = "odd"
    with pytest.raises(Error, match="node odd of .* is Frobnicate, which the ONNX standard does not define"):
        upgrade(pyonnxopt.load(proto), 23)


def test_opset_23_lets_attention_absorb_the_head_transposes(tmp_path):
    path, out = tmp_path / "a.onnx", tmp_path / "o.onnx"
    onnx.save(parser.parse_model(ATTENTION), path)
    plain, _ = pyonnxopt.optimize(str(path))
    assert sum(n.op_type == "Transpose" for n in plain.nodes()) == 4
    r = subprocess.run([sys.executable, "-m", "pyonnxopt", "optimize", str(path), str(out), "--opset", "23"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "opset upgraded: 17 -> 23" in r.stdout and "outputs match" in r.stdout
    ops = [n.op_type for n in pyonnxopt.load(str(out)).nodes()]
    assert ops == ["Attention"]


def test_cli_names_the_flag_in_one_line(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(changing_model(), path)
    r = subprocess.run([sys.executable, "-m", "pyonnxopt", "optimize", str(path), str(tmp_path / "o.onnx"),
                        "--opset", str(newest_opset() + 1)], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"pyonnxopt: error: --opset {newest_opset() + 1}: the installed onnx "
                                             f"{onnx.__version__} knows opsets up to {newest_opset()}"]
    assert not (tmp_path / "o.onnx").exists()


def test_a_result_onnxruntime_cannot_run_names_the_upgrade(tmp_path, monkeypatch):
    # onnxruntime 1.32 has no RoiAlign-22, which the converter writes for a
    # detection model at opset 23: the check cannot load the result.
    from pyonnxopt import check

    path = tmp_path / "m.onnx"
    onnx.save(changing_model(), path)
    why = "[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for ReduceMean(18)"
    monkeypatch.setattr(check, "compare", lambda *a, **k: check.CheckResult.not_loaded(RuntimeError(why)))
    with pytest.raises(Error) as e:
        pyonnxopt.optimize(str(path), str(tmp_path / "o.onnx"), opset=18)
    assert str(e.value) == (f"onnxruntime cannot run the model upgraded to opset 18: {why}; nothing was written "
                            "(try a lower --opset, or none)")
    assert not (tmp_path / "o.onnx").exists()


@pytest.mark.parametrize("each_pass", [False, True])
def test_a_conversion_that_changes_outputs_is_named_not_a_pass(tmp_path, each_pass):
    # onnxruntime's AveragePool-11 and -19 kernels differ on a window larger
    # than the image (the check's 1x1): the converter's doing, before any
    # pass. With --verify-each-pass the first pass that changed the model
    # (eliminate_identity) took the blame.
    model = parser.parse_model('<ir_version: 8, opset_import: ["" : 17]>' + """
        g (float[N,2,H,W] x) => (float[N,2,h,w] y) {
            i = Identity(x)
            y = AveragePool <kernel_shape = [2, 2], strides = [2, 2], count_include_pad = 1> (i)
        }""")
    path = tmp_path / "pool.onnx"
    onnx.save(model, path)
    with pytest.raises(Error, match=r"onnx's version converter \(-?-?opset 19\) already changes .*unknown dims 1\)"):
        pyonnxopt.optimize(str(path), str(tmp_path / "o.onnx"), opset=19, verify_each_pass=each_pass)
    assert not (tmp_path / "o.onnx").exists()
    inputs = {"x": np.ones((1, 2, 8, 8), np.float32)}
    _, report = pyonnxopt.optimize(str(path), str(tmp_path / "o.onnx"), opset=19, check_inputs=inputs)
    assert report["check"]["first_mismatch"] is None


def test_a_weight_reference_the_source_does_not_have_is_a_model_error():
    from pyonnxopt import _core
    from pyonnxopt.errors import ModelError

    source = pyonnxopt.load(changing_model())
    proto = onnx.ModelProto.FromString(source._core.serialize_weightless(1024))
    entry = next(e for e in proto.graph.initializer[0].external_data if e.key == "offset")
    entry.value = "7"  # the model has one big tensor: index 0
    with pytest.raises(ModelError, match="refers to weight 7, which the source model does not have"):
        _core.load_bytes(proto.SerializeToString(), weights_from=source._core)
    proto.graph.initializer[0].dims[0] = 32
    entry.value = "0"
    with pytest.raises(ModelError, match="its type or shape differs from the source model's tensor 0"):
        _core.load_bytes(proto.SerializeToString(), weights_from=source._core)


def test_a_scan_from_opset_8_is_refused(tmp_path):
    # onnx's converter takes Scan-8 (a batch axis first) to 9 by shortening
    # the graph's inputs (the onnx backend case test_scan_sum): onnxruntime
    # then rejects the model, or, with unknown shapes, scans the batch.
    from onnx import TensorProto, helper

    body = helper.make_graph(
        [helper.make_node("Add", ["sum_in", "next"], ["sum_out"]), helper.make_node("Identity", ["sum_out"], ["scan_out"])],
        "body", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("sum_in", "next")],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("sum_out", "scan_out")])
    scan = helper.make_node("Scan", ["", "initial", "x"], ["y", "z"], num_scan_inputs=1, body=body)
    graph = helper.make_graph([scan], "g", [helper.make_tensor_value_info("initial", TensorProto.FLOAT, [1, 2]),
                                            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2]),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 3, 2])])
    path = tmp_path / "scan8.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)]), path)
    with pytest.raises(Error, match=r"--opset 23: .*scan8.onnx has a Scan from opset 8, whose batch axis onnx's "
                                    r"version converter drops"):
        pyonnxopt.optimize(str(path), str(tmp_path / "o.onnx"), opset=23)
    assert not (tmp_path / "o.onnx").exists()
