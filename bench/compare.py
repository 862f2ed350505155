"""pyonnxopt against peer optimizers on the zoo: time, memory, nodes, correctness, latency.

    python bench/zoo.py                                  # build the zoo first (cached)
    python bench/compare.py                              # every zoo model, every tool
    python bench/compare.py --models resnet50,bert_base --tools pyonnxopt,onnxsim --repeats 3
    python bench/compare.py --big bench/out/gpt2_large/model.onnx --json out.json

Each optimization is one fresh subprocess running one tool the way its users
run it (a CLI where the tool has one), under /usr/bin/time, with a timeout:
wall time is that of the whole process (interpreter start, imports, load,
optimize, save) and peak RSS is the tool's own maximum resident set. A tool
that is not installed is "not installed", one that exits non-zero is
"crash: <its error line>", one that runs past --timeout is "timeout"; the run
goes on with the next. Repeats are interleaved (A B C ... A B C ...).

Each result is then evaluated in another subprocess: nodes (main graph and
subgraphs), nodes left whose inputs are all constant (initializers or
Constant outputs: folding that was missed), the outputs compared with the
original's in onnxruntime (graph optimizations off, seeded inputs), and the
median latency in onnxruntime on the CPU (graph optimizations at their
default level). Results: a table (rich) on stdout, everything in --json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import _util  # noqa: E402
import zoo  # noqa: E402 - only its names and paths: zoo imports torch lazily

DEFAULT_WORK = os.path.join(HERE, "out", "compare_work")
DATA_NAME = "model.onnx.data"
TIME_BIN = "/usr/bin/time"

# name -> (modules that must import, one-line description). Order = column order.
TOOLS = {
    "pyonnxopt-nocheck": (("pyonnxopt",), "pyonnxopt optimize IN OUT --no-check"),
    "pyonnxopt": (("pyonnxopt",), "pyonnxopt optimize IN OUT (default: checks the result in onnxruntime)"),
    "onnxsim": (("onnxsim",), "onnxsim IN OUT (defaults: no check_n)"),
    "onnxslim": (("onnxslim",), "onnxslim IN OUT (defaults)"),
    "onnxoptimizer": (("onnxoptimizer",), "python -m onnxoptimizer IN OUT (default fuse-and-elimination passes)"),
    "polygraphy": (("polygraphy",), "polygraphy surgeon sanitize IN --fold-constants -o OUT"),
    "onnxscript": (("onnxscript", "onnx_ir"), "onnxscript.optimizer.optimize(onnx_ir.load(IN)), onnx_ir.save"),
    "ort-basic": (("onnxruntime",), "onnxruntime SessionOptions.optimized_model_filepath at ORT_ENABLE_BASIC"),
}
# The peers whose time the targets are measured against, with their defaults.
TIME_PEERS = ("onnxsim", "onnxslim")
PYONNXOPT = ("pyonnxopt-nocheck", "pyonnxopt")
TARGETS = {"pyonnxopt-nocheck": 0.25, "pyonnxopt": 0.6}

# ---------------------------------------------------------------- running one tool


def _script(name: str) -> str:
    path = os.path.join(sysconfig.get_path("scripts"), name)
    return path if os.path.exists(path) else (shutil.which(name) or name)


def command(tool: str, src: str, dst: str, big: bool) -> list:
    """The command line of one tool run. `big`: write weights as external data."""
    py = sys.executable
    if tool in PYONNXOPT:
        # `python -m pyonnxopt` is the `pyonnxopt` console script, from this checkout.
        return [py, "-m", "pyonnxopt", "optimize", src, dst, *(["--no-check"] if tool == "pyonnxopt-nocheck" else [])]
    if tool == "onnxsim":
        return [py, "-m", "onnxsim", src, dst, *(["--save-as-external-data"] if big else [])]
    if tool == "onnxslim":
        return [py, "-m", "onnxslim", src, dst, *(["--save-as-external-data"] if big else [])]
    if tool == "onnxoptimizer":
        return [py, "-m", "onnxoptimizer", src, dst]  # falls back to external data by itself
    if tool == "polygraphy":
        return [_script("polygraphy"), "surgeon", "sanitize", src, "--fold-constants", "-o", dst,
                *(["--save-external-data", DATA_NAME] if big else [])]
    if tool in ("onnxscript", "ort-basic"):
        return [py, os.path.abspath(__file__), "--tool-worker", tool, src, dst, *(["--external"] if big else [])]
    raise ValueError(tool)


def tool_worker(tool: str, src: str, dst: str, big: bool) -> int:
    """The tools without a command line of their own, run the way their docs show."""
    if tool == "onnxscript":
        import onnx_ir as ir
        import onnxscript.optimizer

        model = ir.load(src)
        onnxscript.optimizer.optimize(model)
        ir.save(model, dst, external_data=DATA_NAME if big else None)
    elif tool == "ort-basic":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        # BASIC: the level whose output stays a portable ONNX model (EXTENDED
        # and ALL add onnxruntime's own contrib ops and layouts).
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        opts.optimized_model_filepath = dst
        if big:
            opts.add_session_config_entry("session.optimized_model_external_initializers_file_name", DATA_NAME)
            opts.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
        ort.InferenceSession(src, opts, providers=["CPUExecutionProvider"])
    return 0


def installed(tool: str) -> bool:
    if tool in PYONNXOPT:
        return os.path.isdir(os.path.join(ROOT, "pyonnxopt")) or importlib.util.find_spec("pyonnxopt") is not None
    return all(importlib.util.find_spec(m) is not None for m in TOOLS[tool][0])


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ROOT, *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("PYTHONWARNINGS", "ignore")
    return env


def error_line(text: str) -> str:
    """The line that says what went wrong: the exception line of a traceback,
    else the first line that looks like an error, else the last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        head = ln.split(":", 1)[0]
        if head.endswith(("Error", "Exception", "Exit", "Interrupt")) and " " not in head:
            return ln[:160]
    for ln in lines:
        low = ln.lower()
        if "error" in low or "fail" in low:
            return ln[:160]
    return lines[-1][:160] if lines else ""


def run_tool(tool: str, src: str, out_dir: str, timeout_s: float, big: bool) -> dict:
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    dst = os.path.join(out_dir, "model.onnx")
    log_path = os.path.join(out_dir, "log.txt")
    time_path = os.path.join(out_dir, "time.txt")
    cmd = command(tool, src, dst, big)
    use_time = os.access(TIME_BIN, os.X_OK)
    full = [TIME_BIN, "-f", "%M %U %S", "-o", time_path, *cmd] if use_time else cmd
    rec = {"tool": tool, "cmd": cmd, "loadavg_1min": os.getloadavg()[0]}
    with open(log_path, "wb") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(full, stdout=log, stderr=subprocess.STDOUT, env=_env(), cwd=out_dir,
                                start_new_session=True)
        try:
            _, status, ru = _wait(proc, timeout_s)
            rec["returncode"] = os.waitstatus_to_exitcode(status)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the group this run started, nothing else
            _, status, ru = os.wait4(proc.pid, 0)
            rec["returncode"] = None
            timed_out = True
        rec["wall_s"] = time.perf_counter() - t0
    if use_time and not timed_out:
        try:
            with open(time_path) as f:
                fields = f.read().split()[-3:]
            rec["peak_rss"] = int(fields[0]) * 1024
            rec["user_s"], rec["sys_s"] = float(fields[1]), float(fields[2])
        except (OSError, ValueError, IndexError):
            pass
    elif not timed_out:
        # No /usr/bin/time: ru_maxrss of our own child, which on Linux starts
        # from this process's RSS at fork; an upper bound.
        rec["peak_rss"] = ru.ru_maxrss * 1024
        rec["peak_rss_upper_bound"] = True
        rec["user_s"], rec["sys_s"] = ru.ru_utime, ru.ru_stime
    with open(log_path, errors="replace") as f:
        log_text = f.read()
    rec["log_tail"] = log_text[-2000:]
    if timed_out:
        rec["status"] = "timeout"
    elif rec["returncode"] != 0:
        rec["status"] = "crash: " + (error_line(log_text) or f"exit code {rec['returncode']}")
    elif not os.path.exists(dst):
        rec["status"] = "crash: exit 0 but no output"
    else:
        rec["status"] = "ok"
        rec["output_bytes"] = _model_bytes(dst)
    return rec


def _wait(proc, timeout_s: float):
    deadline = time.perf_counter() + timeout_s
    delay = 0.002
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return pid, status, ru
        if time.perf_counter() > deadline:
            raise subprocess.TimeoutExpired(proc.args, timeout_s)
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _model_bytes(path: str) -> int:
    """The model file plus the external-data files next to it that it names."""
    import onnx

    total = os.path.getsize(path)
    try:
        m = onnx.load(path, load_external_data=False)
    except Exception:  # noqa: BLE001 - size of what is there
        return total
    base = os.path.dirname(os.path.abspath(path))
    files = set()
    for t in _all_initializers(m.graph):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            files |= {e.value for e in t.external_data if e.key == "location"}
    return total + sum(os.path.getsize(os.path.join(base, f)) for f in files if os.path.exists(os.path.join(base, f)))


# ---------------------------------------------------------------- evaluating a model


def _subgraphs(node):
    for a in node.attribute:
        if a.HasField("g"):
            yield a.g
        yield from a.graphs


def _all_graphs(graph):
    yield graph
    for n in graph.node:
        for g in _subgraphs(n):
            yield from _all_graphs(g)


def _all_initializers(graph):
    for g in _all_graphs(graph):
        yield from g.initializer


def count_nodes(graph) -> tuple:
    """(nodes in the main graph, nodes in all graphs)."""
    return len(graph.node), sum(len(g.node) for g in _all_graphs(graph))


def constant_input_nodes(graph, outer=frozenset()) -> int:
    """Nodes (not Constant, with at least one input) whose inputs are all
    initializers (not also graph inputs) or outputs of Constant nodes, in this
    graph or an enclosing one: what constant folding could still remove."""
    inputs = {i.name for i in graph.input}
    const = set(outer) | ({t.name for t in graph.initializer} - inputs)
    for n in graph.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            const.update(n.output)
    count = 0
    for n in graph.node:
        names = [x for x in n.input if x]
        if n.op_type != "Constant" and names and all(x in const for x in names):
            count += 1
        for g in _subgraphs(n):
            count += constant_input_nodes(g, frozenset(const))
    return count


_NP_TYPES = {
    "tensor(float)": "float32", "tensor(double)": "float64", "tensor(float16)": "float16",
    "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int16)": "int16", "tensor(int8)": "int8",
    "tensor(uint8)": "uint8", "tensor(bool)": "bool",
}


def feeds_for(sess, example: dict, seed: int) -> dict:
    """Seeded inputs: the zoo's example shapes where known (else symbolic dims
    are 1), floats ~ N(0, 1), integers in [0, high) with high from the zoo
    (token ids below the vocabulary, 0/1 masks, type ids 0) else [0, 8)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        dtype = np.dtype(_NP_TYPES[i.type])
        ex = example.get(i.name, {})
        shape = ex.get("shape") or [d if isinstance(d, int) and d >= 0 else 1 for d in (i.shape or [])]
        if dtype.kind == "f":
            feeds[i.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[i.name] = rng.integers(0, 2, shape).astype(dtype)
        else:
            feeds[i.name] = rng.integers(0, ex.get("high", 8), shape).astype(dtype)
    return feeds


def _check(original_sess, result_path: str, feeds: dict, want: dict, nondeterministic: bool,
           rtol: float = 1e-4, atol: float = 1e-5) -> dict:
    """The result's outputs against the original's on the same inputs, with
    pyonnxopt.check's sessions (onnxruntime optimizations off) and tolerances."""
    import numpy as np

    from pyonnxopt.check import session

    try:
        sess = session(result_path)
        names = [o.name for o in sess.get_outputs()]
        missing = [n for n in names if n not in want]
        if missing:
            return {"check": "wrong", "detail": f"output {missing[0]} is not an output of the original"}
        ins = {i.name for i in sess.get_inputs()}
        got = sess.run(names, {k: v for k, v in feeds.items() if k in ins})
    except Exception as e:  # noqa: BLE001 - the result does not run
        return {"check": "does not run", "detail": error_line(str(e))}
    worst = 0.0
    for name, y in zip(names, got):
        x = want[name]
        if x.shape != y.shape or x.dtype != y.dtype:
            return {"check": "wrong", "detail": f"{name}: {x.shape}/{x.dtype} became {y.shape}/{y.dtype}"}
        if nondeterministic:
            continue
        if x.dtype.kind in "fc":
            fin = np.isfinite(x) & np.isfinite(y)
            diff = float(np.max(np.abs(x - y), initial=0.0, where=fin))
            worst = max(worst, diff)
            if not np.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True):
                return {"check": "wrong", "detail": f"{name}: max abs diff {diff:.3g}", "max_abs_diff": worst}
        elif not np.array_equal(x, y):
            return {"check": "wrong", "detail": f"{name}: values differ"}
    if nondeterministic:
        return {"check": "shapes ok", "detail": "the original is random (training-mode Dropout): shapes, dtypes compared"}
    return {"check": "ok", "max_abs_diff": worst}


def latency_ms(path: str, feeds: dict, runs: int, level: str) -> dict:
    import statistics

    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL, "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[level]
    opts.log_severity_level = 3
    try:
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        ins = {i.name for i in sess.get_inputs()}
        feeds = {k: v for k, v in feeds.items() if k in ins}
        sess.run(None, feeds)  # warm-up
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            sess.run(None, feeds)
            times.append(time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001 - reported
        return {"latency_error": error_line(str(e))}
    return {"latency_ms": 1e3 * statistics.median(times), "latency_min_ms": 1e3 * min(times)}


def evaluate(original: str, results: dict, example: dict, seed: int, latency_runs: int, level: str,
             include_original: bool = True) -> dict:
    """Evaluates the original and each result (tool -> path); one process, in order."""
    import numpy as np
    import onnx

    from pyonnxopt.check import session

    out = {}
    orig_sess = session(original)
    feeds = feeds_for(orig_sess, example, seed)
    names = [o.name for o in orig_sess.get_outputs()]
    try:
        want = dict(zip(names, orig_sess.run(names, feeds)))
        again = orig_sess.run(names, feeds)
        nondet = any(not np.array_equal(want[n], y, equal_nan=True) for n, y in zip(names, again))
        orig_error = None
    except Exception as e:  # noqa: BLE001 - nothing to compare with
        want, nondet, orig_error = {}, False, error_line(str(e))
    for tool, path in [*([("original", original)] if include_original else []), *results.items()]:
        rec = {}
        m = onnx.load(path, load_external_data=False)
        rec["nodes_main"], rec["nodes"] = count_nodes(m.graph)
        rec["constant_input_nodes"] = constant_input_nodes(m.graph)
        del m
        if tool == "original":
            rec["check"] = "cannot run" if orig_error else ("random" if nondet else "reference")
            if orig_error:
                rec["detail"] = orig_error
        elif orig_error:
            rec.update({"check": "n/a", "detail": f"the original does not run: {orig_error}"})
        else:
            rec.update(_check(orig_sess, path, feeds, want, nondet))
        if latency_runs > 0 and rec["check"] not in ("does not run", "cannot run"):
            rec.update(latency_ms(path, feeds, latency_runs, level))
        out[tool] = rec
    return out


def run_evaluation(original: str, results: dict, example: dict, args, work: str, include_original: bool = True) -> dict:
    """`evaluate` in a fresh subprocess (onnxruntime memory goes away with it)."""
    spec = os.path.join(work, "evaluate.json")
    with open(spec, "w") as f:
        json.dump({"original": original, "results": results, "example": example, "seed": args.seed,
                   "latency_runs": args.latency_runs, "level": args.latency_level,
                   "include_original": include_original}, f)
    res_path = os.path.join(work, "evaluation.json")
    if os.path.exists(res_path):
        os.remove(res_path)
    cmd = [sys.executable, os.path.abspath(__file__), "--evaluate", spec, "--result", res_path]
    timeout = args.timeout * (1 + len(results))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"evaluation timed out after {timeout:.0f} s"}
    if proc.returncode != 0 or not os.path.exists(res_path):
        return {"error": f"evaluation failed: {error_line(proc.stderr)}"}
    with open(res_path) as f:
        return json.load(f)


# ---------------------------------------------------------------- summary


def summarize_model(runs: list, evaluation: dict, tools: list, model_bytes: int) -> dict:
    rows = {}
    for tool in tools:
        mine = [r for r in runs if r["tool"] == tool]
        if not mine:
            rows[tool] = {"status": "not installed"}
            continue
        ok = [r for r in mine if r["status"] == "ok"]
        row = {"status": "ok" if ok else mine[-1]["status"], "runs": len(mine), "runs_ok": len(ok)}
        if len(ok) < len(mine) and ok:
            row["status"] = f"ok {len(ok)}/{len(mine)}"
        row["wall_s"] = _util.median([r["wall_s"] for r in ok])
        row["peak_rss"] = _util.median([r.get("peak_rss") for r in ok])
        if row["peak_rss"] is not None and model_bytes:
            row["peak_rss_of_model"] = row["peak_rss"] / model_bytes
        row["output_bytes"] = ok[-1].get("output_bytes") if ok else None
        row.update(evaluation.get(tool, {}))
        rows[tool] = row
    rows["original"] = dict(evaluation.get("original", {}), status="input", output_bytes=model_bytes)
    return rows


def model_ratios(rows: dict) -> dict:
    """pyonnxopt / best peer: time over the faster of onnxsim and onnxslim (runs
    that succeeded), nodes over the fewest of any peer whose result is right."""
    def good(r):
        return r.get("wall_s") is not None and r.get("check") in ("ok", "shapes ok", "n/a")

    times = [rows[p]["wall_s"] for p in TIME_PEERS if p in rows and rows[p].get("wall_s") is not None]
    peers = [t for t in rows if t not in PYONNXOPT and t != "original"]
    nodes = [rows[p]["nodes"] for p in peers if good(rows[p]) and rows[p].get("nodes") is not None]
    out = {}
    for tool in PYONNXOPT:
        r = rows.get(tool, {})
        out[tool] = {
            "time_vs_fastest_sim_slim": r["wall_s"] / min(times) if times and r.get("wall_s") else None,
            "nodes_vs_best_peer": r["nodes"] / min(nodes) if nodes and r.get("nodes") and good(r) else None,
            # failed (no result, or a wrong one) where a peer succeeded: counts as worse than any ratio
            "failed": bool(times) and (r.get("wall_s") is None or not good(r)),
        }
    return out


def zoo_summary(models: dict) -> dict:
    """Medians over the models that are not --big ones (those are reported on their own)."""
    models = {k: m for k, m in models.items() if not m.get("big")}
    out = {}
    for tool in PYONNXOPT:
        ratios = [m["ratios"][tool] for m in models.values() if tool in m["ratios"]]
        failed = sum(1 for r in ratios if r.get("failed"))
        # A failed run counts as an infinite ratio: it pulls the median up, it is not left out.
        t = [r["time_vs_fastest_sim_slim"] for r in ratios if r["time_vs_fastest_sim_slim"] is not None
             and not r.get("failed")] + [float("inf")] * failed
        n = [r["nodes_vs_best_peer"] for r in ratios if r["nodes_vs_best_peer"] is not None]
        med = _util.median(t)
        out[tool] = {"median_time_ratio": None if med == float("inf") else med, "models_timed": len(t),
                     "models_failed": failed, "median_node_ratio": _util.median(n), "models_counted": len(n),
                     "target_time_ratio": TARGETS[tool]}
        if med is not None:
            out[tool]["target_met"] = med <= TARGETS[tool]
    return out


# ---------------------------------------------------------------- report


def _fmt(x, spec):
    return "" if x is None else format(x, spec)


def render(doc: dict, width: "int | None") -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(width=width) if width else Console()
    table = Table(title="pyonnxopt vs peers (medians; time = whole process; check vs the original in onnxruntime)",
                  show_lines=False)
    for col, just in (("model", "left"), ("tool", "left"), ("status", "left"), ("time s", "right"),
                      ("x sim/slim", "right"), ("peak MB", "right"), ("nodes", "right"), ("const-in", "right"),
                      ("check", "left"), ("latency ms", "right"), ("MB", "right")):
        table.add_column(col, justify=just, overflow="fold")
    for name, m in doc["models"].items():
        rows = m["rows"]
        ref = [rows[p]["wall_s"] for p in TIME_PEERS if rows.get(p, {}).get("wall_s") is not None]
        ref = min(ref) if ref else None
        order = ["original", *[t for t in doc["tools"] if t in rows]]
        for i, tool in enumerate(order):
            r = rows[tool]
            status = r.get("status", "")
            style = "green" if status.startswith("ok") else ("" if status == "input" else "red")
            check = r.get("check", "")
            if r.get("detail") and check not in ("ok", "reference", "shapes ok"):
                check = f"{check}: {r['detail']}"[:70]
            peak = _fmt(r.get("peak_rss") and r["peak_rss"] / _util.MB, ",.0f")
            if m.get("big") and r.get("peak_rss_of_model") is not None:
                peak += f" ({100 * r['peak_rss_of_model']:.0f}%)"
            table.add_row(
                name if i == 0 else "", tool, f"[{style}]{escape(status[:60])}[/{style}]" if style else status[:60],
                _fmt(r.get("wall_s"), ".2f"),
                _fmt(ref and r.get("wall_s") and r["wall_s"] / ref, ".2f"),
                peak, _fmt(r.get("nodes"), "d"), _fmt(r.get("constant_input_nodes"), "d"), escape(check),
                _fmt(r.get("latency_ms"), ".2f") or escape(r.get("latency_error", "")[:30]),
                _fmt(r.get("output_bytes") and r["output_bytes"] / 1e6, ".1f"),
                end_section=(i == len(order) - 1))
    console.print(table)

    ratios = Table(title="pyonnxopt / best peer, per model (time: / faster of onnxsim, onnxslim; "
                         "nodes: / fewest of any peer with a right result)")
    for col in ("model", *(f"{t} {k}" for t in PYONNXOPT for k in ("time", "nodes"))):
        ratios.add_column(col, justify="left" if col == "model" else "right")
    for name, m in doc["models"].items():
        cells = []
        for t in PYONNXOPT:
            r = m["ratios"].get(t, {})
            cells += [_fmt(r.get("time_vs_fastest_sim_slim"), ".2f"), _fmt(r.get("nodes_vs_best_peer"), ".3f")]
            if r.get("failed"):
                cells[-2] = "failed"
        ratios.add_row(name, *cells)
    console.print(ratios)

    summary = Table(title="over the zoo (medians of the per-model ratios; --big models left out)")
    for col in ("pyonnxopt as", "time ratio", "models", "failed", "target", "met", "node ratio", "models "):
        summary.add_column(col)
    for t, s in doc["summary"].items():
        met = s.get("target_met")
        summary.add_row(t, _fmt(s["median_time_ratio"], ".3f") or "inf", str(s["models_timed"]),
                        str(s.get("models_failed", "")), f"<= {s['target_time_ratio']}",
                        "" if met is None else ("[green]yes[/green]" if met else "[red]NO[/red]"),
                        _fmt(s["median_node_ratio"], ".3f"), str(s["models_counted"]))
    console.print(summary)


# ---------------------------------------------------------------- driver


def _models(a) -> list:
    """[(name, path, example inputs, big)] in the order asked."""
    out = []
    names = [n.strip() for n in a.models.split(",") if n.strip()] if a.models else [e.name for e in zoo.ENTRIES]
    if names == ["none"]:  # only the --big ones
        names = []
    unknown = [n for n in names if n not in zoo.BY_NAME and not os.path.exists(n)]
    if unknown:
        raise SystemExit(f"unknown models {unknown} (zoo entries: python bench/zoo.py --list; or give a path)")
    zoo_names = [n for n in names if n in zoo.BY_NAME]
    if zoo_names and not a.no_build:
        failed = {n: e for n, e in zoo.build(zoo_names, a.zoo).items() if e}
        for n, e in failed.items():
            print(f"zoo entry {n} could not be exported: {e}", file=sys.stderr)
        zoo_names = [n for n in zoo_names if n not in failed]
    for n in names:
        if n in zoo.BY_NAME:
            if n not in zoo_names or not os.path.exists(zoo.model_path(n, a.zoo)):
                continue
            meta = zoo.load_meta(n, a.zoo) or {}
            out.append((n, zoo.model_path(n, a.zoo), meta.get("example_inputs", {}), False))
        else:
            out.append((os.path.splitext(os.path.basename(n))[0], os.path.abspath(n), {}, False))
    for p in a.big or []:
        name = "big:" + os.path.basename(os.path.dirname(os.path.abspath(p)))
        out.append((name, os.path.abspath(p), {}, True))
    return out


def _versions(tools) -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("onnxsim", "onnxslim", "onnxoptimizer", "polygraphy", "onnxscript", "onnx-ir", "onnxruntime", "onnx",
                "numpy", "protobuf", "torch", "torchvision", "transformers"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def _header(doc: dict) -> str:
    env, a = doc["environment"], doc["args"]
    loads = [r["loadavg_1min"] for m in doc["models"].values() for r in m["runs"]]
    return "\n".join([
        f"machine: {env.get('cpus')} CPUs, 1-min load average {min(loads, default=0):.1f}..{max(loads, default=0):.1f} "
        f"during the runs; {a['repeats']} repeats; timeout {a['timeout']:.0f} s; latency: median of "
        f"{a['latency_runs']} runs, onnxruntime {env.get('onnxruntime')} optimizations '{a['latency_level']}'",
        "versions: " + ", ".join(f"{k} {env.get(k)}" for k in ("onnxsim", "onnxslim", "onnxoptimizer", "polygraphy",
                                                                "onnxscript", "onnxruntime", "onnx")),
    ])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", help="comma-separated zoo entries or ONNX paths (default: the whole zoo; "
                                     "'none' with --big: only the big model)")
    ap.add_argument("--tools", default=",".join(TOOLS), help=f"comma-separated, from {list(TOOLS)}")
    ap.add_argument("--big", action="append", metavar="PATH",
                    help="also run on this big model (e.g. bench/out/gpt2_large/model.onnx from make_big_model.py); "
                         "outputs use external data and peak RSS is shown as a fraction of the model size")
    ap.add_argument("--repeats", type=int, default=3, help="optimization runs per tool and model (median)")
    ap.add_argument("--big-repeats", type=int, default=1, help="the same for --big models")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per tool run")
    ap.add_argument("--latency-runs", type=int, default=10, help="onnxruntime runs per latency median (0: skip)")
    ap.add_argument("--latency-level", choices=["disable", "basic", "extended", "all"], default="all",
                    help="onnxruntime graph optimizations during the latency runs (default: all, its default)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the check's and latency runs' inputs")
    ap.add_argument("--json", help="write every run and the summary there")
    ap.add_argument("--zoo", default=zoo.ZOO_DIR, help="zoo folder (default bench/out/zoo)")
    ap.add_argument("--no-build", action="store_true", help="do not export missing zoo entries; skip them")
    ap.add_argument("--work", default=DEFAULT_WORK, help="tool outputs go here (deleted per model)")
    ap.add_argument("--keep-outputs", action="store_true")
    ap.add_argument("--width", type=int, help="table width (default: the terminal's, 220 when not a terminal)")
    ap.add_argument("--render", metavar="JSON", help="print the tables of an earlier run's --json and exit")
    ap.add_argument("--tool-worker", nargs=3, metavar=("TOOL", "IN", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--evaluate", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--external", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.tool_worker:
        return tool_worker(*a.tool_worker, big=a.external)
    if a.evaluate:
        with open(a.evaluate) as f:
            spec = json.load(f)
        res = evaluate(spec["original"], spec["results"], spec["example"], spec["seed"], spec["latency_runs"],
                       spec["level"], spec["include_original"])
        with open(a.result, "w") as f:
            json.dump(res, f)
        return 0

    if a.render:
        with open(a.render) as f:
            doc = json.load(f)
        for m in doc["models"].values():  # ratios and summary as this version computes them
            m["ratios"] = model_ratios(m["rows"])
        doc["summary"] = zoo_summary(doc["models"])
        print(_header(doc))
        render(doc, a.width or (None if sys.stdout.isatty() else 220))
        return 0

    t_start = time.perf_counter()
    tools = [t.strip() for t in a.tools.split(",") if t.strip()]
    bad = [t for t in tools if t not in TOOLS]
    if bad:
        ap.error(f"unknown tools {bad}; from {list(TOOLS)}")
    present = [t for t in tools if installed(t)]
    for t in tools:
        if t not in present:
            print(f"{t}: not installed", file=sys.stderr)
    models = _models(a)
    doc = {"environment": {**_util.environment(), **_versions(tools), "loadavg_start": os.getloadavg()[0]},
           "args": vars(a), "tools": tools, "tool_commands": {t: TOOLS[t][1] for t in tools},
           "not_installed": [t for t in tools if t not in present], "models": {}}
    a.work = os.path.abspath(a.work)  # the tools run with their output folder as working directory
    os.makedirs(a.work, exist_ok=True)
    for name, path, example, big in models:
        model_bytes = _model_bytes(path)
        work = os.path.join(a.work, name.replace(":", "_"))
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        runs, evaluation = [], {}
        print(f"{name} ({model_bytes / 1e6:.0f} MB)", file=sys.stderr)
        repeats = a.big_repeats if big else a.repeats
        for rep in range(repeats):
            for tool in present:
                rec = run_tool(tool, path, os.path.join(work, tool), a.timeout, big)
                rec["repeat"] = rep
                runs.append(rec)
                print(f"  [{rep}] {tool:18s} {rec['status'][:70]:30s} {rec['wall_s']:7.2f} s "
                      f"{(rec.get('peak_rss') or 0) / _util.MB:7.0f} MB", file=sys.stderr)
                if big and rep == repeats - 1 and rec["status"] == "ok":
                    # One result at a time: a few GB each, evaluated and deleted.
                    out = os.path.join(work, tool)
                    ev = run_evaluation(path, {tool: os.path.join(out, "model.onnx")}, example, a, work, False)
                    evaluation.update(ev if "error" not in ev else {tool: {"check": ev["error"]}})
                    if not a.keep_outputs:
                        shutil.rmtree(out, ignore_errors=True)
        results = {t: os.path.join(work, t, "model.onnx") for t in present
                   if any(r["tool"] == t and r["status"] == "ok" for r in runs[-len(present):])}
        ev = run_evaluation(path, {} if big else results, example, a, work)
        if "error" in ev:
            print(f"  evaluation: {ev['error']}", file=sys.stderr)
        evaluation.update(ev)
        rows = summarize_model(runs, evaluation, tools, model_bytes)
        for t in tools:
            if t not in present:
                rows[t] = {"status": "not installed"}
        doc["models"][name] = {"path": path, "model_bytes": model_bytes, "big": big, "rows": rows,
                               "ratios": model_ratios(rows), "runs": runs,
                               "evaluation_error": evaluation.get("error")}
        if not a.keep_outputs:
            shutil.rmtree(work, ignore_errors=True)
    doc["summary"] = zoo_summary(doc["models"])
    doc["total_s"] = time.perf_counter() - t_start
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1, default=str)
    print(_header(doc))
    render(doc, a.width or (None if sys.stdout.isatty() else 220))
    print(f"total {doc['total_s'] / 60:.1f} min" + (f"; JSON: {a.json}" if a.json else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
