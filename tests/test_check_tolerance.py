"""The optimize check's float tolerance: float32 as documented, float16 and
bfloat16 within a few of their own rounding steps."""

import io
import warnings

import numpy as np
import onnx
import pytest

import pyonnxopt
from pyonnxopt.check import _compare_outputs


def _mismatch(want, got):
    return _compare_outputs(["y"], [want], [got], 1e-4, 1e-5, "seed 0").first_mismatch


def test_float16_within_a_few_rounding_steps_matches():
    x = np.linspace(-4, 4, 101).astype(np.float16)
    two_steps = (x + 2 * np.spacing(x)).astype(np.float16)
    assert _mismatch(x, two_steps) is None
    assert _mismatch(x, (x * np.float16(1.02)).astype(np.float16)) == "y: max abs diff 0.0781 (seed 0)"


def test_float16_is_within_4_steps_of_the_largest_value():
    # a fused float16 attention rounds its way: 2 steps of the largest value off on a small element
    x = np.linspace(-4, 4, 101).astype(np.float16)
    step = float(np.finfo(np.float16).eps) * 4
    near, far = x.copy(), x.copy()
    near[50] += np.float16(3 * step)
    far[50] += np.float16(6 * step)
    assert _mismatch(x, near) is None and _mismatch(x, far) is not None


def test_float32_keeps_its_tolerance():
    x = np.linspace(-4, 4, 101).astype(np.float32)
    assert _mismatch(x, x * np.float32(1 + 5e-5)) is None
    assert _mismatch(x, x * np.float32(1 + 1e-3)) is not None


def test_a_float16_transformer_block_is_written():
    # Bypassing Identity(out_proj.bias) feeds LayerNormalization an
    # initializer instead of a computed value, and onnxruntime's float16
    # kernel then rounds one step differently (0.002 at |y| ~ 3).
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    class Block(torch.nn.Module):  # exported whole, TransformerEncoderLayer's is_causal would become a tensor
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)

        def forward(self, x):
            return self.layer(x)

    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Block().eval().half(), (torch.randn(2, 5, 32).half(),), buf, opset_version=17, dynamo=False)
    proto = onnx.load_from_string(buf.getvalue())
    inputs = {proto.graph.input[0].name: np.random.default_rng(0).standard_normal((2, 5, 32)).astype(np.float16)}
    model, report = pyonnxopt.optimize(proto, check_inputs=inputs)
    assert report["check"]["first_mismatch"] is None and len(model.graph.nodes) < len(proto.graph.node)


def test_float32_computed_in_float16_on_the_way_counts_float16_steps():
    x = np.linspace(-4, 4, 101).astype(np.float32)
    step = float(2.0**-10)
    assert _compare_outputs(["y"], [x], [x * np.float32(1 + 2 * step)], 1e-4, 1e-5, "", step).first_mismatch is None
    assert _compare_outputs(["y"], [x], [x * np.float32(1.02)], 1e-4, 1e-5, "", step).first_mismatch is not None


def test_narrow_eps_reads_casts_and_weights():
    from onnx import parser

    from pyonnxopt.check import narrow_eps

    def model(body, consts=""):
        return pyonnxopt.load(parser.parse_model('<ir_version: 8, opset_import: ["" : 17]>' + f"""
            g (float[4] x) => (float[4] y) {consts} {{ {body} }}"""))

    assert narrow_eps(model("y = Relu(x)")) == 0.0
    assert narrow_eps(model("h = Cast <to = 10> (x)  y = Cast <to = 1> (h)")) == 2.0**-10
    assert narrow_eps(model("h = Cast <to = 16> (x)  y = Cast <to = 1> (h)")) == 2.0**-7
    assert narrow_eps(model("h = Cast <to = 10> (x)  a = Add(h, w)  y = Cast <to = 1> (a)",
                            "<float16[4] w = {1, 2, 3, 4}>")) == 2.0**-10


def test_allow_lossy_is_checked_at_the_precision_it_allows():
    # A float32 -> float16 -> float32 round trip removed (--allow-lossy) moves
    # the output by up to a float16 step: within what the check allows.
    from onnx import parser

    proto = parser.parse_model('<ir_version: 8, opset_import: ["" : 17]>' + """
        g (float[64] x) => (float[64] y) {
            a = Mul(x, x)  h = Cast <to = 10> (a)  b = Cast <to = 1> (h)  y = Add(b, x)
        }""")
    model, report = pyonnxopt.optimize(proto, allow_lossy=True)
    assert "Cast" not in [n.op_type for n in model.graph.nodes]
    assert report["check"]["first_mismatch"] is None and report["check"]["max_abs_diff"] > 0
