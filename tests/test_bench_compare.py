"""bench/compare.py's judging: ratios to the best peer, the zoo summary, the
goals' verdicts, and the evaluation's counts and latency runs."""

import io
import json
import math
import os
import shutil

import onnx
import onnx.parser
import pytest

import _evaluate
import _goals
import _report
import _reuse
import compare

INF = float("inf")
LEVELS = ["disable", "all"]


def lat(ms, spread=0.01):
    return {"ms": ms, "p25_ms": ms * (1 - spread), "p75_ms": ms * (1 + spread), "runs": 20}


def row(nodes, disable, all_, transposes=4, ms_nodes=0, check="ok", wall_s=1.0, spread=0.01):
    return {"status": "ok", "wall_s": wall_s, "check": check, "nodes": nodes, "transposes": transposes,
            "ms_nodes": ms_nodes, "latency": {"disable": lat(disable, spread), "all": lat(all_, spread)}}


def rows_with_ort_peer():
    """onnxsim is right but slower; ort-basic has fewer nodes thanks to com.microsoft ops."""
    return {
        "original": {"status": "input", "check": "reference", "nodes": 200, "transposes": 10},
        "pyonnxopt": row(100, 9.0, 5.0, transposes=4),
        "pyonnxopt-ort": row(80, 8.0, 5.0, transposes=4, ms_nodes=3),
        "onnxsim": row(110, 10.0, 4.0, wall_s=10.0),
        "ort-basic": row(90, 7.0, 6.0, ms_nodes=5, wall_s=2.0),
    }


def test_peer_with_com_microsoft_ops_is_left_out_unless_target_ort():
    r = _goals.model_ratios(rows_with_ort_peer(), LEVELS)
    plain, ort = r["pyonnxopt"], r["pyonnxopt-ort"]
    assert plain["excluded_peers"] == ["ort-basic"]
    assert plain["nodes_best_peer"] == "onnxsim" and plain["nodes_vs_best_peer"] == pytest.approx(100 / 110)
    assert plain["latency_vs_best_peer"]["disable"] == pytest.approx(0.9)
    assert ort["excluded_peers"] == []
    assert ort["nodes_best_peer"] == "ort-basic" and ort["nodes_vs_best_peer"] == pytest.approx(80 / 90)
    assert ort["latency_best_peer"]["disable"] == "ort-basic"
    assert ort["latency_vs_best_peer"]["disable"] == pytest.approx(8 / 7)


def test_ratios_time_latency_transposes():
    r = _goals.model_ratios(rows_with_ort_peer(), LEVELS)["pyonnxopt"]
    assert r["time_vs_fastest_sim_slim"] == pytest.approx(0.1)  # onnxslim absent: onnxsim alone
    assert r["latency_vs_best_peer"]["all"] == pytest.approx(5 / 4)
    assert r["latency_within_noise"]["all"] is False  # 1% spreads do not overlap at 25% apart
    assert r["transposes_vs_original"] == pytest.approx(0.4)
    assert r["failed"] is False


def test_transposes_none_before_none_after_meets_the_goal():
    rows = rows_with_ort_peer()
    rows["original"]["transposes"] = 0
    rows["pyonnxopt"]["transposes"] = 0
    rows["pyonnxopt-ort"]["transposes"] = 1
    r = _goals.model_ratios(rows, LEVELS)
    assert r["pyonnxopt"]["transposes_vs_original"] == 0.0
    assert r["pyonnxopt-ort"]["transposes_vs_original"] == INF


def test_worse_latency_with_overlapping_quartiles_is_within_noise():
    rows = rows_with_ort_peer()
    rows["pyonnxopt"] = row(100, 9.0, 4.2, spread=0.1)
    rows["onnxsim"] = row(110, 10.0, 4.0, spread=0.1, wall_s=10.0)
    r = _goals.model_ratios(rows, LEVELS)["pyonnxopt"]
    assert r["latency_vs_best_peer"]["all"] == pytest.approx(1.05)
    assert r["latency_within_noise"]["all"] is True
    assert r["latency_within_noise"]["disable"] is False  # better: not "worse within noise"


def test_wrong_result_is_an_infinite_ratio_everywhere():
    rows = rows_with_ort_peer()
    rows["pyonnxopt"]["check"] = "wrong"
    r = _goals.model_ratios(rows, LEVELS)["pyonnxopt"]
    assert r["failed"] is True
    assert r["nodes_vs_best_peer"] == INF
    assert r["latency_vs_best_peer"] == {"disable": INF, "all": INF}
    assert r["transposes_vs_original"] == INF
    assert r["time_vs_fastest_sim_slim"] == INF


def test_wrong_peer_is_not_the_best_peer():
    rows = rows_with_ort_peer()
    rows["onnxsim"]["check"] = "wrong"
    r = _goals.model_ratios(rows, LEVELS)["pyonnxopt"]
    assert "nodes_vs_best_peer" not in r and r["latency_vs_best_peer"] == {}


def test_unmeasured_latency_of_a_right_result_fails():
    rows = rows_with_ort_peer()
    rows["pyonnxopt"]["latency"]["all"] = {"error": "boom"}
    r = _goals.model_ratios(rows, LEVELS)["pyonnxopt"]
    assert r["latency_vs_best_peer"]["all"] == INF and not r["failed"]


def _doc(models: dict) -> dict:
    doc = {"models": {n: {"rows": rows, "big": False, "runs": []} for n, rows in models.items()},
           "args": {"latency_level": LEVELS, "repeats": 1, "timeout": 600, "latency_runs": 20,
                    "latency_budget": 120, "latency_block": 1, "latency_clock": "cpu"},
           "environment": {"cpus": 2}, "tools": ["pyonnxopt", "pyonnxopt-ort", "onnxsim", "ort-basic"],
           "latency_setup": _evaluate.LATENCY_SETUP}
    compare.judge(doc)
    return doc


def _goal(doc, tool, start):
    (g,) = [g for g in doc["goals"] if g["tool"] == tool and g["goal"].startswith(start)]
    return g


def test_goals_met_and_not_met():
    good = rows_with_ort_peer()
    slow = rows_with_ort_peer()
    slow["pyonnxopt"]["latency"]["disable"] = lat(10.5)  # 1.05x onnxsim
    doc = _doc({"bert_base": good, "resnet50": slow})
    s = doc["summary"]["pyonnxopt"]
    assert s["latency"]["disable"]["max"] == pytest.approx(1.05)
    assert s["latency"]["disable"]["max_model"] == "resnet50"
    assert s["latency"]["disable"]["geomean"] == pytest.approx(math.sqrt(0.9 * 1.05))
    assert s["transposes"]["per_model"] == {"bert_base": pytest.approx(0.4)}  # resnet50: not a transformer
    assert _goal(doc, "pyonnxopt", "outputs correct")["met"] is True
    assert _goal(doc, "pyonnxopt", "node count")["met"] is True
    assert _goal(doc, "pyonnxopt", "latency (ort 'disable') <=")["met"] is False
    assert _goal(doc, "pyonnxopt", "latency (ort 'disable') geomean")["met"] is False  # 0.972 > 0.95
    assert _goal(doc, "pyonnxopt", "latency (ort 'all') <=")["met"] is False  # 5 vs onnxsim's 4
    assert _goal(doc, "pyonnxopt", "Transposes")["met"] is True
    assert "com.microsoft" in _goal(doc, "pyonnxopt", "node count")["detail"]
    # the ort variant is not timed against a target and counts ort-basic's result
    assert not [g for g in doc["goals"] if g["tool"] == "pyonnxopt-ort" and g["goal"].startswith("optimize time")]
    assert _goal(doc, "pyonnxopt-ort", "latency (ort 'disable') <=")["value"] == pytest.approx(8 / 7)


def test_a_failed_model_fails_every_goal_it_touches():
    bad = rows_with_ort_peer()
    bad["pyonnxopt"]["check"] = "does not run"
    doc = _doc({"vit_b_16": rows_with_ort_peer(), "swin_t": bad})
    g = _goal(doc, "pyonnxopt", "outputs correct")
    assert (g["value"], g["met"]) == ("1/2", False) and "swin_t" in g["detail"]
    assert _goal(doc, "pyonnxopt", "node count")["value"] == INF
    geo = _goal(doc, "pyonnxopt", "latency (ort 'disable') geomean")
    assert geo["value"] == pytest.approx(0.9) and geo["met"] is False  # over the measured model; failure fails it
    assert _goal(doc, "pyonnxopt", "Transposes")["value"] == INF


def test_big_models_stay_out_of_the_summary():
    doc = _doc({"resnet50": rows_with_ort_peer()})
    doc["models"]["big:x"] = {"rows": rows_with_ort_peer(), "big": True, "runs": []}
    doc["models"]["big:x"]["rows"]["pyonnxopt"]["check"] = "wrong"
    compare.judge(doc)
    assert doc["summary"]["pyonnxopt"]["models"] == 1 and doc["summary"]["pyonnxopt"]["failed"] == []


def test_report_prints_goals_and_both_latency_columns():
    doc = _doc({"bert_base": rows_with_ort_peer()})
    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, width=400)
    for table in (_report._runs_table(doc, LEVELS), _report._ratios_table(doc, LEVELS),
                  _report._summary_table(doc, LEVELS)):
        console.print(table)
    text = buf.getvalue()
    assert "ms disable" in text and "ms all" in text and "Transp" in text and "ms:5" in text
    assert "1 intra-op thread(s)" in _report.header(doc)


def test_old_json_latency_becomes_its_level():
    doc = {"args": {"latency_level": "all"}, "models": {"m": {"rows": {"t": {"latency_ms": 3.0}}}}}
    _report.upgrade(doc)
    assert doc["models"]["m"]["rows"]["t"]["latency"] == {"all": {"ms": 3.0, "min_ms": None}}


def test_tool_and_level_lists():
    assert "pyonnxopt-ort" not in compare._tool_list("default")
    assert compare._tool_list("default,pyonnxopt-ort")[-1] == "pyonnxopt-ort"
    assert compare.command("pyonnxopt-ort", "a", "b", False)[-4:] == ["b", "--no-check", "--target", "ort"]
    assert compare._levels("all, disable,all") == ["all", "disable"]
    with pytest.raises(Exception, match="from"):
        compare._levels("fast")


MODEL = """
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
g (float[2, 3] x, bool c) => (float[3, 2] y, float[2, 3] z) {
    t = Transpose <perm = [1, 0]> (x)
    y = Relu (t)
    z = If (c) <then_branch = a () => (float[2, 3] o) { o = com.microsoft.FastGelu (x) },
                else_branch = b () => (float[2, 3] p) { q = Transpose <perm = [1, 0]> (x)
                                                        p = Transpose <perm = [1, 0]> (q) }>
}
"""


def test_count_ops_walks_subgraphs():
    counts = _evaluate.count_ops(onnx.parser.parse_model(MODEL).graph)
    assert counts == {"nodes_main": 3, "nodes": 6, "transposes": 3, "ms_nodes": 1}


def test_count_ops_counts_onnxruntime_ops_in_the_onnx_domain():
    model = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 14]> g (float[2, 3] x, float[3] s) => (float[2, 3] y) {
        a = SimplifiedLayerNormalization (x, s)  y = LayerNormalization (a, s) }""")
    assert _evaluate.count_ops(model.graph, 14)["ms_nodes"] == 2  # LayerNormalization is ONNX's from opset 17
    assert _evaluate.count_ops(model.graph, 17)["ms_nodes"] == 1
    assert _evaluate.count_ops(model.graph)["ms_nodes"] == 0  # opset not given: its own domains only


def test_planned_runs_respects_the_budget_and_the_floor():
    assert _evaluate._planned_runs(20, 0.1, 120) == 20
    assert _evaluate._planned_runs(20, 10.0, 120) == 12
    assert _evaluate._planned_runs(20, 100.0, 120) == _evaluate.MIN_LATENCY_RUNS
    assert _evaluate._planned_runs(20, 100.0, 0) == 20


SMALL = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[4, 8] x) => (float[8, 4] y) { t = Transpose <perm = [1, 0]> (x)
                                      y = Relu (t) }
"""


@pytest.fixture
def two_models(tmp_path):
    paths = {}
    for name in ("a", "b"):
        paths[name] = str(tmp_path / f"{name}.onnx")
        onnx.save(onnx.parser.parse_model(SMALL), paths[name])
    broken = onnx.parser.parse_model(SMALL)
    broken.graph.node[1].op_type = "NoSuchOp"
    paths["broken"] = str(tmp_path / "broken.onnx")
    onnx.save(broken, paths["broken"])
    return paths


def test_latency_interleaved_and_one_by_one(two_models):
    import numpy as np

    feeds = {"x": np.ones((4, 8), np.float32)}
    side = _evaluate.latency_interleaved(two_models, feeds, "disable", runs=6, block=4, budget_s=60)
    seq = _evaluate.latency_one_by_one(two_models, feeds, "all", runs=5, budget_s=60)
    wall = _evaluate.latency_one_by_one(two_models, feeds, "all", runs=5, budget_s=60, clock="wall")
    for res, runs, order in ((side, 6, "interleaved, rounds of 4"), (seq, 5, "back to back"), (wall, 5, "back to back")):
        assert "error" in res["broken"]
        for t in ("a", "b"):
            assert res[t]["runs"] == runs and res[t]["order"] == order
            assert 0 < res[t]["min_ms"] <= res[t]["p25_ms"] <= res[t]["ms"] <= res[t]["p75_ms"]
    assert side["a"]["clock"] == "cpu" and side["a"]["ms"] == side["a"]["cpu_ms"]
    assert wall["a"]["clock"] == "wall" and wall["a"]["ms"] == wall["a"]["wall_ms"]


# ---------------------------------------------------------------- --reuse: peers from an earlier run

WRONG = SMALL.replace("Relu", "Neg")


def _save(text: str, path) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save(onnx.parser.parse_model(text), str(path))
    return str(path)


@pytest.fixture
def earlier_run(tmp_path):
    """A model `tiny` and an earlier run's JSON with its kept outputs: onnxsim right, onnxslim wrong
    (the JSON says ok: the check must be this run's), onnxoptimizer's output gone, polygraphy crashed,
    and a pyonnxopt row that must not be reused."""
    model = _save(SMALL, tmp_path / "tiny.onnx")
    work = tmp_path / "earlier"
    outs = {"onnxsim": _save(SMALL, work / "tiny" / "onnxsim" / "model.onnx"),
            "onnxslim": _save(WRONG, work / "tiny" / "onnxslim" / "model.onnx")}
    old = {"status": "ok", "wall_s": 3.0, "peak_rss": 100 << 20, "nodes": 2, "transposes": 1, "check": "ok",
           "latency": {"disable": lat(99.0)}}
    rows = {t: dict(old, output_bytes=_evaluate.model_bytes(p)) for t, p in outs.items()}
    rows["onnxslim"]["wall_s"] = 4.0
    rows["onnxoptimizer"] = dict(old, output_bytes=123)
    rows["polygraphy"] = {"status": "crash: boom", "wall_s": None}
    rows["pyonnxopt-nocheck"] = dict(old, wall_s=0.1)
    doc = {"args": {"work": str(work), "keep_outputs": True}, "environment": {"loadavg_start": 1.5},
           "models": {"tiny": {"model_bytes": _evaluate.model_bytes(model), "rows": rows}}}
    path = tmp_path / "earlier.json"
    path.write_text(json.dumps(doc))
    return {"model": model, "json": str(path), "work": str(work), "tmp": tmp_path}


def _fake_run_tool(calls, json_path):
    """run_tool without a tool: the input copied as the output; checks the JSON written so far."""
    def run(tool, src, out_dir, timeout_s, big):
        if os.path.exists(json_path):
            with open(json_path) as f:
                doc = json.load(f)
            calls.append((tool, sorted(doc["models"]), doc["complete"]))
        else:
            calls.append((tool, [], None))
        os.makedirs(out_dir, exist_ok=True)
        shutil.copy(src, os.path.join(out_dir, "model.onnx"))
        return {"tool": tool, "status": "ok", "wall_s": 1.0, "peak_rss": 50 << 20, "loadavg_1min": 1.0,
                "output_bytes": os.path.getsize(src)}
    return run


def test_reuse_takes_the_earlier_optimization_and_measures_check_and_latency_anew(earlier_run, monkeypatch, capsys):
    tmp = earlier_run["tmp"]
    other = shutil.copy(earlier_run["model"], tmp / "other.onnx")  # not in the earlier run: every tool runs
    out_json = str(tmp / "now.json")
    calls = []
    monkeypatch.setattr(compare, "run_tool", _fake_run_tool(calls, out_json))
    monkeypatch.setattr(compare, "installed", lambda tool: True)  # the fake runs every tool, installed here or not
    tools = "pyonnxopt-nocheck,onnxsim,onnxslim,onnxoptimizer,polygraphy,ort-basic"
    assert compare.main(["--models", f"{earlier_run['model']},{other}", "--tools", tools, "--reuse",
                         earlier_run["json"], "--repeats", "1", "--latency-runs", "3", "--latency-level", "disable",
                         "--work", str(tmp / "now"), "--json", out_json, "--width", "400"]) == 0
    # tiny: only pyonnxopt and the tool without an earlier row ran; other: all of them, after tiny's JSON was written
    assert calls[:2] == [("pyonnxopt-nocheck", [], None), ("ort-basic", [], None)]
    assert [t for t, _, _ in calls[2:]] == tools.split(",")
    assert {(tuple(m), done) for _, m, done in calls[2:]} == {(("tiny",), False)}
    with open(out_json) as f:
        doc = json.load(f)
    assert doc["complete"] is True and doc["reused"]["json"] == earlier_run["json"]
    rows = doc["models"]["tiny"]["rows"]
    assert doc["models"]["tiny"]["reused_tools"] == ["onnxsim", "onnxslim", "onnxoptimizer", "polygraphy"]
    sim = rows["onnxsim"]
    assert sim["reused"] is True and (sim["wall_s"], sim["peak_rss"], sim["nodes"]) == (3.0, 100 << 20, 2)
    assert sim["check"] == "ok" and sim["output"] == os.path.join(earlier_run["work"], "tiny", "onnxsim", "model.onnx")
    # measured in this run, in the same rounds as the fresh results
    assert sim["latency"]["disable"]["runs"] == 3 and sim["latency"]["disable"]["ms"] != 99.0
    assert sim["latency"]["disable"]["order"] == rows["pyonnxopt-nocheck"]["latency"]["disable"]["order"]
    assert rows["onnxslim"]["check"] == "wrong"
    assert rows["onnxoptimizer"]["check"] == "no output" and "gone" in rows["onnxoptimizer"]["detail"]
    assert rows["polygraphy"]["status"] == "crash: boom" and "check" not in rows["polygraphy"]
    assert "reused" not in rows["pyonnxopt-nocheck"] and rows["pyonnxopt-nocheck"]["wall_s"] == 1.0
    assert "reused" not in rows["ort-basic"] and doc["models"]["other"]["reused_tools"] == []
    assert doc["models"]["tiny"]["ratios"]["pyonnxopt-nocheck"]["time_peers_reused"] == ["onnxsim", "onnxslim"]
    assert doc["models"]["other"]["ratios"]["pyonnxopt-nocheck"]["time_peers_reused"] == []
    goal = _goal(doc, "pyonnxopt-nocheck", "optimize time")
    assert "peer times from an earlier run on 1 of them (tiny)" in goal["detail"]
    text = capsys.readouterr().out
    assert "from an earlier run" in text and "onnxsim ^" in text and "unfinished" not in text


def test_reuse_only_the_same_model_and_never_pyonnxopt(earlier_run):
    earlier = _reuse.Earlier(earlier_run["json"])
    size = _evaluate.model_bytes(earlier_run["model"])
    assert earlier.row("tiny", "onnxsim", size, None)["wall_s"] == 3.0
    assert earlier.row("tiny", "onnxsim", size + 1, None) is None  # another export of the model
    assert earlier.row("tiny", "pyonnxopt-nocheck", size, None) is None
    assert earlier.row("tiny", "ort-basic", size, None) is None
    assert earlier.row("other", "onnxsim", size, None) is None
    other = _reuse.Earlier(earlier_run["json"], work=str(earlier_run["tmp"]))
    assert other.output("big:x", "onnxsim") == os.path.join(str(earlier_run["tmp"]), "big_x", "onnxsim", "model.onnx")


def test_reuse_refuses_to_work_where_the_earlier_outputs_lie(earlier_run, capsys):
    with pytest.raises(SystemExit) as e:
        compare.main(["--models", earlier_run["model"], "--reuse", earlier_run["json"], "--work", earlier_run["work"]])
    assert e.value.code == 2 and "overlap" in capsys.readouterr().err


def test_reused_output_overwritten_since_is_not_evaluated(earlier_run):
    path = os.path.join(earlier_run["work"], "tiny", "onnxsim", "model.onnx")
    assert _reuse.usable_output({"output_bytes": _evaluate.model_bytes(path)}, path) is None
    assert "overwritten" in _reuse.usable_output({"output_bytes": 1}, path)


def test_zoo_paths_are_absolute_when_the_zoo_is_given_relative(tmp_path, monkeypatch):
    """The tools run in their output folders: a relative --zoo once made every tool miss its input."""
    _save(SMALL, tmp_path / "zoo" / "resnet50" / "model.onnx")
    (tmp_path / "zoo" / "resnet50" / "meta.json").write_text(json.dumps({"sha256": "abc", "example_inputs": {}}))
    monkeypatch.chdir(tmp_path)
    a = compare.argparse.Namespace(models="resnet50", no_build=True, zoo="zoo", big=None)
    ((name, path, _, big, sha256),) = compare._models(a)
    assert (name, path, big, sha256) == ("resnet50", str(tmp_path / "zoo" / "resnet50" / "model.onnx"), False, "abc")


def interleaved(samples):
    return {"ms": sorted(samples)[len(samples) // 2], "p25_ms": min(samples), "p75_ms": max(samples),
            "runs": len(samples), "order": "interleaved, rounds of 1", "samples_ms": samples}


def test_paired_latency_chooses_on_even_rounds_and_measures_on_odd():
    # Three peers with the same graph as ours: the same time but a different
    # lucky round each. By their medians the luckiest wins and we read slow; by
    # rounds the choice (even rounds) and the ratio (odd rounds) are apart.
    base = [100.0] * 8
    peers = {}
    for i, name in enumerate(("a", "b", "c")):
        samples = list(base)
        samples[2 * i + 1] = 90.0  # lucky on an odd round only: must not count for the choice
        peers[name] = interleaved(samples)
    peers["slow"] = interleaved([130.0] * 8)
    best, ratio, (low, high) = _goals.paired_latency(interleaved(list(base)), peers)
    assert best in ("a", "b", "c") and ratio == pytest.approx(1.0)
    assert low <= 1 <= high


def test_paired_latency_needs_interleaved_runs_of_the_same_count():
    mine = interleaved([10.0] * 8)
    assert _goals.paired_latency(mine, {"a": interleaved([10.0] * 6)}) is None
    assert _goals.paired_latency(interleaved([10.0] * 4), {"a": interleaved([10.0] * 4)}) is None
    back_to_back = dict(mine, order="back to back")
    assert _goals.paired_latency(back_to_back, {"a": interleaved([10.0] * 8)}) is None


def test_model_ratios_use_the_paired_ratio_when_samples_are_there():
    rows = rows_with_ort_peer()
    rows["pyonnxopt"]["latency"]["disable"] = interleaved([9.0, 9.5] * 4)
    rows["onnxsim"]["latency"]["disable"] = interleaved([10.0, 9.5] * 4)
    r = _goals.model_ratios(rows, LEVELS)["pyonnxopt"]
    assert r["latency_method"] == {"disable": "paired", "all": "medians"}
    assert r["latency_vs_best_peer"]["disable"] == pytest.approx(1.0)  # odd rounds: 9.5 / 9.5
    assert r["latency_within_noise"]["disable"] is False
