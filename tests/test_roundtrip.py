"""Fidelity of load -> save: models come back equal to the original, field by
field (protobuf equality, so presence and unknown fields count), whether saved
inline, through external data (one file or several), over their own file, or
serialized with `to_bytes`.

Models: onnx's backend test data (light, pytorch-converted, pytorch-operator,
simple), onnx's node test cases, and a few small torch exports, which are also
run in onnxruntime before and after.
"""

import copy
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import pyonnxopt

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"


def _test_data_models():
    paths = sorted(DATA.glob("light/*.onnx"))
    for kind in ("pytorch-converted", "pytorch-operator", "simple"):
        paths += sorted(DATA.glob(f"{kind}/*/model.onnx"))
    return paths


MODELS = _test_data_models()
MODEL_IDS = [p.stem if p.parent.name == "light" else p.parent.name for p in MODELS]


# ---------------------------------------------------------------- helpers


def _messages(msg):
    yield msg
    for field, value in msg.ListFields():
        if field.message_type is not None:
            for sub in value if field.is_repeated else [value]:
                yield from _messages(sub)


def all_tensors(model):
    """Every TensorProto of the model, wherever it sits (onnx's own helper
    misses sparse tensors, training graphs and function attribute defaults)."""
    return [m for m in _messages(model) if isinstance(m, TensorProto)]


def inline_external_data(model, base_dir):
    """Reads every external tensor into raw_data and drops its external_data
    and data_location fields (onnx.load instead sets data_location=DEFAULT,
    which protobuf equality would count as a difference)."""
    for t in all_tensors(model):
        if t.data_location != TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        with open(os.path.join(base_dir, info["location"]), "rb") as f:
            f.seek(int(info.get("offset", 0)))
            data = f.read(int(info["length"])) if "length" in info else f.read()
        t.raw_data = data
        t.ClearField("external_data")
        t.ClearField("data_location")
    return model


def load_resolved(path):
    """The model at `path` with external data read inline, as if never external."""
    return inline_external_data(onnx.load(path, load_external_data=False), os.path.dirname(path))


def checker_error(path):
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        return str(e)
    return None


def assert_checker_agrees(original, saved):
    if checker_error(original) is None:
        assert checker_error(saved) is None


def external_placements(path):
    """(location, offset, length) of every external tensor of the model at `path`."""
    out = []
    for t in all_tensors(onnx.load(path, load_external_data=False)):
        if t.data_location == TensorProto.EXTERNAL:
            info = {e.key: e.value for e in t.external_data}
            out.append((info["location"], int(info["offset"]), int(info["length"])))
    return out


def raw_tensor_count(model):
    return sum(t.HasField("raw_data") for t in all_tensors(model))


# ---------------------------------------------------------------- backend test data


@pytest.mark.parametrize("path", MODELS, ids=MODEL_IDS)
def test_save_keeps_the_model(path, tmp_path):
    out = tmp_path / "model.onnx"
    result = pyonnxopt.load(path).save(out)
    assert onnx.load(out) == onnx.load(path)
    assert result.data_files == [] and os.listdir(tmp_path) == ["model.onnx"]
    assert_checker_agrees(path, out)


@pytest.mark.parametrize("path", MODELS, ids=MODEL_IDS)
def test_to_bytes_keeps_the_model(path):
    expected = onnx.load(path)
    for source in (path, path.read_bytes(), expected):
        m = pyonnxopt.load(source)
        assert onnx.ModelProto.FromString(m.to_bytes()) == expected
        assert m.to_onnx() == expected
        assert m.check_invariants() == []


@pytest.mark.parametrize("path", MODELS, ids=MODEL_IDS)
def test_external_data_keeps_the_model(path, tmp_path):
    expected = onnx.load(path)
    out = tmp_path / "default" / "model.onnx"
    out.parent.mkdir()
    pyonnxopt.load(path).save(out, external_data=True)
    assert load_resolved(out) == expected
    assert_checker_agrees(path, out)

    # size_threshold=0: these models' tensors are small, so move them all.
    # (No full_check here: onnx's shape inference cannot read external data
    # in attributes, such as ConstantOfShape's value.)
    out = tmp_path / "all" / "model.onnx"
    out.parent.mkdir()
    result = pyonnxopt.load(path).save(out, external_data=True, size_threshold=0)
    raw = raw_tensor_count(expected)
    assert len(external_placements(out)) == raw
    assert result.data_files == (["model.onnx.data"] if raw else [])
    onnx.load(out)  # onnx's own reader accepts what we wrote
    onnx.checker.check_model(str(out))
    assert load_resolved(out) == expected
    # ...and our reader too, back to the same model inline.
    assert onnx.ModelProto.FromString(pyonnxopt.load(out).to_bytes()) == expected


@pytest.mark.parametrize("path", MODELS, ids=MODEL_IDS)
def test_external_data_split_over_files_keeps_the_model(path, tmp_path):
    expected = onnx.load(path)
    out = tmp_path / "model.onnx"
    limit = 256
    result = pyonnxopt.load(path).save(out, external_data=True, size_threshold=0, max_file_size=limit)
    placements = external_placements(out)
    assert len(placements) == raw_tensor_count(expected)
    names = ["model.onnx.data"] + [f"model.onnx.data.{i}" for i in range(1, len(result.data_files))]
    assert result.data_files == (names if placements else [])
    assert sorted({loc for loc, _, _ in placements}) == sorted(result.data_files)
    for name in result.data_files:
        in_file = [(off, length) for loc, off, length in placements if loc == name]
        end = max(off + length for off, length in in_file)
        assert os.path.getsize(tmp_path / name) == end
        assert end <= limit or len(in_file) == 1, f"{name} is past max_file_size with {len(in_file)} tensors"
    assert load_resolved(out) == expected
    onnx.checker.check_model(str(out))


def test_max_file_size_counts_alignment_padding(tmp_path):
    """Two 8-byte tensors, max_file_size=16: the second starts at offset 16
    (aligned), so it must go to a second file rather than make the first 24 bytes."""
    a = numpy_helper.from_array(np.zeros(2, np.float32), "a")
    b = numpy_helper.from_array(np.ones(2, np.float32), "b")
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], [a, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    result = pyonnxopt.load(model).save(tmp_path / "model.onnx", external_data=True, size_threshold=0, max_file_size=16)
    assert [os.path.getsize(tmp_path / f) for f in result.data_files] == [8, 8]
    assert load_resolved(tmp_path / "model.onnx") == model


@pytest.mark.parametrize("path", MODELS, ids=MODEL_IDS)
def test_save_over_its_own_file(path, tmp_path):
    expected = onnx.load(path)
    copy = tmp_path / "model.onnx"
    shutil.copyfile(path, copy)
    pyonnxopt.load(copy).save(copy)
    assert onnx.load(copy) == expected
    # inline -> external, external -> external (the data file replaced while read), external -> inline
    for external in (True, True, False):
        pyonnxopt.load(copy).save(copy, external_data=external, size_threshold=0)
        assert load_resolved(copy) == expected
    assert onnx.load(copy) == expected and external_placements(copy) == []
    assert set(os.listdir(tmp_path)) <= {"model.onnx", "model.onnx.data"}, "temporary files left behind"


def test_saving_again_after_saving_over_its_own_file(tmp_path):
    """A Model saved over the file it came from must still save its own data,
    not whatever the new file holds at the old offsets."""
    weights = [numpy_helper.from_array(np.full((200, 200), i + 1, np.float32), f"w{i}") for i in range(3)]
    graph = helper.make_graph([helper.make_node("Sum", ["w0", "w1", "w2"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [200, 200])], weights)
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "model.onnx"
    # onnx.save turns the proto it is given into external references: give it a copy.
    onnx.save(copy.deepcopy(original), path, save_as_external_data=True, location="model.onnx.data")
    m = pyonnxopt.load(path)
    m.save(path, external_data=True, align_threshold=1, align=65536)  # same files, new offsets
    assert load_resolved(path) == original
    m.save(tmp_path / "again.onnx")
    assert load_resolved(tmp_path / "again.onnx") == original
    assert onnx.ModelProto.FromString(m.to_bytes()) == original


def test_saving_another_model_never_replaces_the_data_its_source_reads(tmp_path, monkeypatch):
    """a.onnx whose data file is b.onnx.data, saved as b.onnx: the default
    data file would be the source's; the save takes a free name instead, and
    an explicit location that clashes is refused."""
    weights = [numpy_helper.from_array(np.full((300, 300), i + 1, np.float32), f"w{i}") for i in range(2)]
    graph = helper.make_graph([helper.make_node("Sum", ["w0", "w1"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [300, 300])], weights)
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(copy.deepcopy(original), tmp_path / "a.onnx", save_as_external_data=True, location="b.onnx.data")
    monkeypatch.chdir(tmp_path)  # relative paths, as on the command line
    m = pyonnxopt.load("a.onnx")
    result = m.save("b.onnx", external_data=True, size_threshold=0)
    assert [os.path.basename(f) for f in result.data_files] == ["b.onnx.1.data"]
    assert load_resolved(tmp_path / "a.onnx") == original and load_resolved(tmp_path / "b.onnx") == original
    with pytest.raises(pyonnxopt.ModelError, match="its data file b.onnx.data is one the model reads"):
        m.save("c.onnx", external_data=True, location="b.onnx.data")
    m.save("a.onnx", external_data=True, location="b.onnx.data")  # over its own file: its data goes with it
    assert load_resolved(tmp_path / "a.onnx") == original


# ---------------------------------------------------------------- onnx test cases


def _quietly(collect, *args):
    """Collecting computes every case's expected outputs, with numpy warnings on the way."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return collect(*args)


def _roundtrip_failures(cases):
    failures = []
    for case in cases:
        try:
            m = pyonnxopt.load(case.model)
            if onnx.ModelProto.FromString(m.to_bytes()) != case.model:
                failures.append(f"{case.name}: not equal")
            elif problems := m.check_invariants():
                failures.append(f"{case.name}: {problems}")
        except Exception as e:  # noqa: BLE001 - report every case, not the first
            failures.append(f"{case.name}: {type(e).__name__}: {e}")
    return failures


def test_node_test_cases_keep_their_model():
    from onnx.backend.test.case import node

    cases = _quietly(node.collect_testcases, "")
    assert len(cases) > 1000
    assert _roundtrip_failures(cases) == []


def test_model_test_cases_keep_their_model():
    from onnx.backend.test.case import model

    cases = [c for c in _quietly(model.collect_testcases) if c.model is not None]
    if not cases:
        pytest.skip("onnx's model-level test cases carry no ModelProto here (their models are downloaded)")
    assert _roundtrip_failures(cases) == []


# ---------------------------------------------------------------- torch exports


def _torch_case(name):
    """(module, example args, export options, whether outputs are deterministic)."""
    import torch

    torch.manual_seed(0)
    nn = torch.nn

    class Recurrent(nn.Module):
        def __init__(self, cls):
            super().__init__()
            self.rnn = cls(8, 16, num_layers=2, batch_first=True)

        def forward(self, x):
            return self.rnn(x)[0]

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)

        def forward(self, x):
            # An explicit is_causal keeps the TorchScript tracer from turning it into a tensor.
            return self.layer(x, is_causal=False)

    class ControlFlow(nn.Module):
        def forward(self, x: torch.Tensor, n: int):
            if x.sum() > 0:
                y = x * 2
            else:
                y = x - 1
            for i in range(n):
                y = y + float(i)
            return y

    def cnn():
        return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.Dropout(0.25),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

    image = (torch.randn(2, 3, 8, 8),)
    if name == "cnn":  # no constant folding, so BatchNormalization stays
        return cnn().eval(), image, {"do_constant_folding": False}, True
    if name == "cnn_training":  # training-mode BatchNormalization and Dropout
        return cnn().train(), image, {"do_constant_folding": False, "training": torch.onnx.TrainingMode.TRAINING}, False
    if name == "lstm":
        return Recurrent(nn.LSTM).eval(), (torch.randn(2, 5, 8),), {}, True
    if name == "gru":
        return Recurrent(nn.GRU).eval(), (torch.randn(2, 5, 8),), {}, True
    if name == "transformer_encoder":
        return Encoder().eval(), (torch.randn(2, 5, 16),), {}, True
    if name == "control_flow":  # If and Loop with subgraphs reading outer values
        return torch.jit.script(ControlFlow()), (torch.randn(3), 3), {}, True
    raise AssertionError(name)


TORCH_CASES = ["cnn", "cnn_training", "lstm", "gru", "transformer_encoder", "control_flow"]


@pytest.fixture(scope="module", params=[(c, e) for e in ("torchscript", "dynamo") for c in TORCH_CASES],
                ids=lambda p: f"{p[0]}-{p[1]}")
def torch_export(request, tmp_path_factory):
    """(path of the exported model, onnxruntime inputs or None when outputs are random)."""
    torch = pytest.importorskip("torch")
    case, exporter = request.param
    if exporter == "dynamo":
        pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) needs onnxscript")
        if case in ("cnn_training", "control_flow"):
            pytest.skip("the dynamo exporter has no training mode and takes torch.cond, not TorchScript control flow")
    path = tmp_path_factory.mktemp(f"{case}-{exporter}") / "model.onnx"
    with warnings.catch_warnings():  # deprecation notices of torch.jit and the TorchScript exporter
        warnings.simplefilter("ignore")
        module, args, options, deterministic = _torch_case(case)
        torch.onnx.export(module, args, str(path), dynamo=exporter == "dynamo", **options)
    if case == "control_flow":
        assert {"If", "Loop"} <= {n.op_type for n in onnx.load(path).graph.node}
    inputs = [np.asarray(a.numpy() if isinstance(a, torch.Tensor) else a) for a in args]
    return path, inputs if deterministic else None


def _run_ort(path, inputs):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, {i.name: x for i, x in zip(session.get_inputs(), inputs)})


def test_torch_export_keeps_the_model(torch_export, tmp_path):
    path, _ = torch_export
    expected = load_resolved(path)  # the dynamo exporter may write external data
    out = tmp_path / "model.onnx"
    pyonnxopt.load(path).save(out)
    assert load_resolved(out) == expected
    assert onnx.ModelProto.FromString(pyonnxopt.load(path).to_bytes()) == expected
    assert checker_error(path) is None
    assert checker_error(out) is None


def test_torch_export_with_external_data_runs_the_same(torch_export, tmp_path):
    path, inputs = torch_export
    out = tmp_path / "model.onnx"
    result = pyonnxopt.load(path).save(out, external_data=True)
    # Tensors of 1 KiB or more go external; ones already external stay so.
    was_external = {t.name for t in all_tensors(onnx.load(path, load_external_data=False)) if t.data_location == 1}
    big = sum((t.HasField("raw_data") and len(t.raw_data) >= 1024) or t.name in was_external
              for t in all_tensors(load_resolved(path)))
    assert len(external_placements(out)) == big
    assert result.data_files == (["model.onnx.data"] if big else [])
    assert load_resolved(out) == load_resolved(path)
    assert checker_error(out) is None
    if inputs is None:
        return
    pytest.importorskip("onnxruntime")
    for want, got in zip(_run_ort(path, inputs), _run_ort(out, inputs), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
