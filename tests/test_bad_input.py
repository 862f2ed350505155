"""Malformed and hostile input: every case is refused with `ModelError` whose
message names the file ("<bytes>" for bytes), the tensor or node where it is
known, and what is wrong; nothing crashes, hangs or allocates by a size the
input claims. Also: saving never leaves a half-written file behind.

Models are built with onnx.helper; cases protobuf itself cannot express
(wrong wire types, broken varints, raw TypeProto bytes) with the small
wire-format encoder below.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import pyonnxopt
from pyonnxopt import ModelError

F = TensorProto.FLOAT


# ---------------------------------------------------------------- wire format


def varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tag(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def ld(field: int, payload) -> bytes:
    """A length-delimited field."""
    if isinstance(payload, str):
        payload = payload.encode()
    return tag(field, 2) + varint(len(payload)) + payload


def vi(field: int, v: int) -> bytes:
    """A varint field."""
    return tag(field, 0) + varint(v)


def node_bytes(op, inputs, outputs, name="", attrs=()) -> bytes:
    b = b"".join(ld(1, i) for i in inputs) + b"".join(ld(2, o) for o in outputs)
    b += ld(3, name) + ld(4, op)
    return b + b"".join(ld(5, a) for a in attrs)


def graph_bytes(nodes, name, outputs, inputs=()) -> bytes:
    b = b"".join(ld(1, n) for n in nodes) + ld(2, name)
    b += b"".join(ld(11, ld(1, i)) for i in inputs)
    return b + b"".join(ld(12, ld(1, o)) for o in outputs)


def model_bytes(graph: bytes) -> bytes:
    return vi(1, 8) + ld(7, graph) + ld(8, ld(1, "") + vi(2, 17))


def graph_attr(name: str, graph: bytes) -> bytes:
    return ld(1, name) + ld(6, graph) + vi(20, 5)  # type: GRAPH


# ---------------------------------------------------------------- models


def tiny_model(nodes=None, inputs=None, outputs=None, initializers=(), name="g") -> onnx.ModelProto:
    nodes = nodes if nodes is not None else [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    inputs = inputs if inputs is not None else [helper.make_tensor_value_info("x", F, [3])]
    outputs = outputs if outputs is not None else [helper.make_tensor_value_info("y", F, [3])]
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def model_with_initializer(tensor: TensorProto) -> onnx.ModelProto:
    node = helper.make_node("Add", ["x", tensor.name], ["y"], name="add")
    return tiny_model(nodes=[node], initializers=[tensor])


def external_tensor(name="w", location="w.bin", offset=None, length=None, dims=(3,)) -> TensorProto:
    t = TensorProto(name=name, data_type=F, dims=list(dims))
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            e = t.external_data.add()
            e.key, e.value = key, str(value)
    return t


def write_model(path, model: onnx.ModelProto) -> str:
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return str(path)


WEIGHTS = np.array([1.0, 2.0, 3.0], dtype=np.float32)


@pytest.fixture
def model_dir(tmp_path):
    """A folder `m/` holding w.bin (12 bytes of float32 weights), and a
    sibling `outside.bin` holding the same bytes."""
    d = tmp_path / "m"
    d.mkdir()
    (d / "w.bin").write_bytes(WEIGHTS.tobytes())
    (tmp_path / "outside.bin").write_bytes(WEIGHTS.tobytes())
    return d


def run_isolated(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter, so a hang or a crash fails the
    test instead of the test run. The limit leaves room for the interpreter's
    start and imports on 2 busy cores (3-4 s beside one other job)."""
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung for more than {timeout} s")


# ---------------------------------------------------------------- files and paths


def test_empty_file(tmp_path):
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(ModelError, match=r"empty\.onnx.*empty"):
        pyonnxopt.load(path)


def test_empty_bytes():
    with pytest.raises(ModelError, match=r"<bytes>.*empty"):
        pyonnxopt.load(b"")


def test_path_that_does_not_exist(tmp_path):
    with pytest.raises(ModelError, match=r"nope\.onnx.*(No such file|cannot open)"):
        pyonnxopt.load(tmp_path / "nope.onnx")


def test_folder_as_path(tmp_path):
    with pytest.raises(ModelError, match=re.escape(str(tmp_path)) + r".*folder"):
        pyonnxopt.load(tmp_path)


def test_fifo_as_path_is_refused_without_hanging(tmp_path):
    # A named pipe is not a model file; open(O_RDONLY) on it blocks until a
    # writer appears, so the loader must refuse it before opening it that way.
    fifo = tmp_path / "pipe.onnx"
    os.mkfifo(fifo)
    r = run_isolated(
        f"""
        import pyonnxopt
        try:
            pyonnxopt.load({str(fifo)!r})
        except pyonnxopt.ModelError as e:
            print("ModelError:", e)
        """
    )
    assert r.returncode == 0, r.stderr
    assert "ModelError:" in r.stdout and "pipe.onnx" in r.stdout


def test_path_with_a_nul_byte(tmp_path):
    # open(2) stops at the NUL: "model.onnx\0.bak" must not load model.onnx.
    path = write_model(tmp_path / "model.onnx", tiny_model())
    with pytest.raises(ModelError, match=r"model\.onnx.*(NUL|null)"):
        pyonnxopt.load(path + "\0.bak")


# ---------------------------------------------------------------- broken bytes


def _full_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32), "w")
    return tiny_model(
        nodes=[helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        inputs=[helper.make_tensor_value_info("x", F, [6])],
        outputs=[helper.make_tensor_value_info("y", F, [6])],
        initializers=[w],
    )


@pytest.mark.parametrize("fraction", [0.1, 0.25, 0.5, 0.75, 0.9, 0.99])
def test_truncated_file(tmp_path, fraction):
    full = _full_model()
    data = full.SerializeToString()
    graph = full.graph.SerializeToString()
    start = data.index(graph)  # cut inside the graph field: never a valid prefix
    cut = start + max(1, int(len(graph) * fraction))
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[:cut])
    with pytest.raises(ModelError, match=r"cut\.onnx: not a valid ONNX model: .*(runs past the end|truncated).* at byte \d+"):
        pyonnxopt.load(path)


def test_every_prefix_loads_or_raises_model_error():
    data = _full_model().SerializeToString()
    for n in range(len(data)):
        try:
            pyonnxopt.load(data[:n])
        except ModelError:
            pass


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_random_bytes(seed):
    data = random.Random(seed).randbytes(4096)
    with pytest.raises(ModelError, match=r"<bytes>: not a valid ONNX model: .* at byte \d+"):
        pyonnxopt.load(data)


def test_many_random_inputs_load_or_raise_model_error():
    rng = random.Random(1234)
    for _ in range(500):
        try:
            pyonnxopt.load(rng.randbytes(rng.randrange(1, 300)))
        except ModelError:
            pass


def test_graph_encoded_as_varint():
    with pytest.raises(ModelError, match=r"<bytes>: .*field 7 has wire type 0, expected length-delimited at byte 3"):
        pyonnxopt.load(vi(1, 8) + vi(7, 5))


def test_ir_version_encoded_as_bytes():
    with pytest.raises(ModelError, match=r"field 1 has wire type 2, expected varint"):
        pyonnxopt.load(ld(1, "8"))


def test_tensor_name_encoded_as_varint():
    tensor = vi(1, 3) + vi(2, F) + vi(8, 7)  # dims, data_type, name as varint
    graph = graph_bytes([node_bytes("Relu", ["x"], ["y"], "relu")], "g", ["y"], ["x"]) + ld(5, tensor)
    with pytest.raises(ModelError, match=r"<bytes>: .*field 8 has wire type 0, expected length-delimited"):
        pyonnxopt.load(model_bytes(graph))


def test_node_op_type_encoded_as_fixed32():
    node = ld(1, "x") + ld(2, "y") + tag(4, 5) + b"Relu"
    with pytest.raises(ModelError, match=r"field 4 has wire type 5, expected length-delimited"):
        pyonnxopt.load(model_bytes(graph_bytes([node], "g", ["y"], ["x"])))


@pytest.mark.parametrize("wire", [6, 7])
def test_unsupported_wire_types(wire):
    with pytest.raises(ModelError, match=rf"unsupported wire type {wire}"):
        pyonnxopt.load(vi(1, 8) + tag(9, wire) + b"\x00" * 8)


def test_group_that_is_never_closed():
    # Groups (wire types 3/4) are deprecated but legal for unknown fields.
    with pytest.raises(ModelError, match=r"group 9 is not closed"):
        pyonnxopt.load(vi(1, 8) + tag(9, 3) + vi(1, 5))


def test_group_end_without_start():
    with pytest.raises(ModelError, match=r"end of a group that was not opened"):
        pyonnxopt.load(vi(1, 8) + tag(9, 4))


def test_varint_that_never_ends():
    with pytest.raises(ModelError, match=r"<bytes>: not a valid ONNX model: varint longer than 10 bytes"):
        pyonnxopt.load(vi(1, 8) + tag(5, 0) + b"\xff" * 64)


def test_varint_cut_by_end_of_file():
    with pytest.raises(ModelError, match=r"<bytes>: not a valid ONNX model: truncated varint at byte 6"):
        pyonnxopt.load(vi(1, 8) + tag(5, 0) + b"\xff" * 3)


def test_varint_that_never_ends_inside_a_node():
    node = ld(1, "x") + tag(15, 0) + b"\xff" * 5  # an unknown field: skipped, so read to its end
    with pytest.raises(ModelError, match=r"<bytes>: not a valid ONNX model: truncated varint"):
        pyonnxopt.load(model_bytes(graph_bytes([node], "g", [])))


def test_length_prefix_past_the_end():
    with pytest.raises(ModelError, match=r"<bytes>: not a valid ONNX model: length 1000 runs past the end of its message at byte 3"):
        pyonnxopt.load(tag(7, 2) + varint(1000) + b"abc")


def test_huge_length_prefix_is_not_allocated():
    with pytest.raises(ModelError, match=rf"length {2**62} runs past the end"):
        pyonnxopt.load(vi(1, 8) + tag(2, 2) + varint(2**62) + b"x")


def test_length_prefix_past_the_end_of_the_enclosing_message():
    # The node's own length is fine for the file but not for the graph around it.
    graph = ld(1, ld(4, "Relu"))[:-1]
    data = vi(1, 8) + ld(7, graph) + ld(8, ld(1, "") + vi(2, 17))
    with pytest.raises(ModelError, match=r"runs past the end of its message"):
        pyonnxopt.load(data)


def test_packed_floats_not_a_multiple_of_four():
    tensor = vi(1, 1) + vi(2, F) + ld(4, b"\x00" * 5) + ld(8, "w")
    graph = graph_bytes([node_bytes("Relu", ["w"], ["y"], "relu")], "g", ["y"]) + ld(5, tensor)
    with pytest.raises(ModelError, match=r"packed field 4 length is not a multiple of 4"):
        pyonnxopt.load(model_bytes(graph))


# ---------------------------------------------------------------- tensors


def test_negative_dims():
    t = TensorProto(name="w", data_type=F, dims=[-1, 3], raw_data=b"")
    with pytest.raises(ModelError, match=r"<bytes>: tensor 'w': negative dimension -1"):
        pyonnxopt.load(model_with_initializer(t))


def test_dims_whose_product_overflows():
    t = TensorProto(name="w", data_type=F, dims=[2**40, 2**40], raw_data=b"\x00" * 4)
    with pytest.raises(ModelError, match=r"tensor 'w': dimensions multiply past 2\^62"):
        pyonnxopt.load(model_with_initializer(t))


def test_dims_whose_product_wraps_around_64_bits():
    # 2**32 * 2**32 is 0 modulo 2**64: a wrapping multiply would accept it.
    t = TensorProto(name="w", data_type=F, dims=[2**32, 2**32], raw_data=b"")
    with pytest.raises(ModelError, match=r"tensor 'w': dimensions multiply past"):
        pyonnxopt.load(model_with_initializer(t))


def test_raw_data_shorter_than_dims():
    t = TensorProto(name="w", data_type=F, dims=[3], raw_data=b"\x00" * 8)
    with pytest.raises(ModelError, match=r"tensor 'w': raw_data has 8 bytes, but float32 dims need 12"):
        pyonnxopt.load(model_with_initializer(t))


def test_raw_data_longer_than_dims():
    t = TensorProto(name="w", data_type=TensorProto.INT64, dims=[1], raw_data=b"\x00" * 9)
    with pytest.raises(ModelError, match=r"tensor 'w': raw_data has 9 bytes, but int64 dims need 8"):
        pyonnxopt.load(model_with_initializer(t))


def test_float_data_count_not_matching_dims():
    t = TensorProto(name="w", data_type=F, dims=[4], float_data=[1.0, 2.0, 3.0])
    with pytest.raises(ModelError, match=r"tensor 'w': float_data has 3 elements, but the dims need 4"):
        pyonnxopt.load(model_with_initializer(t))


def test_attribute_tensor_with_bad_raw_data():
    value = TensorProto(name="cv", data_type=F, dims=[2], raw_data=b"\x00")
    node = helper.make_node("Constant", [], ["y"], name="const", value=value)
    with pytest.raises(ModelError, match=r"tensor 'cv': raw_data has 1 bytes"):
        pyonnxopt.load(tiny_model(nodes=[node], inputs=[]))


def test_huge_dims_with_tiny_raw_data_fail_fast():
    # 2**40 float32 would be 4 TiB: nothing may be sized by the dims (an
    # attempt would end in MemoryError, not this ModelError).
    t = TensorProto(name="w", data_type=F, dims=[2**40], raw_data=b"\x00" * 4)
    with pytest.raises(ModelError, match=r"tensor 'w': raw_data has 4 bytes, but float32 dims need 4398046511104"):
        pyonnxopt.load(model_with_initializer(t))


def test_huge_dims_with_tiny_float_data_fail_fast():
    t = TensorProto(name="w", data_type=F, dims=[2**40], float_data=[1.0])
    with pytest.raises(ModelError, match=r"tensor 'w': float_data has 1 elements"):
        pyonnxopt.load(model_with_initializer(t))


@pytest.mark.parametrize(
    "dtype, dims",
    [(TensorProto.FLOAT, [2**61]), (TensorProto.INT64, [2**60, 2]), (TensorProto.COMPLEX128, [2**59])],
    ids=["float32", "int64", "complex128"],
)
def test_dims_whose_byte_size_overflows_int64(dtype, dims):
    # Fewer than 2**62 elements, but more than 2**63 bytes: the byte count
    # cannot be computed, which must not mean "no size check".
    t = TensorProto(name="w", data_type=dtype, dims=dims, raw_data=b"\x00" * 16)
    with pytest.raises(ModelError, match=r"tensor 'w'"):
        pyonnxopt.load(model_with_initializer(t))


def test_huge_packed_count_claim_is_bounded_by_payload():
    # A packed int64_data of 3 bytes cannot hold 2**40 elements.
    tensor = vi(1, 2**40) + vi(2, TensorProto.INT64) + ld(7, b"\x01\x02\x03") + ld(8, "w")
    graph = graph_bytes([node_bytes("Relu", ["w"], ["y"], "relu")], "g", ["y"]) + ld(5, tensor)
    with pytest.raises(ModelError, match=r"tensor 'w': int64_data has 3 elements"):
        pyonnxopt.load(model_bytes(graph))


# ---------------------------------------------------------------- external data


def test_external_data_missing_file(model_dir):
    path = write_model(model_dir / "model.onnx", model_with_initializer(external_tensor(location="missing.bin")))
    with pytest.raises(ModelError, match=r"model\.onnx: tensor 'w' external data: cannot open 'missing\.bin'"):
        pyonnxopt.load(path)


def test_external_data_offset_past_end(model_dir):
    path = write_model(model_dir / "model.onnx", model_with_initializer(external_tensor(offset=100)))
    with pytest.raises(ModelError, match=r"model\.onnx: tensor 'w' external data: offset 100 is past the end of 'w\.bin' \(12 bytes\)"):
        pyonnxopt.load(path)


def test_external_data_length_past_end(model_dir):
    path = write_model(model_dir / "model.onnx", model_with_initializer(external_tensor(offset=4, length=12)))
    with pytest.raises(ModelError, match=r"tensor 'w' external data: bytes 4\.\.16 run past the end of 'w\.bin' \(12 bytes\)"):
        pyonnxopt.load(path)


def test_external_data_huge_length_does_not_overflow(model_dir):
    path = write_model(model_dir / "model.onnx", model_with_initializer(external_tensor(offset=4, length=2**64 - 1)))
    with pytest.raises(ModelError, match=r"tensor 'w' external data: .*run past the end of 'w\.bin'"):
        pyonnxopt.load(path)


def test_external_data_length_not_matching_dims(model_dir):
    path = write_model(model_dir / "model.onnx", model_with_initializer(external_tensor(length=8)))
    with pytest.raises(ModelError, match=r"tensor 'w' external data: has 8 bytes, but float32 dims need 12"):
        pyonnxopt.load(path)


@pytest.mark.parametrize("offset", ["-4", "abc", "99999999999999999999999"])
def test_external_data_offset_not_a_number(model_dir, offset):
    path = write_model(model_dir / "model.onnx", model_with_initializer(external_tensor(offset=offset)))
    with pytest.raises(ModelError, match=r"tensor 'w' external data: offset '.*' is not a non-negative integer"):
        pyonnxopt.load(path)


def test_external_data_without_location(model_dir):
    t = external_tensor()
    del t.external_data[:]
    path = write_model(model_dir / "model.onnx", model_with_initializer(t))
    with pytest.raises(ModelError, match=r"tensor 'w' external data: no 'location' entry"):
        pyonnxopt.load(path)


def test_external_data_location_with_a_nul_byte(model_dir):
    path = write_model(model_dir / "model.onnx", model_with_initializer(external_tensor(location="w.bin\0.txt")))
    with pytest.raises(ModelError, match=r"tensor 'w' external data: location contains a NUL byte"):
        pyonnxopt.load(path)


def test_external_data_base_dir_that_does_not_exist(tmp_path):
    data = model_with_initializer(external_tensor()).SerializeToString()
    with pytest.raises(ModelError, match=r"<bytes>: .*'w\.bin'|model folder"):
        pyonnxopt.load(data, base_dir=tmp_path / "missing")


def test_external_data_location_is_a_folder(model_dir):
    (model_dir / "sub").mkdir()
    path = write_model(model_dir / "model.onnx", model_with_initializer(external_tensor(location="sub")))
    with pytest.raises(ModelError, match=r"tensor 'w' external data: cannot open 'sub'"):
        pyonnxopt.load(path)


def test_external_data_location_is_a_fifo_refused_without_hanging(model_dir):
    os.mkfifo(model_dir / "pipe.bin")
    path = write_model(model_dir / "model.onnx", model_with_initializer(external_tensor(location="pipe.bin")))
    r = run_isolated(
        f"""
        import pyonnxopt
        try:
            pyonnxopt.load({path!r})
        except pyonnxopt.ModelError as e:
            print("ModelError:", e)
        """
    )
    assert r.returncode == 0, r.stderr
    assert "ModelError:" in r.stdout and "pipe.bin" in r.stdout


def test_external_data_dot_dot(model_dir):
    path = write_model(model_dir / "model.onnx", model_with_initializer(external_tensor(location="../outside.bin")))
    with pytest.raises(ModelError, match=r"tensor 'w' external data: location '\.\./outside\.bin' resolves outside the model's folder"):
        pyonnxopt.load(path)


def test_external_data_dot_dot_to_missing_file(model_dir):
    path = write_model(model_dir / "model.onnx", model_with_initializer(external_tensor(location="../nothing.bin")))
    with pytest.raises(ModelError, match=r"tensor 'w' external data: .*'\.\./nothing\.bin'"):
        pyonnxopt.load(path)


def test_external_data_absolute_path(model_dir):
    outside = str(model_dir.parent / "outside.bin")
    path = write_model(model_dir / "model.onnx", model_with_initializer(external_tensor(location=outside)))
    with pytest.raises(ModelError, match=r"tensor 'w' external data: location '.*outside\.bin' is an absolute path"):
        pyonnxopt.load(path)


def test_external_data_symlink_pointing_outside(model_dir):
    os.symlink(model_dir.parent / "outside.bin", model_dir / "link.bin")
    path = write_model(model_dir / "model.onnx", model_with_initializer(external_tensor(location="link.bin")))
    with pytest.raises(ModelError, match=r"tensor 'w' external data: location 'link\.bin' resolves outside the model's folder"):
        pyonnxopt.load(path)


def test_external_data_symlinked_folder_pointing_outside(model_dir):
    os.symlink(model_dir.parent, model_dir / "up")
    path = write_model(model_dir / "model.onnx", model_with_initializer(external_tensor(location="up/outside.bin")))
    with pytest.raises(ModelError, match=r"resolves outside the model's folder"):
        pyonnxopt.load(path)


def test_external_data_symlink_inside_is_allowed(model_dir):
    os.symlink("w.bin", model_dir / "link.bin")
    path = write_model(model_dir / "model.onnx", model_with_initializer(external_tensor(location="link.bin")))
    np.testing.assert_array_equal(pyonnxopt.load(path).initializers()[0].numpy(), WEIGHTS)


@pytest.mark.parametrize("kind", ["dot_dot", "absolute", "symlink"])
def test_external_data_outside_allowed_when_asked(model_dir, kind):
    outside = model_dir.parent / "outside.bin"
    if kind == "symlink":
        os.symlink(outside, model_dir / "link.bin")
    location = {"dot_dot": "../outside.bin", "absolute": str(outside), "symlink": "link.bin"}[kind]
    path = write_model(model_dir / "model.onnx", model_with_initializer(external_tensor(location=location)))
    with pytest.raises(ModelError, match=r"allow_external_outside=True"):
        pyonnxopt.load(path)
    model = pyonnxopt.load(path, allow_external_outside=True)
    np.testing.assert_array_equal(model.initializers()[0].numpy(), WEIGHTS)


def test_bytes_with_external_data_and_no_base_dir(model_dir):
    data = model_with_initializer(external_tensor()).SerializeToString()
    with pytest.raises(ModelError, match=r"<bytes>: tensor 'w' external data: the model was loaded from bytes; pass base_dir"):
        pyonnxopt.load(data)
    model = pyonnxopt.load(data, base_dir=model_dir)
    np.testing.assert_array_equal(model.initializers()[0].numpy(), WEIGHTS)


def test_bytes_with_external_data_outside_base_dir(model_dir):
    data = model_with_initializer(external_tensor(location="../outside.bin")).SerializeToString()
    with pytest.raises(ModelError, match=r"<bytes>: tensor 'w' external data: location '\.\./outside\.bin' resolves outside"):
        pyonnxopt.load(data, base_dir=model_dir)


# ---------------------------------------------------------------- graph structure


def test_graph_cycle():
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="first"),
        helper.make_node("Relu", ["a"], ["b"], name="second"),
        helper.make_node("Identity", ["a"], ["y"], name="out"),
    ]
    with pytest.raises(ModelError, match=r"<bytes>: graph 'g' has a cycle through node '(first|second)'"):
        pyonnxopt.load(tiny_model(nodes=nodes))


def test_node_reading_its_own_output():
    nodes = [helper.make_node("Add", ["x", "y"], ["y"], name="self_loop")]
    with pytest.raises(ModelError, match=r"graph 'g' has a cycle through node 'self_loop' \(Add\)"):
        pyonnxopt.load(tiny_model(nodes=nodes))


def test_cycle_through_a_subgraph():
    # The then-branch reads 'y', which its own If node produces.
    then_g = helper.make_graph(
        [helper.make_node("Identity", ["y"], ["t"], name="reads_if_output")], "then", [], [helper.make_tensor_value_info("t", F, [3])]
    )
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e"], name="e")], "else", [], [helper.make_tensor_value_info("e", F, [3])])
    node = helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g)
    inputs = [helper.make_tensor_value_info("c", TensorProto.BOOL, []), helper.make_tensor_value_info("x", F, [3])]
    with pytest.raises(ModelError, match=r"graph 'g' has a cycle through node 'if' \(If\)"):
        pyonnxopt.load(tiny_model(nodes=[node], inputs=inputs))


def test_two_nodes_writing_the_same_name():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="a"), helper.make_node("Neg", ["x"], ["y"], name="b")]
    with pytest.raises(ModelError, match=r"<bytes>: graph 'g': output of node 'b' \(Neg\) 'y' is already defined by node 'a' \(Relu\)"):
        pyonnxopt.load(tiny_model(nodes=nodes))


def test_node_output_equal_to_graph_input():
    nodes = [helper.make_node("Relu", ["x"], ["x"], name="overwrites_input"), helper.make_node("Neg", ["x"], ["y"], name="n")]
    with pytest.raises(ModelError, match=r"output of node 'overwrites_input' \(Relu\) 'x' is already defined by a graph input"):
        pyonnxopt.load(tiny_model(nodes=nodes))


def test_node_output_equal_to_initializer():
    w = numpy_helper.from_array(WEIGHTS, "w")
    nodes = [helper.make_node("Relu", ["x"], ["w"], name="overwrites_w"), helper.make_node("Add", ["x", "w"], ["y"], name="add")]
    with pytest.raises(ModelError, match=r"output of node 'overwrites_w' \(Relu\) 'w' is already defined by an initializer"):
        pyonnxopt.load(tiny_model(nodes=nodes, initializers=[w]))


def test_duplicate_graph_input():
    inputs = [helper.make_tensor_value_info("x", F, [3])] * 2
    with pytest.raises(ModelError, match=r"graph 'g': input 'x' is already defined by a graph input"):
        pyonnxopt.load(tiny_model(inputs=inputs))


def test_node_reading_an_undefined_name():
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="add")]
    with pytest.raises(ModelError, match=r"<bytes>: graph 'g': node 'add' \(Add\) reads 'ghost', which no node, graph input or initializer defines"):
        pyonnxopt.load(tiny_model(nodes=nodes))


def test_graph_output_that_nothing_defines():
    outputs = [helper.make_tensor_value_info("y", F, [3]), helper.make_tensor_value_info("z", F, [3])]
    with pytest.raises(ModelError, match=r"graph 'g': output 'z' is not produced by any node, graph input or initializer"):
        pyonnxopt.load(tiny_model(outputs=outputs))


def test_subgraph_reading_an_undefined_name():
    then_g = helper.make_graph(
        [helper.make_node("Add", ["x", "ghost"], ["t"], name="then_add")], "then", [], [helper.make_tensor_value_info("t", F, [3])]
    )
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e"], name="e")], "else", [], [helper.make_tensor_value_info("e", F, [3])])
    node = helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g)
    inputs = [helper.make_tensor_value_info("c", TensorProto.BOOL, []), helper.make_tensor_value_info("x", F, [3])]
    with pytest.raises(ModelError, match=r"graph 'then': node 'then_add' \(Add\) reads 'ghost'"):
        pyonnxopt.load(tiny_model(nodes=[node], inputs=inputs))


def test_subgraph_cannot_read_a_sibling_branch():
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"], name="t")], "then", [], [helper.make_tensor_value_info("t", F, [3])])
    else_g = helper.make_graph([helper.make_node("Identity", ["t"], ["e"], name="e")], "else", [], [helper.make_tensor_value_info("e", F, [3])])
    node = helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g)
    inputs = [helper.make_tensor_value_info("c", TensorProto.BOOL, []), helper.make_tensor_value_info("x", F, [3])]
    with pytest.raises(ModelError, match=r"graph 'else': node 'e' \(Identity\) reads 't'"):
        pyonnxopt.load(tiny_model(nodes=[node], inputs=inputs))


def test_function_body_reading_an_undefined_name():
    fn = helper.make_function(
        "local", "Twice", ["a"], ["b"], [helper.make_node("Add", ["a", "ghost"], ["b"], name="fadd")], [helper.make_opsetid("", 18)]
    )
    model = tiny_model(nodes=[helper.make_node("Twice", ["x"], ["y"], domain="local", name="call")])
    model.functions.append(fn)
    with pytest.raises(ModelError, match=r"function 'Twice': node 'fadd' \(Add\) reads 'ghost'"):
        pyonnxopt.load(model)


def nested_ifs(depth: int) -> bytes:
    """`depth` If nodes, each in the then-branch of the one before, as raw
    bytes (protobuf's own parser refuses to read past ~33 levels)."""
    graph = graph_bytes([node_bytes("Identity", ["c"], ["out"], "leaf")], "leaf", ["out"])
    for level in range(depth):
        other = graph_bytes([node_bytes("Identity", ["c"], [f"e{level}"], f"else{level}")], f"else{level}", [f"e{level}"])
        attrs = [graph_attr("then_branch", graph), graph_attr("else_branch", other)]
        graph = graph_bytes([node_bytes("If", ["c"], [f"y{level}"], f"if{level}", attrs)], f"level{level}", [f"y{level}"])
    graph += ld(11, ld(1, "c"))
    return model_bytes(graph)


def test_nesting_within_the_limit_loads():
    model = pyonnxopt.load(nested_ifs(20))
    assert len(model.graphs()) == 1 + 2 * 20


@pytest.mark.parametrize("depth", [200, 1000])
def test_nesting_beyond_the_limit(depth):
    # In a fresh interpreter: a stack overflow would kill it, not this run.
    r = run_isolated(
        f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import pyonnxopt
        from test_bad_input import nested_ifs
        try:
            pyonnxopt.load(nested_ifs({depth}))
        except pyonnxopt.ModelError as e:
            print("ModelError:", e)
        """,
        timeout=60,
    )
    assert r.returncode == 0, f"exit code {r.returncode}: {r.stderr[-2000:]}"
    assert "ModelError: <bytes>: not a valid ONNX model: messages nested deeper than protobuf's limit of 100" in r.stdout


def test_nesting_that_loads_can_be_read_by_protobuf():
    # What pyonnxopt accepts (and writes back) should be readable by onnx:
    # protobuf stops at 100 nested *messages*, about 33 levels of If.
    data = nested_ifs(40)
    try:
        model = pyonnxopt.load(data)
    except ModelError:
        return
    onnx.ModelProto.FromString(model.to_bytes())


# ---------------------------------------------------------------- parsed as protobuf would


def _if_with_then_branch_twice() -> bytes:
    """An If whose then_branch attribute carries field 6 (g) twice, followed
    by an else branch. Protobuf merges repeated singular message fields."""
    then1 = graph_bytes([node_bytes("Identity", ["c"], ["t1"], "a1")], "then", ["t1"])
    then2 = graph_bytes([node_bytes("Neg", ["c"], ["t2"], "a2"), node_bytes("Abs", ["c"], ["t3"], "a3")], "then", ["t2"])
    els = graph_bytes([node_bytes("Identity", ["c"], ["e1"], "b1")], "else", ["e1"])
    attr_then = ld(1, "then_branch") + ld(6, then1) + ld(6, then2) + vi(20, 5)
    node = node_bytes("If", ["c"], ["y"], "if", [attr_then, graph_attr("else_branch", els)])
    return model_bytes(graph_bytes([node], "main", ["y"], ["c"]))


def _io(graph):
    return [(n.name, [v.name if v else "" for v in n.inputs], [v.name if v else "" for v in n.outputs]) for n in graph.nodes]


def test_repeated_subgraph_field_does_not_leak_names_into_other_nodes():
    # The replaced first then_branch must leave nothing behind that a later
    # node (allocated where its nodes were) picks up.
    model = pyonnxopt.load(_if_with_then_branch_twice())
    else_branch = model.graph.nodes[0].subgraphs[1]
    assert _io(else_branch) == [("b1", ["c"], ["e1"])]
    assert model.check_invariants() == []


def test_node_fields_after_its_subgraphs():
    # Protobuf fields may come in any order: here the If node's inputs and
    # outputs follow two attributes whose subgraphs hold many nodes. Run in
    # a fresh interpreter, since a dangling reference would crash it.
    r = run_isolated(
        f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import pyonnxopt
        from test_bad_input import graph_attr, graph_bytes, ld, model_bytes, node_bytes
        then = graph_bytes([node_bytes("Identity", ["c"], [f"t{{i}}"], f"a{{i}}") for i in range(200)], "then", ["t0"])
        els = graph_bytes([node_bytes("Identity", ["c"], [f"e{{i}}"], f"b{{i}}") for i in range(200)], "else", ["e0"])
        node = ld(5, graph_attr("then_branch", then)) + ld(5, graph_attr("else_branch", els))
        node += ld(1, "c") + ld(2, "y") + ld(3, "if") + ld(4, "If")
        model = pyonnxopt.load(model_bytes(graph_bytes([node], "main", ["y"], ["c"])))
        n = model.graph.nodes[0]
        print([v.name for v in n.inputs], [v.name for v in n.outputs], [len(g) for g in n.subgraphs])
        """
    )
    assert r.returncode == 0, f"exit code {r.returncode}: {r.stderr[-2000:]}"
    assert r.stdout.strip() == "['c'] ['y'] [200, 200]"


def test_repeated_subgraph_field_merges_like_protobuf():
    data = _if_with_then_branch_twice()
    expected = onnx.ModelProto.FromString(data).graph.node[0].attribute[0].g
    then_branch = pyonnxopt.load(data).graph.nodes[0].subgraphs[0]
    assert _io(then_branch) == [(n.name, list(n.input), list(n.output)) for n in expected.node]


def test_malformed_type_proto_is_a_model_error():
    # graph input 'x' whose TypeProto says it holds 5 bytes but holds 1
    graph = graph_bytes([node_bytes("Relu", ["x"], ["y"], "relu")], "g", ["y"]) + ld(11, ld(1, "x") + ld(2, b"\x0a\x05\x08"))
    with pytest.raises(ModelError, match=r"'x'|at byte"):
        model = pyonnxopt.load(model_bytes(graph))
        [v.type for v in model.graph.inputs]


def test_name_that_is_not_utf8_is_a_model_error():
    # The message quotes the bad name; it must still arrive as ModelError.
    node = ld(1, b"\x8c") + ld(2, "y") + ld(3, "relu") + ld(4, "Relu")
    with pytest.raises(ModelError, match=r"<bytes>: graph 'g': node 'relu' \(Relu\) reads"):
        pyonnxopt.load(model_bytes(graph_bytes([node], "g", ["y"], ["x"])))


def test_names_that_are_not_utf8_do_not_break_the_api():
    node = ld(1, "x") + ld(2, "y") + ld(3, b"\xffname") + ld(4, "Relu")
    try:
        model = pyonnxopt.load(model_bytes(graph_bytes([node], "g", ["y"], ["x"])))
    except ModelError:
        return  # refusing such names at load is fine too
    assert "name" in model.graph.nodes[0].name


# ---------------------------------------------------------------- saving


def test_save_into_a_missing_folder_creates_nothing(tmp_path):
    model = pyonnxopt.load(_full_model())
    target = tmp_path / "no" / "such" / "dir" / "out.onnx"
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(ModelError, match=r"cannot save .*out\.onnx: folder '.*dir' does not exist"):
        model.save(target)
    with pytest.raises(ModelError, match=r"does not exist"):
        model.save(target, external_data=True, size_threshold=0)
    assert sorted(os.listdir(tmp_path)) == before


def _two_weights(scale: float) -> onnx.ModelProto:
    w1 = numpy_helper.from_array(np.full(4096, scale, np.float32), "w1")
    w2 = numpy_helper.from_array(np.full(4096, -scale, np.float32), "w2")
    nodes = [helper.make_node("Add", ["x", "w1"], ["s"], name="a1"), helper.make_node("Add", ["s", "w2"], ["y"], name="a2")]
    io = dict(inputs=[helper.make_tensor_value_info("x", F, [4096])], outputs=[helper.make_tensor_value_info("y", F, [4096])])
    return tiny_model(nodes=nodes, initializers=[w1, w2], **io)


def test_failed_save_leaves_the_previous_files_intact(tmp_path):
    # A save that writes two data files and cannot put the second in place
    # (a folder has its name) must leave the earlier save readable: the
    # model and *all* its data files stay as they were, and no temporary.
    path = tmp_path / "out.onnx"
    pyonnxopt.load(_two_weights(1.0)).save(path, external_data=True)
    before = sorted(os.listdir(tmp_path))
    (tmp_path / "out.onnx.data.1").mkdir()
    with pytest.raises(ModelError, match=r"out\.onnx\.data\.1"):
        pyonnxopt.load(_two_weights(2.0)).save(path, external_data=True, max_file_size=20000)
    assert sorted(os.listdir(tmp_path)) == sorted(before + ["out.onnx.data.1"])
    old = pyonnxopt.load(path)
    np.testing.assert_array_equal(old.graph.value("w1").initializer.numpy(), np.full(4096, 1.0, np.float32))
    np.testing.assert_array_equal(old.graph.value("w2").initializer.numpy(), np.full(4096, -1.0, np.float32))


def test_save_to_a_folder_is_refused(tmp_path):
    model = pyonnxopt.load(_full_model())
    with pytest.raises(ModelError, match=r"it is a folder"):
        model.save(tmp_path)


def test_save_over_the_input_path(tmp_path):
    original = _full_model()
    path = tmp_path / "model.onnx"
    path.write_bytes(original.SerializeToString())
    model = pyonnxopt.load(path)
    before = model.initializers()[0].numpy()
    model.save(path)
    # the loaded model still reads its (replaced) source
    np.testing.assert_array_equal(model.initializers()[0].numpy(), before)
    reloaded = pyonnxopt.load(path)
    assert reloaded.to_bytes() == model.to_bytes()
    assert onnx.ModelProto.FromString(path.read_bytes()) == original
    assert sorted(os.listdir(tmp_path)) == ["model.onnx"]  # no temporary left


def test_save_over_the_input_path_with_external_data_then_save_again(tmp_path):
    # Data file with the tensors at offsets a fresh save will not reuse, and
    # big enough (>= 64 KiB) to be copied file-to-file by the writer.
    w1 = np.arange(20000, dtype=np.float32)
    w2 = -np.arange(20000, dtype=np.float32)
    with open(tmp_path / "model.onnx.data", "wb") as f:
        f.write(b"\x01" * 100 + w1.tobytes() + w2.tobytes())
    t1 = external_tensor("w1", "model.onnx.data", 100, w1.nbytes, dims=[20000])
    t2 = external_tensor("w2", "model.onnx.data", 100 + w1.nbytes, w2.nbytes, dims=[20000])
    nodes = [helper.make_node("Add", ["x", "w1"], ["s"], name="a1"), helper.make_node("Add", ["s", "w2"], ["y"], name="a2")]
    io = dict(inputs=[helper.make_tensor_value_info("x", F, [20000])], outputs=[helper.make_tensor_value_info("y", F, [20000])])
    path = write_model(tmp_path / "model.onnx", tiny_model(nodes=nodes, initializers=[t1, t2], **io))

    model = pyonnxopt.load(path)
    model.save(path, external_data=True)  # rewrites model.onnx.data in place
    reloaded = pyonnxopt.load(path)
    np.testing.assert_array_equal(reloaded.graph.value("w1").initializer.numpy(), w1)
    np.testing.assert_array_equal(reloaded.graph.value("w2").initializer.numpy(), w2)

    # The model in memory still holds the old bytes: saving it again must
    # write them, not whatever now lies at the old offsets of the new file.
    model.save(tmp_path / "copy.onnx", external_data=False)
    copy = pyonnxopt.load(tmp_path / "copy.onnx")
    np.testing.assert_array_equal(copy.graph.value("w1").initializer.numpy(), w1)
    np.testing.assert_array_equal(copy.graph.value("w2").initializer.numpy(), w2)


def test_a_long_dependency_error_keeps_its_reason_at_the_end():
    from pyonnxopt.errors import FIRST_LINE_LIMIT, first_line

    why = "Status Message: Input 'key' and 'value' shall have same shape"
    line = first_line(RuntimeError("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : " + "x" * 400 + why + "\nsecond"))
    assert line.startswith("[ONNXRuntimeError]") and line.endswith(why) and len(line) <= FIRST_LINE_LIMIT
    assert first_line(ValueError("short\nmore")) == "short" and first_line(KeyError()) == "KeyError"
