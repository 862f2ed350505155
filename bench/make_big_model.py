"""Builds a GPT-2-style decoder with random fp32 weights in one external data file.

    python bench/make_big_model.py OUT_DIR                      # GPT-2 large, ~3.1 GB
    python bench/make_big_model.py OUT_DIR --layers 2 --d-model 128 --vocab 1000

The graph is a real decoder (opset 20): token and position embeddings
(Gather), then per layer LayerNormalization -> fused QKV MatMul/Add -> Split ->
Reshape/Transpose heads -> scaled MatMul + causal mask -> Softmax -> MatMul ->
output projection -> residual Add, and LayerNormalization -> MLP (MatMul/Add,
Gelu, MatMul/Add) -> residual Add; a final LayerNormalization and an lm_head
tied to the token embedding (Transpose + MatMul).

Weights never sit in memory together: each tensor is generated in chunks and
written at an offset this script computes (aligned to 4096 bytes), and the
ModelProto only holds TensorProtos with data_location=EXTERNAL. The result
passes `onnx.checker.check_model(path)`; the model file itself is small.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

OPSET = 20
ALIGN = 4096
CHUNK_BYTES = 64 << 20
DATA_SUFFIX = ".data"


class ExternalWriter:
    """Appends tensors to one open data file and returns their TensorProtos."""

    def __init__(self, path: str, seed: int):
        self.location = os.path.basename(path)
        self.file = open(path, "wb")
        self.offset = 0
        self.rng = np.random.default_rng(seed)
        self.tensors: list[TensorProto] = []

    def add(self, name: str, shape: tuple, kind: str = "normal", array=None) -> str:
        """Writes one float32 tensor: `array`, or by kind: normal (N(0, 0.02)),
        gamma (1 + N(0, 0.1)) or zeros."""
        count = math.prod(shape)
        start = -(-self.offset // ALIGN) * ALIGN
        self.file.write(b"\0" * (start - self.offset))
        if array is not None:
            np.ascontiguousarray(array, dtype=np.float32).tofile(self.file)
        else:
            step = max(1, CHUNK_BYTES // 4)
            for lo in range(0, count, step):
                n = min(step, count - lo)
                if kind == "zeros":
                    chunk = np.zeros(n, np.float32)
                else:
                    chunk = self.rng.standard_normal(n, dtype=np.float32)
                    if kind == "gamma":
                        chunk = chunk * np.float32(0.1) + np.float32(1.0)
                    else:
                        chunk *= np.float32(0.02)
                chunk.tofile(self.file)
        length = count * 4
        self.offset = start + length
        t = TensorProto()
        t.name = name
        t.data_type = TensorProto.FLOAT
        t.dims.extend(shape)
        t.data_location = TensorProto.EXTERNAL
        for key, value in (("location", self.location), ("offset", str(start)), ("length", str(length))):
            e = t.external_data.add()
            e.key, e.value = key, value
        self.tensors.append(t)
        return name

    def close(self) -> int:
        self.file.close()
        return self.offset


def _const(name: str, values, dtype=np.int64) -> TensorProto:
    return onnx.numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


def build(
    out_dir: str,
    *,
    layers: int = 36,
    d_model: int = 1280,
    heads: int = 20,
    vocab: int = 50257,
    ctx: int = 1024,
    gelu: str = "op",
    seed: int = 0,
    name: str = "model.onnx",
) -> str:
    """Writes OUT_DIR/NAME and OUT_DIR/NAME.data; returns the model path."""
    if d_model % heads:
        raise ValueError(f"d_model {d_model} is not a multiple of heads {heads}")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name)
    data = ExternalWriter(path + DATA_SUFFIX, seed)
    head_dim = d_model // heads
    ff = 4 * d_model
    nodes = []
    small = [
        _const("c_zero", 0),
        _const("c_one", 1),
        _const("c_axis0", [0]),
        _const("c_zeros2", [0, 0]),
        _const("c_axes01", [0, 1]),
        _const("c_heads", [0, 0, heads, head_dim]),
        _const("c_merge", [0, 0, d_model]),
        _const("c_split", [d_model, d_model, d_model]),
        _const("c_scale", 1.0 / math.sqrt(head_dim), np.float32),
    ]

    def node(op, inputs, outputs, **attrs):
        nodes.append(helper.make_node(op, inputs, outputs, name=f"n{len(nodes)}_{op}", **attrs))
        return outputs[0]

    data.add("wte", (vocab, d_model))
    data.add("wpe", (ctx, d_model))
    # Causal additive mask, sliced to the sequence length at run time.
    mask = np.triu(np.full((ctx, ctx), -1e4, np.float32), k=1)
    data.add("attn_mask", (ctx, ctx), array=mask)
    del mask

    # Positions 0..S-1 from the input's shape; S x S slice of the mask.
    node("Shape", ["input_ids"], ["ids_shape"])
    node("Gather", ["ids_shape", "c_one"], ["seq_len"], axis=0)
    node("Range", ["c_zero", "seq_len", "c_one"], ["positions"])
    node("Unsqueeze", ["seq_len", "c_axis0"], ["seq_len_1d"])
    node("Concat", ["seq_len_1d", "seq_len_1d"], ["mask_end"], axis=0)
    node("Slice", ["attn_mask", "c_zeros2", "mask_end", "c_axes01"], ["mask"])
    node("Gather", ["wte", "input_ids"], ["tok_emb"], axis=0)
    node("Gather", ["wpe", "positions"], ["pos_emb"], axis=0)
    x = node("Add", ["tok_emb", "pos_emb"], ["h0"])

    def layer_norm(inp, prefix):
        g = data.add(f"{prefix}.weight", (d_model,), kind="gamma")
        b = data.add(f"{prefix}.bias", (d_model,), kind="zeros")
        return node("LayerNormalization", [inp, g, b], [f"{prefix}.out"], axis=-1, epsilon=1e-5)

    def linear(inp, prefix, n_in, n_out):
        w = data.add(f"{prefix}.weight", (n_in, n_out))
        b = data.add(f"{prefix}.bias", (n_out,), kind="zeros")
        y = node("MatMul", [inp, w], [f"{prefix}.mm"])
        return node("Add", [y, b], [f"{prefix}.out"])

    def gelu_tanh(inp, p):
        # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
        cube = node("Pow", [inp, "c_three"], [f"{p}.x3"])
        t = node("Mul", [cube, "c_gelu_c"], [f"{p}.cx3"])
        t = node("Add", [inp, t], [f"{p}.inner"])
        t = node("Mul", [t, "c_gelu_k"], [f"{p}.scaled"])
        t = node("Tanh", [t], [f"{p}.tanh"])
        t = node("Add", [t, "c_one_f"], [f"{p}.onep"])
        t = node("Mul", [inp, t], [f"{p}.xt"])
        return node("Mul", [t, "c_half"], [f"{p}.out"])

    if gelu == "tanh":
        small += [
            _const("c_half", 0.5, np.float32),
            _const("c_one_f", 1.0, np.float32),
            _const("c_three", 3.0, np.float32),
            _const("c_gelu_k", math.sqrt(2.0 / math.pi), np.float32),
            _const("c_gelu_c", 0.044715, np.float32),
        ]

    for i in range(layers):
        p = f"h{i}"
        h = layer_norm(x, f"{p}.ln_1")
        qkv = linear(h, f"{p}.attn.c_attn", d_model, 3 * d_model)
        node("Split", [qkv, "c_split"], [f"{p}.q", f"{p}.k", f"{p}.v"], axis=-1)
        q = node("Reshape", [f"{p}.q", "c_heads"], [f"{p}.q4"])
        k = node("Reshape", [f"{p}.k", "c_heads"], [f"{p}.k4"])
        v = node("Reshape", [f"{p}.v", "c_heads"], [f"{p}.v4"])
        q = node("Transpose", [q], [f"{p}.qt"], perm=[0, 2, 1, 3])
        k = node("Transpose", [k], [f"{p}.kt"], perm=[0, 2, 3, 1])
        v = node("Transpose", [v], [f"{p}.vt"], perm=[0, 2, 1, 3])
        s = node("MatMul", [q, k], [f"{p}.scores"])
        s = node("Mul", [s, "c_scale"], [f"{p}.scaled"])
        s = node("Add", [s, "mask"], [f"{p}.masked"])
        s = node("Softmax", [s], [f"{p}.probs"], axis=-1)
        a = node("MatMul", [s, v], [f"{p}.ctx"])
        a = node("Transpose", [a], [f"{p}.ctx_t"], perm=[0, 2, 1, 3])
        a = node("Reshape", [a, "c_merge"], [f"{p}.ctx_m"])
        a = linear(a, f"{p}.attn.c_proj", d_model, d_model)
        x = node("Add", [x, a], [f"{p}.res1"])
        h = layer_norm(x, f"{p}.ln_2")
        h = linear(h, f"{p}.mlp.c_fc", d_model, ff)
        if gelu == "tanh":
            h = gelu_tanh(h, f"{p}.gelu")
        else:
            h = node("Gelu", [h], [f"{p}.gelu"], approximate="tanh")
        h = linear(h, f"{p}.mlp.c_proj", ff, d_model)
        x = node("Add", [x, h], [f"{p}.res2"])

    x = layer_norm(x, "ln_f")
    node("Transpose", ["wte"], ["wte_t"], perm=[1, 0])
    node("MatMul", [x, "wte_t"], ["logits"])
    data_bytes = data.close()

    graph = helper.make_graph(
        nodes,
        "gpt2_decoder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", vocab])],
        initializer=small + data.tensors,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="pyonnxopt-bench",
        ir_version=9,
    )
    # Serialized by hand: the proto is small and has no raw data to move out.
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    sys.stderr.write(
        f"{path}: {len(nodes)} nodes, {len(data.tensors)} external tensors, "
        f"{data_bytes / 1e9:.3f} GB of external data\n"
    )
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--d-model", type=int, default=1280)
    ap.add_argument("--heads", type=int, default=None, help="default: d_model // 64")
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--gelu", choices=["op", "tanh"], default="op", help="Gelu op or its tanh decomposition")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default="model.onnx")
    ap.add_argument("--no-check", action="store_true", help="skip onnx.checker")
    a = ap.parse_args(argv)
    heads = a.heads or max(1, a.d_model // 64)
    t0 = time.perf_counter()
    path = build(a.out_dir, layers=a.layers, d_model=a.d_model, heads=heads, vocab=a.vocab,
                 ctx=a.ctx, gelu=a.gelu, seed=a.seed, name=a.name)
    t1 = time.perf_counter()
    if not a.no_check:
        onnx.checker.check_model(path)
    sys.stderr.write(f"built in {t1 - t0:.1f} s{'' if a.no_check else ', onnx.checker ok'}\n")
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
