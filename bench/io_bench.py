"""Load + save of a big external-data model: pyonnxopt against onnx and onnx-ir.

    python bench/io_bench.py                       # GPT-2 large (~3.1 GB), built if missing
    python bench/io_bench.py --model m.onnx --repeats 5
    python bench/io_bench.py --small               # 2-layer model, a quick self-test

Every run is a fresh subprocess doing one tool's load and save (external data
kept in one file beside the new model), so peak RSS is that tool's alone.
`file_copy` is not a peer but a reference: the input files copied with
copy_file_range, as `cp` does, the floor for a save that rewrites every byte.
One untimed round of every tool comes first (on a VM, memory the guest
touches for the first time is slow), then the timed runs are interleaved
(A B C A B C ...), and before each run the input files
are read once end to end, the same for every tool, so all start warm; the
page-cache residency of the inputs (mincore) is recorded for each run.
`--cold` instead evicts the inputs (posix_fadvise DONTNEED) before each run.
Dirty pages are flushed (sync) before each run, and the time of the sync
after a run is reported as `flush`, outside the tool's wall time; `+flush`
is wall time plus flush, the time until the output is on disk.

Each output is checked: onnx.checker on the path; the same nodes and
initializers (names, dtypes, dims); the bytes of a handful of tensors (or all,
with --verify all) equal to the original's; external data in the output
folder. Results: a table on stdout and JSON in bench/out/io_bench.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _util  # noqa: E402

DEFAULT_OUT = os.path.join(HERE, "out")
DEFAULT_MODEL = os.path.join(DEFAULT_OUT, "gpt2_large", "model.onnx")
SMALL_MODEL = os.path.join(DEFAULT_OUT, "gpt2_small_test", "model.onnx")
TOOLS = ("pyonnxopt", "onnx", "onnx_ir", "file_copy")
EXTRA_TOOLS = ("onnx_ir_mt",)
# Not a peer: copies the input files with copy_file_range, like `cp`. The
# floor for any save that writes every byte again on this disk.
REFERENCE = "file_copy"
DATA_NAME = "model.onnx.data"

# ---------------------------------------------------------------- worker side


def _load_save(tool: str, src: str, dst: str) -> tuple:
    """Imports the tool, loads `src`, saves `dst`; returns timings."""
    t0 = time.perf_counter()
    if tool == "pyonnxopt":
        import pyonnxopt

        t1 = time.perf_counter()
        m = pyonnxopt.load(src)
        t2 = time.perf_counter()
        m.save(dst, external_data=None, location=DATA_NAME)
    elif tool == "onnx":
        import onnx

        t1 = time.perf_counter()
        m = onnx.load(src)
        t2 = time.perf_counter()
        onnx.save_model(m, dst, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=DATA_NAME, size_threshold=1024)
    elif tool in ("onnx_ir", "onnx_ir_mt"):
        import onnx_ir as ir

        t1 = time.perf_counter()
        m = ir.load(src)
        t2 = time.perf_counter()
        ir.save(m, dst, external_data=DATA_NAME, size_threshold_bytes=1024,
                max_workers=os.cpu_count() if tool == "onnx_ir_mt" else None)
    elif tool == REFERENCE:
        t1 = t2 = time.perf_counter()
        for name in os.listdir(os.path.dirname(src)):
            _copy_file(os.path.join(os.path.dirname(src), name), os.path.join(os.path.dirname(dst), name))
    else:
        raise SystemExit(f"unknown tool {tool}")
    t3 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2, _util.proc_status()


def _core_build() -> "str | None":
    """When the native module was built: other people rebuild it while we measure."""
    mod = sys.modules.get("pyonnxopt._core")
    if mod is None:
        return None
    st = os.stat(mod.__file__)
    return f"{time.strftime('%H:%M:%S', time.localtime(st.st_mtime))} {st.st_size} B"


def _copy_file(src: str, dst: str) -> None:
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        left = os.fstat(fi.fileno()).st_size
        while left:
            n = os.copy_file_range(fi.fileno(), fo.fileno(), min(left, 1 << 30))
            if n == 0:
                raise OSError(f"copy_file_range stopped early on {src}")
            left -= n


def worker(tool: str, src: str, dst: str, result: str) -> None:
    base = _util.proc_status()
    import_s, load_s, save_s, end = _load_save(tool, src, dst)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    with open(result, "w") as f:
        json.dump({
            "import_s": import_s, "load_s": load_s, "save_s": save_s, "total_s": load_s + save_s,
            "vmhwm": end.get("VmHWM"), "rss_end": end.get("VmRSS"),
            "rss_anon_end": end.get("RssAnon"), "rss_file_end": end.get("RssFile"),
            "rss_start": base.get("VmRSS"), "user_s": ru.ru_utime, "sys_s": ru.ru_stime,
            "core_build": _core_build(),
        }, f)


# ---------------------------------------------------------------- checks


def _external_info(t) -> dict:
    return {e.key: e.value for e in t.external_data}


def _tensor_bytes(t, base_dir: str) -> np.ndarray:
    """The tensor's payload bytes as a uint8 array (a memmap for external data)."""
    from onnx import TensorProto, numpy_helper

    if t.data_location == TensorProto.EXTERNAL:
        info = _external_info(t)
        offset = int(info.get("offset", 0))
        path = os.path.join(base_dir, info["location"])
        length = int(info["length"]) if "length" in info else os.path.getsize(path) - offset
        if length == 0:
            return np.zeros(0, np.uint8)
        return np.memmap(path, dtype=np.uint8, mode="r", offset=offset, shape=(length,))
    if t.HasField("raw_data"):
        return np.frombuffer(t.raw_data, np.uint8)
    return np.ascontiguousarray(numpy_helper.to_array(t)).view(np.uint8).reshape(-1)


def _same_bytes(a: np.ndarray, b: np.ndarray, chunk: int = 64 * _util.MB) -> bool:
    if a.shape != b.shape:
        return False
    for lo in range(0, a.shape[0], chunk):
        if not np.array_equal(a[lo:lo + chunk], b[lo:lo + chunk]):
            return False
    return True


def verify(src: str, dst: str, how: str, seed: int = 0) -> dict:
    """Problems found in `dst` compared with `src` (empty list when it is right)."""
    import onnx

    problems = []
    try:
        onnx.checker.check_model(dst)
    except Exception as e:  # noqa: BLE001 - recorded as a problem
        problems.append(f"checker: {type(e).__name__}: {str(e)[:300]}")
    a = onnx.load(src, load_external_data=False)
    b = onnx.load(dst, load_external_data=False)
    sig = lambda g: [(n.op_type, tuple(n.input), tuple(n.output)) for n in g.node]  # noqa: E731
    if sig(a.graph) != sig(b.graph):
        problems.append("nodes differ")
    ta = {t.name: t for t in a.graph.initializer}
    tb = {t.name: t for t in b.graph.initializer}
    if set(ta) != set(tb):
        problems.append(f"initializer names differ: {sorted(set(ta) ^ set(tb))[:5]}")
    names = [n for n in ta if n in tb]
    for n in names:
        if (list(ta[n].dims), ta[n].data_type) != (list(tb[n].dims), tb[n].data_type):
            problems.append(f"{n}: dims/dtype differ")
    out_dir = os.path.dirname(os.path.abspath(dst))
    for n in names:
        t = tb[n]
        if t.data_location == onnx.TensorProto.EXTERNAL:
            loc = os.path.join(out_dir, _external_info(t).get("location", ""))
            if os.path.dirname(os.path.abspath(loc)) != out_dir or not os.path.isfile(loc):
                problems.append(f"{n}: external data not in the output folder ({loc})")
                break
    if how == "all":
        chosen = names
    else:
        ext = [n for n in names if ta[n].data_location == onnx.TensorProto.EXTERNAL]
        by_size = sorted(ext, key=lambda n: int(_external_info(ta[n]).get("length", 0)))
        chosen = {names[0], names[-1]} | set(by_size[:1] + by_size[-1:])
        chosen |= set(random.Random(seed).sample(ext, min(5, len(ext))))
        chosen |= {n for n in names if ta[n].data_location != onnx.TensorProto.EXTERNAL}
        chosen = sorted(chosen)
    src_dir = os.path.dirname(os.path.abspath(src))
    checked = 0
    for n in chosen:
        if not _same_bytes(_tensor_bytes(ta[n], src_dir), _tensor_bytes(tb[n], out_dir)):
            problems.append(f"{n}: bytes differ")
        checked += 1
    return {"ok": not problems, "problems": problems, "tensors_compared": checked,
            "initializers": len(names)}


# ---------------------------------------------------------------- driver


def input_files(model: str) -> list:
    import onnx

    m = onnx.load(model, load_external_data=False)
    base = os.path.dirname(os.path.abspath(model))
    files = {os.path.abspath(model)}
    for t in m.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            files.add(os.path.join(base, _external_info(t)["location"]))
    return sorted(files)


def run_one(tool: str, src: str, work: str, files: list, cold: bool, sample_s: float) -> dict:
    out_dir = os.path.join(work, tool)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    dst = os.path.join(out_dir, "model.onnx")
    result = os.path.join(work, f"{tool}.result.json")
    os.sync()
    warm = {}
    if cold:
        _util.evict(files)
    else:
        t0 = time.perf_counter()
        n = _util.read_through(files)
        warm = {"warmup_read_s": time.perf_counter() - t0, "warmup_read_bytes": n}
    resident = sum(max(0, _util.resident_bytes(p)) for p in files)
    loadavg = os.getloadavg()[0]
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", tool, "--model", src,
           "--dst", dst, "--result", result]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd)
    peak = {"RssAnon": 0, "RssFile": 0, "VmRSS": 0}
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        st = _util.proc_status(proc.pid)
        for k in peak:
            peak[k] = max(peak[k], st.get(k, 0))
        time.sleep(sample_s)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    t1 = time.perf_counter()
    os.sync()
    flush_s = time.perf_counter() - t1
    rec = {"tool": tool, "returncode": proc.returncode, "process_wall_s": wall, "flush_s": flush_s,
           "ru_maxrss_incl_parent": ru.ru_maxrss * 1024, "peak_rss_anon_sampled": peak["RssAnon"],
           "peak_rss_file_sampled": peak["RssFile"], "input_resident_bytes": resident,
           "loadavg_1min": loadavg, **warm}
    if proc.returncode == 0:
        with open(result) as f:
            rec.update(json.load(f))
        # VmHWM of the child's own address space. Not ru_maxrss: Linux carries
        # the parent's RSS at fork/vfork into the child's maxrss across exec.
        rec["peak_rss"] = max(rec["vmhwm"] or 0, peak["VmRSS"])
        rec["output_bytes"] = sum(os.path.getsize(os.path.join(out_dir, p)) for p in os.listdir(out_dir))
    return rec


def summarize(runs: list, tools: list, model_bytes: int) -> dict:
    for r in runs:
        if r.get("total_s") is not None:
            r["total_flush_s"] = r["total_s"] + r["flush_s"]
    keys = ("load_s", "save_s", "total_s", "flush_s", "total_flush_s", "import_s", "peak_rss", "peak_rss_anon_sampled",
            "peak_rss_file_sampled", "rss_start", "user_s", "sys_s", "input_resident_bytes")
    med = {}
    for tool in tools:
        ok = [r for r in runs if r["tool"] == tool and r["returncode"] == 0]
        med[tool] = {k: _util.median([r.get(k) for r in ok]) for k in keys}
        med[tool]["runs_ok"] = len(ok)
        med[tool]["verified"] = all(r.get("verify", {}).get("ok", True) for r in ok)
        if med[tool]["peak_rss"] is not None:
            med[tool]["peak_rss_fraction_of_model"] = med[tool]["peak_rss"] / model_bytes
    ratios = {}
    base = med.get("pyonnxopt")
    if base and base["runs_ok"]:
        for peer in tools:
            if peer == "pyonnxopt" or not med[peer]["runs_ok"]:
                continue
            ratios[peer] = {k: base[k] / med[peer][k] if med[peer][k] else None
                            for k in ("load_s", "save_s", "total_s", "total_flush_s", "peak_rss")}
    return {"medians": med, "ratios_pyonnxopt_over_peer": ratios}


def targets(summary: dict, model_bytes: int) -> list:
    med, rat = summary["medians"], summary["ratios_pyonnxopt_over_peer"]
    p = med.get("pyonnxopt", {})
    out = []
    if p.get("peak_rss") is not None:
        limit = 0.05 * model_bytes + 200 * _util.MB
        out.append(("peak RSS <= 5% of model + 200 MB", f"{p['peak_rss'] / _util.MB:.0f} MB vs {limit / _util.MB:.0f} MB",
                    p["peak_rss"] <= limit))
        if "onnx_ir" in rat:
            out.append(("peak RSS <= onnx-ir's", f"ratio {rat['onnx_ir']['peak_rss']:.2f}",
                        rat["onnx_ir"]["peak_rss"] <= 1.0))
    for peer in ("onnx_ir", "onnx"):  # never the file-copy reference
        if peer in rat and rat[peer]["total_s"] is not None:
            out.append((f"wall time <= 0.5x {peer}'s", f"ratio {rat[peer]['total_s']:.2f}",
                        rat[peer]["total_s"] <= 0.5))
    return out


def report(summary: dict, tools: list, model_bytes: int, tgts: list) -> str:
    mb = lambda b: None if b is None else f"{b / _util.MB:,.0f}"  # noqa: E731
    s = lambda x: None if x is None else f"{x:.2f}"  # noqa: E731
    rows = []
    for tool in tools:
        m = summary["medians"][tool]
        frac = m.get("peak_rss_fraction_of_model")
        rows.append([tool, s(m["load_s"]), s(m["save_s"]), s(m["total_s"]), s(m["flush_s"]), s(m["total_flush_s"]),
                     mb(m["peak_rss"]), None if frac is None else f"{100 * frac:.1f}%",
                     mb(m["peak_rss_anon_sampled"]), mb(m["peak_rss_file_sampled"]), mb(m["rss_start"]),
                     s(m["user_s"]), s(m["sys_s"]), s(m["import_s"]),
                     f"{m['runs_ok']}{'' if m['verified'] else ' BAD'}"])
    out = [_util.table(["tool", "load s", "save s", "total s", "flush s", "+flush s", "peak RSS MB", "of model",
                        "anon MB", "file MB", "start MB", "user s", "sys s", "import s", "ok runs"], rows)]
    rrows = [[peer + (" (reference)" if peer == REFERENCE else ""),
              *(s(r[k]) for k in ("load_s", "save_s", "total_s", "total_flush_s", "peak_rss"))]
             for peer, r in summary["ratios_pyonnxopt_over_peer"].items()]
    if rrows:
        out += ["", "pyonnxopt / peer (ratio of medians; < 1 is better for pyonnxopt)",
                _util.table(["peer", "load", "save", "total", "+flush", "peak RSS"], rrows)]
    if tgts:
        out += ["", "targets", _util.table(["target", "measured", "met"],
                                           [[a, b, "yes" if c else "NO"] for a, b, c in tgts])]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help=f"default: {os.path.relpath(DEFAULT_MODEL)} (built if missing)")
    ap.add_argument("--small", action="store_true", help="use a 2-layer model (quick self-test)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tools", default=",".join(TOOLS), help=f"from {TOOLS + EXTRA_TOOLS}")
    ap.add_argument("--work", default=os.path.join(DEFAULT_OUT, "io_bench_work"), help="outputs go here (deleted after)")
    ap.add_argument("--json", default=os.path.join(DEFAULT_OUT, "io_bench.json"))
    ap.add_argument("--verify", choices=["handful", "all", "none"], default="handful")
    ap.add_argument("--warmup-rounds", type=int, default=1,
                    help="untimed rounds of every tool first (in a VM, first-touched memory is slow)")
    ap.add_argument("--cold", action="store_true", help="evict inputs from the page cache before each run")
    ap.add_argument("--sample-ms", type=float, default=10.0, help="RSS sampling period of the child")
    ap.add_argument("--keep-outputs", action="store_true")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--dst", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker(a.worker, a.model, a.dst, a.result)
        return 0

    tools = [t.strip() for t in a.tools.split(",") if t.strip()]
    model = a.model or (SMALL_MODEL if a.small else DEFAULT_MODEL)
    if not os.path.exists(model):
        if a.model:
            raise SystemExit(f"{model}: no such file")
        extra = ["--layers", "2", "--d-model", "256", "--vocab", "5000", "--ctx", "128"] if a.small else []
        print(f"building {model} ...", file=sys.stderr)
        subprocess.run([sys.executable, os.path.join(HERE, "make_big_model.py"), os.path.dirname(model), *extra],
                       check=True, stdout=subprocess.DEVNULL)
    model = os.path.abspath(model)
    files = input_files(model)
    model_bytes = sum(os.path.getsize(p) for p in files)
    os.makedirs(a.work, exist_ok=True)
    print(f"model {model}: {model_bytes / 1e9:.3f} GB in {len(files)} files; tools {tools}; "
          f"{a.repeats} repeats, {'cold' if a.cold else 'warm'} inputs", file=sys.stderr)

    runs = []
    try:
        for rep in range(-a.warmup_rounds, a.repeats):
            for tool in tools:
                rec = run_one(tool, model, a.work, files, a.cold, a.sample_ms / 1000)
                rec["repeat"] = rep
                if rep < 0:
                    print(f"[warm-up] {tool:10s} rc={rec['returncode']} {rec['process_wall_s']:.2f}s", file=sys.stderr)
                    shutil.rmtree(os.path.join(a.work, tool), ignore_errors=True)
                    continue
                dst = os.path.join(a.work, tool, "model.onnx")
                if rec["returncode"] == 0 and a.verify != "none":
                    rec["verify"] = verify(model, dst, a.verify, seed=rep)
                runs.append(rec)
                v = rec.get("verify", {})
                print(f"[{rep}] {tool:10s} rc={rec['returncode']} load {rec.get('load_s', 0):.2f}s "
                      f"save {rec.get('save_s', 0):.2f}s peak {rec.get('peak_rss', 0) / _util.MB:.0f} MB "
                      f"inputs cached {rec['input_resident_bytes'] / model_bytes:.0%} "
                      f"load avg {rec['loadavg_1min']:.1f} "
                      f"verify {'ok' if v.get('ok') else v.get('problems', 'skipped')}", file=sys.stderr)
                if not a.keep_outputs:
                    shutil.rmtree(os.path.join(a.work, tool), ignore_errors=True)
    finally:
        if not a.keep_outputs:
            shutil.rmtree(a.work, ignore_errors=True)

    summary = summarize(runs, tools, model_bytes)
    tgts = targets(summary, model_bytes)
    doc = {
        "model": model, "model_bytes": model_bytes, "files": files, "repeats": a.repeats,
        "cache": "cold (evicted)" if a.cold else "warm (read through before each run)",
        "verify": a.verify, "environment": _util.environment(), "runs": runs, **summary,
        "targets": [{"target": t, "measured": m, "met": ok} for t, m, ok in tgts],
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump(doc, f, indent=1)
    la = [r["loadavg_1min"] for r in runs]
    builds = sorted({r["core_build"] for r in runs if r.get("core_build")})
    print(f"model: {model} ({model_bytes / 1e9:.3f} GB), medians of {a.repeats}, "
          f"{doc['cache']}, sizes in MiB")
    print(f"machine: {os.cpu_count()} CPUs, 1-min load average {min(la):.1f}..{max(la):.1f} during the runs; "
          f"pyonnxopt._core built {', '.join(builds) or '?'}")
    print(report(summary, tools, model_bytes, tgts))
    print(f"\nJSON: {a.json}")
    return 0 if all(r["returncode"] == 0 and r.get("verify", {}).get("ok", True) for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
