"""Where the time goes: onnxruntime's profiler (SessionOptions.enable_profiling)
on a separate session, its JSON trace summed per op type and per node.

The trace (Chrome trace format) holds one "Node" event per kernel run, named
"<node>_kernel_time", with args.op_name and args.provider, and one "Session"
event "model_run" per run. Runs before the first measured one (warm-up) are
left out by timestamp. Node names are onnxruntime's after its own graph
optimizations (fused nodes get new names), unless the level is "disable"."""

from __future__ import annotations

import json
import os
import tempfile
from collections import defaultdict
from typing import Optional

from pyonnxopt.benchmark.latency import warm_up
from pyonnxopt.benchmark.session import Settings, create_session

TOP_NODES = 10
_SUFFIX = "_kernel_time"


def parse_trace(events: list, skip_runs: int = 0, top: int = TOP_NODES) -> dict:
    """{"by_op_type": [{"op_type", "ms", "share", "count"}], "top_nodes":
    [{"name", "op_type", "ms", "share"}], "runs", "total_ms", "memory_peak_mb":
    {provider: MiB}}; ms are per run (mean), share of all kernel time, count
    the number of nodes of that type, lists sorted slowest first."""
    if isinstance(events, dict):  # some writers wrap the list
        events = events.get("traceEvents", [])
    run_starts = sorted(e["ts"] for e in events if e.get("cat") == "Session" and e.get("name") == "model_run")
    measured = run_starts[skip_runs:]
    since = measured[0] if measured else float("inf")
    runs = len(measured)
    node_us = defaultdict(float)
    node_op = {}
    peaks = defaultdict(int)
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith(_SUFFIX) or e.get("ts", 0) < since:
            continue
        name = e["name"][: -len(_SUFFIX)]
        args = e.get("args", {})
        node_us[name] += float(e.get("dur", 0))
        node_op[name] = args.get("op_name", "?")
        if "mem_in_use_peak" in args:
            provider = args.get("provider", "?")
            peaks[provider] = max(peaks[provider], int(args["mem_in_use_peak"]))
    total = sum(node_us.values())
    per_run = 1e-3 / max(runs, 1)
    by_op = defaultdict(lambda: [0.0, 0])
    for name, us in node_us.items():
        by_op[node_op[name]][0] += us
        by_op[node_op[name]][1] += 1
    share = (lambda us: us / total) if total else (lambda us: 0.0)
    return {
        "by_op_type": [{"op_type": op, "ms": us * per_run, "share": share(us), "count": n}
                       for op, (us, n) in sorted(by_op.items(), key=lambda kv: (-kv[1][0], kv[0]))],
        "top_nodes": [{"name": name, "op_type": node_op[name], "ms": us * per_run, "share": share(us)}
                      for name, us in sorted(node_us.items(), key=lambda kv: (-kv[1], kv[0]))[:top]],
        "runs": runs, "total_ms": total * per_run,
        "memory_peak_mb": {p: b / (1024 * 1024) for p, b in sorted(peaks.items())},
    }


def profile_model(path: str, settings: Settings, feeds: list, label: str, warmup: int, runs: int,
                  top: int = TOP_NODES) -> dict:
    """Profiles `runs` runs after `warmup` on a session of its own (profiling
    slows runs down, so it never shares the latency measurement's session);
    the trace file is deleted."""
    with tempfile.TemporaryDirectory(prefix="pyonnxopt-profile-") as tmp:
        sess = create_session(path, settings, label, profile_prefix=os.path.join(tmp, "trace"))
        trace: Optional[str] = None
        try:
            warm_up(sess, feeds, warmup)
            warm_up(sess, feeds, runs)
        finally:
            trace = sess.end_profiling()
        with open(trace) as f:
            events = json.load(f)
        os.remove(trace)  # the folder goes too; explicit, in case onnxruntime wrote it elsewhere
    return parse_trace(events, skip_runs=warmup, top=top)
