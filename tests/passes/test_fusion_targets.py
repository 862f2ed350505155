"""fusion/targets.py: the table of element types onnxruntime's CPU provider
runs each fused op for matches the installed onnxruntime (a rule must not
emit an op the check against the original could not run), and the opset
each standard op needs matches onnx's schemas."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pyonnxopt.check import session
from pyonnxopt.fusion.targets import MS_DOMAIN, RUNS_ON_CPU, SINCE

FLOATS = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE)

# One small instance of each op: input shapes and attributes.
CASES = {
    "Gelu": ([[2, 3, 8]], {}),
    "HardSwish": ([[2, 3, 8]], {}),
    "MatMul": ([[2, 3, 8], [8, 4]], {}),
    "LayerNormalization": ([[2, 3, 8], [8], [8]], {}),
    "RMSNormalization": ([[2, 3, 8], [8]], {}),
    "Attention": ([[2, 4, 5, 8]] * 3, {}),
    "FastGelu": ([[2, 3, 8]], {}),
    "FusedConv": ([[1, 2, 5, 5], [3, 2, 3, 3]], {"activation": "Relu"}),
    "BiasGelu": ([[2, 3, 8], [8]], {}),
    "QuickGelu": ([[2, 3, 8]], {}),
    "MultiHeadAttention": ([[2, 5, 32]] * 3, {"num_heads": 4}),
    "SkipSimplifiedLayerNormalization": ([[2, 3, 8], [2, 3, 8], [8]], {}),
}


def _runs(domain: str, op: str, dtype: int) -> bool:
    shapes, attrs = CASES[op]
    inputs = [helper.make_tensor_value_info(f"i{k}", dtype, s) for k, s in enumerate(shapes)]
    node = helper.make_node(op, [i.name for i in inputs], ["y"], domain=domain, **attrs)
    opset = 23 if domain == "" else 17
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(MS_DOMAIN, 1)] if domain else [])
    model = helper.make_model(helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", dtype, None)]),
                              opset_imports=imports, ir_version=10)
    np_type = helper.tensor_dtype_to_np_dtype(dtype)
    feeds = {f"i{k}": np.ones(s, np_type) for k, s in enumerate(shapes)}
    try:
        session(model.SerializeToString()).run(None, feeds)
    except Exception:  # onnxruntime raises several kinds: any means "does not run"
        return False
    return True


@pytest.mark.parametrize("domain, op", sorted(RUNS_ON_CPU))
def test_element_types_match_onnxruntime(domain, op):
    have = {t for t in FLOATS if _runs(domain, op, t)}
    assert RUNS_ON_CPU[(domain, op)] == have


@pytest.mark.parametrize("op", sorted(SINCE))
def test_first_opsets_match_onnx(op):
    assert onnx.defs.get_schema(op, SINCE[op]).since_version == SINCE[op]
    with pytest.raises(onnx.defs.SchemaError):
        onnx.defs.get_schema(op, SINCE[op] - 1)
