"""Attention heads with standard ops below opset 23, laid out three ways, timed
in onnxruntime's CPU provider on one thread at ORT_DISABLE_ALL and at its
default. Why optimize_transposes leaves BERT's four Transposes per layer
(Q, K and V split into heads, the merge) where they are:

  exported     Q, K, V each MatMul + Add -> Reshape [B, S, h, d] -> Transpose
               (K's straight to [B, h, d, S]); the merge Transposes back.
  head_major   Q and V as x [B, 1, S, H] times the weight as [h, H, d]: a
               broadcasting MatMul writes [B, h, S, d], no Transpose; K as
               [h, d, H] times xᵀ; two Transposes a layer instead of four.
  packed_qkv   one Gemm by the three weights side by side, one Transpose of
               [B, S, 3, h, d], a Gather per head tensor, and Kᵀ: three.
  einsum       no Transpose: the scores as Einsum("bshd,bthd->bhst") of the
               split heads, the context as Einsum("bhst,bthd->bshd"), which
               the merge Reshape takes as it is.

Each model chains L BERT-base attention blocks (with the residual Add, so
that no two blocks compute the same thing); the ratio is the median of the
per-round ratios layout / exported, the two models taking turns.

    python bench/head_layouts.py               # ~1 min
    python bench/head_layouts.py --rounds 200 --json out.json
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import onnxruntime as ort
from fused_ops import RNG, B, H, S, _model, print_row, time_case
from onnx import helper

HEADS, D, L = 12, 64, 4
NAMES = ("exported", "layout")  # time_case's keys: exported_ms, layout_ms
WEIGHTS = {k: (RNG.standard_normal((H, H)) * 0.03).astype(np.float32) for k in "qkvo"}
BIASES = {k: (RNG.standard_normal(H) * 0.02).astype(np.float32) for k in "qkvo"}
SHARED = {"merge": np.array([B, S, H], np.int64), "scale": np.float32(D ** -0.5)}


def _tail(p: str, q: str, k: str, v: str, x: str) -> tuple:
    """Scores, softmax, context, head merge, output projection, residual."""
    nodes = [helper.make_node("MatMul", [q, k], [p + "s"]), helper.make_node("Mul", [p + "s", "scale"], [p + "ss"]),
             helper.make_node("Softmax", [p + "ss"], [p + "p"], axis=-1),
             helper.make_node("MatMul", [p + "p", v], [p + "c"]),
             helper.make_node("Transpose", [p + "c"], [p + "ct"], perm=[0, 2, 1, 3])]
    return _merged_out(p, p + "ct", x, nodes)


def _merged_out(p: str, context: str, x: str, nodes: list) -> tuple:
    """`nodes`, then the head merge of the [B, S, h, d] context, the output
    projection and the residual."""
    nodes = nodes + [helper.make_node("Reshape", [context, "merge"], [p + "cm"]),
                     helper.make_node("MatMul", [p + "cm", p + "Wo"], [p + "om"]),
                     helper.make_node("Add", [p + "om", p + "bo"], [p + "o"]),
                     helper.make_node("Add", [p + "o", x], [p + "y"])]
    return nodes, {p + "Wo": WEIGHTS["o"], p + "bo": BIASES["o"]}


def _split_heads(p: str, x: str) -> tuple:
    """Q, K and V each projected and split into [B, S, h, d] heads (named
    p + "qr", "kr", "vr")."""
    nodes, inits = [], {}
    for k in "qkv":
        inits.update({p + "W" + k: WEIGHTS[k], p + "b" + k: BIASES[k]})
        nodes += [helper.make_node("MatMul", [x, p + "W" + k], [p + k + "m"]),
                  helper.make_node("Add", [p + k + "m", p + "b" + k], [p + k + "a"]),
                  helper.make_node("Reshape", [p + k + "a", "split"], [p + k + "r"])]
    return nodes, inits


def _exported(p: str, x: str) -> tuple:
    nodes, inits = _split_heads(p, x)
    nodes += [helper.make_node("Transpose", [p + k + "r"], [p + k], perm=[0, 2, 3, 1] if k == "k" else [0, 2, 1, 3])
              for k in "qkv"]
    tail, more = _tail(p, p + "q", p + "k", p + "v", x)
    return nodes + tail, {**inits, **more}


def _head_major(p: str, x: str) -> tuple:
    nodes = [helper.make_node("Reshape", [x, "x4"], [p + "x4"]),
             helper.make_node("Transpose", [p + "x4"], [p + "xt"], perm=[0, 1, 3, 2])]
    inits = {}
    for k in "qkv":
        w = WEIGHTS[k].reshape(H, HEADS, D).transpose(1, 0, 2)  # [h, H, d]
        b = BIASES[k].reshape(HEADS, 1, D)
        if k == "k":  # Kᵀ = Wᵀ xᵀ: [h, d, H] x [B, 1, H, S]
            w, b = w.transpose(0, 2, 1), b.transpose(0, 2, 1)
            nodes.append(helper.make_node("MatMul", [p + "Wk", p + "xt"], [p + "km"]))
        else:
            nodes.append(helper.make_node("MatMul", [p + "x4", p + "W" + k], [p + k + "m"]))
        nodes.append(helper.make_node("Add", [p + k + "m", p + "b" + k], [p + k]))
        inits.update({p + "W" + k: np.ascontiguousarray(w), p + "b" + k: np.ascontiguousarray(b)})
    tail, more = _tail(p, p + "q", p + "k", p + "v", x)
    return nodes + tail, {**inits, **more}


def _packed_qkv(p: str, x: str) -> tuple:
    nodes = [helper.make_node("Reshape", [x, "rows"], [p + "x2"]),
             helper.make_node("Gemm", [p + "x2", p + "Wp", p + "bp"], [p + "qkv"]),
             helper.make_node("Reshape", [p + "qkv", "split5"], [p + "qkv5"]),
             helper.make_node("Transpose", [p + "qkv5"], [p + "qkvt"], perm=[2, 0, 3, 1, 4])]
    nodes += [helper.make_node("Gather", [p + "qkvt", f"i{i}"], [p + k + "g"], axis=0) for i, k in enumerate("qkv")]
    nodes.append(helper.make_node("Transpose", [p + "kg"], [p + "k"], perm=[0, 1, 3, 2]))
    inits = {p + "Wp": np.concatenate([WEIGHTS[k] for k in "qkv"], 1),
             p + "bp": np.concatenate([BIASES[k] for k in "qkv"])}
    tail, more = _tail(p, p + "qg", p + "k", p + "vg", x)
    return nodes + tail, {**inits, **more}


def _einsum(p: str, x: str) -> tuple:
    nodes, inits = _split_heads(p, x)
    nodes += [helper.make_node("Einsum", [p + "qr", p + "kr"], [p + "s"], equation="bshd,bthd->bhst"),
              helper.make_node("Mul", [p + "s", "scale"], [p + "ss"]),
              helper.make_node("Softmax", [p + "ss"], [p + "p"], axis=-1),
              helper.make_node("Einsum", [p + "p", p + "vr"], [p + "c"], equation="bhst,bthd->bshd")]
    nodes, more = _merged_out(p, p + "c", x, nodes)
    return nodes, {**inits, **more}


LAYOUTS = {"exported": _exported, "head_major": _head_major, "packed_qkv": _packed_qkv, "einsum": _einsum}
CONSTANTS = {"split": np.array([B, S, HEADS, D], np.int64), "x4": np.array([B, 1, S, H], np.int64),
             "rows": np.array([B * S, H], np.int64), "split5": np.array([B, S, 3, HEADS, D], np.int64),
             **{f"i{i}": np.array(i, np.int64) for i in range(3)}}


def model(layout: str) -> bytes:
    nodes, inits, x = [], {}, "x"
    for layer in range(L):
        more_nodes, more_inits = LAYOUTS[layout](f"l{layer}_", x)
        nodes += more_nodes
        inits.update(more_inits)
        x = nodes[-1].output[0]
    return _model(nodes, {"x": [B, S, H]}, {**inits, **SHARED, **CONSTANTS}, 17)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=60, help="interleaved runs of each model per level (default 60)")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args(argv)
    feeds = {"x": RNG.standard_normal((B, S, H)).astype(np.float32)}
    exported = model("exported")
    results = {}
    print(f"{L} attention blocks, one thread, {args.rounds} interleaved rounds; layout / exported (median of ratios)")
    print(f"{'layout':12s} {'ORT_DISABLE_ALL':>28s} {'ORT_ENABLE_ALL':>28s}")
    for name in LAYOUTS:
        if name == "exported":
            continue
        results[name] = time_case(exported, model(name), feeds, args.rounds, NAMES)  # raises if the outputs differ
        print_row(name, 12, results[name], NAMES)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"onnxruntime": ort.__version__, "blocks": L, "rounds": args.rounds, "layouts": results}, f, indent=1)


if __name__ == "__main__":
    main()
