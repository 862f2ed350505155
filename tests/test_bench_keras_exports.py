"""bench/keras_exports.py: counts a tf2onnx export optimized three ways; a
missing tensorflow is a one-line error, not a traceback."""

import importlib.util
import sys

import pytest

import keras_exports

HAVE_TF = all(importlib.util.find_spec(m) is not None for m in ("tensorflow", "tf2onnx"))


def test_without_tensorflow_it_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # import tensorflow raises ImportError
    assert keras_exports.main([]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: tensorflow is not installed: pip install tensorflow tf2onnx"


@pytest.mark.skipif(not HAVE_TF, reason="needs tensorflow and tf2onnx (pip install tensorflow tf2onnx)")
def test_keras_attention_fuses(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(keras_exports, "OUT", str(tmp_path))
    assert keras_exports.main(["--models", "transformer", "--opsets", "17"]) == 0
    row = dict(kv.split("=") for kv in capsys.readouterr().out.split())
    assert int(row["opset23"]) < int(row["default"]) < int(row["onnxslim"]) < int(row["export"])
