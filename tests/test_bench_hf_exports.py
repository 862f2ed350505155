"""bench/hf_exports.py: counts a transformers export optimized three ways; a
missing transformers is a one-line error, not a traceback; an export
onnxruntime cannot run reads "unchecked", not "FAILED"."""

import importlib.util
import sys

import onnx
import pytest
from onnx import TensorProto, helper

import _export_counts
import hf_exports

HAVE_HF = all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))


def test_without_transformers_it_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers raises ImportError
    assert hf_exports.main([]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: transformers is not installed: pip install -r bench/requirements.txt"


def test_an_export_onnxruntime_cannot_run_reads_unchecked(tmp_path):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]),
                           helper.make_node("Unknown", ["r"], ["y"], domain="org.example")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "custom.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("org.example", 1)]),
              str(path))
    assert _export_counts.optimized(str(path), "default") == "unchecked"


@pytest.mark.skipif(not HAVE_HF, reason="needs torch and transformers (pip install -r bench/requirements.txt)")
def test_bert_fuses_below_the_peers(monkeypatch, tmp_path, capsys):
    try:  # transformers imports torchvision where there is one, which fails beside a torch it was not built for
        import transformers.models.bert.modeling_bert  # noqa: F401
    except Exception as e:
        pytest.skip(f"transformers does not import here: {str(e).splitlines()[0]}")
    monkeypatch.setattr(hf_exports, "OUT", str(tmp_path))
    assert hf_exports.main(["--models", "bert", "--opsets", "17"]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("model=")]  # the framework may chat
    row = dict(kv.split("=") for kv in line.split())
    assert int(row["opset23"]) < int(row["default"]) < min(int(row["onnxslim"]), int(row["onnxsim"]))
    assert int(row["default"]) < int(row["export"])
