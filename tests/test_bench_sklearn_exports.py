"""bench/sklearn_exports.py: counts skl2onnx exports optimized three ways;
a missing scikit-learn is a one-line error that names the pip packages."""

import importlib.util
import sys

import pytest

import _export_counts
import sklearn_exports

HAVE_SKLEARN = all(importlib.util.find_spec(m) is not None for m in ("sklearn", "skl2onnx"))


def test_without_scikit_learn_it_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "sklearn", None)  # import sklearn raises ImportError
    assert sklearn_exports.main([]) == 2
    assert capsys.readouterr().err.strip() == "error: sklearn is not installed: pip install scikit-learn skl2onnx"


@pytest.mark.skipif(not HAVE_SKLEARN, reason="needs scikit-learn and skl2onnx (pip install scikit-learn skl2onnx)")
def test_a_text_classifier_is_checked_and_counted(monkeypatch, tmp_path, capsys):
    # string input and a ZipMap output: the check draws words of the vocabulary and compares the maps
    monkeypatch.setattr(sklearn_exports, "OUT", str(tmp_path))
    assert sklearn_exports.main(["--models", "tfidf_logreg", "--opsets", "17"]) == 0
    row = dict(kv.split("=") for kv in capsys.readouterr().out.split())
    assert int(row["default"]) <= int(row["onnxslim"]) < int(row["export"])


def test_each_model_is_built_once_and_only_for_missing_files(tmp_path):
    # the loop the three export scripts share
    built, written = [], []

    def write(made, name, opset, path):
        written.append((made, opset))
        open(path, "w").close()

    def make(name):
        built.append(name)
        return name.upper()

    paths = _export_counts.export_each(str(tmp_path), ["a", "b"], [13, 17], make, write)
    assert [p.rsplit("/", 1)[1] for p in paths] == ["a_opset13.onnx", "a_opset17.onnx", "b_opset13.onnx",
                                                     "b_opset17.onnx"]
    assert built == ["a", "b"] and written == [("A", 13), ("A", 17), ("B", 13), ("B", 17)]
    assert _export_counts.export_each(str(tmp_path), ["a", "b"], [13, 17], make, write) == paths
    assert built == ["a", "b"]  # every file there: nothing built again
