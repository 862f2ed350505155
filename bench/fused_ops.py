"""Each onnxruntime com.microsoft op `--target ort` may emit, timed against
the standard ops it replaces, in onnxruntime's CPU provider on one thread,
at ORT_DISABLE_ALL and at its default ORT_ENABLE_ALL.

Each case chains the op L times (each one reading the previous output, so
that onnxruntime's own common-subexpression pass cannot merge them) on
BERT-base-sized tensors, and runs the two models in turns; the ratio is the
median of the per-round ratios fused / unfused. fusion/targets.py and the
README's "Latency" paragraph cite these numbers.

    python bench/fused_ops.py                 # every case, ~1 min
    python bench/fused_ops.py skip_layer_norm --rounds 400 --json out.json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

B, S, H, FF, L = 1, 128, 768, 3072, 12
MS = "com.microsoft"
RNG = np.random.default_rng(0)


def _model(nodes: list, inputs: dict, inits: dict, opset: int) -> bytes:
    graph = helper.make_graph(
        nodes, "chain",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in inits.items()])
    imports = [helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)]
    return helper.make_model(graph, opset_imports=imports).SerializeToString()


def _chain(step) -> list:
    """L copies of step(i, previous output name, output name), flattened."""
    return [n for i in range(L) for n in step(i, f"y{i - 1}" if i else "x", f"y{i}")]


_node = helper.make_node


def _vec(n):
    return RNG.standard_normal(n).astype(np.float32)


def _ln_decomposed(i, x, y):
    return [_node("ReduceMean", [x], [f"m{i}"], axes=[-1]), _node("Sub", [x, f"m{i}"], [f"d{i}"]),
            _node("Pow", [f"d{i}", "two"], [f"p{i}"]), _node("ReduceMean", [f"p{i}"], [f"v{i}"], axes=[-1]),
            _node("Add", [f"v{i}", "eps"], [f"e{i}"]), _node("Sqrt", [f"e{i}"], [f"q{i}"]),
            _node("Div", [f"d{i}", f"q{i}"], [f"n{i}"]), _node("Mul", [f"n{i}", "g"], [f"k{i}"]),
            _node("Add", [f"k{i}", "b"], [y])]


def _rms_decomposed(i, x, y):
    return [_node("Pow", [x, "two"], [f"p{i}"]), _node("ReduceMean", [f"p{i}"], [f"m{i}"], axes=[-1]),
            _node("Add", [f"m{i}", "eps"], [f"e{i}"]), _node("Sqrt", [f"e{i}"], [f"q{i}"]),
            _node("Reciprocal", [f"q{i}"], [f"r{i}"]), _node("Mul", [x, f"r{i}"], [f"n{i}"]),
            _node("Mul", [f"n{i}", "g"], [y])]


def _attention_decomposed(i, x, y):
    """What a TorchScript export below opset 23 writes for one attention:
    self-attention of x, so that no two layers share a subexpression, then a
    residual Add, so that one layer's head merge and the next one's split
    cannot cancel (they never meet in a real model: projections lie between)."""
    split = lambda v, perm, out: [_node("Reshape", [v, "heads_shape"], [f"{out}{i}r"]),
                                  _node("Transpose", [f"{out}{i}r"], [f"{out}{i}"], perm=perm)]
    return [*split(x, [0, 2, 1, 3], "q"), *split(x, [0, 2, 3, 1], "k"), *split(x, [0, 2, 1, 3], "v"),
            _node("MatMul", [f"q{i}", f"k{i}"], [f"s{i}"]), _node("Mul", [f"s{i}", "scale"], [f"t{i}"]),
            _node("Softmax", [f"t{i}"], [f"p{i}"], axis=-1), _node("MatMul", [f"p{i}", f"v{i}"], [f"o{i}"]),
            _node("Transpose", [f"o{i}"], [f"m{i}"], perm=[0, 2, 1, 3]), _node("Reshape", [f"m{i}", "hidden_shape"], [f"a{i}"]),
            _node("Add", [f"a{i}", "r"], [y])]


def cases() -> dict:
    """name -> (unfused model, fused model, feeds)."""
    hidden = {"x": [B, S, H], "r": [B, S, H]}
    norm = {"g": _vec(H), "b": _vec(H), "two": np.float32(2), "eps": np.float32(1e-12)}
    ff = {"x": [B, S, FF]}
    bias = {"bias": _vec(FF)}
    image = {"x": [1, 64, 56, 56]}
    conv = {"w": (RNG.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32), "c": _vec(64)}
    feeds_hidden = {"x": RNG.standard_normal((B, S, H), dtype=np.float32),
                    "r": RNG.standard_normal((B, S, H), dtype=np.float32)}
    feeds_ff = {"x": RNG.standard_normal((B, S, FF), dtype=np.float32)}
    feeds_image = {"x": RNG.standard_normal((1, 64, 56, 56), dtype=np.float32)}
    qkv = {"x": [B, S, H], "r": [B, S, H]}
    heads = {"heads_shape": np.array([B, S, 12, H // 12]), "hidden_shape": np.array([B, S, H]),
             "scale": np.float32(1 / np.sqrt(H // 12))}
    feeds_qkv = feeds_hidden
    skip_ln = lambda i, x, y: [_node("SkipLayerNormalization", [x, "r", "g", "b"], [y], domain=MS, epsilon=1e-12)]
    return {
        "skip_layer_norm (opset 17)": (
            _model(_chain(lambda i, x, y: [_node("Add", [x, "r"], [f"s{i}"]),
                                           _node("LayerNormalization", [f"s{i}", "g", "b"], [y], epsilon=1e-12)]),
                   hidden, norm, 17),
            _model(_chain(skip_ln), hidden, norm, 17), feeds_hidden),
        "skip_layer_norm (opset 14)": (
            _model(_chain(lambda i, x, y: [_node("Add", [x, "r"], [f"s{i}"]), *_ln_decomposed(i, f"s{i}", y)]),
                   hidden, norm, 14),
            _model(_chain(skip_ln), hidden, norm, 14), feeds_hidden),
        "skip_simplified_layer_norm": (
            _model(_chain(lambda i, x, y: [_node("Add", [x, "r"], [f"s{i}"]), *_rms_decomposed(i, f"s{i}", y)]),
                   hidden, norm, 17),
            _model(_chain(lambda i, x, y: [_node("SkipSimplifiedLayerNormalization", [x, "r", "g"], [y], domain=MS,
                                                 epsilon=1e-12)]), hidden, norm, 17), feeds_hidden),
        "bias_gelu": (
            _model(_chain(lambda i, x, y: [_node("Add", [x, "bias"], [f"s{i}"]), _node("Gelu", [f"s{i}"], [y])]),
                   ff, bias, 20),
            _model(_chain(lambda i, x, y: [_node("BiasGelu", [x, "bias"], [y], domain=MS)]), ff, bias, 20),
            feeds_ff),
        "fast_gelu with bias": (
            _model(_chain(lambda i, x, y: [_node("Add", [x, "bias"], [f"s{i}"]),
                                           _node("FastGelu", [f"s{i}"], [y], domain=MS)]), ff, bias, 17),
            _model(_chain(lambda i, x, y: [_node("FastGelu", [x, "bias"], [y], domain=MS)]), ff, bias, 17),
            feeds_ff),
        "quick_gelu": (
            _model(_chain(lambda i, x, y: [_node("Sigmoid", [x], [f"s{i}"]), _node("Mul", [x, f"s{i}"], [y])]),
                   ff, {}, 17),
            _model(_chain(lambda i, x, y: [_node("QuickGelu", [x], [y], domain=MS, alpha=1.0)]), ff, {}, 17),
            feeds_ff),
        "multi_head_attention": (
            _model(_chain(_attention_decomposed), qkv, heads, 17),
            _model(_chain(lambda i, x, y: [_node("MultiHeadAttention", [x, x, x], [f"a{i}"], domain=MS, num_heads=12),
                                           _node("Add", [f"a{i}", "r"], [y])]),
                   qkv, {}, 17), feeds_qkv),
        "fused_conv (Relu)": (
            _model(_chain(lambda i, x, y: [_node("Conv", [x, "w", "c"], [f"s{i}"], pads=[1, 1, 1, 1]),
                                           _node("Relu", [f"s{i}"], [y])]), image, conv, 17),
            _model(_chain(lambda i, x, y: [_node("FusedConv", [x, "w", "c"], [y], domain=MS, pads=[1, 1, 1, 1],
                                                 activation="Relu")]), image, conv, 17),
            feeds_image),
    }


def _session(model, level) -> ort.InferenceSession:
    """A one-thread CPU session of `model` (bytes, or a path)."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.graph_optimization_level = level
    opts.log_severity_level = 3
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def time_case(unfused, fused, feeds: dict, rounds: int, names: tuple = ("unfused", "fused")) -> dict:
    """Both models (bytes, or paths) at both levels, taking turns; per level
    NAME_ms for each (`names`: what the two are), the ratio second / first,
    and the largest difference between their outputs."""
    out = {}
    for level_name, level in (("disable", ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
                              ("all", ort.GraphOptimizationLevel.ORT_ENABLE_ALL)):
        a, b = _session(unfused, level), _session(fused, level)
        ya, yb = a.run(None, feeds), b.run(None, feeds)
        diff = max(float(np.abs(x.astype(np.float64) - y).max(initial=0)) for x, y in zip(ya, yb))
        if not all(np.allclose(x, y, rtol=1e-3, atol=1e-3) for x, y in zip(ya, yb)):
            raise SystemExit(f"{names[1]} and {names[0]} outputs differ (max {diff:.3g}): a broken case")
        ta, tb = [], []
        for _ in range(rounds):
            for sess, times in ((a, ta), (b, tb)):
                t0 = time.perf_counter()
                sess.run(None, feeds)
                times.append(time.perf_counter() - t0)
        ratios = np.array(tb) / np.array(ta)
        out[level_name] = {f"{names[0]}_ms": float(np.median(ta) * 1e3), f"{names[1]}_ms": float(np.median(tb) * 1e3),
                           "ratio": float(np.median(ratios)), "max_abs_diff": diff,
                           "ratio_p25_p75": [float(np.percentile(ratios, 25)), float(np.percentile(ratios, 75))]}
    return out


def print_row(label: str, width: int, r: dict, names: tuple = ("unfused", "fused")) -> None:
    """One line of time_case's result: first -> second ms and the ratio, per level."""
    cells = [f"{r[k][names[0] + '_ms']:7.2f} -> {r[k][names[1] + '_ms']:7.2f} ms {r[k]['ratio']:5.2f}x"
             for k in ("disable", "all")]
    print(f"{label:{width}s} {cells[0]:>28s} {cells[1]:>28s}")


def main(argv=None) -> None:
    all_cases = cases()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", help=f"cases (prefix match; default all): {', '.join(all_cases)}")
    p.add_argument("--rounds", type=int, default=100, help="interleaved runs of each model per level (default 100)")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args(argv)
    chosen = {n: c for n, c in all_cases.items() if not args.names or any(n.startswith(k) for k in args.names)}
    if not chosen:
        p.error(f"no case starts with {args.names}; cases: {', '.join(all_cases)}")
    results = {}
    print(f"{L} chained ops, one thread, {args.rounds} interleaved rounds; fused / unfused (median of ratios)")
    print(f"{'case':30s} {'ORT_DISABLE_ALL':>28s} {'ORT_ENABLE_ALL':>28s}")
    for name, (unfused, fused, feeds) in chosen.items():
        results[name] = time_case(unfused, fused, feeds, args.rounds)
        print_row(name, 30, results[name])
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"onnxruntime": ort.__version__, "chain": L, "rounds": args.rounds, "cases": results}, f, indent=1)


if __name__ == "__main__":
    main()
