"""The cold-start worker: run as a script (`python cold_worker.py JSON`) in a
fresh process that imports only numpy, onnxruntime and device.py, so its
peak RSS is the runtime's and the model's, not pyonnxopt's.

It creates one session (timed), runs the feeds a few times, and prints one
JSON line: {"create_s", "peak_rss_mb", "device_peak_mb", "device_note"}, or
{"error": "<onnxruntime's first line>"}. `apply_options` is also how the
parent process makes its sessions, so both build them the same way."""

from __future__ import annotations

import json
import resource
import sys
import time


def apply_options(rt, spec: dict):
    """SessionOptions from the plain dict session.options_spec() makes."""
    opts = rt.SessionOptions()
    opts.graph_optimization_level = getattr(rt.GraphOptimizationLevel, spec["level"])
    opts.log_severity_level = 4  # a failing run raises, and bench says it in one line
    if spec.get("intra_op_threads") is not None:
        opts.intra_op_num_threads = spec["intra_op_threads"]
    if spec.get("inter_op_threads") is not None:
        # Inter-op threads are only used when independent nodes may run at once.
        opts.inter_op_num_threads = spec["inter_op_threads"]
        opts.execution_mode = rt.ExecutionMode.ORT_PARALLEL
    return opts


def peak_rss_mb() -> float:
    """This process's peak RSS since it started. On Linux that is VmHWM:
    ru_maxrss also keeps the parent's RSS at fork time (the kernel carries
    the old address space's high-water mark across exec), so a worker
    spawned by a big parent would read the parent's size."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / (1024 * 1024) if sys.platform == "darwin" else kib / 1024  # bytes on macOS, KiB on Linux


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__


def main(request: dict) -> dict:
    import numpy as np
    import onnxruntime as rt

    if __package__:
        from pyonnxopt.benchmark.device import DeviceMemory
    else:  # run as a script: device.py sits next to this file, on sys.path[0]
        from device import DeviceMemory

    rt.set_default_logger_severity(3)
    spec = request["options"]
    memory = DeviceMemory(request["provider"])
    memory.start()
    opts = apply_options(rt, spec)
    start = time.perf_counter()
    try:
        sess = rt.InferenceSession(request["model"], opts, providers=spec["providers"])
    except Exception as e:
        return {"error": _first_line(e)}
    create_s = time.perf_counter() - start
    with np.load(request["feeds"], allow_pickle=False) as data:
        feeds = {name: data[name] for name in data.files}
    try:
        for _ in range(request["runs"]):
            sess.run(None, feeds)
    except Exception as e:
        return {"error": f"cannot run it: {_first_line(e)}"}
    device_mb, note = memory.peak_mb()
    return {"create_s": create_s, "peak_rss_mb": peak_rss_mb(), "device_peak_mb": device_mb, "device_note": note}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
