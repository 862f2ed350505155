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
    assert info["initializer_input_count"] == 0
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
    assert "round trip identical" in out and "16 -> 9 nodes" in out and "onnxruntime outputs match" in out


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


def test_passes_table_keeps_bracketed_text(capsys, monkeypatch):
    # rich reads "[rows, K]" as a markup tag and would drop it
    monkeypatch.setenv("COLUMNS", "300")
    assert main(["passes"]) == 0
    assert "runs on [rows, K], each Linear one Gemm" in capsys.readouterr().out


def test_python_dash_m(cnn_path):
    r = subprocess.run([sys.executable, "-m", "pyonnxopt", "info", str(cnn_path), "--json"], capture_output=True, text=True)
    assert r.returncode == 0 and json.loads(r.stdout)["node_count"] == 16


@pytest.mark.parametrize("flags, needle", [
    (["--input-shape", "input"], "--input-shape 'input': expected NAME:D1,D2"),
    (["--input-shape", "nope:1,3,8,8"], "--input-shape: the model has no input 'nope'"),
    (["--fold-size-limit", "lots"], "--fold-size-limit 'lots': expected a size"),
    (["--skip", "no_such_pass"], "unknown pass 'no_such_pass'"),
    (["--skip", "fuse_gelu,no_such_pass"], "unknown pass 'no_such_pass'"),
    (["--batch", "0"], "--batch 0: must be between 1 and 2147483647"),
    (["--batch", "99999999999"], "--batch 99999999999: must be between 1 and 2147483647"),
    (["--input-shape", "image:0,3,32,32"], "dim 0 must be between 1 and 2147483647"),
    (["--input-shape", "image:1,3,32,32", "--input-shape", "image:2,3,32,32"], "input 'image' is given twice"),
    (["--input-shape", "image:1,3,h,32"], "input 'image' dim 2 is 32 in the model, not h"),
    (["--check-inputs", "missing.npz"], "--check-inputs missing.npz: cannot read it"),
])
def test_optimize_flag_errors_are_one_line_exit_2(cnn_path, tmp_path, flags, needle, capsys):
    out = tmp_path / "o.onnx"
    assert main(["optimize", str(cnn_path), str(out), *flags]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()


def test_optimize_flags_reach_the_report(cnn_path, tmp_path, capsys):
    import numpy as np

    inputs = tmp_path / "inputs.npz"
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.savez(inputs, image=x)
    report = tmp_path / "r.json"
    rc = main(["optimize", str(cnn_path), str(tmp_path / "o.onnx"), "--fold-size-limit", "64KiB", "--allow-lossy",
               "--remove-training-residue", "--batch", "1", "--check-inputs", str(inputs), "--report", str(report),
               "--target", "ort", "--opset", "18", "--initializer-inputs", "inputs"])
    assert rc == 0
    r = json.loads(report.read_text())
    assert r["options"] == {"fold_size_limit": 65536, "allow_lossy": True, "remove_training_residue": True,
                            "target": "ort", "opset": 18, "initializer_inputs": "inputs"}
    assert (r["opset_before"], r["opset_after"]) == (17, 18)
    assert r["check"]["first_mismatch"] is None and r["check"]["seed"] is None
    assert "checked in onnxruntime: 1 outputs match" in capsys.readouterr().out
    np.savez(inputs, other=x)
    assert main(["optimize", str(cnn_path), str(tmp_path / "o.onnx"), "--check-inputs", str(inputs)]) == 2
    assert "check inputs: the model has no input 'other'" in capsys.readouterr().err


@pytest.mark.parametrize("skip", [["--skip", "fold_constants,eliminate_identity"],
                                  ["--skip", "fold_constants", "--skip", "eliminate_identity"]])
def test_skip_takes_a_list_or_repeats(cnn_path, tmp_path, skip):
    report = tmp_path / "r.json"
    assert main(["optimize", str(cnn_path), str(tmp_path / "o.onnx"), "--no-check", "--report", str(report), *skip]) == 0
    ran = {p["name"] for p in json.loads(report.read_text())["passes"]}
    assert ran and not ran & {"fold_constants", "eliminate_identity"}


def test_commands_import_only_what_they_use(cnn_path, tmp_path):
    """info, passes and optimize --no-check on a model with nothing for onnxruntime to fold never import it."""
    code = ("import sys; from pyonnxopt.cli import main; "
            f"main(['info', {str(cnn_path)!r}]); main(['passes']); "
            f"main(['optimize', {str(cnn_path)!r}, {str(tmp_path / 'o.onnx')!r}, '--no-check']); "
            "print(sorted(m for m in ('onnxruntime', 'torch', 'numba', 'cupy', 'tensorrt') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1] == "[]"
