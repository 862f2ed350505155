"""torchvision-like blocks exported with torch through the whole default
pipeline with the onnxruntime check on: the BatchNormalization and Pad
nodes fold away and the outputs stay."""

import io

import pytest

import pyonnxopt

torch = pytest.importorskip("torch")


def export(net, *shape):
    import onnx

    torch.manual_seed(0)
    for m in net.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):  # statistics as after training
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
            m.weight.data.uniform_(0.5, 2)
            m.bias.data.uniform_(-1, 1)
    buf = io.BytesIO()
    # PRESERVE keeps BatchNormalization in the export (EVAL has torch fold it itself).
    torch.onnx.export(net.eval(), torch.randn(*shape), buf, dynamo=False, opset_version=17,
                      training=torch.onnx.TrainingMode.PRESERVE)
    return onnx.load_from_string(buf.getvalue())


def blocks():
    nn = torch.nn
    torch.manual_seed(0)
    yield ("conv_bn_relu", nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU()),
           (2, 3, 16, 16), ["Conv", "Relu"])
    yield ("conv_transpose_bn_groups", nn.Sequential(nn.ConvTranspose2d(8, 6, 4, stride=2, padding=1, groups=2), nn.BatchNorm2d(6)),
           (1, 8, 5, 5), ["ConvTranspose"])
    yield "linear_bn1d", nn.Sequential(nn.Linear(10, 7), nn.BatchNorm1d(7), nn.ReLU()), (4, 10), ["Gemm", "Relu"]
    yield ("zero_pad_conv_bn", nn.Sequential(nn.ZeroPad2d((1, 0, 2, 1)), nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)),
           (1, 3, 9, 9), ["Conv"])


@pytest.mark.parametrize("name, net, shape, expected", list(blocks()), ids=[b[0] for b in blocks()])
def test_block_folds_and_keeps_its_outputs(name, net, shape, expected):
    proto = export(net, *shape)
    before = [n.op_type for n in proto.graph.node]
    assert "BatchNormalization" in before or "Pad" in before
    model, report = pyonnxopt.optimize(proto, check_outputs=True)
    assert [n.op_type for n in model.nodes()] == expected
    assert report["check"]["first_mismatch"] is None and report["check"]["max_abs_diff"] < 1e-5
    assert [v.name for v in model.graph.outputs] == [o.name for o in proto.graph.output]
