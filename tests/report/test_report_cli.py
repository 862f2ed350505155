"""gather() and `pyonnxopt report`: parts checked for kind and version with
one-line errors naming the file, atomic writes, exit codes, and (when the
verify and bench modules are there) the whole thing run for real."""

import importlib.util
import json
import os

import pytest
from report_samples import bench_dict, optimize_dict, verify_dict

from pyonnxopt.cli import main
from pyonnxopt.errors import Error
from pyonnxopt.report import gather


@pytest.fixture
def models(tmp_path, cnn_path):
    """The demo CNN and its optimized copy, with the optimize report."""
    import pyonnxopt

    optimized = tmp_path / "cnn.opt.onnx"
    _, report = pyonnxopt.optimize(str(cnn_path), str(optimized))
    opt_json = tmp_path / "opt.json"
    opt_json.write_text(json.dumps(report))
    return str(cnn_path), str(optimized), str(opt_json)


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def test_gather_from_dicts_and_files(tmp_path):
    ver = write(tmp_path, "verify.json", verify_dict())
    report = gather("a.onnx", "b.onnx", optimize_report=optimize_dict(), verify=ver, bench=bench_dict())
    assert report["kind"] == "report" and report["version"] == 1
    assert (report["original"], report["optimized"]) == ("a.onnx", "b.onnx")
    assert report["verify"]["kind"] == "verify" and report["bench"]["kind"] == "bench"
    assert report["optimize"]["nodes_before"] == 16 and report["optimize"]["nodes_after"] == 9
    assert report["created"].endswith("+00:00") and report["pyonnxopt"]
    empty = gather("a.onnx", "b.onnx")
    assert empty["optimize"] is None and empty["verify"] is None and empty["bench"] is None


@pytest.mark.parametrize("part, data, message", [
    ("verify", bench_dict(samples=3), "verify.json: not a verify JSON (a bench JSON); write one with `pyonnxopt verify --json`"),
    ("verify", {**verify_dict(layers=2), "version": 7}, "verify.json: verify JSON version 7; this pyonnxopt reads version 1"),
    ("bench", {"models": []}, "bench.json: not a bench JSON (no \"kind\" field)"),
    ("bench", [1, 2], "bench.json: expected a JSON object from `pyonnxopt bench --json`, found list"),
    ("bench", "{not json", "bench.json: the bench JSON is not valid JSON at line 1"),
    ("optimize_report", verify_dict(layers=2), "optimize_report.json: a verify JSON, not an optimize report"),
    ("optimize_report", {"version": 2, "nodes_before": 3}, "optimize_report.json: not an optimize report (no nodes_after, op_counts_before, op_counts_after)"),
    ("optimize_report", {**optimize_dict(), "version": 1}, "optimize_report.json: optimize report version 1; this pyonnxopt reads version 2"),
])
def test_gather_names_the_file_that_is_not_what_it_claims(tmp_path, part, data, message):
    name = "optimize_report.json" if part == "optimize_report" else f"{part}.json"
    path = write(tmp_path, name, data)
    with pytest.raises(Error) as e:
        gather("a.onnx", "b.onnx", **{part: path})
    assert str(e.value).startswith(f"{path[: -len(name)]}{message}")
    assert "\n" not in str(e.value)


def test_gather_missing_file(tmp_path):
    with pytest.raises(Error, match=r"nope.json: no such file \(the verify JSON\)"):
        gather("a.onnx", "b.onnx", verify=str(tmp_path / "nope.json"))


def test_cli_writes_json_and_html_from_given_parts(models, tmp_path, capsys):
    original, optimized, opt_json = models
    ver = write(tmp_path, "verify.json", verify_dict())
    bench = write(tmp_path, "bench.json", bench_dict(samples=50))
    out_json, out_html = tmp_path / "out" / "report.json", tmp_path / "out" / "report.html"
    out_json.parent.mkdir()
    out_html.write_text("an older report")  # replaced whole
    code = main(["report", original, optimized, "--optimize-report", opt_json, "--verify-json", ver,
                 "--bench-json", bench, "--json", str(out_json), "--html", str(out_html)])
    assert code == 0
    report = json.loads(out_json.read_text())
    assert report["kind"] == "report" and report["optimize"]["nodes_after"] == 9
    assert report["verify"]["ok"] is True and len(report["bench"]["models"]) == 2
    page = out_html.read_text()
    assert page.startswith("<!DOCTYPE html>") and 'data-plot="latency"' in page and 'data-plot="op-counts"' in page
    assert sorted(os.listdir(out_json.parent)) == ["report.html", "report.json"]  # no temporary file left
    umask = os.umask(0)
    os.umask(umask)
    assert out_json.stat().st_mode & 0o777 == 0o666 & ~umask  # like any file the user writes
    out = capsys.readouterr().out
    assert "16 -> 9" in out and "equivalent" in out and "B/A p50" in out and "wrote" in out


def test_cli_exits_1_on_mismatch_after_writing(models, tmp_path, capsys):
    original, optimized, _ = models
    ver = write(tmp_path, "verify.json", verify_dict(ok=False))
    out_html = tmp_path / "report.html"
    out_html.write_text("an older report")
    code = main(["report", original, optimized, "--verify-json", ver, "--no-bench", "--html", str(out_html)])
    assert code == 1
    page = out_html.read_text()
    assert "mismatch" in page and "bench was not run" in page and "No optimize report" in page
    out = capsys.readouterr().out
    assert "mismatch" in out and "/features.25/MaxPool_output_0" in out


@pytest.mark.parametrize("extra, message", [
    (["--verify-json", "v.json", "--no-verify"], "--verify-json and --no-verify: give one or the other"),
    (["--bench-json", "b.json", "--no-bench"], "--bench-json and --no-bench: give one or the other"),
    (["--no-bench", "--iterations", "5"], "--iterations 5: expected a positive count, with bench running here"),
    (["--no-bench", "--no-verify", "--optimize-report", "missing.json"], "missing.json: no such file (the optimize report)"),
])
def test_cli_user_errors_are_one_line(models, capsys, extra, message):
    original, optimized, _ = models
    assert main(["report", original, optimized, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_cli_missing_model(tmp_path, capsys):
    assert main(["report", str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx"), "--no-bench", "--no-verify"]) == 2
    assert "a.onnx: no such file" in capsys.readouterr().err


def _importable(name):
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


@pytest.mark.skipif(not (_importable("pyonnxopt.verify") and _importable("pyonnxopt.benchmark.run")),
                    reason="pyonnxopt.verify or pyonnxopt.benchmark.run is not in this tree yet")
def test_cli_runs_verify_and_bench_for_real(models, tmp_path, capsys):
    original, optimized, opt_json = models
    out_json, out_html = tmp_path / "report.json", tmp_path / "report.html"
    code = main(["report", original, optimized, "--optimize-report", opt_json, "--iterations", "5",
                 "--json", str(out_json), "--html", str(out_html)])
    assert code == 0, capsys.readouterr()
    report = json.loads(out_json.read_text())
    assert report["verify"]["kind"] == "verify" and report["verify"]["ok"] is True
    assert report["verify"]["layers"], "the CNN shares intermediates by name"
    assert [m["label"] for m in report["bench"]["models"]] == ["A", "B"]
    assert report["bench"]["models"][0]["latency_ms"]["count"] == 5
    assert report["bench"]["models"][1]["profile"]["by_op_type"]
    page = out_html.read_text()
    for plot in ("op-counts", "layer-error", "latency", "profile"):
        assert f'data-plot="{plot}"' in page


def test_inputs_reach_verify_for_a_string_model(tmp_path, capsys):
    # a string input (a classical-ML model's category column): generated from its categories, or given
    import numpy as np
    import onnx
    from onnx import parser

    import pyonnxopt

    proto = parser.parse_model("""<ir_version: 8, opset_import: ["" : 17, "ai.onnx.ml" : 2]>
    g (string[N] s) => (int64[N] y) {
        c = ai.onnx.ml.LabelEncoder <keys_strings = ["a", "b"], values_int64s = [1, 2], default_int64 = 0> (s)
        y = Add(c, c)
    }""")
    original, optimized, inputs = (str(tmp_path / n) for n in ("m.onnx", "m.opt.onnx", "rows.npz"))
    onnx.save(proto, original)
    pyonnxopt.optimize(original, optimized, check_outputs=False)
    np.savez(inputs, s=np.array(["a", "b", "z"]))
    assert main(["report", original, optimized, "--no-bench", "--json", str(tmp_path / "r.json")]) == 0
    generated = json.loads((tmp_path / "r.json").read_text())["verify"]
    assert main(["report", original, optimized, "--no-bench", "--inputs", inputs,
                 "--json", str(tmp_path / "r.json")]) == 0
    given = json.loads((tmp_path / "r.json").read_text())["verify"]
    assert generated["ok"] and given["ok"] and generated["inputs"] != given["inputs"]
    assert main(["report", original, optimized, "--inputs", str(tmp_path / "none.npz")]) == 2
    assert "--inputs " in capsys.readouterr().err
