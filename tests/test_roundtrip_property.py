"""Differential property: pyonnxopt's reader and writer agree with protobuf's.

Random ModelProtos built with onnx.helper cover every message and field of
onnx.proto: attributes of every type (refs too), subgraphs reading outer
values, local functions, tensors of every data type (raw and typed fields,
strings), sparse tensors, sequence/map/optional types, symbolic and fixed
dims, metadata, training info, device configurations, fields set to their
default values (proto2 presence) and unknown fields. The graphs are not
meant to pass onnx.checker, only pyonnxopt's use-def rules: every name read
is defined (outer scopes included), none is defined twice, no cycles, and
raw data has the size its dims and type need.

Properties: `load(bytes).to_bytes()` parses to the same ModelProto as
`bytes`; and the same through external data, in every save mode.
"""

import math
import os
import struct
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from onnx import AttributeProto, TensorProto, helper
from onnx.external_data_helper import convert_model_to_external_data, set_external_data

import pyonnxopt

DT = TensorProto
DTYPES = [v for _, v in DT.DataType.items() if v != DT.UNDEFINED]
BITS = {DT.UINT4: 4, DT.INT4: 4, DT.FLOAT4E2M1: 4, DT.UINT2: 2, DT.INT2: 2, DT.FLOAT6E2M3: 6, DT.FLOAT6E3M2: 6}
INT_RANGES = {
    DT.UINT8: (0, 2**8 - 1), DT.INT8: (-(2**7), 2**7 - 1), DT.UINT16: (0, 2**16 - 1), DT.INT16: (-(2**15), 2**15 - 1),
    DT.INT32: (-(2**31), 2**31 - 1), DT.INT64: (-(2**63), 2**63 - 1),
    DT.UINT32: (0, 2**32 - 1), DT.UINT64: (0, 2**64 - 1),
    DT.UINT4: (0, 15), DT.INT4: (-8, 7), DT.UINT2: (0, 3), DT.INT2: (-2, 1),
}
# Typed (non-raw) floats must not be NaN: NaN != NaN would fail the equality
# whatever pyonnxopt writes. Raw bytes and int32_data bit patterns may be NaN.
FLOAT32 = st.floats(allow_nan=False, width=32)
FLOAT64 = st.floats(allow_nan=False)
NARROW_FLOAT = st.floats(-1000, 1000, width=32)  # converted by make_tensor to float16, float8, ...
INT64 = st.integers(-(2**63), 2**63 - 1)
UINT64 = st.integers(0, 2**64 - 1)
TEXT = st.text(max_size=6)
BYTES = st.binary(max_size=6)
OPT_TEXT = st.one_of(st.none(), st.just(""), TEXT)  # absent, explicitly empty (proto2 presence), or text
DIM = st.one_of(st.none(), st.integers(0, 2**40), TEXT)  # unknown, fixed or symbolic
PERCENT = st.integers(0, 99)
# Unused field numbers of every onnx.proto message; protobuf keeps them as unknown fields.
UNKNOWN_FIELD_NUMBERS = [100, 999, 1000, 12345, 2**29 - 1]
ATTRIBUTE_TYPES = list(AttributeProto.AttributeType.values())
LIST_TYPES = [AttributeProto.FLOATS, AttributeProto.INTS, AttributeProto.STRINGS, AttributeProto.TENSORS,
              AttributeProto.GRAPHS, AttributeProto.SPARSE_TENSORS, AttributeProto.TYPE_PROTOS]

MAX_DEPTH = 2  # graphs inside attributes inside graphs...


def _varint(n):
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _tag(number, wire_type):
    return _varint(number << 3 | wire_type)


def _len_field(number, payload):
    return _tag(number, 2) + _varint(len(payload)) + payload


class _Builder:
    """Draws one random model; names come from a counter, so they are unique.

    Strategies are module constants or cached `st.integers`: building new
    strategy objects for every draw costs more than the test itself."""

    def __init__(self, draw, graph_defaults_in_functions):
        self.draw = draw
        self.count = 0
        self.graph_defaults_in_functions = graph_defaults_in_functions

    # ---- small pieces
    def upto(self, hi, lo=0):
        return self.draw(st.integers(lo, hi))

    def pick(self, seq):
        return seq[self.upto(len(seq) - 1)]

    def some(self, seq, most):
        return [self.pick(seq) for _ in range(self.upto(most))] if seq else []

    def chance(self, percent):
        return self.draw(PERCENT) < percent

    def name(self):
        self.count += 1
        return f"{self.draw(TEXT) if self.chance(15) else 'v'}#{self.count}"

    def set_opt(self, msg, field, strategy=OPT_TEXT):
        value = self.draw(strategy)
        if value is not None:
            setattr(msg, field, value)

    def entries(self, repeated):
        for _ in range(self.upto(2)):
            e = repeated.add()
            self.set_opt(e, "key")
            self.set_opt(e, "value")

    # ---- tensors
    def values(self, dtype, n):
        """n values for make_tensor(raw=False)."""
        draw = self.draw
        if dtype == DT.STRING:
            return [draw(BYTES) for _ in range(n)]
        np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
        if dtype == DT.BOOL:
            return np.array([draw(st.booleans()) for _ in range(n)], dtype=bool)
        if dtype in INT_RANGES:
            lo, hi = INT_RANGES[dtype]
            ints = [self.upto(hi, lo) for _ in range(n)]
            return np.array(ints, dtype=np.int64 if lo < 0 else np.uint64).astype(np_dtype)
        if dtype in (DT.COMPLEX64, DT.COMPLEX128):
            part = FLOAT32 if dtype == DT.COMPLEX64 else FLOAT64
            return np.array([complex(draw(part), draw(part)) for _ in range(n)], dtype=np_dtype)
        if dtype in (DT.FLOAT, DT.DOUBLE):
            return np.array([draw(FLOAT32 if dtype == DT.FLOAT else FLOAT64) for _ in range(n)], dtype=np_dtype)
        if dtype == DT.FLOAT8E8M0:  # exponent only: powers of two
            return np.array([2.0 ** self.upto(20, -20) for _ in range(n)], dtype=np.float32)
        return np.array([draw(NARROW_FLOAT) for _ in range(n)], dtype=np.float32)

    def tensor(self, name=None, dtype=None, dims=None):
        """A tensor of any type: raw_data or the typed field, plus optional fields."""
        dtype = dtype if dtype is not None else self.pick(DTYPES)
        dims = dims if dims is not None else [self.upto(2) for _ in range(self.upto(3))]
        n = math.prod(dims)
        name = name if name is not None else self.draw(OPT_TEXT)
        if dtype != DT.STRING and self.chance(50):
            size = -(-n * BITS.get(dtype, helper.tensor_dtype_to_np_dtype(dtype).itemsize * 8) // 8)
            data = self.draw(st.binary(min_size=size, max_size=size))
            t = helper.make_tensor(name or "", dtype, dims, data, raw=True)
        else:
            t = helper.make_tensor(name or "", dtype, dims, self.values(dtype, n))
        if name is None:
            t.ClearField("name")
        extra = self.draw(PERCENT)
        if extra < 10:
            t.data_location = DT.DEFAULT  # explicitly the default
        elif extra < 15:
            t.segment.begin = self.upto(9)
            self.set_opt(t.segment, "end", st.one_of(st.none(), st.integers(0, 9)))
        elif extra < 30:
            self.set_opt(t, "doc_string")
            self.entries(t.metadata_props)
        return t

    def sparse_tensor(self, name=None):
        nnz, rank = self.upto(3), self.upto(2, 1)
        values = self.tensor(name=name if name is not None else self.name(), dims=[nnz])
        index_dims = [nnz] if self.chance(50) else [nnz, rank]
        indices = self.tensor(name=self.name(), dtype=DT.INT64, dims=index_dims)
        return helper.make_sparse_tensor(values, indices, [self.upto(5) for _ in range(rank)])

    # ---- types
    def type_proto(self, depth=0):
        kinds = ["tensor", "sparse", "empty"] + (["sequence", "map", "optional", "opaque"] if depth < 2 else [])
        kind = self.pick(kinds)
        elem = self.pick(DTYPES)
        shape = None if self.chance(30) else [self.draw(DIM) for _ in range(self.upto(3))]
        if kind == "tensor":
            tp = helper.make_tensor_type_proto(elem, shape)
        elif kind == "sparse":
            tp = helper.make_sparse_tensor_type_proto(elem, shape)
        elif kind == "sequence":
            tp = helper.make_sequence_type_proto(self.type_proto(depth + 1))
        elif kind == "map":
            tp = helper.make_map_type_proto(self.pick([DT.INT64, DT.STRING, DT.INT32]), self.type_proto(depth + 1))
        elif kind == "optional":
            tp = helper.make_optional_type_proto(self.type_proto(depth + 1))
        else:
            tp = onnx.TypeProto()
            if kind == "opaque":
                self.set_opt(tp.opaque_type, "domain")
                self.set_opt(tp.opaque_type, "name")
        if self.chance(20):
            self.set_opt(tp, "denotation")
        return tp

    def value_info(self, name):
        vi = onnx.ValueInfoProto(name=name)
        if self.chance(70):
            vi.type.CopyFrom(self.type_proto())
        if self.chance(15):
            self.set_opt(vi, "doc_string")
            self.entries(vi.metadata_props)
        return vi

    # ---- attributes
    def attribute(self, name, visible, depth, refs):
        """An attribute of a random type; `refs` are the attribute names a
        function body may refer to (ref_attr_name)."""
        draw = self.draw
        kinds = ["float", "int", "string", "tensor", "floats", "ints", "strings", "tensors", "sparse_tensor",
                 "sparse_tensors", "type_proto", "type_protos", "empty_list"]
        if depth < MAX_DEPTH:
            kinds += ["graph", "graphs"]
        if refs:
            kinds += ["ref"]
        kind = self.pick(kinds)
        if kind == "ref":
            a = helper.make_attribute_ref(name, self.pick(ATTRIBUTE_TYPES), ref_attr_name=self.pick(refs))
        elif kind == "empty_list":
            a = helper.make_attribute(name, [], attr_type=self.pick(LIST_TYPES))
        else:
            k = self.upto(3, 1)
            value = {
                "float": lambda: draw(FLOAT32),
                "int": lambda: draw(INT64),
                "string": lambda: draw(BYTES),
                "tensor": lambda: self.tensor(),
                "floats": lambda: [draw(FLOAT32) for _ in range(k)],
                "ints": lambda: [draw(INT64) for _ in range(k)],
                "strings": lambda: [draw(BYTES) for _ in range(k)],
                "tensors": lambda: [self.tensor() for _ in range(k)],
                "sparse_tensor": lambda: self.sparse_tensor(),
                "sparse_tensors": lambda: [self.sparse_tensor() for _ in range(k)],
                "type_proto": lambda: self.type_proto(),
                "type_protos": lambda: [self.type_proto() for _ in range(k)],
                "graph": lambda: self.graph(visible, depth + 1),
                "graphs": lambda: [self.graph(visible, depth + 1) for _ in range(k)],
            }[kind]()
            a = helper.make_attribute(name, value)
        if self.chance(15):
            self.set_opt(a, "doc_string")
        if self.chance(10):
            a.i = 0  # a field of another type, explicitly at its default
        return a

    # ---- nodes and graphs
    def node(self, visible, depth, refs, functions):
        """A node reading `visible` names; returns it and the names it defines."""
        ops = [("", "Add"), ("", "Identity"), ("com.example", "Custom"), ("", "If")] + [("local", f) for f in functions]
        domain, op = self.pick(ops)
        inputs = self.some(visible + [""], 3)
        outputs = [self.name() if self.chance(85) else "" for _ in range(self.upto(2))]
        attrs = []
        if op == "If":  # branches reading outer-scope values
            attrs.append(helper.make_attribute("then_branch", self.graph(visible, depth + 1, refs)))
            attrs.append(helper.make_attribute("else_branch", self.graph(visible, depth + 1, refs)))
        attrs += [self.attribute(self.name(), visible, depth, refs) for _ in range(self.upto(2))]
        n = helper.make_node(op, inputs, outputs)
        n.attribute.extend(attrs)
        if self.chance(70):
            n.domain = domain
        self.set_opt(n, "name")
        if self.chance(15):
            self.set_opt(n, "doc_string")
            self.set_opt(n, "overload")
            self.entries(n.metadata_props)
        if self.chance(5):
            config = n.device_configurations.add(configuration_id=self.draw(TEXT), pipeline_stage=self.upto(4))
            config.sharding_spec.add(tensor_name=self.draw(TEXT), device=[0, 1])
        return n, [o for o in outputs if o]

    def graph(self, outer, depth, refs=(), functions=()):
        """A graph whose nodes may read `outer` (the enclosing scopes' names)."""
        g = onnx.GraphProto()
        self.set_opt(g, "name")
        inputs = [self.name() for _ in range(self.upto(2))]
        g.input.extend(self.value_info(x) for x in inputs)
        local = list(inputs)
        for _ in range(self.upto(2)):
            # An initializer may also be listed as a graph input (IR < 4 style).
            shared = [x for x in inputs if x not in {t.name for t in g.initializer}]
            name = self.pick(shared) if shared and self.chance(30) else self.name()
            g.initializer.append(self.tensor(name=name))
            local.append(name)
        if self.chance(15):
            s = self.sparse_tensor(name=self.name())
            g.sparse_initializer.append(s)
            local.append(s.values.name)
        for _ in range(self.upto(4 if depth == 0 else 2)):
            n, defined = self.node(list(outer) + local, depth, refs, functions)
            g.node.append(n)
            local += defined
        g.output.extend(self.value_info(x) for x in self.some(list(outer) + local, 3))
        stale = [self.name()] if self.chance(10) else []  # value_info naming nothing: kept as is
        g.value_info.extend(self.value_info(x) for x in self.some(local + stale, 2))
        if self.chance(15):
            self.set_opt(g, "doc_string")
            self.entries(g.metadata_props)
            note = g.quantization_annotation.add(tensor_name=self.draw(TEXT))
            self.entries(note.quant_parameter_tensor_names)
        return g

    def function(self, name, functions):
        inputs = [self.name() for _ in range(self.upto(2))]
        attr_names = [self.name() for _ in range(self.upto(2))]
        # Default values; a GRAPH default only when asked (depth MAX_DEPTH rules graphs out).
        depth = 1 if self.graph_defaults_in_functions else MAX_DEPTH
        defaults = [self.attribute(self.name(), [], depth, ()) for _ in range(self.upto(2))]
        refs = attr_names + [a.name for a in defaults]
        nodes, visible = [], list(inputs)
        for _ in range(self.upto(3)):
            n, defined = self.node(visible, 1, refs, functions)
            nodes.append(n)
            visible += defined
        f = helper.make_function("local", name, inputs, self.some(visible, 2), nodes, [helper.make_opsetid("", 21)],
                                 attributes=attr_names, attribute_protos=defaults,
                                 value_info=[self.value_info(x) for x in self.some(visible, 2)])
        self.set_opt(f, "overload")
        if self.chance(20):
            self.set_opt(f, "doc_string")
            self.entries(f.metadata_props)
        return f

    def training_info(self, main):
        """Training graphs read the main graph's inputs and initializers."""
        readable = [x.name for x in main.input] + [t.name for t in main.initializer]
        t = onnx.TrainingInfoProto()
        if self.chance(50):
            t.initialization.CopyFrom(self.graph(readable, 1))
        if self.chance(50):
            t.algorithm.CopyFrom(self.graph(readable, 1))
        self.entries(t.initialization_binding)
        self.entries(t.update_binding)
        return t

    def model(self):
        function_names = [f"fn{i}" for i in range(self.upto(2))]
        m = onnx.ModelProto()
        # A function may call the ones defined before it (no recursion).
        m.functions.extend(self.function(f, function_names[:i]) for i, f in enumerate(function_names))
        m.graph.CopyFrom(self.graph([], 0, functions=function_names))
        for domain, version in [("", 21), ("local", 1)]:
            op = m.opset_import.add(version=version)
            if domain or self.chance(50):  # the default domain, absent or ""
                op.domain = domain
        self.set_opt(m, "ir_version", st.one_of(st.none(), st.integers(0, 12)))
        self.set_opt(m, "producer_name")
        self.set_opt(m, "producer_version")
        self.set_opt(m, "domain")
        self.set_opt(m, "model_version", st.one_of(st.none(), st.just(0), INT64))
        self.set_opt(m, "doc_string")
        self.entries(m.metadata_props)
        if self.chance(15):
            m.training_info.append(self.training_info(m.graph))
        if self.chance(5):
            m.configuration.add(name=self.draw(TEXT), num_devices=self.upto(8))
        self.add_unknown_fields(m)
        return m

    # ---- unknown fields
    def add_unknown_fields(self, m):
        messages = list(_messages(m))
        for _ in range(self.upto(3)):
            target = self.pick(messages)
            number = self.pick(UNKNOWN_FIELD_NUMBERS)
            wire = self.pick([0, 1, 2, 5])
            if wire == 0:
                raw = _tag(number, 0) + _varint(self.draw(UINT64))
            elif wire == 2:
                raw = _len_field(number, self.draw(BYTES))
            else:
                size = 8 if wire == 1 else 4
                raw = _tag(number, wire) + self.draw(st.binary(min_size=size, max_size=size))
            target.MergeFromString(raw)


def _messages(msg):
    """`msg` and every message inside it."""
    yield msg
    for field, value in msg.ListFields():
        if field.message_type is None:
            continue
        for sub in value if field.is_repeated else [value]:
            yield from _messages(sub)


@st.composite
def models(draw, graph_defaults_in_functions=True):
    return _Builder(draw, graph_defaults_in_functions).model()


# ---------------------------------------------------------------- helpers


def _difference(got, want):
    import difflib

    lines = difflib.unified_diff(str(want).splitlines(), str(got).splitlines(), "protobuf", "pyonnxopt",
                                 lineterm="", n=2)
    return "\n".join(list(lines)[:60]) or "(only unknown fields differ)"


def _assert_same(got, want):
    assert got == want, _difference(got, want)


def _tensors(model):
    """Every TensorProto of the model that external data can hold."""
    for msg in _messages(model):
        if isinstance(msg, TensorProto):
            yield msg


def _load_resolved(path):
    """onnx.load, but external tensors become exactly what they were inline:
    no data_location (onnx.load sets DEFAULT), no external_data."""
    model = onnx.load(path, load_external_data=False)
    for t in _tensors(model):
        if t.data_location != DT.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        with open(os.path.join(os.path.dirname(path), info["location"]), "rb") as f:
            f.seek(int(info.get("offset", 0)))
            t.raw_data = f.read(int(info["length"])) if "length" in info else f.read()
        t.ClearField("external_data")
        t.ClearField("data_location")
    return model


# No shrinking: one example costs a tenth of a second, so shrinking a failure
# runs for minutes. A failure prints the differing lines instead, and each bug
# found keeps a small deterministic test below.
def _without_default_location(model):
    """Drops data_location=DEFAULT: a tensor moved to external data and read
    back cannot remember that it once had the field explicitly."""
    for t in _tensors(model):
        if t.HasField("data_location") and t.data_location == DT.DEFAULT:
            t.ClearField("data_location")
    return model


SETTINGS = settings(deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ---------------------------------------------------------------- properties


@settings(SETTINGS, max_examples=150)
@given(models())
def test_load_then_to_bytes_matches_protobuf(model):
    data = model.SerializeToString()
    m = pyonnxopt.load(data)
    _assert_same(onnx.ModelProto.FromString(m.to_bytes()), onnx.ModelProto.FromString(data))
    assert m.check_invariants() == []


def _externalize_the_rest(model, folder, location, threshold):
    """Moves the raw tensors that onnx's helper does not reach (sparse
    tensors, training graphs, function attribute defaults) to `location`."""
    offset = 0
    with open(os.path.join(folder, location), "wb") as f:
        for t in _tensors(model):
            if t.HasField("raw_data") and t.data_location != DT.EXTERNAL and len(t.raw_data) >= threshold:
                f.write(t.raw_data)
                set_external_data(t, location, offset, len(t.raw_data))
                offset += len(t.raw_data)
                t.ClearField("raw_data")
                t.data_location = DT.EXTERNAL


def _external_flags(path):
    return [t.data_location == DT.EXTERNAL for t in _tensors(onnx.load(path, load_external_data=False))]


@settings(SETTINGS, max_examples=40)
@given(models(), st.sampled_from([0, 16, 1024]), st.sampled_from([None, 1, 64]))
def test_external_data_matches_protobuf(model, threshold, max_file_size):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for sub in ("src", "keep", "all", "none"):
            (root / sub).mkdir()
        source = root / "src" / "model.onnx"
        convert_model_to_external_data(model, location="weights.bin", size_threshold=threshold, convert_attribute=True)
        _externalize_the_rest(model, root / "src", "more.bin", threshold)
        onnx.save(model, source)
        expected = _load_resolved(source)
        m = pyonnxopt.load(source)
        _assert_same(onnx.ModelProto.FromString(m.to_bytes()), expected)

        keep = root / "keep" / "model.onnx"
        m.save(keep)  # external tensors stay external, in one file of the new name
        assert _external_flags(keep) == _external_flags(source)
        _assert_same(_load_resolved(keep), expected)
        onnx.load(keep)

        every = root / "all" / "model.onnx"
        m.save(every, external_data=True, size_threshold=threshold, max_file_size=max_file_size)
        saved = onnx.load(every, load_external_data=False)
        # (Segments are chunks of a tensor split over several TensorProtos; they stay inline.)
        inline = [t.name for t in _tensors(saved) if t.HasField("raw_data") and len(t.raw_data) >= threshold
                  and not t.HasField("segment")]
        assert inline == [], f"raw tensors of at least {threshold} bytes left inline"
        moved = _without_default_location(onnx.ModelProto.FromString(expected.SerializeToString()))
        _assert_same(_without_default_location(_load_resolved(every)), moved)
        again = pyonnxopt.load(every)
        _assert_same(_without_default_location(onnx.ModelProto.FromString(again.to_bytes())), moved)

        none = root / "none" / "model.onnx"
        m.save(none, external_data=False)
        assert os.listdir(root / "none") == ["model.onnx"] and not any(_external_flags(none))
        _assert_same(onnx.load(none), expected)


# ---------------------------------------------------------------- cases found by the properties


def test_function_graph_attribute_default_keeps_its_nodes():
    """A FunctionProto's attribute_proto default of type GRAPH: its nodes keep their inputs and outputs."""
    body = helper.make_graph([helper.make_node("Neg", ["a"], ["b"])], "body",
                             [helper.make_tensor_value_info("a", DT.FLOAT, [1])],
                             [helper.make_tensor_value_info("b", DT.FLOAT, [1])])
    fn = helper.make_function("local", "F", ["x"], ["y"], [helper.make_node("Identity", ["x"], ["y"])],
                              [helper.make_opsetid("", 21)], attribute_protos=[helper.make_attribute("body", body)])
    graph = helper.make_graph([helper.make_node("F", ["x"], ["y"], domain="local")], "main",
                              [helper.make_tensor_value_info("x", DT.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", DT.FLOAT, [1])])
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("local", 1)]
    model = helper.make_model(graph, functions=[fn], opset_imports=opsets)
    _assert_same(pyonnxopt.load(model).to_onnx(), model)


def _twice(field_number, first, second):
    return _len_field(field_number, first.SerializeToString()) + _len_field(field_number, second.SerializeToString())


def _merge_case(where):
    """Model bytes where one singular message field occurs twice; returns
    (bytes, a check that protobuf merged the two occurrences)."""
    head = onnx.ModelProto(ir_version=10).SerializeToString()
    if where == "AttributeProto.t":
        first = helper.make_tensor("c", DT.FLOAT, [2], np.array([1, 2], np.float32).tobytes(), raw=True)
        attr = onnx.AttributeProto(name="value", type=AttributeProto.TENSOR).SerializeToString()
        attr += _twice(5, first, TensorProto(doc_string="second"))
        node = helper.make_node("Constant", [], ["y"]).SerializeToString() + _len_field(5, attr)
        graph = helper.make_graph([], "g", [], [helper.make_tensor_value_info("y", DT.FLOAT, [2])])
        return head + _len_field(7, graph.SerializeToString() + _len_field(1, node)), \
            lambda m: m.graph.node[0].attribute[0].t.raw_data and m.graph.node[0].attribute[0].t.doc_string
    if where == "ValueInfoProto.type":
        types = helper.make_tensor_type_proto(DT.FLOAT, ["N"]), onnx.TypeProto(denotation="d")
        info = _len_field(1, b"x") + _twice(2, *types)
        return head + _len_field(7, _len_field(11, info)), \
            lambda m: m.graph.input[0].type.tensor_type.elem_type and m.graph.input[0].type.denotation
    if where == "TensorProto.segment":
        tensor = helper.make_tensor("w", DT.FLOAT, [1], np.zeros(1, np.float32).tobytes(), raw=True).SerializeToString()
        tensor += _twice(3, TensorProto.Segment(begin=1), TensorProto.Segment(end=2))
        return head + _len_field(7, _len_field(5, tensor)), \
            lambda m: m.graph.initializer[0].segment.begin and m.graph.initializer[0].segment.end
    if where == "TrainingInfoProto.algorithm":
        training = _twice(2, onnx.GraphProto(name="a"), onnx.GraphProto(doc_string="b"))
        return head + _len_field(7, b"") + _len_field(20, training), \
            lambda m: m.training_info[0].algorithm.name and m.training_info[0].algorithm.doc_string
    raise AssertionError(where)


@pytest.mark.parametrize("where", ["AttributeProto.t", "ValueInfoProto.type", "TensorProto.segment",
                                   "TrainingInfoProto.algorithm"])
def test_repeated_singular_message_field_merges_like_protobuf(where):
    """A singular message field that occurs twice on the wire is merged (protobuf's rule), not replaced."""
    data, merged = _merge_case(where)
    want = onnx.ModelProto.FromString(data)
    assert merged(want)
    _assert_same(onnx.ModelProto.FromString(pyonnxopt.load(data).to_bytes()), want)


def test_other_valid_encodings_parse_like_protobuf():
    """Packed where protobuf writes unpacked and the other way round; a scalar field twice (the last wins)."""
    tensor_f = _len_field(8, b"f") + _tag(2, 0) + _varint(DT.FLOAT) + _len_field(1, _varint(2))
    tensor_f += _tag(4, 5) + struct.pack("<f", 1.5) + _tag(4, 5) + struct.pack("<f", 2.5)
    tensor_i = _len_field(8, b"i") + _tag(2, 0) + _varint(DT.INT64) + _tag(1, 0) + _varint(2)
    tensor_i += _tag(7, 0) + _varint(5) + _tag(7, 0) + _varint(2**64 - 3)
    floats = _len_field(1, b"fl") + _tag(20, 0) + _varint(AttributeProto.FLOATS)
    floats += _len_field(7, struct.pack("<ff", 1.0, 2.0))
    ints = _len_field(1, b"in") + _tag(20, 0) + _varint(AttributeProto.INTS)
    ints += _len_field(8, _varint(1) + _varint(2**64 - 1))
    node = _len_field(2, b"y") + _len_field(4, b"Custom") + _len_field(5, floats) + _len_field(5, ints)
    graph = _len_field(2, b"first") + _len_field(5, tensor_f) + _len_field(5, tensor_i) + _len_field(1, node)
    graph += _len_field(2, b"second")
    data = onnx.ModelProto(ir_version=10).SerializeToString() + _len_field(7, graph)
    want = onnx.ModelProto.FromString(data)
    assert want.graph.name == "second" and list(want.graph.initializer[1].int64_data) == [5, -3]
    _assert_same(onnx.ModelProto.FromString(pyonnxopt.load(data).to_bytes()), want)


def test_keep_mode_keeps_external_segment_tensors_external(tmp_path):
    """external_data=None keeps each tensor where it was, segments (chunks of a split tensor) included."""
    w = helper.make_tensor("w", DT.FLOAT, [4], np.arange(4, dtype=np.float32).tobytes(), raw=True)
    w.segment.begin, w.segment.end = 0, 4
    (tmp_path / "w.bin").write_bytes(w.raw_data)
    set_external_data(w, "w.bin", 0, 16)
    w.ClearField("raw_data")
    w.data_location = DT.EXTERNAL
    graph = helper.make_graph([], "g", [], [helper.make_tensor_value_info("w", DT.FLOAT, [4])], [w])
    onnx.save(helper.make_model(graph), tmp_path / "model.onnx")
    (tmp_path / "out").mkdir()
    pyonnxopt.load(tmp_path / "model.onnx").save(tmp_path / "out" / "model.onnx")
    assert _external_flags(tmp_path / "out" / "model.onnx") == [True]
    _assert_same(_load_resolved(tmp_path / "out" / "model.onnx"), _load_resolved(tmp_path / "model.onnx"))


def test_unknown_group_field_is_kept():
    """Unknown fields of the (deprecated) group wire types are valid protobuf and kept like any other."""
    model = helper.make_model(helper.make_graph([], "g", [], []))
    group = _tag(999, 3) + _tag(1, 0) + _varint(5) + _tag(999, 4)
    data = model.SerializeToString() + group
    _assert_same(onnx.ModelProto.FromString(pyonnxopt.load(data).to_bytes()), onnx.ModelProto.FromString(data))


@pytest.mark.parametrize("wire_type", [0, 1, 2, 5])
def test_unknown_fields_of_every_message_are_kept(wire_type):
    """Deterministic companion of the property: one unknown field in every message of one model."""
    model = helper.make_model(
        helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], alpha=1.5)], "g",
                          [helper.make_tensor_value_info("x", DT.FLOAT, ["N", 2])],
                          [helper.make_tensor_value_info("y", DT.FLOAT, ["N", 2])],
                          [helper.make_tensor("w", DT.FLOAT, [2], [1.0, 2.0])]),
        opset_imports=[helper.make_opsetid("", 21)])
    payload = {0: _varint(7), 1: bytes(8), 2: _varint(3) + b"abc", 5: bytes(4)}[wire_type]
    for msg in list(_messages(model)):
        msg.MergeFromString(_tag(999, wire_type) + payload)
    data = model.SerializeToString()
    _assert_same(onnx.ModelProto.FromString(pyonnxopt.load(data).to_bytes()), onnx.ModelProto.FromString(data))
