"""Loading from every source, saving in every mode, tensors as numpy views."""

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import pyonnxopt


def strip_location_flags(model):
    """onnx.load sets data_location=DEFAULT explicitly on tensors it read from files."""
    for t in model.graph.initializer:
        if t.HasField("data_location") and t.data_location == 0:
            t.ClearField("data_location")
    return model


def test_load_from_path_bytes_and_proto(cnn_path):
    proto = onnx.load(cnn_path)
    for source in (cnn_path, str(cnn_path), cnn_path.read_bytes(), proto):
        m = pyonnxopt.load(source)
        assert len(m.graph) == len(proto.graph.node)
        assert m.to_onnx() == proto
    assert pyonnxopt.load(cnn_path).path == str(cnn_path)


def test_load_rejects_other_types():
    with pytest.raises(TypeError, match="path, bytes or onnx.ModelProto"):
        pyonnxopt.load(42)


def test_model_fields(cnn_path):
    m = pyonnxopt.load(cnn_path)
    assert m.ir_version == 8
    assert m.opset_imports == {"": 17}
    assert m.producer_name == "pyonnxopt.examples"
    assert [v.name for v in m.graph.inputs] == ["image"]
    assert m.graph.inputs[0].type == {"kind": "tensor", "text": "float32[N,3,32,32]", "elem_type": 1,
                                      "shape": ["N", 3, 32, 32]}
    assert len(list(m.nodes())) == 16


def test_tensor_numpy_is_a_read_only_view(cnn_path):
    m = pyonnxopt.load(cnn_path)
    t = {t.name: t for t in m.initializers()}["conv1.w"]
    arr = t.numpy()
    expected = numpy_helper.to_array({i.name: i for i in onnx.load(cnn_path).graph.initializer}["conv1.w"])
    np.testing.assert_array_equal(arr, expected)
    assert not arr.flags.writeable and not arr.flags.owndata
    with pytest.raises(ValueError):
        arr[0, 0, 0, 0] = 1.0
    # A write makes a new tensor; the old view keeps the old bytes.
    t.set_data(np.zeros((2, 2), dtype=np.float16))
    assert t.dims == [2, 2] and t.data_type == TensorProto.FLOAT16
    np.testing.assert_array_equal(arr, expected)
    saved = {i.name: i for i in m.to_onnx().graph.initializer}["conv1.w"]
    assert numpy_helper.to_array(saved).dtype == np.float16


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.uint8, np.int16, np.uint16, np.int32,
                                   np.int64, np.uint32, np.uint64, np.bool_, np.float16, np.complex64])
@pytest.mark.parametrize("raw", [True, False])
def test_numpy_of_every_storage(dtype, raw):
    values = (np.arange(6) % 3).astype(dtype).reshape(2, 3)
    if not raw and dtype in (np.uint32, np.uint64, np.complex64):
        tensor = numpy_helper.from_array(values, "t")  # always raw
    else:
        tensor = helper.make_tensor("t", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), [2, 3],
                                    values.tobytes() if raw else values.flatten().tolist(), raw=raw)
    g = helper.make_graph([], "g", [], [helper.make_tensor_value_info("t", tensor.data_type, [2, 3])], [tensor])
    m = pyonnxopt.load(helper.make_model(g))
    np.testing.assert_array_equal(m.initializers()[0].numpy(), values)


def test_numpy_of_types_numpy_lacks():
    import ml_dtypes

    values = np.array([1.5, -2.0, 0.25], dtype=ml_dtypes.bfloat16)
    t = numpy_helper.from_array(values, "b")
    g = helper.make_graph([], "g", [], [helper.make_tensor_value_info("b", t.data_type, [3])], [t])
    arr = pyonnxopt.load(helper.make_model(g)).initializers()[0].numpy()
    np.testing.assert_array_equal(arr.astype(np.float32), values.astype(np.float32))


def test_save_inline_roundtrip(cnn_path, tmp_path):
    out = tmp_path / "out.onnx"
    r = pyonnxopt.load(cnn_path).save(out)
    assert r.data_files == [] and r.model_bytes == out.stat().st_size
    assert onnx.load(out) == onnx.load(cnn_path)


def test_save_external_threshold_and_alignment(cnn_path, tmp_path):
    out = tmp_path / "ext.onnx"
    r = pyonnxopt.load(cnn_path).save(out, external_data=True, size_threshold=1000, align=256, align_threshold=1000)
    assert r.data_files == ["ext.onnx.data"]
    stored = onnx.load(out, load_external_data=False)
    for t in stored.graph.initializer:
        entries = {e.key: e.value for e in t.external_data}
        if t.data_location == TensorProto.EXTERNAL:
            assert int(entries["offset"]) % 256 == 0 and int(entries["length"]) >= 1000
        else:
            assert len(t.raw_data) < 1000
    assert strip_location_flags(onnx.load(out)) == onnx.load(cnn_path)
    onnx.checker.check_model(str(out), full_check=True)


def test_save_external_split_into_files(cnn_path, tmp_path):
    out = tmp_path / "split.onnx"
    r = pyonnxopt.load(cnn_path).save(out, external_data=True, size_threshold=64, location="w.bin", max_file_size=4096)
    assert r.data_files[0] == "w.bin" and len(r.data_files) > 2
    assert all((tmp_path / f).exists() for f in r.data_files)
    assert strip_location_flags(onnx.load(out)) == onnx.load(cnn_path)


def test_external_model_reloads_and_inlines(cnn_path, tmp_path):
    ext = tmp_path / "ext.onnx"
    pyonnxopt.load(cnn_path).save(ext, external_data=True, size_threshold=64)
    m = pyonnxopt.load(ext)
    assert m.external_files() == [str(tmp_path / "ext.onnx.data")]
    assert any(t.is_external for t in m.initializers())
    # Kept external by default, in a data file named after the new model.
    other = tmp_path / "sub"
    other.mkdir()
    r = m.save(other / "again.onnx")
    assert r.data_files == ["again.onnx.data"]
    assert strip_location_flags(onnx.load(other / "again.onnx")) == onnx.load(cnn_path)
    # Inline on request, and in to_onnx().
    m.save(tmp_path / "inline.onnx", external_data=False)
    assert onnx.load(tmp_path / "inline.onnx") == onnx.load(cnn_path)
    assert m.to_onnx() == onnx.load(cnn_path)


def test_save_over_the_input_keeps_it_readable(cnn_path):
    ext = cnn_path.with_name("model.onnx")
    pyonnxopt.load(cnn_path).save(ext, external_data=True, size_threshold=64)
    m = pyonnxopt.load(ext)
    before = {t.name: t.numpy().copy() for t in m.initializers()}
    m.save(ext)  # same model file and same data file
    for t in m.initializers():  # the loaded model still reads its old bytes
        np.testing.assert_array_equal(t.numpy(), before[t.name])
    assert strip_location_flags(onnx.load(ext)) == onnx.load(cnn_path)
    assert sorted(os.listdir(ext.parent)) == ["cnn.onnx", "model.onnx", "model.onnx.data"]


def test_save_rejects_bad_locations(cnn_path, tmp_path):
    m = pyonnxopt.load(cnn_path)
    for bad in ("../x.data", "/tmp/x.data", "sub/x.data"):
        with pytest.raises(pyonnxopt.ModelError, match="plain file name"):
            m.save(tmp_path / "o.onnx", external_data=True, location=bad)
    assert os.listdir(tmp_path) == ["cnn.onnx"]


def test_single_file_model_over_2gb(tmp_path):
    """A single-file model past protobuf's limit loads (mapped, holes not read)
    and saves with external data by itself; inline is refused."""
    n = (2**31 + 4096) // 4
    header = onnx.ModelProto(ir_version=8, opset_import=[helper.make_opsetid("", 17)])
    small = helper.make_graph(
        [helper.make_node("Identity", ["big"], ["y"])], "g", [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])],
    )
    tensor = TensorProto(name="big", data_type=TensorProto.FLOAT, dims=[n], raw_data=b"")
    prefix_graph = small.SerializeToString()
    tensor_head = tensor.SerializeToString()  # ends with the empty raw_data field
    assert tensor_head.endswith(b"\x4a\x00")
    tensor_head = tensor_head[:-2]

    def varint(v):
        out = bytearray()
        while v >= 0x80:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        out.append(v)
        return bytes(out)

    raw_field = b"\x4a" + varint(4 * n)
    init_len = len(tensor_head) + len(raw_field) + 4 * n
    graph_len = len(prefix_graph) + 1 + len(varint(init_len)) + init_len
    path = tmp_path / "big.onnx"
    with open(path, "wb") as f:
        f.write(header.SerializeToString())
        f.write(b"\x3a" + varint(graph_len) + prefix_graph + b"\x2a" + varint(init_len) + tensor_head + raw_field)
        f.truncate(f.tell() + 4 * n)  # a hole: no disk, no memory
    m = pyonnxopt.load(path)
    (big,) = m.initializers()
    assert big.nbytes == 4 * n and big.numpy().shape == (n,)
    with pytest.raises(pyonnxopt.ModelError, match="2 GB"):
        m.save(tmp_path / "inline.onnx", external_data=False)
    assert not (tmp_path / "inline.onnx").exists()
    r = m.save(tmp_path / "out.onnx")
    assert r.switched_to_external and r.data_files == ["out.onnx.data"]
    again = pyonnxopt.load(tmp_path / "out.onnx")
    assert again.initializers()[0].is_external and again.initializers()[0].nbytes == 4 * n


def _onnx_external(tmp_path, name="src.onnx"):
    """A 16 MiB model saved by onnx itself with external data (onnx's own offsets)."""
    import copy

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((1024, 1024)).astype(np.float32), f"w{i}") for i in range(4)]
    g = helper.make_graph([helper.make_node("Sum", [w.name for w in weights], ["y"])], "g", [],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1024, 1024])], weights)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / name
    onnx.save(copy.deepcopy(model), path, save_as_external_data=True, location=name + ".data", size_threshold=0)
    return path, model


def test_unchanged_external_file_is_copied_whole_at_the_same_offsets(tmp_path):
    src, model = _onnx_external(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    m = pyonnxopt.load(src)
    r = m.save(out / "m.onnx")
    assert r.data_files == ["m.onnx.data"]
    assert (out / "m.onnx.data").read_bytes() == (tmp_path / "src.onnx.data").read_bytes()
    offsets = lambda p: [[e.value for e in t.external_data if e.key == "offset"] for t in
                         onnx.load(p, load_external_data=False).graph.initializer]
    assert offsets(out / "m.onnx") == offsets(src)
    assert strip_location_flags(onnx.load(out / "m.onnx")) == model
    assert os.stat(out / "m.onnx.data").st_ino != os.stat(tmp_path / "src.onnx.data").st_ino


def test_a_large_new_tensor_joins_the_external_data_a_small_one_stays_inline(tmp_path):
    """A folded weight in a model with external data goes where its weights
    are; kept where they were, the inline ones stay inline."""
    src, _ = _onnx_external(tmp_path)
    m = pyonnxopt.load(src)
    m.graph.add_initializer("big_new", TensorProto.FLOAT, [512, 1024], np.ones((512, 1024), np.float32).tobytes())
    m.graph.add_initializer("small_new", TensorProto.FLOAT, [4], np.ones(4, np.float32).tobytes())
    m.save(tmp_path / "out.onnx")
    stored = {t.name: t.data_location for t in onnx.load(tmp_path / "out.onnx", load_external_data=False).graph.initializer}
    assert stored["big_new"] == TensorProto.EXTERNAL and stored["small_new"] == TensorProto.DEFAULT
    assert all(stored[f"w{i}"] == TensorProto.EXTERNAL for i in range(4))
    loaded = {t.name: numpy_helper.to_array(t) for t in onnx.load(tmp_path / "out.onnx").graph.initializer}
    assert (loaded["big_new"] == 1).all() and loaded["big_new"].shape == (512, 1024)


def test_inline_models_stay_inline_with_a_large_new_tensor(tmp_path, cnn_path):
    m = pyonnxopt.load(cnn_path)
    m.graph.add_initializer("big_new", TensorProto.FLOAT, [512, 1024], np.ones((512, 1024), np.float32).tobytes())
    r = m.save(tmp_path / "out.onnx")
    assert r.data_files == []


def test_small_external_files_are_gathered_into_one(tmp_path):
    """onnx's one-file-per-tensor layout: the output holds one data file."""
    weights = [numpy_helper.from_array(np.full((8, 8), i, np.float32), f"w{i}") for i in range(5)]
    g = helper.make_graph([helper.make_node("Sum", [w.name for w in weights], ["y"])], "g", [],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 8])], weights)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    src = tmp_path / "src.onnx"
    onnx.save(onnx.ModelProto.FromString(model.SerializeToString()), src, save_as_external_data=True,
              all_tensors_to_one_file=False, size_threshold=0)
    m = pyonnxopt.load(src)
    assert len(m.external_files()) == 5
    r = m.save(tmp_path / "out.onnx")
    assert r.data_files == ["out.onnx.data"]
    assert strip_location_flags(onnx.load(tmp_path / "out.onnx")) == model


def test_mostly_unreferenced_file_is_composed_afresh(tmp_path):
    src, model = _onnx_external(tmp_path)
    with open(tmp_path / "src.onnx.data", "ab") as f:  # stale bytes no tensor reads
        f.truncate(f.tell() + 4 * 16 * 2**20)
    m = pyonnxopt.load(src)
    m.save(tmp_path / "out.onnx")
    assert (tmp_path / "out.onnx.data").stat().st_size < 17 * 2**20
    assert strip_location_flags(onnx.load(tmp_path / "out.onnx")) == model


def test_source_replaced_before_save_is_an_error_not_wrong_data(tmp_path):
    src, model = _onnx_external(tmp_path)
    m = pyonnxopt.load(src)  # external file checked, not mapped yet
    data = tmp_path / "src.onnx.data"
    replacement = tmp_path / "other"
    replacement.write_bytes(b"\1" * data.stat().st_size)
    os.replace(replacement, data)
    with pytest.raises(OSError, match="changed on disk"):
        m.save(tmp_path / "out.onnx")
    assert sorted(os.listdir(tmp_path)) == ["src.onnx", "src.onnx.data"]


def test_annotations_and_device_configurations_round_trip():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    ann = g.quantization_annotation.add(tensor_name="x")
    ann.quant_parameter_tensor_names.add(key="SCALE_TENSOR", value="s")
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    cfg = model.graph.node[0].device_configurations.add(configuration_id="c", pipeline_stage=1)
    spec = cfg.sharding_spec.add(tensor_name="x", device=[0, 1])
    spec.sharded_dim.add(axis=0).simple_sharding.add(dim_value=2, num_shards=2)
    model.configuration.add(name="c", num_devices=2, device=["gpu0", "gpu1"])
    assert onnx.ModelProto.FromString(pyonnxopt.load(model).to_bytes()) == model


def test_malformed_annotation_is_refused():
    graph = helper.make_graph([], "g", [], []).SerializeToString()
    # quantization_annotation (GraphProto field 14) whose entry claims 5 bytes and has 2
    bad_graph = graph + bytes([0x72, 0x04, 0x12, 0x05, 0x0A, 0x01])
    data = bytes([0x08, 0x08, 0x3A, len(bad_graph)]) + bad_graph
    with pytest.raises(pyonnxopt.ModelError, match="runs past the end"):
        pyonnxopt.load(data)


def test_set_raw_refuses_bytes_that_do_not_match_dims(cnn_path):
    t = pyonnxopt.load(cnn_path).initializers()[0]
    with pytest.raises(ValueError, match="do not hold 4 elements"):
        t.set_raw(TensorProto.FLOAT, [4], b"\0" * 8)
    with pytest.raises(ValueError, match="negative dimension"):
        t.set_raw(TensorProto.FLOAT, [-1], b"")


def test_set_data_keeps_a_scalar_a_scalar():
    import numpy as np
    from onnx import helper, numpy_helper

    g = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [],
                          [helper.make_tensor_value_info("y", 1, [])], [numpy_helper.from_array(np.float32(1), "w")])
    m = pyonnxopt.load(helper.make_model(g))
    m.initializers()[0].set_data(np.float32(2.5))
    assert m.initializers()[0].dims == [] and m.initializers()[0].numpy().shape == ()
