"""`--opset N`: upgrade a model's ONNX opset before the passes run, so that
fusions into newer standard ops (Gelu from 20, RMSNormalization and
Attention from 23) become possible.

onnx's version converter does the graph rewriting (its adapters know every
op's changes between versions); it sees the model without its weights
(references to a file that does not exist), and the converted graph takes
the original tensors back by index, shared, never copied. So a 10 GB model
converts in the time and memory of its graph.

Where an adapter changes what a model computes, pyonnxopt mends the result
(Resize-10's rounding, PRelu-6's per-channel slope) or refuses (Scan-8, and
any conversion that changes the graph's inputs or outputs).
"""

from __future__ import annotations

from pyonnxopt import _core
from pyonnxopt.errors import Error, first_line
from pyonnxopt.model import Model
from pyonnxopt.proto_graphs import constant, graphs

# Tensors up to this size travel inline through the converter (its adapters
# may read small constants); bigger ones stay behind as references.
INLINE_BYTES = 1024


def default_opset(model: Model) -> int:
    """The model's ai.onnx opset version (0 when it imports none)."""
    imports = model.opset_imports
    return imports.get("", imports.get("ai.onnx", 0))


def newest_opset() -> int:
    import onnx.defs

    return onnx.defs.onnx_opset_version()


def upgrade(model: Model, version: int, label: str = "") -> Model:
    """The model converted to ai.onnx opset `version`, or the model itself
    when it is there already. Raises Error for a downgrade, a version onnx
    does not know, or a model the converter cannot convert."""
    import onnx
    import onnx.defs
    from onnx import helper, version_converter

    label = label or model.path or "the model"
    current = default_opset(model)
    newest = newest_opset()
    if version > newest:
        raise Error(f"--opset {version}: the installed onnx {onnx.__version__} knows opsets up to {newest}")
    if version < current:
        raise Error(f"--opset {version}: {label} is at opset {current}; pyonnxopt only upgrades "
                    f"(give {current} or more, or leave --opset out)")
    if version == current:
        return model
    if current < 9 <= version and any(n.op_type == "Scan" and n.domain in ("", "ai.onnx")
                                      for n in model.nodes(recursive=True)):
        raise Error(f"--opset {version}: {label} has a Scan from opset 8, whose batch axis onnx's version converter "
                    "drops from the graph's inputs rather than converting; leave --opset out")
    if model.functions:  # the converter drops them, leaving their calls undefined
        raise Error(f"--opset {version}: {label} has model-local functions ({model.functions[0].name}, ...), "
                    "which onnx's version converter cannot convert; leave --opset out")
    for node in model.nodes(recursive=True):
        if node.domain in ("", "ai.onnx") and current == 0:
            raise Error(f"--opset {version}: node {node.name or '(unnamed)'} of {label} is an ai.onnx op "
                        f"({node.op_type}) but the model imports no ai.onnx opset: the file is invalid; "
                        "re-export it, or leave --opset out")
        if node.domain in ("", "ai.onnx") and not onnx.defs.has(node.op_type):
            raise Error(f"--opset {version}: node {node.name or '(unnamed)'} of {label} is {node.op_type}, which the "
                        "ONNX standard does not define (the exporter wrote an op no runtime knows), so it cannot be "
                        "converted; leave --opset out")
    proto = onnx.ModelProto.FromString(model._core.serialize_weightless(INLINE_BYTES))
    effective = model.opset_imports
    if len(proto.opset_import) != len(effective):
        # A domain imported twice (skl2onnx writes '' twice): the last entry
        # counts, as in onnxruntime; the converter would upgrade the first.
        del proto.opset_import[:]
        proto.opset_import.extend(helper.make_opsetid(domain, v) for domain, v in effective.items())
    if current == 0:
        # Only other domains' ops (an XGBoost model's ai.onnx.ml): nothing to
        # convert, the import is all that is new.
        proto.opset_import.append(helper.make_opsetid("", version))
        converted = proto
    else:
        resizes = _opset_10_resizes(proto.graph, label, version) if current < 11 <= version else []
        slopes = _opset_6_prelu_slopes(proto.graph, label, version) if current < 7 <= version else []
        try:
            converted = version_converter.convert_version(proto, version)
        except Exception as e:  # onnx raises RuntimeError, ValidationError, ... naming the op it cannot convert
            raise Error(f"--opset {version}: onnx's version converter cannot convert {label} from opset {current}: "
                        f"{first_line(e)}; leave --opset out to keep opset {current}") from None
        _keep_resize_modes(converted.graph, resizes, label, version)
        _keep_prelu_channels(converted.graph, slopes, label, version)
        _same_signature(proto.graph, converted.graph, label, version)
        _only_stated_value_info(proto.graph, converted.graph)
        if current < 11 <= version:
            _bounds_in_their_type(converted)
    # An opset needs an IR version that knows it (opset 23 came with IR 11).
    converted.ir_version = max(converted.ir_version, helper.find_min_ir_version_for(
        [helper.make_opsetid("", version)], ignore_unknown=True))
    if current != 0:
        _still_valid(proto, converted, label, version)
    return Model(_core.load_bytes(converted.SerializeToString(), base_dir=model._core.base_dir,
                                  weights_from=model._core))


# ---------------------------------------------------------------- what the converter gets wrong

def _only_stated_value_info(before, after) -> None:
    """The converter runs onnx's shape inference at the old opset and keeps
    what it found, as value_info and in the outputs' dims; there onnx can be
    wrong (Slice-10 gives a sliced axis the input's symbol, which
    shapes.infer works around), and the passes would trust it. Only what
    the model stated stays; the passes infer the rest again at the new
    opset."""
    stated = {v.name for g in graphs(before) for v in g.value_info}
    old, new = graphs(before), graphs(after)
    for g in new:
        kept = [v for v in g.value_info if v.name in stated]
        if len(kept) != len(g.value_info):
            del g.value_info[:]
            g.value_info.extend(kept)
    for b, a in zip(old, new) if len(old) == len(new) else [(old[0], new[0])]:
        declared = {v.name: v.type for v in b.output}
        for v in a.output:
            if v.name in declared:
                v.type.CopyFrom(declared[v.name])


def _in_order(graph, ops: tuple) -> list:
    """(graph, node) for every node of `ops`, graph by graph in `graphs`'
    order: the converter keeps such nodes in place (it may rename their
    outputs), so before and after match by position."""
    return [(g, n) for g in graphs(graph) for n in g.node if n.domain in ("", "ai.onnx") and n.op_type in ops]


def _converted_in_place(graph, ops: tuple, now: str, count: int, label: str, version: int) -> list:
    """`_in_order`'s nodes after conversion: as many as before, each a `now`
    (Upsample has become Resize); else Error."""
    written = _in_order(graph, ops)
    if len(written) != count or any(n.op_type != now for _, n in written):
        raise Error(f"--opset {version}: onnx's version converter rewrote the {'/'.join(ops)} nodes of {label} "
                    "beyond recognition, so what they computed cannot be kept; leave --opset out")
    return written


# ---------------------------------------------------------------- Resize-10

_RESIZES = ("Upsample", "Resize")


def _opset_10_resizes(graph, label: str, version: int) -> list:
    """(coordinate_transformation_mode, nearest_mode) for every Upsample and
    Resize-10 (in `_in_order`) the converter will make a Resize-11+: onnx's
    adapter leaves both attributes at their new defaults (half_pixel,
    round_prefer_floor), which moves every pixel. Before opset 11 the
    coordinates were asymmetric, and nearest took the floor when upsampling
    and the ceiling when downsampling (onnxruntime's rule). A nearest Resize
    whose scales go both ways, or are computed, has no one mode: Error."""
    import numpy as np

    found = []
    for g, n in _in_order(graph, _RESIZES):
        mode = next((a.s.decode() for a in n.attribute if a.name == "mode"), "nearest")
        nearest = ""
        if mode == "nearest":
            scales = None if n.op_type == "Upsample" or len(n.input) < 2 else constant(g, n.input[1])
            if n.op_type == "Upsample" or (scales is not None and np.all(scales >= 1)):
                nearest = "floor"
            elif scales is not None and np.all(scales <= 1):
                nearest = "ceil"
            else:
                raise Error(f"--opset {version}: Resize {n.name or n.output[0]!r} of {label} (opset 10, nearest) "
                            "has scales that are computed or go both ways, and no opset-11 rounding reproduces "
                            "what it does; leave --opset out, or give 10")
        found.append(("asymmetric", nearest))
    return found


def _keep_resize_modes(graph, resizes: list, label: str, version: int) -> None:
    """Sets the attributes `_opset_10_resizes` worked out on the Resizes the
    converter wrote."""
    from onnx import helper

    if not resizes:
        return
    written = _converted_in_place(graph, _RESIZES, "Resize", len(resizes), label, version)
    for (_, n), (transform, nearest) in zip(written, resizes):
        keep = [a for a in n.attribute if a.name not in ("coordinate_transformation_mode", "nearest_mode")]
        del n.attribute[:]
        n.attribute.extend(keep + [helper.make_attribute("coordinate_transformation_mode", transform)]
                           + ([helper.make_attribute("nearest_mode", nearest)] if nearest else []))


# ---------------------------------------------------------------- PRelu-6

def _rank(graph, name: str):
    for v in [*graph.input, *graph.value_info, *graph.output]:
        if v.name == name and v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape"):
            return len(v.type.tensor_type.shape.dim)
    return None


def _opset_6_prelu_slopes(graph, label: str, version: int) -> list:
    """For each PRelu (in `_in_order`): the rank of its input where
    its slope is one per channel, else None. PRelu-6 applied a (C,) slope
    along axis 1; from opset 7 it broadcasts like numpy, along the last
    axis, and the converter keeps it as it is (a wrong result or a failure
    wherever C is not the last dim). Error where the input's rank is unknown."""
    found = []
    for g, n in _in_order(graph, ("PRelu",)):
        slope = constant(g, n.input[1]) if len(n.input) > 1 else None
        if slope is None or slope.ndim != 1 or slope.size <= 1:
            found.append(None)
            continue
        rank = _rank(g, n.input[0])
        if rank is None:
            raise Error(f"--opset {version}: PRelu {n.name or n.output[0]!r} of {label} (opset 6) has a slope "
                        "per channel and an input of unknown rank, so its channel axis cannot be kept; "
                        "leave --opset out")
        found.append(rank if rank > 2 else None)
    return found


def _keep_prelu_channels(graph, slopes: list, label: str, version: int) -> None:
    """Puts a Reshape to (C, 1, ..., 1) before each PRelu whose slope
    `_opset_6_prelu_slopes` found per channel."""
    import numpy as np
    from onnx import helper, numpy_helper

    if not any(slopes):
        return
    prelus = _converted_in_place(graph, ("PRelu",), "PRelu", len(slopes), label, version)
    for k, ((g, n), rank) in enumerate(zip(prelus, slopes)):
        if not rank:
            continue
        shape = f"{n.input[1]}_channels_shape{k}"
        g.initializer.append(numpy_helper.from_array(np.array([-1] + [1] * (rank - 2), np.int64), shape))
        channels = f"{n.input[1]}_channels{k}"
        at = list(g.node).index(n)
        g.node.insert(at, helper.make_node("Reshape", [n.input[1], shape], [channels]))
        n.input[1] = channels


def _same_signature(before, after, label: str, version: int) -> None:
    """The converter must not change the graph's inputs and outputs (its
    Scan adapter once shortened them)."""
    def signature(graph):  # names, element types and ranks (the converter may state more dims)
        def rank(t):
            return len(t.tensor_type.shape.dim) if t.tensor_type.HasField("shape") else None

        return [(v.name, v.type.WhichOneof("value"), v.type.tensor_type.elem_type, rank(v.type))
                for v in [*graph.input, *graph.output]]

    def same(a, b):
        return a[:3] == b[:3] and (a[3] is None or b[3] is None or a[3] == b[3])

    old, new = signature(before), signature(after)
    if len(old) != len(new) or not all(map(same, old, new)):
        raise Error(f"--opset {version}: onnx's version converter changed the inputs or outputs of {label}, "
                    "which pyonnxopt does not let it do; leave --opset out")


# Ops whose float attributes became inputs of the data's type at opset 11:
# Pad-2's value (input 2), Clip-6's min and max (inputs 1 and 2).
_ATTRIBUTES_MADE_INPUTS = {"Pad": (2,), "Clip": (1, 2)}


def _bounds_in_their_type(model) -> None:
    """Pad-2's `value` and Clip-6's `min` and `max` are float attributes
    whatever the data's type; the converter makes them float32 Constants,
    which Pad-11 and Clip-11 refuse beside float16 or double data. Each such
    Constant takes the data's type (read from onnx's inference of the
    converted model), as a cast of its value."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    uses = [(n, i) for g in graphs(model.graph) for n in g.node
            if n.op_type in _ATTRIBUTES_MADE_INPUTS and n.domain in ("", "ai.onnx")
            for i in _ATTRIBUTES_MADE_INPUTS[n.op_type] if len(n.input) > i and n.input[i]]
    if not uses:
        return
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
    except Exception:  # (onnx raises several kinds) no types: nothing to mend with
        return
    types = {v.name: v.type.tensor_type.elem_type for g in graphs(inferred.graph)
             for v in [*g.input, *g.value_info, *g.output] if v.type.HasField("tensor_type")}
    made = {c.output[0]: c for g in graphs(model.graph) for c in g.node if c.op_type == "Constant" and c.output}
    for n, i in uses:
        data, maker = types.get(n.input[0]), made.get(n.input[i])
        if maker is None or data in (None, 0, onnx.TensorProto.FLOAT) or len(maker.attribute) != 1:
            continue
        value = maker.attribute[0]
        if value.name != "value" or value.t.data_type != onnx.TensorProto.FLOAT:
            continue
        with np.errstate(over="ignore"):  # Clip-6's default bounds, -+FLT_MAX, are -+inf in half: the same clip
            cast = numpy_helper.to_array(value.t).astype(helper.tensor_dtype_to_np_dtype(data))
        value.t.CopyFrom(numpy_helper.from_array(np.asarray(cast), value.t.name))


def _still_valid(before, after, label: str, version: int) -> None:
    """The converter can write a model that onnx's own full check refuses
    (as it did with a float16 Pad-2's value, which `_bounds_in_their_type`
    now mends). Where the original passes that check and the result does
    not, the upgrade is refused: the passes would start from an invalid
    model."""
    import onnx

    refused = (onnx.checker.ValidationError, onnx.shape_inference.InferenceError)
    try:
        onnx.checker.check_model(after, full_check=True)
        return
    except refused as e:
        why = first_line(e)
    try:
        onnx.checker.check_model(before, full_check=True)
    except refused:
        return  # no better before: nothing the converter broke
    raise Error(f"--opset {version}: onnx's version converter wrote a model that onnx's checker refuses ({why}); "
                f"leave --opset out to keep {label} at its opset")
