"""Evaluating the tools' results of one model, in a process of its own:

    python bench/_evaluate.py SPEC.json RESULT.json     # run by compare.py

For the original and every result: node counts (main graph, all graphs),
Transposes, nodes of onnxruntime's own domains (com.microsoft*), nodes left
whose inputs are all constant; the outputs against the original's in
onnxruntime with graph optimizations off; latency in onnxruntime at each
requested optimization level.

Latency: one intra-op and one inter-op thread, sequential execution, so that
onnxruntime computes in the calling thread; a run's latency is then by
default the CPU time it takes (process time), which other jobs on a small
shared machine do not lengthen the way they lengthen its wall time (both are
recorded). The results of one model are measured together: their sessions
are open side by side and run in rounds (each round: per result one untimed
run, which brings its weights back into the caches, then a block of timed
runs), so that a change in the machine's state hits every tool alike. When
the sessions together would not fit in memory, the results are measured one
after the other instead.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _util  # noqa: E402

LEVELS = ("disable", "basic", "extended", "all")
# Nodes in these domains run only in onnxruntime.
ORT_DOMAINS = ("com.microsoft",)
LATENCY_SETUP = {"intra_op_threads": 1, "inter_op_threads": 1, "execution_mode": "sequential"}
MIN_LATENCY_RUNS = 10  # the least a latency budget may cut the runs to
# Sessions open side by side may take this many times the models' bytes
# (weights copied and prepacked: bert_base's 438 MB take 510-610 MB a
# session, gpt2_past's 652 MB 745-796 MB, at either level) and at most this
# share of the free memory. Models that do not fit are timed back to back,
# which drifts: bert_base's results read 1.12-1.17 that way where an
# interleaved A/B reads 0.98, gpt2_past_nofold's 1.29 where it reads 0.95.
SESSION_MEMORY_FACTOR = 1.5
MEMORY_SHARE = 0.5

# ---------------------------------------------------------------- counting


def _subgraphs(node):
    for a in node.attribute:
        if a.HasField("g"):
            yield a.g
        yield from a.graphs


def all_graphs(graph):
    yield graph
    for n in graph.node:
        for g in _subgraphs(n):
            yield from all_graphs(g)


def all_initializers(graph):
    for g in all_graphs(graph):
        yield from g.initializer


def count_ops(graph, opset: int = 0) -> dict:
    """Nodes of the main graph, of all graphs, Transposes and onnxruntime-only
    nodes in all graphs: its own domains, and (given the model's `opset`) ops
    it registers in the ONNX domain that ONNX does not have there
    (SimplifiedLayerNormalization; LayerNormalization below 17)."""
    import onnx.defs

    nodes = [n for g in all_graphs(graph) for n in g.node]

    def ort_only(n) -> bool:
        if n.domain.startswith(ORT_DOMAINS):
            return True
        return bool(opset) and n.domain in ("", "ai.onnx") and not onnx.defs.has(n.op_type, opset)

    return {
        "nodes_main": len(graph.node),
        "nodes": len(nodes),
        "transposes": sum(1 for n in nodes if n.op_type == "Transpose" and n.domain in ("", "ai.onnx")),
        "ms_nodes": sum(1 for n in nodes if ort_only(n)),
    }


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


# ---------------------------------------------------------------- checking

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


def check(result_path: str, feeds: dict, want: dict, nondeterministic: bool,
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
        return {"check": "does not run", "detail": _util.error_line(str(e))}
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


# ---------------------------------------------------------------- latency


def latency_session(path: str, level: str):
    """A CPU session pinned to one thread: on a small shared machine more
    threads measure the other jobs as much as the model."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL, "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[level]
    opts.intra_op_num_threads = LATENCY_SETUP["intra_op_threads"]
    opts.inter_op_num_threads = LATENCY_SETUP["inter_op_threads"]
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def _quartiles(xs: list) -> tuple:
    if len(xs) < 2:
        return xs[0], xs[0]
    q = statistics.quantiles(xs, n=4)
    return q[0], q[2]


def _stats(samples: list, order: str, clock: str) -> dict:
    """Median, min and quartiles of the `clock` ("cpu" or "wall") times; the other clock's median beside them."""
    wall, cpu = [s[0] for s in samples], [s[1] for s in samples]
    times = cpu if clock == "cpu" else wall
    p25, p75 = _quartiles(times)
    return {"ms": 1e3 * statistics.median(times), "min_ms": 1e3 * min(times), "p25_ms": 1e3 * p25,
            "p75_ms": 1e3 * p75, "clock": clock, "wall_ms": 1e3 * statistics.median(wall),
            "cpu_ms": 1e3 * statistics.median(cpu), "runs": len(times), "order": order,
            "samples_ms": [round(1e3 * t, 4) for t in times]}  # in run order: interleaved runs pair up by index


def _planned_runs(runs: int, per_run_s: float, budget_s: float) -> int:
    """`runs`, fewer when they would take more than `budget_s`, never under MIN_LATENCY_RUNS."""
    if budget_s <= 0 or per_run_s * runs <= budget_s:
        return runs
    return max(min(runs, MIN_LATENCY_RUNS), int(budget_s / per_run_s))


def _timed_run(sess, feeds) -> tuple:
    """(wall seconds, CPU seconds of this process): with one thread onnxruntime
    computes in the calling thread, so the CPU time is the run's latency on a
    core of its own, whatever else the machine is doing."""
    t0, c0 = time.perf_counter(), time.process_time()
    sess.run(None, feeds)
    return time.perf_counter() - t0, time.process_time() - c0


def _open(path: str, level: str, feeds: dict):
    """(session, its feeds, one warm run's seconds) or an error record."""
    try:
        sess = latency_session(path, level)
        ins = {i.name for i in sess.get_inputs()}
        mine = {k: v for k, v in feeds.items() if k in ins}
        sess.run(None, mine)  # first run: allocations, prepacking
        return sess, mine, _timed_run(sess, mine)[0]
    except Exception as e:  # noqa: BLE001 - reported in the table
        return {"error": _util.error_line(str(e))}


def latency_interleaved(paths: dict, feeds: dict, level: str, runs: int, block: int, budget_s: float,
                        clock: str = "cpu") -> dict:
    """tool -> latency record; every session open, tools taking turns in rounds."""
    out, live = {}, {}
    for tool, path in paths.items():
        opened = _open(path, level, feeds)
        if isinstance(opened, dict):
            out[tool] = opened
        else:
            live[tool] = opened
    # Each round costs one untimed run per result and block; the budget counts both.
    per_run = sum(s for _, _, s in live.values()) * (1 + 1 / block)
    n = _planned_runs(runs, per_run, budget_s)
    times = {t: [] for t in live}
    order = list(live)
    rnd = 0
    while live and len(times[order[0]]) < n:
        k = min(block, n - len(times[order[0]]))
        for tool in order[rnd % len(order):] + order[:rnd % len(order)]:  # no tool always first
            sess, mine, _ = live[tool]
            sess.run(None, mine)
            times[tool] += [_timed_run(sess, mine) for _ in range(k)]
        rnd += 1
    for tool in live:
        out[tool] = _stats(times[tool], f"interleaved, rounds of {block}", clock)
    return out


def latency_one_by_one(paths: dict, feeds: dict, level: str, runs: int, budget_s: float, clock: str = "cpu") -> dict:
    """tool -> latency record; one session at a time, all runs of a tool back to back."""
    out = {}
    budget_each = budget_s / max(1, len(paths))
    for tool, path in paths.items():
        opened = _open(path, level, feeds)
        if isinstance(opened, dict):
            out[tool] = opened
            continue
        sess, mine, per_run = opened
        n = _planned_runs(runs, per_run, budget_each)
        out[tool] = _stats([_timed_run(sess, mine) for _ in range(n)], "back to back", clock)
        del sess
    return out


def fits_side_by_side(paths: dict) -> bool:
    total = sum(model_bytes(p) for p in paths.values())
    free = _util.proc_meminfo().get("MemAvailable", 0)
    return SESSION_MEMORY_FACTOR * total <= MEMORY_SHARE * free


def model_bytes(path: str) -> int:
    """The model file plus the external-data files next to it that it names."""
    import onnx

    total = os.path.getsize(path)
    try:
        m = onnx.load(path, load_external_data=False)
    except Exception:  # noqa: BLE001 - size of what is there
        return total
    base = os.path.dirname(os.path.abspath(path))
    files = set()
    for t in all_initializers(m.graph):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            files |= {e.value for e in t.external_data if e.key == "location"}
    return total + sum(os.path.getsize(os.path.join(base, f)) for f in files if os.path.exists(os.path.join(base, f)))


# ---------------------------------------------------------------- one model


def evaluate(spec: dict) -> dict:
    """tool -> record, for the original (when spec asks) and each result."""
    import numpy as np
    import onnx

    from pyonnxopt.check import session

    original, results = spec["original"], spec["results"]
    orig_sess = session(original)
    feeds = feeds_for(orig_sess, spec["example"], spec["seed"])
    names = [o.name for o in orig_sess.get_outputs()]
    try:
        want = dict(zip(names, orig_sess.run(names, feeds)))
        again = orig_sess.run(names, feeds)
        nondet = any(not np.array_equal(want[n], y, equal_nan=True) for n, y in zip(names, again))
        orig_error = None
    except Exception as e:  # noqa: BLE001 - nothing to compare with
        want, nondet, orig_error = {}, False, _util.error_line(str(e))
    del orig_sess
    paths = {**({"original": original} if spec["include_original"] else {}), **results}
    out = {}
    for tool, path in paths.items():
        m = onnx.load(path, load_external_data=False)
        rec = count_ops(m.graph, next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 0))
        rec["constant_input_nodes"] = constant_input_nodes(m.graph)
        del m
        if tool == "original":
            rec["check"] = "cannot run" if orig_error else ("random" if nondet else "reference")
            if orig_error:
                rec["detail"] = orig_error
        elif orig_error:
            rec.update({"check": "n/a", "detail": f"the original does not run: {orig_error}"})
        else:
            rec.update(check(path, feeds, want, nondet))
        out[tool] = rec
    del want
    timed = {t: p for t, p in paths.items() if out[t]["check"] not in ("does not run", "cannot run")}
    if spec["latency_runs"] > 0 and timed:
        side_by_side = fits_side_by_side(timed)
        for level in spec["levels"]:
            if side_by_side:
                lat = latency_interleaved(timed, feeds, level, spec["latency_runs"], spec["latency_block"],
                                          spec["latency_budget"], spec["latency_clock"])
            else:
                lat = latency_one_by_one(timed, feeds, level, spec["latency_runs"], spec["latency_budget"],
                                         spec["latency_clock"])
            for tool, rec in lat.items():
                out[tool].setdefault("latency", {})[level] = rec
    return out


def main(argv) -> int:
    spec_path, result_path = argv
    with open(spec_path) as f:
        spec = json.load(f)
    res = evaluate(spec)
    with open(result_path, "w") as f:
        json.dump(res, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
