"""What a fusion may emit for each target.

"onnx": standard ops only, and only at the opset the model imports (a rule
never raises the opset: other nodes' meaning could change with it).
"ort": onnxruntime's com.microsoft ops as well. onnxruntime also registers
a few non-standard ops in the ONNX domain (LayerNormalization below opset
17, SimplifiedLayerNormalization); we never emit those: onnx.checker
rejects them, and every model we write passes it.

Element types: only those onnxruntime's CPU provider runs the op for
(tests/passes/test_fusion_targets.py keeps this table honest), so that the
check against the original can always run.
"""

from __future__ import annotations

from typing import Optional

from onnx import TensorProto

from pyonnxopt.fusion.values import same_dim

MS_DOMAIN = "com.microsoft"

_F32, _F16, _F64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE

# (domain, op) -> element types onnxruntime 1.32's CPU provider runs.
RUNS_ON_CPU = {
    ("", "Gelu"): {_F32, _F16},
    ("", "LayerNormalization"): {_F32, _F16, _F64},
    ("", "RMSNormalization"): {_F32, _F16, _F64},
    ("", "Attention"): {_F32, _F16, _F64},
    ("", "HardSwish"): {_F32, _F16},
    ("", "MatMul"): {_F32, _F16, _F64},  # lower_einsum's (integer Einsums stay: MatMul has no 8-bit types)
    (MS_DOMAIN, "Gelu"): {_F32, _F16},
    (MS_DOMAIN, "FastGelu"): {_F32, _F16, _F64},
    (MS_DOMAIN, "FusedConv"): {_F32, _F16},
    (MS_DOMAIN, "BiasGelu"): {_F32, _F16},
    (MS_DOMAIN, "QuickGelu"): {_F32, _F16, _F64},
    (MS_DOMAIN, "MultiHeadAttention"): {_F32, _F16},
    (MS_DOMAIN, "SkipSimplifiedLayerNormalization"): {_F32, _F16},
}

# Never emitted: com.microsoft SkipLayerNormalization. onnxruntime 1.32's
# CPU kernel takes 3.7x-4.7x the time of Add + LayerNormalization, and
# 1.8x-2.5x that of the ten-op decomposition below opset 17 (python
# bench/fused_ops.py: [1, 128, 768] float32, one thread, ORT_DISABLE_ALL).
# At its default level onnxruntime makes the op itself from a post-norm Add
# + LayerNormalization, so leaving the two ops costs nothing there.

# onnxruntime 1.32's CPU com.microsoft MultiHeadAttention takes 1.1x-1.25x
# the time of the opset-23 Attention on the same [1, 128, 768] tensors (12
# heads, one thread, with or without a [1, 1, S, T] bias, at ORT_DISABLE_ALL
# and ORT_ENABLE_ALL): fuse_attention emits it only below opset 23, where
# it takes 0.86x / 0.95x the time of the ops it replaces (bench/fused_ops.py).

# The first default-domain opset that has each standard op we emit.
SINCE = {"Gelu": 20, "LayerNormalization": 17, "RMSNormalization": 23, "Attention": 23, "HardSwish": 14}


def opset_reason(op: str, have: int) -> Optional[str]:
    """None when the model's opset has `op`, else the refusal."""
    need = SINCE[op]
    return None if have >= need else f"{op} needs opset {need}; the model imports {have}"


def dtype_reason(domain: str, op: str, dtype: int) -> Optional[str]:
    """None when onnxruntime's CPU provider runs `op` for `dtype`, else the refusal."""
    if dtype in RUNS_ON_CPU[(domain, op)]:
        return None
    name = TensorProto.DataType.Name(dtype) if dtype else "an unknown element type"
    return f"{(domain + '.') if domain else ''}{op} on {name.lower()}: onnxruntime's CPU provider has no kernel"


def fits_skip_contract(inp: Optional[list], skip: Optional[list], total: Optional[list]) -> bool:
    """onnxruntime's Skip*LayerNormalization shapes, provably (dims as
    values.dims gives them: equal ints or equal symbols): input [B, S, H]
    or [T, H] with the sum's shape; skip of input's shape, or [1, S, H] or
    [S, H] for a 3-d input. Anything else onnxruntime rejects at run time."""
    if inp is None or skip is None or total is None or len(inp) not in (2, 3) or len(total) != len(inp):
        return False
    if not all(same_dim(i, t) for i, t in zip(inp, total)):
        return False
    if len(skip) == len(inp) and all(same_dim(s, i) for s, i in zip(skip, inp)):
        return True
    if len(inp) == 3 and (len(skip) == 2 or (len(skip) == 3 and skip[0] == 1)):
        return all(same_dim(s, i) for s, i in zip(skip[-2:], inp[1:]))
    return False


def import_ms_domain(model) -> None:
    """The model imports com.microsoft (version 1, the only one) for the op just emitted."""
    if MS_DOMAIN not in model.opset_imports:
        model._core.set_opset_import(MS_DOMAIN, 1)
