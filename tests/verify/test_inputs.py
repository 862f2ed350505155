"""verify's inputs: specs and index bounds read from the graph, seeded random
feeds that onnxruntime accepts, every --inputs layout, and the one-line
errors for samples that do not fit the model."""

import glob
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pyonnxopt.check import session
from pyonnxopt.errors import Error
from pyonnxopt.verify.inputs import InputSpec, input_specs, load_samples, random_feeds, validate_feeds

ONNX_DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
T = TensorProto


def _model(nodes, inputs, outputs, initializers=(), opset=17, value_info=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(initializers), value_info=list(value_info))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _table(name, rows, cols=4):
    return numpy_helper.from_array(np.arange(rows * cols, dtype=np.float32).reshape(rows, cols), name)


def _run(model, feeds):
    return session(model.SerializeToString()).run(None, feeds)


def bert_like(vocab=1000, types=2, positions=64):
    """ids -> word table, token_type_ids -> 2-row table, mask -> Cast/Sub/Mul bias (not an index)."""
    nodes = [
        helper.make_node("Gather", ["word", "input_ids"], ["we"]),
        helper.make_node("Gather", ["type_table", "token_type_ids"], ["te"]),
        helper.make_node("Add", ["we", "te"], ["emb"]),
        helper.make_node("Cast", ["attention_mask"], ["mf"], to=T.FLOAT),
        helper.make_node("Sub", ["one", "mf"], ["inv"]),
        helper.make_node("Unsqueeze", ["inv", "axis2"], ["inv3"]),
        helper.make_node("Mul", ["emb", "inv3"], ["out"]),
    ]
    dyn = ["batch", "seq"]
    inputs = [helper.make_tensor_value_info(n, T.INT64, dyn) for n in ("input_ids", "attention_mask", "token_type_ids")]
    inits = [_table("word", vocab), _table("type_table", types), numpy_helper.from_array(np.float32(1), "one"),
             numpy_helper.from_array(np.array([2], np.int64), "axis2")]
    return _model(nodes, inputs, [helper.make_tensor_value_info("out", T.FLOAT, None)], inits)


# -- input_specs ------------------------------------------------------------

def test_specs_skip_initializers_and_keep_shapes_dtypes(tmp_path):
    m = bert_like()
    m.graph.input.append(helper.make_tensor_value_info("word", T.FLOAT, [1000, 4]))  # IR<4 style: initializer as input
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    for source in (m, m.SerializeToString(), str(path), path):
        specs = input_specs(source)
        assert [s.name for s in specs] == ["input_ids", "attention_mask", "token_type_ids"]
        assert [s.position for s in specs] == [0, 1, 2]
        assert all(s.dtype == np.int64 and s.shape == ["batch", "seq"] for s in specs)
        assert specs[0].onnx_type == "tensor(int64)"


def test_embedding_gather_bound_is_table_rows():
    specs = {s.name: s for s in input_specs(bert_like(vocab=1000, types=3))}
    assert specs["input_ids"].high == 1000
    assert specs["token_type_ids"].high == 3
    assert specs["attention_mask"].high is None  # feeds arithmetic, not an index


def test_bound_follows_value_preserving_ops_and_takes_the_minimum():
    # ids -> Cast(int32) -> Unsqueeze -> Reshape -> Squeeze -> Flatten -> Expand -> Gather(table[50]);
    # ids also index a 20-row table on axis 1 through Identity: bound = min(50, 20).
    nodes = [
        helper.make_node("Cast", ["ids"], ["c"], to=T.INT32),
        helper.make_node("Unsqueeze", ["c", "ax0"], ["u"]),
        helper.make_node("Reshape", ["u", "shape"], ["r"]),
        helper.make_node("Squeeze", ["r", "ax0"], ["s"]),
        helper.make_node("Flatten", ["s"], ["f"], axis=0),
        helper.make_node("Expand", ["f", "eshape"], ["e"]),
        helper.make_node("Gather", ["big", "e"], ["g1"]),
        helper.make_node("Identity", ["ids"], ["i"]),
        helper.make_node("Gather", ["small", "i"], ["g2"], axis=1),
    ]
    inits = [_table("big", 50), numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(2, 20), "small"),
             numpy_helper.from_array(np.array([0], np.int64), "ax0"),
             numpy_helper.from_array(np.array([1, 6], np.int64), "shape"),
             numpy_helper.from_array(np.array([1, 6], np.int64), "eshape")]
    m = _model(nodes, [helper.make_tensor_value_info("ids", T.INT64, [6])],
               [helper.make_tensor_value_info("g1", T.FLOAT, None), helper.make_tensor_value_info("g2", T.FLOAT, None)],
               inits)
    (spec,) = input_specs(m)
    assert spec.high == 20
    feeds = random_feeds([spec], seed=3)
    assert feeds["ids"].max() < 20
    _run(m, feeds)  # in range of both tables


def test_bound_stops_at_arithmetic_and_needs_a_known_dim():
    nodes = [
        helper.make_node("Add", ["ids", "offset"], ["shifted"]),
        helper.make_node("Gather", ["table", "shifted"], ["a"]),
        helper.make_node("Gather", ["dynamic_table", "ids"], ["b"]),  # rows unknown
    ]
    m = _model(nodes, [helper.make_tensor_value_info("ids", T.INT64, [3]),
                       helper.make_tensor_value_info("dynamic_table", T.FLOAT, ["rows", 4])],
               [helper.make_tensor_value_info("a", T.FLOAT, None), helper.make_tensor_value_info("b", T.FLOAT, None)],
               [_table("table", 10), numpy_helper.from_array(np.int64(5), "offset")])
    assert input_specs(m)[0].high is None


def test_gather_elements_gather_nd_scatter_nd_onehot_and_constant_node_bounds():
    nodes = [
        helper.make_node("Constant", [], ["table"], value=numpy_helper.from_array(np.zeros((7, 3), np.float32))),
        helper.make_node("GatherElements", ["table", "ge"], ["a"], axis=1),           # 3
        helper.make_node("GatherND", ["table", "gnd"], ["b"]),                         # min(7, 3) with k unknown
        helper.make_node("GatherND", ["table", "gnd1"], ["c"]),                        # k = 1 -> 7
        helper.make_node("ScatterND", ["table", "snd", "upd"], ["d"]),                 # k = 2 -> min(7, 3)
        helper.make_node("OneHot", ["oh", "depth", "vals"], ["e"]),                    # depth 11
    ]
    inits = [numpy_helper.from_array(np.array(11, np.int64), "depth"),
             numpy_helper.from_array(np.array([0, 1], np.float32), "vals")]
    inputs = [helper.make_tensor_value_info("ge", T.INT64, [7, 3]),
              helper.make_tensor_value_info("gnd", T.INT64, ["n", "k"]),
              helper.make_tensor_value_info("gnd1", T.INT64, [2, 1]),
              helper.make_tensor_value_info("snd", T.INT64, [2, 2]),
              helper.make_tensor_value_info("upd", T.FLOAT, [2]),
              helper.make_tensor_value_info("oh", T.INT64, [4])]
    outs = [helper.make_tensor_value_info(n, T.FLOAT, None) for n in "abcde"]
    m = _model(nodes, inputs, outs, inits)
    assert {s.name: s.high for s in input_specs(m)} == {"ge": 3, "gnd": 3, "gnd1": 7, "snd": 3, "upd": None, "oh": 11}
    feeds = random_feeds(input_specs(m), seed=0, dims={"k": 2, "n": 3})
    _run(m, feeds)


def test_bound_inside_a_subgraph_counts():
    then_g = helper.make_graph([helper.make_node("Gather", ["table", "ids"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", T.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Gather", ["table", "zero"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", T.FLOAT, None)])
    m = _model([helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)],
               [helper.make_tensor_value_info("ids", T.INT64, [5]), helper.make_tensor_value_info("cond", T.BOOL, [])],
               [helper.make_tensor_value_info("y", T.FLOAT, None)],
               [_table("table", 9), numpy_helper.from_array(np.zeros(5, np.int64), "zero")])
    assert input_specs(m)[0].high == 9


# -- random_feeds -----------------------------------------------------------

def test_bert_like_feeds_run_and_respect_ranges():
    m = bert_like(vocab=1000)
    specs = input_specs(m)
    feeds = random_feeds(specs, seed=0, batch_size=3, dims={"seq": 40})
    assert {k: v.shape for k, v in feeds.items()} == {k: (3, 40) for k in ("input_ids", "attention_mask", "token_type_ids")}
    assert all(v.dtype == np.int64 for v in feeds.values())
    assert (feeds["attention_mask"] == 1).all()
    assert set(np.unique(feeds["token_type_ids"])) <= {0, 1}
    ids = feeds["input_ids"]
    assert ids.min() >= 0 and ids.max() < 1000 and ids.max() > 100  # the whole table, not only 0 and 1
    _run(m, feeds)


def test_vocab_size_bounds_token_ids_without_a_graph_bound():
    specs = [InputSpec("input_ids", np.dtype(np.int64), ["b", "s"]),
             InputSpec("token_type_ids", np.dtype(np.int64), ["b", "s"]),
             InputSpec("steps", np.dtype(np.int32), [4]),
             InputSpec("ids_in_table", np.dtype(np.int64), ["b", "s"], high=10)]
    feeds = random_feeds(specs, seed=1, vocab_size=500, dims={"s": 64})
    assert 100 < feeds["input_ids"].max() < 500
    assert feeds["token_type_ids"].max() <= 1  # a type id is not a token id
    assert feeds["steps"].max() <= 1 and feeds["steps"].dtype == np.int32
    assert feeds["ids_in_table"].max() < 10  # the graph's bound wins over a larger vocabulary
    assert random_feeds(specs, seed=1, dims={"s": 64})["input_ids"].max() <= 1  # no vocab: 0 or 1


def test_feeds_respect_dtypes_and_are_seeded():
    specs = [InputSpec(n, np.dtype(d), [2, 3]) for n, d in
             [("f16", np.float16), ("f32", np.float32), ("f64", np.float64), ("u8", np.uint8),
              ("flag", np.bool_), ("mask", np.bool_), ("pad_mask", np.int32)]]
    a, b, c = random_feeds(specs, seed=5), random_feeds(specs, seed=5), random_feeds(specs, seed=6)
    assert {k: v.dtype for k, v in a.items()} == {s.name: s.dtype for s in specs}
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["f32"], c["f32"])
    assert a["mask"].all() and (a["pad_mask"] == 1).all()
    assert abs(float(random_feeds([InputSpec("x", np.dtype(np.float32), [10000])])["x"].std()) - 1) < 0.05


def test_symbolic_dims_shared_across_inputs_and_batch_size_first():
    specs = [InputSpec("a", np.dtype(np.float32), ["B", "S", 8]),
             InputSpec("b", np.dtype(np.float32), ["B", "S"]),
             InputSpec("c", np.dtype(np.float32), [4, "B"]),      # B here too: same value as in a's first dim
             InputSpec("d", np.dtype(np.float32), [None, "T"])]   # unnamed first dim takes the batch size
    feeds = random_feeds(specs, batch_size=3, dims={"S": 5})
    assert {k: v.shape for k, v in feeds.items()} == {"a": (3, 5, 8), "b": (3, 5), "c": (4, 3), "d": (3, 1)}
    assert random_feeds(specs)["a"].shape == (1, 1, 8)


def test_scalar_and_empty_dims():
    feeds = random_feeds([InputSpec("s", np.dtype(np.float32), []), InputSpec("e", np.dtype(np.int64), [0, 2])])
    assert isinstance(feeds["s"], np.ndarray) and feeds["s"].shape == ()
    assert feeds["e"].shape == (0, 2)


@pytest.mark.parametrize("specs, kwargs, message", [
    ([InputSpec("x", np.dtype(np.float32), [1, 3])], {"batch_size": 2},
     "--batch-size 2: the model's inputs have no dynamic first dim (x [1, 3] (float32))"),
    ([InputSpec("x", np.dtype(np.float32), ["N", 3])], {"dims": {"M": 2}},
     "--dim M: the model has no dynamic dim named 'M' (its named dims: N)"),
    ([InputSpec("x", np.dtype(np.float32), ["N", 3])], {"dims": {"N": 0}},
     "--dim N must be a positive integer, not 0"),
    ([InputSpec("x", np.dtype(np.float32), ["N", 3])], {"batch_size": 2, "dims": {"N": 4}},
     "--batch-size 2 and --dim N=4 disagree (input 'x' has N first)"),
    ([InputSpec("x", np.dtype(np.int64), [3])], {"vocab_size": -1},
     "--vocab-size must be a positive integer, not -1"),
    ([InputSpec("x", None, None, onnx_type="seq(tensor(float))")], {},
     "input 'x' has type seq(tensor(float)), which random inputs cannot be made of; give it with --inputs"),
    ([InputSpec("x", np.dtype(np.complex64), [2], onnx_type="tensor(complex64)")], {},
     "input 'x' has type tensor(complex64), which random inputs cannot be made of; give it with --inputs"),
    ([InputSpec("x", np.dtype(np.float32), None)], {},
     "input 'x' has no declared shape, which random inputs cannot be made of; give it with --inputs"),
])
def test_random_feeds_errors(specs, kwargs, message):
    for s in specs:
        s.onnx_type = s.onnx_type or "tensor(float)"
    with pytest.raises(Error) as e:
        random_feeds(specs, **kwargs)
    assert str(e.value) == message


def test_non_tensor_inputs_from_a_model_name_their_type():
    inputs = [helper.make_tensor_sequence_value_info("xs", T.FLOAT, None),
              helper.make_value_info("maybe", helper.make_optional_type_proto(helper.make_tensor_type_proto(T.INT64, [2]))),
              helper.make_tensor_value_info("words", T.STRING, [3])]
    nodes = [helper.make_node("SequenceLength", ["xs"], ["n"]),
             helper.make_node("OptionalHasElement", ["maybe"], ["has"]),
             helper.make_node("Identity", ["words"], ["w"])]
    outs = [helper.make_tensor_value_info("n", T.INT64, []), helper.make_tensor_value_info("has", T.BOOL, []),
            helper.make_tensor_value_info("w", T.STRING, [3])]
    specs = input_specs(_model(nodes, inputs, outs, opset=18))
    assert [(s.onnx_type, s.dtype) for s in specs] == [
        ("seq(tensor(float))", None), ("optional(tensor(int64))", None), ("tensor(string)", np.dtype(object))]
    with pytest.raises(Error, match=r"^input 'xs' has type seq\(tensor\(float\)\), which random inputs cannot be "):
        random_feeds(specs)
    with pytest.raises(Error, match=r"^input 'maybe' has type optional\(tensor\(int64\)\)"):
        random_feeds(specs[1:])
    # Given by the user, they pass validation.
    validate_feeds(specs, {"xs": [np.zeros(2, np.float32)], "maybe": None,
                           "words": np.array(["a", "b", "c"])}, "inputs sample 1")


# -- load_samples -----------------------------------------------------------

def test_npz_one_sample(tmp_path):
    path = tmp_path / "x.npz"
    np.savez(path, input_ids=np.arange(4), mask=np.ones(4, np.int64))
    (sample,) = load_samples(path)
    assert sorted(sample) == ["input_ids", "mask"] and sample["input_ids"].tolist() == [0, 1, 2, 3]
    assert sample.source == str(path)


def test_npz_several_samples_in_natural_order(tmp_path):
    path = tmp_path / "x.npz"
    np.savez(path, **{f"{i}/x": np.full(2, i) for i in (10, 2, 1)}, **{f"{i}/y": np.zeros(1) for i in (10, 2, 1)})
    samples = load_samples(path)
    assert [s["x"][0] for s in samples] == [1, 2, 10]
    assert all(sorted(s) == ["x", "y"] for s in samples)
    assert samples[2].source == f"{path} sample '10'"


def test_npz_names_with_a_slash(tmp_path):
    specs = [InputSpec("enc/x", np.dtype(np.float32), [1])]
    single = tmp_path / "single.npz"
    np.savez(single, **{"enc/x": np.zeros(1, np.float32)})
    assert list(load_samples(single, specs)[0]) == ["enc/x"]
    several = tmp_path / "several.npz"
    np.savez(several, **{"0/enc/x": np.zeros(1, np.float32), "1/enc/x": np.ones(1, np.float32)})
    assert [list(s) for s in load_samples(several, specs)] == [["enc/x"], ["enc/x"]]
    mixed = tmp_path / "mixed.npz"
    np.savez(mixed, **{"0/enc/x": np.zeros(1), "y": np.zeros(1)})
    with pytest.raises(Error, match="keys mix '<sample>/<input>' \\('0/enc/x'\\) and plain names \\('y'\\)"):
        load_samples(mixed, specs)


def test_folder_of_npz(tmp_path):
    for i in (1, 2, 10):
        np.savez(tmp_path / f"s{i}.npz", x=np.full(1, i))
    (tmp_path / "notes.txt").write_text("ignored")
    samples = load_samples(tmp_path)
    assert [int(s["x"][0]) for s in samples] == [1, 2, 10]


def _pb(path, array, name=""):
    path.write_bytes(numpy_helper.from_array(array, name).SerializeToString())


def test_folder_of_pb_named_and_unnamed(tmp_path):
    specs = [InputSpec("a", np.dtype(np.float32), [2], position=0), InputSpec("b", np.dtype(np.int64), [1], position=2)]
    _pb(tmp_path / "input_0.pb", np.ones(2, np.float32))            # unnamed: graph input 0 -> a
    _pb(tmp_path / "input_1.pb", np.array([7], np.int64), name="b")  # named: the name wins over position
    _pb(tmp_path / "output_0.pb", np.zeros(3, np.float32))           # expected outputs are skipped
    (sample,) = load_samples(tmp_path, specs)
    assert sorted(sample) == ["a", "b"] and sample["b"].tolist() == [7]
    with pytest.raises(Error, match="input_0.pb: holds an unnamed tensor; set TensorProto.name or give the model"):
        load_samples(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    _pb(other / "ids.pb", np.arange(3))  # unnamed, not input_<i>: named by its stem
    assert list(load_samples(other)[0]) == ["ids"]
    assert list(load_samples(other / "ids.pb")[0]) == ["ids"]


def test_pb_position_of_an_initializer_is_an_error(tmp_path):
    specs = [InputSpec("a", np.dtype(np.float32), [2], position=0)]
    _pb(tmp_path / "input_1.pb", np.ones(2, np.float32))
    with pytest.raises(Error, match="input_1.pb: holds an unnamed tensor and the model's input 1 is an initializer"):
        load_samples(tmp_path, specs)


def test_sequence_pb_read_when_specs_say_so(tmp_path):
    specs = [InputSpec("xs", None, None, onnx_type="seq(tensor(float))")]
    seq = numpy_helper.from_list([np.zeros(2, np.float32), np.ones(3, np.float32)], "xs")
    (tmp_path / "input_0.pb").write_bytes(seq.SerializeToString())
    (sample,) = load_samples(tmp_path, specs)
    assert [a.tolist() for a in sample["xs"]] == [[0, 0], [1, 1, 1]]


def test_test_data_sets_from_onnx_backend_data_run_in_onnxruntime():
    cases = ["simple/test_single_relu_model", "pytorch-converted/test_Embedding",
             "pytorch-operator/test_operator_index", "simple/test_sequence_model1"]
    for case in cases:
        folder = os.path.join(ONNX_DATA, case)
        model = onnx.load(os.path.join(folder, "model.onnx"))
        specs = input_specs(model)
        (sample,) = load_samples(folder, specs)  # the folder holding test_data_set_0/
        feeds = validate_feeds(specs, sample, f"{case} sample 1")
        got = session(model.SerializeToString()).run(None, feeds)
        want = numpy_helper.to_array(onnx.load_tensor(os.path.join(folder, "test_data_set_0", "output_0.pb")))
        np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-6)
        assert load_samples(os.path.join(folder, "test_data_set_0"), specs)[0].keys() == sample.keys()


def test_several_test_data_sets_and_string_inputs(tmp_path):
    folder = os.path.join(ONNX_DATA, "simple", "test_strnorm_model_monday_casesensintive_lower")
    specs = input_specs(os.path.join(folder, "model.onnx"))
    for i in (10, 0, 2):
        d = tmp_path / f"test_data_set_{i}"
        d.mkdir()
        _pb(d / "input_0.pb", np.array([f"set {i}", "monday", "x", "y"], dtype=object))
    samples = load_samples(tmp_path, specs)
    assert [s.source for s in samples] == [str(tmp_path / f"test_data_set_{i}") for i in (0, 2, 10)]
    for s in samples:
        validate_feeds(specs, s, s.source)
    # (StringNormalizer needs an en_US locale onnxruntime may lack: an Identity carries the strings.)
    m = _model([helper.make_node("Identity", ["x"], ["y"])], [helper.make_tensor_value_info("x", T.STRING, [4])],
               [helper.make_tensor_value_info("y", T.STRING, [4])])
    assert _run(m, samples[2])[0].tolist() == ["set 10", "monday", "x", "y"]


def test_every_onnx_backend_data_set_loads_and_fits_its_model():
    """All test_data_set_0 folders shipped with the onnx wheel (sequences, unnamed
    tensors, initializers listed as inputs): each loads and passes validation."""
    cases = [d for group in sorted(os.listdir(ONNX_DATA)) if os.path.isdir(os.path.join(ONNX_DATA, group))
             for d in sorted(glob.glob(os.path.join(ONNX_DATA, group, "*", "test_data_set_0")))
             if os.path.exists(os.path.join(os.path.dirname(d), "model.onnx"))]
    assert len(cases) > 100
    for data_set in cases:
        specs = input_specs(os.path.join(os.path.dirname(data_set), "model.onnx"))
        (sample,) = load_samples(data_set, specs)
        validate_feeds(specs, sample, data_set)


@pytest.mark.parametrize("setup, message", [
    (lambda p: None, "inputs {p}/missing.npz: no such file or folder"),
    (lambda p: (p / "bad.npz").write_bytes(b"not a zip"), "inputs {p}/bad.npz: cannot read it as .npz: "),
    (lambda p: np.save(p / "x.npy", np.zeros(2)), "inputs {p}/x.npy: expected a .npz file, a .pb file or a folder of them"),
    (lambda p: (p / "input_0.pb").write_bytes(b"\xff\xff\xff"), "inputs {p}/input_0.pb: not a readable ONNX TensorProto: "),
    (lambda p: np.savez(p / "obj.npz", x=np.array([{"a": 1}], dtype=object)),
     "inputs {p}/obj.npz: array 'x' holds Python objects, which are not loaded (pickle)"),
    (lambda p: (p / "empty").mkdir(), "inputs {p}/empty: holds no inputs"),
    (lambda p: (np.savez(p / "a.npz", x=np.zeros(1)), _pb(p / "b.pb", np.zeros(1))),
     "inputs {p}: holds both .npz and .pb files; keep one kind per folder"),
])
def test_load_samples_errors_name_the_file(tmp_path, setup, message):
    setup(tmp_path)
    target = {"missing": "missing.npz", "cannot read": "bad.npz", "expected a": "x.npy", "TensorProto": "input_0.pb",
              "pickle": "obj.npz", "no inputs": "empty", "both": ""}
    name = next(v for k, v in target.items() if k in message)
    with pytest.raises(Error) as e:
        load_samples(tmp_path / name if name else tmp_path)
    assert str(e.value).startswith(message.format(p=tmp_path))
    assert "\n" not in str(e.value)


# -- validate_feeds ---------------------------------------------------------

IMAGE = [InputSpec("image", np.dtype(np.float32), ["N", 3, 224, 224], onnx_type="tensor(float)"),
         InputSpec("scale", np.dtype(np.float32), ["N"], onnx_type="tensor(float)")]


def _image_feeds(**change):
    feeds = {"image": np.zeros((1, 3, 224, 224), np.float32), "scale": np.ones(1, np.float32)}
    feeds.update(change)
    return {k: v for k, v in feeds.items() if v is not None}


@pytest.mark.parametrize("change, message", [
    ({"imag": np.zeros(1)}, "inputs sample 2: the original model has no input 'imag' (its inputs: image, scale); "
                            "did you mean 'image'?"),
    ({"scale": None}, "inputs sample 2: input 'scale' is missing; the original model expects [N] (float32)"),
    ({"image": np.zeros((1, 3, 224, 224))},
     "inputs sample 2: input 'image' has dtype float64 but the original model expects [N, 3, 224, 224] (float32)"),
    ({"image": np.zeros((1, 3, 224), np.float32)},
     "inputs sample 2: input 'image' has shape (1, 3, 224) but the original model expects [N, 3, 224, 224] (float32)"),
    ({"image": np.zeros((1, 1, 224, 224), np.float32)},
     "inputs sample 2: input 'image' has shape (1, 1, 224, 224) but the original model expects [N, 3, 224, 224] (float32)"),
    ({"scale": np.ones(2, np.float32)},
     "inputs sample 2: input 'scale' has shape (2,) but the original model expects [N] (float32), "
     "with N = 1 as in input 'image'"),
    ({"scale": [1.0]},
     "inputs sample 2: input 'scale' is a list, but the original model expects [N] (float32); "
     "give a numpy array of that dtype"),
])
def test_validate_feeds_errors(change, message):
    with pytest.raises(Error) as e:
        validate_feeds(IMAGE, _image_feeds(**change), "inputs sample 2", model="the original model")
    assert str(e.value) == message


def test_validate_feeds_accepts_dynamic_dims_and_never_casts():
    feeds = _image_feeds(image=np.zeros((4, 3, 224, 224), np.float32), scale=np.ones(4, np.float32))
    out = validate_feeds(IMAGE, feeds, "inputs sample 1")
    assert out == feeds and all(out[k] is feeds[k] for k in feeds)
    seq = [InputSpec("xs", None, None, onnx_type="seq(tensor(float))")]
    with pytest.raises(Error, match=r"^s: input 'xs' is a ndarray, but the model expects seq\(tensor\(float\)\) "
                                    r"\(a list of arrays\)$"):
        validate_feeds(seq, {"xs": np.zeros(2)}, "s")
    strings = [InputSpec("w", np.dtype(object), [2], onnx_type="tensor(string)")]
    validate_feeds(strings, {"w": np.array(["a", "b"])}, "s")
    with pytest.raises(Error, match=r"^s: input 'w' has dtype int64 but the model expects \[2\] \(string\)$"):
        validate_feeds(strings, {"w": np.array([1, 2])}, "s")


def test_random_feeds_pass_validation():
    specs = input_specs(bert_like())
    feeds = random_feeds(specs, seed=2, batch_size=2, dims={"seq": 7})
    assert validate_feeds(specs, feeds, "random") == feeds


def test_input_specs_of_a_missing_or_broken_model_is_a_model_error(tmp_path):
    from pyonnxopt.errors import ModelError

    with pytest.raises(ModelError, match=r"missing.onnx: cannot read the model: "):
        input_specs(tmp_path / "missing.onnx")
    with pytest.raises(ModelError, match=r"^<model bytes>: not an ONNX model: "):
        input_specs(b"\xff\xff\xff\xff")
