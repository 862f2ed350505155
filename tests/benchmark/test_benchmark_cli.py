"""`pyonnxopt bench`: the bench JSON, the tables, the cold start, and
one-line errors with exit code 2."""

import json

import numpy as np
import pytest

from pyonnxopt.benchmark import bench
from pyonnxopt.benchmark.cold import cold_start
from pyonnxopt.benchmark import cold_worker
from pyonnxopt.benchmark.device import DeviceMemory
from pyonnxopt.benchmark.session import LoadError, Settings
from pyonnxopt.cli import main

MODEL_KEYS = {"label", "path", "session_create_cold_s", "session_create_warm_s", "latency_ms", "qps", "peak_rss_mb",
              "device_peak_mb", "profile"}
LATENCY_KEYS = {"p50", "p95", "p99", "mean", "min", "max", "stdev", "count", "samples"}


def test_two_models_json_schema(chain, tmp_path, capsys):
    a, b = chain(1), chain(3)
    report = tmp_path / "bench.json"
    assert main(["bench", a, b, "--threads", "1", "--iterations", "20", "--warmup", "2", "--batch-size", "8",
                 "--no-cold", "--profile", "--concurrency", "2", "--json", "--report", str(report)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == json.loads(report.read_text())
    assert out["kind"] == "bench" and out["version"] == 1 and out["seconds"] > 0
    assert out["settings"] == {"provider": "cpu", "intra_op_threads": 1, "inter_op_threads": None,
                               "optimization_level": "all", "warmup": 2, "iterations": 20, "seconds": None,
                               "concurrency": 2, "batch_size": 8,
                               "inputs": {"source": "random", "seed": 0, "dims": {}, "vocab_size": None}}
    assert [m["label"] for m in out["models"]] == ["A", "B"] and [m["path"] for m in out["models"]] == [a, b]
    for m in out["models"]:
        assert MODEL_KEYS <= set(m) and set(m["latency_ms"]) == LATENCY_KEYS
        assert m["latency_ms"]["count"] == 20 and m["qps"] > 0 and m["session_create_warm_s"] > 0
        assert m["session_create_cold_s"] is None and m["peak_rss_mb"] is None and m["device_peak_mb"] is None
        assert {"by_op_type", "top_nodes"} <= set(m["profile"])
        assert {"op_type", "ms", "share", "count"} == set(m["profile"]["by_op_type"][0])
        assert {"name", "op_type", "ms", "share"} == set(m["profile"]["top_nodes"][0])
    c = out["comparison"]
    assert {"metric", "ratio", "ratio_low", "ratio_high", "rounds"} <= set(c) and c["rounds"] == 20
    assert c["ratio"] > 1  # three layers against one


def test_one_model_by_time_with_cold_start_and_tables(chain, capsys):
    assert main(["bench", chain(2), "--seconds", "0.2", "--warmup", "1", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    for text in ("session create, cold", "latency p99", "throughput (1 thread)", "peak RSS (cold process)"):
        assert text in out
    assert "B/A" not in out


def test_cold_start_in_a_fresh_process(chain):
    c = cold_start(chain(2), Settings(intra_op_threads=1), {"x": np.ones((4, 256), np.float32)}, "A")
    assert 0 < c["create_s"] < 30
    assert 20 < c["peak_rss_mb"] < 2000  # python + numpy + onnxruntime + the model, not pyonnxopt's process
    assert c["device_peak_mb"] is None and "cpu" in c["device_note"]


def test_cold_rss_is_the_workers_not_its_parents(chain):
    """ru_maxrss would carry this process's size across fork and exec."""
    ballast = np.ones(600 << 20, np.uint8)  # 600 MB resident here
    c = cold_start(chain(2), Settings(intra_op_threads=1), {"x": np.ones((4, 256), np.float32)}, "A")
    assert c["peak_rss_mb"] < 400 and ballast.sum() == 600 << 20


def test_cold_worker_reports_load_errors(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage")
    result = cold_worker.main({"model": str(bad), "provider": "cpu", "feeds": None, "runs": 1,
                               "options": {"providers": ["CPUExecutionProvider"], "level": "ORT_ENABLE_ALL"}})
    assert set(result) == {"error"} and "\n" not in result["error"]


def test_device_memory_says_why_not():
    assert DeviceMemory("cpu").peak_mb() == (None, "the cpu provider uses no device memory")
    try:
        import pynvml  # noqa: F401
    except ImportError:
        value, reason = DeviceMemory("cuda").peak_mb()
        assert value is None and "pynvml" in reason


def test_api_load_error_prefix(chain, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(LoadError, match=rf"^model B \({bad}\): onnxruntime cannot load it: "):
        bench([chain(1), str(bad)], iterations=2, warmup=0, cold=False)


@pytest.mark.parametrize("argv, message", [
    (["missing.onnx"], "model A (missing.onnx): no such file"),
    (["{a}", "--iterations", "0"], "--iterations 0: expected 1 or more"),
    (["{a}", "--concurrency", "0"], "--concurrency 0: expected 1 or more"),
    (["{a}", "--seconds", "-1"], "--seconds -1.0: expected a positive time"),
    (["{a}", "--warmup", "-2"], "--warmup -2: expected 0 or more"),
    (["{a}", "--threads", "0"], "--threads 0: expected a thread count of 1 or more"),
    (["{a}", "{a}", "{a}"], "bench takes one model or two (A and B), not 3"),
    (["{a}", "--iterations", "5", "--seconds", "1"], "not allowed with argument"),
    (["{a}", "--level", "max"], "invalid choice: 'max'"),
    (["{a}", "--inputs", "{npz}"], "input 'nope'"),
    (["{a}", "--dim", "seq"], "--dim 'seq': expected SYMBOL=N, e.g. seq=128"),
    (["{a}", "--dim", "seq=4"], "--dim seq: the model has no dynamic dim named 'seq'"),
    (["{a}", "--dim", "seq=0"], "--dim seq"),
    (["{a}", "--vocab-size", "0"], "--vocab-size"),
])
def test_bad_input_is_one_line_exit_2(chain, tmp_path, capsys, argv, message):
    a = chain(1)
    npz = tmp_path / "wrong.npz"
    np.savez(npz, nope=np.ones((2, 256), np.float32))
    argv = [x.format(a=a, npz=npz) for x in argv]
    with pytest.raises(SystemExit) as e:  # argparse's own errors exit; ours return 2
        raise SystemExit(main(["bench", "--no-cold", "--warmup", "0", *argv]))
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


def test_user_inputs_are_run(chain, tmp_path):
    npz = tmp_path / "x.npz"
    np.savez(npz, x=np.ones((8, 256), np.float32))
    out = bench([chain(1)], inputs=str(npz), iterations=3, warmup=0, cold=False)
    assert out["settings"]["inputs"] == {"source": str(npz), "seed": None, "dims": None, "vocab_size": None}
    assert out["models"][0]["latency_ms"]["count"] == 3


def test_named_dims_and_vocab_size_size_random_inputs(tmp_path, capsys):
    from onnx import parser
    import onnx
    from pyonnxopt.benchmark.feeds import model_feeds

    path = tmp_path / "seq.onnx"
    onnx.save(parser.parse_model("""<ir_version: 8, opset_import: ["" : 11]>
        g (int64[B,S] input_ids, float[B,S,4] h) => (float[B,S,4] y) {
            c = Cast <to = 1> (input_ids)
            u = Unsqueeze <axes = [2]> (c)
            y = Add(h, u)
        }"""), path)
    (feed,) = model_feeds(str(path), "A", None, 0, 2, dims={"S": 5}, vocab_size=7)
    assert feed["h"].shape == (2, 5, 4) and feed["input_ids"].shape == (2, 5)
    assert feed["input_ids"].max() < 7 and feed["input_ids"].max() > 1  # token ids, not 0 and 1
    assert main(["bench", str(path), "--dim", "S=5", "--batch-size", "2", "--vocab-size", "7", "--iterations", "3",
                 "--warmup", "0", "--no-cold", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["settings"]["inputs"] == {"source": "random", "seed": 0, "dims": {"S": 5}, "vocab_size": 7}
    npz = tmp_path / "x.npz"
    np.savez(npz, input_ids=np.ones((2, 5), np.int64), h=np.ones((2, 5, 4), np.float32))
    assert main(["bench", str(path), "--dim", "S=5", "--inputs", str(npz), "--no-cold"]) == 2
    assert "--dim and --vocab-size size random inputs" in capsys.readouterr().err


def test_a_model_that_cannot_run_on_size_1_dims_is_told_to_size_them(tmp_path, capsys):
    from onnx import parser
    import onnx

    path = tmp_path / "audio.onnx"  # a kernel of 4 cannot slide over 1 sample
    onnx.save(parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[B,1,T] x) => (float[B,1,U] y) <float[1,1,4] w = {1, 1, 1, 1}> { y = Conv(x, w) }"""), path)
    assert main(["bench", str(path), "--no-cold", "--warmup", "1", "--iterations", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.endswith(
        "(random inputs with dynamic dims B, T of size 1: size them with --dim SYMBOL=N, or give --inputs)")
    assert main(["bench", str(path), "--no-cold", "--warmup", "1", "--iterations", "1", "--dim", "T=16"]) == 0
