"""pyonnxopt against peer optimizers on the zoo: time, memory, nodes, correctness, latency.

    python bench/zoo.py                                  # build the zoo first (cached)
    python bench/compare.py                              # every zoo model, the default tools
    python bench/compare.py --tools default,pyonnxopt-ort --latency-level disable,all
    python bench/compare.py --models resnet50,bert_base --tools pyonnxopt,onnxsim --repeats 3
    python bench/compare.py --big bench/out/gpt2_large/model.onnx --json out.json
    python bench/compare.py --reuse peers.json           # peers' rows from an earlier run (--keep-outputs)

Each optimization is one fresh subprocess running one tool the way its users
run it (a CLI where the tool has one), under /usr/bin/time, with a timeout:
wall time is that of the whole process (interpreter start, imports, load,
optimize, save) and peak RSS is the tool's own maximum resident set. A tool
that is not installed is "not installed", one that exits non-zero is
"crash: <its error line>", one that runs past --timeout is "timeout"; the run
goes on with the next. Repeats are interleaved (A B C ... A B C ...).

Each result is then evaluated in another subprocess (bench/_evaluate.py):
nodes (main graph and subgraphs), Transposes, nodes in onnxruntime's own
domains, nodes left whose inputs are all constant (folding that was missed),
the outputs compared with the original's in onnxruntime (graph optimizations
off, seeded inputs), and the median latency in onnxruntime on the CPU at each
--latency-level (one thread, CPU time by default; the results of a model take
turns). The ratios
to the best peer and the goals with their verdicts are in bench/_goals.py.
Results: tables (rich) on stdout, everything in --json (written after each
model). --reuse takes the peers' optimization runs from an earlier --json
and evaluates their kept outputs here (bench/_reuse.py).
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
import _evaluate  # noqa: E402
import _goals  # noqa: E402
import _report  # noqa: E402
import _reuse  # noqa: E402
import _util  # noqa: E402
import zoo  # noqa: E402 - only its names and paths: zoo imports torch lazily
from _goals import PYONNXOPT  # noqa: E402

DEFAULT_WORK = os.path.join(HERE, "out", "compare_work")
DATA_NAME = "model.onnx.data"
TIME_BIN = "/usr/bin/time"

# name -> (modules that must import, one-line description). Order = column order.
TOOLS = {
    "pyonnxopt-nocheck": (("pyonnxopt",), "pyonnxopt optimize IN OUT --no-check"),
    "pyonnxopt": (("pyonnxopt",), "pyonnxopt optimize IN OUT (default: checks the result in onnxruntime)"),
    "pyonnxopt-ort": (("pyonnxopt",), "pyonnxopt optimize IN OUT --no-check --target ort (com.microsoft ops allowed)"),
    "pyonnxopt-opset23": (("pyonnxopt",), "pyonnxopt optimize IN OUT --no-check --opset 23 (upgraded first: Attention, "
                                          "RMSNormalization, Gelu become targets)"),
    "onnxsim": (("onnxsim",), "onnxsim IN OUT (defaults: no check_n)"),
    "onnxslim": (("onnxslim",), "onnxslim IN OUT (defaults)"),
    "onnxoptimizer": (("onnxoptimizer",), "python -m onnxoptimizer IN OUT (default fuse-and-elimination passes)"),
    "polygraphy": (("polygraphy",), "polygraphy surgeon sanitize IN --fold-constants -o OUT"),
    "onnxscript": (("onnxscript", "onnx_ir"), "onnxscript.optimizer.optimize(onnx_ir.load(IN)), onnx_ir.save"),
    "ort-basic": (("onnxruntime",), "onnxruntime SessionOptions.optimized_model_filepath at ORT_ENABLE_BASIC"),
    "ort-extended": (("onnxruntime",), "onnxruntime SessionOptions.optimized_model_filepath at ORT_ENABLE_EXTENDED "
                                       "(com.microsoft ops: the peer of --target ort)"),
}
# Not run unless asked for (`--tools default,pyonnxopt-ort,ort-extended`): one more result to evaluate and time
# per model.
OPT_IN = ("pyonnxopt-ort", "pyonnxopt-opset23", "ort-extended")
DEFAULT_TOOLS = [t for t in TOOLS if t not in OPT_IN]
PYONNXOPT_FLAGS = {"pyonnxopt-nocheck": ["--no-check"], "pyonnxopt": [], "pyonnxopt-ort": ["--no-check", "--target", "ort"],
                   "pyonnxopt-opset23": ["--no-check", "--opset", "23"]}

# ---------------------------------------------------------------- running one tool


def _script(name: str) -> str:
    path = os.path.join(sysconfig.get_path("scripts"), name)
    return path if os.path.exists(path) else (shutil.which(name) or name)


def command(tool: str, src: str, dst: str, big: bool) -> list:
    """The command line of one tool run. `big`: write weights as external data."""
    py = sys.executable
    if tool in PYONNXOPT:
        # `python -m pyonnxopt` is the `pyonnxopt` console script, from this checkout.
        return [py, "-m", "pyonnxopt", "optimize", src, dst, *PYONNXOPT_FLAGS[tool]]
    if tool == "onnxsim":
        return [py, "-m", "onnxsim", src, dst, *(["--save-as-external-data"] if big else [])]
    if tool == "onnxslim":
        return [py, "-m", "onnxslim", src, dst, *(["--save-as-external-data"] if big else [])]
    if tool == "onnxoptimizer":
        return [py, "-m", "onnxoptimizer", src, dst]  # falls back to external data by itself
    if tool == "polygraphy":
        return [_script("polygraphy"), "surgeon", "sanitize", src, "--fold-constants", "-o", dst,
                *(["--save-external-data", DATA_NAME] if big else [])]
    if tool in ("onnxscript", "ort-basic", "ort-extended"):
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
    elif tool in ("ort-basic", "ort-extended"):
        import onnxruntime as ort

        opts = ort.SessionOptions()
        # BASIC: the level whose output stays a portable ONNX model. EXTENDED
        # adds onnxruntime's contrib ops (FusedConv, ...), the peer of
        # --target ort; ALL's layouts are tied to this CPU and left out.
        level = ort.GraphOptimizationLevel
        opts.graph_optimization_level = level.ORT_ENABLE_BASIC if tool == "ort-basic" else level.ORT_ENABLE_EXTENDED
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
        rec["status"] = "crash: " + (_util.error_line(log_text) or f"exit code {rec['returncode']}")
    elif not os.path.exists(dst):
        rec["status"] = "crash: exit 0 but no output"
    else:
        rec["status"] = "ok"
        rec["output_bytes"] = _evaluate.model_bytes(dst)
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


# ---------------------------------------------------------------- evaluating the results


def run_evaluation(original: str, results: dict, example: dict, args, work: str, include_original: bool = True) -> dict:
    """bench/_evaluate.py in a fresh subprocess (onnxruntime memory goes away with it)."""
    spec = os.path.join(work, "evaluate.json")
    with open(spec, "w") as f:
        json.dump({"original": original, "results": results, "example": example, "seed": args.seed,
                   "latency_runs": args.latency_runs, "levels": args.latency_level,
                   "latency_block": args.latency_block, "latency_budget": args.latency_budget,
                   "latency_clock": args.latency_clock,
                   "include_original": include_original}, f)
    res_path = os.path.join(work, "evaluation.json")
    if os.path.exists(res_path):
        os.remove(res_path)
    cmd = [sys.executable, os.path.join(HERE, "_evaluate.py"), spec, res_path]
    timeout = args.timeout + (1 + len(results)) * (args.timeout + args.latency_budget * len(args.latency_level))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"evaluation timed out after {timeout:.0f} s"}
    if proc.returncode != 0 or not os.path.exists(res_path):
        return {"error": f"evaluation failed: {_util.error_line(proc.stderr)}"}
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


# ---------------------------------------------------------------- one model


def run_model(name: str, path: str, example: dict, big: bool, sha256, tools: list, present: list, a,
              earlier: "_reuse.Earlier | None") -> dict:
    """Every tool on one model (or its row from the earlier run), then the evaluation of the results
    together: the model's entry of the --json."""
    model_bytes = _evaluate.model_bytes(path)
    work = os.path.join(a.work, _reuse.model_dir(name))
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    reused = {t: r for t in tools if earlier and (r := earlier.row(name, t, model_bytes, sha256)) is not None}
    fresh = [t for t in present if t not in reused]
    runs, evaluation = [], {}
    print(f"{name} ({model_bytes / 1e6:.0f} MB)", file=sys.stderr)
    for tool, r in reused.items():
        print(f"  [earlier] {tool:18s} {r.get('status', '')[:70]:30s} {r.get('wall_s') or 0:7.2f} s "
              f"{(r.get('peak_rss') or 0) / _util.MB:7.0f} MB", file=sys.stderr)
    repeats = a.big_repeats if big else a.repeats
    for rep in range(repeats):
        for tool in fresh:
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
    last = runs[-len(fresh):] if fresh else []
    results = {t: os.path.join(work, t, "model.onnx") for t in fresh
               if any(r["tool"] == t and r["status"] == "ok" for r in last)}
    problems, kept = {}, {}
    for tool, r in reused.items():
        if r.get("status", "").startswith("ok"):
            problems[tool] = _reuse.usable_output(r, earlier.output(name, tool))
            if problems[tool] is None:
                kept[tool] = earlier.output(name, tool)
            else:
                print(f"  [earlier] {tool}: {problems[tool]}", file=sys.stderr)
    if big:
        for tool, out in kept.items():  # as the fresh ones: one at a time; the earlier run's files stay
            ev = run_evaluation(path, {tool: out}, example, a, work, False)
            evaluation.update(ev if "error" not in ev else {tool: {"check": ev["error"]}})
    # In column order, reused and fresh side by side: their latencies are measured in the same rounds.
    results = {t: results.get(t) or kept[t] for t in tools if t in results or t in kept}
    ev = run_evaluation(path, {} if big else results, example, a, work)
    if "error" in ev:
        print(f"  evaluation: {ev['error']}", file=sys.stderr)
    evaluation.update(ev)
    rows = summarize_model(runs, evaluation, tools, model_bytes)
    for t in tools:
        if t in reused:
            rows[t] = _reuse.reused_row(reused[t], evaluation.get(t, {}), earlier.output(name, t), problems.get(t))
        elif t not in present:
            rows[t] = {"status": "not installed"}
    if not a.keep_outputs:
        shutil.rmtree(work, ignore_errors=True)
    return {"path": path, "model_bytes": model_bytes, "sha256": sha256, "big": big, "rows": rows, "runs": runs,
            "reused_tools": list(reused), "evaluation_error": evaluation.get("error")}


def write_json(doc: dict, path: str) -> None:
    """Atomically: a reader (or a run killed while writing) never sees half a file."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, default=str)
    os.replace(tmp, path)


# ---------------------------------------------------------------- driver


def _models(a) -> list:
    """[(name, absolute path, example inputs, big, sha256 or None)] in the order asked. Absolute:
    the tools run in their output folders."""
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
            out.append((n, os.path.abspath(zoo.model_path(n, a.zoo)), meta.get("example_inputs", {}), False,
                        meta.get("sha256")))
        else:
            out.append((os.path.splitext(os.path.basename(n))[0], os.path.abspath(n), {}, False, None))
    for p in a.big or []:
        name = "big:" + os.path.basename(os.path.dirname(os.path.abspath(p)))
        out.append((name, os.path.abspath(p), {}, True, None))
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


def _levels(text: str) -> list:
    levels = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in levels if x not in _evaluate.LEVELS]
    if bad or not levels:
        raise argparse.ArgumentTypeError(f"levels {bad or text!r}: from {list(_evaluate.LEVELS)}")
    return list(dict.fromkeys(levels))


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n}: at least 1")
    return n


def _tool_list(text: str) -> list:
    tools = []
    for t in (x.strip() for x in text.split(",")):
        tools += DEFAULT_TOOLS if t == "default" else ([t] if t else [])
    return list(dict.fromkeys(tools))


def judge(doc: dict) -> None:
    """Ratios per model, their spread over the zoo and the goals' verdicts, into doc."""
    levels = _report.levels_of(doc)
    for m in doc["models"].values():
        m["ratios"] = _goals.model_ratios(m["rows"], levels)
    doc["summary"] = _goals.zoo_summary(doc["models"], levels)
    doc["goals"] = _goals.goals(doc["summary"], levels)


def _earlier(a, ap) -> "_reuse.Earlier":
    if a.reuse_work and not os.path.isdir(a.reuse_work):
        ap.error(f"--reuse-work {a.reuse_work}: not a folder")
    try:
        earlier = _reuse.Earlier(a.reuse, a.reuse_work)
    except (OSError, ValueError) as e:
        ap.error(f"--reuse {a.reuse}: {e}")
    mine, theirs = os.path.realpath(a.work), os.path.realpath(earlier.work)
    if os.path.commonpath([mine, theirs]) in (mine, theirs):
        # This run empties WORK/MODEL before each model: it would delete what it reuses.
        ap.error(f"--work {a.work} and the earlier run's outputs ({earlier.work}) overlap; give another --work")
    if not earlier.kept:
        print(f"--reuse {a.reuse}: that run did not keep its outputs (--keep-outputs); their rows will say "
              "'no output' (--reuse-work DIR if they are elsewhere)", file=sys.stderr)
    return earlier


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", help="comma-separated zoo entries or ONNX paths (default: the whole zoo; "
                                     "'none' with --big: only the big model)")
    ap.add_argument("--tools", default="default",
                    help=f"comma-separated, from {list(TOOLS)}; 'default' stands for {DEFAULT_TOOLS} "
                         "(e.g. default,pyonnxopt-ort)")
    ap.add_argument("--big", action="append", metavar="PATH",
                    help="also run on this big model (e.g. bench/out/gpt2_large/model.onnx from make_big_model.py); "
                         "outputs use external data and peak RSS is shown as a fraction of the model size")
    ap.add_argument("--repeats", type=int, default=3, help="optimization runs per tool and model (median)")
    ap.add_argument("--big-repeats", type=int, default=1, help="the same for --big models")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per tool run")
    ap.add_argument("--latency-runs", type=int, default=20, help="onnxruntime runs per latency median (0: skip)")
    ap.add_argument("--latency-level", type=_levels, default="disable,all",
                    help=f"comma-separated onnxruntime graph optimization levels, one latency column each, from "
                         f"{list(_evaluate.LEVELS)} (default: disable,all: none, and onnxruntime's default)")
    ap.add_argument("--latency-clock", choices=["cpu", "wall"], default="cpu",
                    help="what a latency is: the CPU time of the (one-threaded) run, which other jobs on the machine "
                         "do not lengthen (default), or its wall time; both medians are in --json")
    ap.add_argument("--latency-block", type=_positive, default=1,
                    help="timed runs per result and round, after one untimed run; the results of a model take "
                         "turns (default 1: the finest mix, twice the runs)")
    ap.add_argument("--latency-budget", type=float, default=120,
                    help=f"seconds per model and level; slower models get fewer runs, at least "
                         f"{_evaluate.MIN_LATENCY_RUNS} (default 120; 0: no limit)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the check's and latency runs' inputs")
    ap.add_argument("--json", help="write every run and the summary there")
    ap.add_argument("--zoo", default=zoo.ZOO_DIR, help="zoo folder (default bench/out/zoo)")
    ap.add_argument("--no-build", action="store_true", help="do not export missing zoo entries; skip them")
    ap.add_argument("--work", default=DEFAULT_WORK, help="tool outputs go here (deleted per model)")
    ap.add_argument("--keep-outputs", action="store_true")
    ap.add_argument("--reuse", metavar="JSON",
                    help="an earlier run's --json: the peers with a row there are not run again; their status, "
                         "time, peak RSS and node counts come from it, their kept outputs (--keep-outputs) are "
                         "checked and timed in this run beside the fresh results")
    ap.add_argument("--reuse-work", metavar="DIR",
                    help="where that run kept its outputs (default: its --work, as its JSON records it)")
    ap.add_argument("--width", type=int, help="table width (default: the terminal's, 220 when not a terminal)")
    ap.add_argument("--render", metavar="JSON", help="print the tables of an earlier run's --json and exit")
    ap.add_argument("--tool-worker", nargs=3, metavar=("TOOL", "IN", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--external", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.tool_worker:
        return tool_worker(*a.tool_worker, big=a.external)

    if a.render:
        with open(a.render) as f:
            doc = json.load(f)
        _report.upgrade(doc)
        judge(doc)  # ratios, summary and goals as this version computes them
        print(_report.header(doc))
        _report.render(doc, a.width or (None if sys.stdout.isatty() else 220))
        return 0

    t_start = time.perf_counter()
    tools = _tool_list(a.tools)
    bad = [t for t in tools if t not in TOOLS]
    if bad:
        ap.error(f"unknown tools {bad}; from {list(TOOLS)}")
    present = [t for t in tools if installed(t)]
    for t in tools:
        if t not in present:
            print(f"{t}: not installed", file=sys.stderr)
    earlier = _earlier(a, ap) if a.reuse else None
    models = _models(a)
    doc = {"environment": {**_util.environment(), **_versions(tools), "loadavg_start": os.getloadavg()[0]},
           "args": vars(a), "tools": tools, "tool_commands": {t: TOOLS[t][1] for t in tools},
           "not_installed": [t for t in tools if t not in present], "latency_setup": _evaluate.LATENCY_SETUP,
           "models": {}, "complete": False}
    a.work = os.path.abspath(a.work)  # the tools run with their output folder as working directory
    os.makedirs(a.work, exist_ok=True)
    if earlier:
        doc["reused"] = earlier.summary()
    for name, path, example, big, sha256 in models:
        doc["models"][name] = run_model(name, path, example, big, sha256, tools, present, a, earlier)
        # After each model: a long run that is interrupted keeps what it measured.
        judge(doc)
        doc["total_s"] = time.perf_counter() - t_start
        if a.json:
            write_json(doc, a.json)
    doc["complete"] = True
    if a.json:
        write_json(doc, a.json)
    print(_report.header(doc))
    _report.render(doc, a.width or (None if sys.stdout.isatty() else 220))
    print(f"total {doc['total_s'] / 60:.1f} min" + (f"; JSON: {a.json}" if a.json else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
