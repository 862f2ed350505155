"""The `pyonnxopt` command: subcommands, JSON, and one-line errors."""

import json
import subprocess
import sys

import onnx
import pytest

from pyonnxopt import __version__
from pyonnxopt.cli import main


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"pyonnxopt {__version__}"


def test_info_json(cnn_path, capsys):
    assert main(["info", str(cnn_path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["ir_version"] == 8 and info["opset_imports"] == {"": 17}
    assert info["node_count"] == 16 and info["op_counts"]["Conv"] == 2
    assert info["inputs"] == [{"name": "image", "type": "float32[N,3,32,32]", "dtype": "float32", "shape": ["N", 3, 32, 32]}]
    assert info["initializer_count"] == 12 and info["initializer_bytes"] > 20000
    assert info["external_data"] == [] and info["function_count"] == 0


def test_info_table_lists_external_data(cnn_path, tmp_path, capsys):
    import pyonnxopt

    ext = tmp_path / "ext.onnx"
    pyonnxopt.load(cnn_path).save(ext, external_data=True, size_threshold=64)
    assert main(["info", str(ext)]) == 0
    out = capsys.readouterr().out
    assert "external data" in out and "ext.onnx.data" in out and "BatchNormalization" in out


def test_info_counts_subgraphs_and_functions(if_model, tmp_path, capsys):
    path = tmp_path / "if.onnx"
    onnx.save(if_model, path)
    assert main(["info", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["subgraph_count"] == 2 and info["node_count"] == 2 and info["node_count_all_graphs"] == 4


def test_demo_runs(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "round trip identical" in out and "16 -> 13 nodes" in out and "onnxruntime outputs match" in out


@pytest.mark.parametrize("argv, needle", [
    (["info", "missing.onnx"], "missing.onnx: cannot open"),
    (["info"], "the following arguments are required: model"),
    (["nonsense"], "invalid choice"),
    (["info", "--bogus", "x.onnx"], "unrecognized arguments: --bogus"),
])
def test_user_errors_are_one_line_exit_2(argv, needle, capsys):
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_malformed_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08" + b"\xff" * 20)
    assert main(["info", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "varint" in err and len(err.strip().splitlines()) == 1


def test_passes_lists_the_native_passes(capsys):
    assert main(["passes", "--json"]) == 0
    names = [p["name"] for p in json.loads(capsys.readouterr().out)]
    assert {"eliminate_dead_code", "eliminate_identity", "eliminate_dropout"} <= set(names)


def test_python_dash_m(cnn_path):
    r = subprocess.run([sys.executable, "-m", "pyonnxopt", "info", str(cnn_path), "--json"], capture_output=True, text=True)
    assert r.returncode == 0 and json.loads(r.stdout)["node_count"] == 16
