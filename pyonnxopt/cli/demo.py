"""`pyonnxopt demo`: builds a small model, loads it, shows it, writes it back
(inline and with external data) checking nothing was lost, then runs the
cleanup passes and checks the result in onnxruntime."""

from __future__ import annotations

import os
import tempfile
import time

from pyonnxopt.cli.render import console


def add_parser(sub):
    p = sub.add_parser("demo", help="build a small model and run pyonnxopt on it (no files needed)")
    p.add_argument("--out", help="folder for the demo files (default: a temporary folder)")
    p.set_defaults(run=run)


def run(args) -> int:
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        return _demo(args.out)
    with tempfile.TemporaryDirectory(prefix="pyonnxopt-demo-") as folder:
        return _demo(folder)


def _demo(folder: str) -> int:
    import numpy as np
    import onnx

    import pyonnxopt
    from pyonnxopt.cli.info import render
    from pyonnxopt.examples import tiny_cnn
    from pyonnxopt.info import model_info

    out = console()
    source = os.path.join(folder, "tiny_cnn.onnx")
    onnx.save(tiny_cnn(), source)
    out.print(f"built [bold]{source}[/bold]")

    start = time.perf_counter()
    model = pyonnxopt.load(source)
    out.print(f"loaded in {1e3 * (time.perf_counter() - start):.2f} ms")
    render(model_info(model))

    inline = os.path.join(folder, "tiny_cnn.roundtrip.onnx")
    external = os.path.join(folder, "tiny_cnn.external.onnx")
    model.save(inline)
    result = model.save(external, external_data=True, size_threshold=256)
    original = onnx.load(source)
    same = onnx.load(inline) == original and _without_location_flags(onnx.load(external)) == original
    out.print(f"saved {inline} and {external} (+ {', '.join(result.data_files)}, {result.external_bytes} bytes)")
    if not same:
        out.print("[red]round trip changed the model[/red]")
        return 1
    onnx.checker.check_model(external, full_check=True)
    weights = {t.name: t.numpy() for t in model.initializers()}
    conv = weights["conv1.w"]
    out.print(f"round trip identical field by field; conv1.w is a read-only view: shape {conv.shape}, "
              f"writeable={conv.flags.writeable}, mean {float(np.mean(conv)):+.4f}")
    return _run_passes(out, source, folder)


def _run_passes(out, source: str, folder: str) -> int:
    """The default pipeline, checked against onnxruntime."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    from pyonnxopt.passes import run_passes

    model, report = run_passes(source)
    before = len(onnx.load(source).graph.node)
    for r in report.runs:
        if r.modified and "removed" in r.stats:
            out.print(f"  {r.name}: removed {', '.join(r.stats['removed'])}")
        elif r.modified:  # provenance records: what each rewrite did, to what
            done = (f"{w['what']} ({' + '.join(w['consumed'])})" for w in r.stats["rewrites"])
            out.print(f"  {r.name}: {', '.join(done)}")
    optimized = os.path.join(folder, "tiny_cnn.optimized.onnx")
    model.save(optimized)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    image = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    want, got = (ort.InferenceSession(p, opts, providers=["CPUExecutionProvider"]).run(None, {"image": image})[0]
                 for p in (source, optimized))
    diff = float(np.max(np.abs(want - got)))
    out.print(f"passes: {before} -> {len(model.graph)} nodes in {report.iterations} iterations; "
              f"onnxruntime outputs match (max abs diff {diff:.1e}): {optimized}")
    return 0 if np.allclose(want, got, rtol=1e-5, atol=1e-6) else 1


def _without_location_flags(model):
    """onnx.load marks tensors it read from external data as DEFAULT location
    explicitly; the original never set the field."""
    for t in model.graph.initializer:  # the demo model keeps its weights there
        if t.HasField("data_location") and t.data_location == 0:
            t.ClearField("data_location")
    return model
