"""fuse_gemm_batchnorm: Gemm/MatMul with a constant 2-D weight + inference
BatchNormalization over [N, C] -> Gemm (or MatMul + Add) with folded weight
and bias. Numbers: onnxruntime, original against fused, rtol = atol = 1e-5
in float32."""

import pytest

from fusion_helpers import assert_same_outputs, fused_by, near_misses, rng_weights, run_rule, with_weights
from helpers import ops, structure

RULE = "fuse_gemm_batchnorm"
BN = "y = BatchNormalization <epsilon = 0.001> (t, scale, beta, mean, var)"


def stats(n, seed=0, **shapes):
    return rng_weights(seed, scale=(n,), beta=(n,), mean=(n,), var=(n,), **shapes)


def fused(proto):
    return fused_by(RULE, proto)


@pytest.mark.parametrize("c_shape", [(6,), (1, 6), (1,), ()])
def test_gemm_trans_b_alpha_beta_and_c(c_shape):
    proto = with_weights(f"""g (float[3,5] a) => (float[3,6] y) {{
        t = Gemm <transB = 1, alpha = 0.5, beta = 2.0> (a, w, c)
        {BN}
    }}""", **stats(6, w=(6, 5), c=c_shape))
    m, _ = fused(proto)
    (gemm,) = m.graph.nodes
    assert gemm.op_type == "Gemm" and gemm.outputs[0].name == "y" and gemm.inputs[0].name == "a"
    assert gemm.attributes == {"transB": 1, "alpha": 0.5, "beta": 1.0}
    assert gemm.inputs[2].initializer.dims == [6]


def test_gemm_without_c_gets_one():
    proto = with_weights(f"""g (float[3,5] a) => (float[3,6] y) {{
        t = Gemm <transA = 1> (a, w)
        {BN}
    }}""", **stats(6, w=(3, 6)))
    proto.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 3
    proto.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 3
    m, _ = fused(proto)
    assert ops(m) == ["Gemm"] and len(m.graph.nodes[0].inputs) == 3


def test_matmul_becomes_matmul_and_add():
    proto = with_weights(f"""g (float[4,5] a) => (float[4,6] y) {{
        t = MatMul (a, w)
        {BN}
    }}""", **stats(6, w=(5, 6)))
    m, _ = fused(proto)
    (mm, mm_in, (t,)), (add, add_in, add_out) = structure(m)
    assert (mm, mm_in[0], add, add_in[0], add_out) == ("MatMul", "a", "Add", t, ["y"])
    assert mm_in[1] != "w" and m.graph.nodes[1].inputs[1].initializer.dims == [6]


def test_matmul_with_unknown_batch_dim_of_known_rank():
    proto = with_weights(f"""g (float[N,5] a) => (float[N,6] y) {{
        t = MatMul (a, w)
        {BN}
    }}""", **stats(6, w=(5, 6)))
    m, _ = run_rule(RULE, proto)
    assert ops(m) == ["MatMul", "Add"]
    assert_same_outputs(proto, m, a=[7, 5])


def test_refuses_a_rank_3_matmul():
    proto = with_weights(f"""g (float[2,4,5] a) => (float[2,6,6] y) {{
        t = MatMul (a, w)
        y = BatchNormalization (t, scale, beta, mean, var)
    }}""", **rng_weights(w=(5, 6), scale=(4,), beta=(4,), mean=(4,), var=(4,)))
    m, r = run_rule(RULE, proto, valid=False)
    assert not r.modified
    assert near_misses(r) == ["the MatMul output has rank 3: BatchNormalization's axis 1 is not its feature axis"]


@pytest.mark.parametrize("rows", ["f = Flatten <axis = 2> (t)", "f = Reshape (t, rows)"])
def test_a_rank_3_matmul_whose_rows_go_into_the_batchnorm(rows):
    # LeViT's Linear + BatchNorm1d through TorchScript: BN over the flattened rows
    proto = with_weights(f"""g (float[2,4,5] a) => (float[2,4,6] y)
            <int64[2] rows = {{-1, 6}}, int64[3] back = {{2, 4, 6}}> {{
        t = MatMul (a, w)
        {rows}
        b = BatchNormalization <epsilon = 0.001> (f, scale, beta, mean, var)
        y = Reshape (b, back)
    }}""", **stats(6, w=(5, 6)))
    m, _ = fused(proto)
    assert ops(m) == ["MatMul", "Add", rows.split()[2], "Reshape"]
    assert m.graph.nodes[2].outputs[0].name == "b" and m.graph.nodes[1].inputs[1].initializer.dims == [6]


def test_refuses_rows_that_are_not_the_columns():
    # Flatten at axis 1: [2, 24] rows of 4 positions x 6 columns
    proto = with_weights("""g (float[2,4,5] a) => (float[2,24] y) {
        t = MatMul (a, w)
        f = Flatten <axis = 1> (t)
        y = BatchNormalization (f, scale, beta, mean, var)
    }""", **rng_weights(w=(5, 6), scale=(24,), beta=(24,), mean=(24,), var=(24,)))
    m, r = run_rule(RULE, proto)
    assert not r.modified
    assert near_misses(r) == ["the MatMul output [2, 4, 6] does not go into BatchNormalization as its rows ([2, 24])"]


def test_refuses_a_matmul_of_unknown_rank():
    proto = with_weights(f"""g (float[] a) => (float[] y) {{
        t = MatMul (a, w)
        {BN}
    }}""", **stats(6, w=(5, 6)))
    m, r = run_rule(RULE, proto, valid=False)
    assert not r.modified
    assert near_misses(r) == ["the MatMul output's rank is unknown (BatchNormalization's axis 1 must be its feature axis)"]


def test_refuses_c_per_row():
    proto = with_weights(f"""g (float[3,5] a) => (float[3,6] y) {{
        t = Gemm (a, w, c)
        {BN}
    }}""", **stats(6, w=(5, 6), c=(3, 6)))
    m, r = run_rule(RULE, proto)
    assert not r.modified and near_misses(r) == ["Gemm's C: the constant's shape [3, 6] varies along the batch axis 0"]


def test_refuses_a_product_with_another_reader():
    proto = with_weights(f"""g (float[3,5] a) => (float[3,6] y, float[3,6] z) {{
        t = Gemm (a, w)
        {BN}
        z = Relu (t)
    }}""", **stats(6, w=(5, 6)))
    m, r = run_rule(RULE, proto)
    assert not r.modified and near_misses(r) == ["'product': its output 't' is also read by 'Relu->z'"]


def test_refuses_a_non_constant_weight():
    proto = with_weights(f"""g (float[3,5] a, float[5,6] w) => (float[3,6] y) {{
        t = Gemm (a, w)
        {BN}
    }}""", **stats(6))
    m, r = run_rule(RULE, proto)
    assert not r.modified and "'w'" in r.stats["near_misses"][0]


def test_opset_9_runs_and_opset_6_does_not():
    text = f"""g (float[3,5] a) => (float[3,6] y) {{
        t = Gemm (a, w, c)
        y = BatchNormalization (t, scale, beta, mean, var)
    }}"""
    m, _ = fused(with_weights(text, 9, **stats(6, w=(5, 6), c=(6,))))
    assert ops(m) == ["Gemm"]
    m, r = run_rule(RULE, with_weights(text.replace("(t, scale", "<is_test = 1> (t, scale"), 6,
                                       **stats(6, w=(5, 6), c=(6,))), shapes=False, valid=False)
    assert not r.modified and r.stats["near_misses"] == []


def test_torch_linear_batchnorm1d_export():
    torch = pytest.importorskip("torch")
    import io

    import onnx

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.BatchNorm1d(6))
    net[1].running_mean.uniform_(-1, 1)
    net[1].running_var.uniform_(0.5, 2)
    net.eval()
    buf = io.BytesIO()
    torch.onnx.export(net, torch.randn(4, 5), buf, dynamo=False, opset_version=17,
                      training=torch.onnx.TrainingMode.PRESERVE)
    proto = onnx.load_from_string(buf.getvalue())
    assert [n.op_type for n in proto.graph.node] == ["Gemm", "BatchNormalization"]
    m, _ = fused(proto)
    assert ops(m) == ["Gemm"]


def test_torch_levit_linear_norm_on_tokens():
    # timm's LeViT LinearNorm: Linear without bias, BatchNorm1d over the flattened tokens
    torch = pytest.importorskip("torch")
    import io

    import onnx

    import pyonnxopt

    class LinearNorm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear, self.bn = torch.nn.Linear(8, 12, bias=False), torch.nn.BatchNorm1d(12)
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)

        def forward(self, x):
            x = self.linear(x)
            return self.bn(x.flatten(0, 1)).reshape_as(x)

    torch.manual_seed(0)
    buf = io.BytesIO()
    torch.onnx.export(LinearNorm().eval(), torch.randn(2, 5, 8), buf, dynamo=False, opset_version=17)
    proto = onnx.load_from_string(buf.getvalue())
    assert "BatchNormalization" in [n.op_type for n in proto.graph.node]
    model, report = pyonnxopt.optimize(proto)
    assert [n.op_type for n in model.graph.nodes] == ["MatMul", "Add"]
    assert report["check"]["first_mismatch"] is None
