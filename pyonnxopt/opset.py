"""`--opset N`: upgrade a model's ONNX opset before the passes run, so that
fusions into newer standard ops (Gelu from 20, RMSNormalization and
Attention from 23) become possible.

onnx's version converter does the graph rewriting (its adapters know every
op's changes between versions); it sees the model without its weights
(references to a file that does not exist), and the converted graph takes
the original tensors back by index, shared, never copied. So a 10 GB model
converts in the time and memory of its graph.
"""

from __future__ import annotations

from pyonnxopt import _core
from pyonnxopt.errors import Error, first_line
from pyonnxopt.model import Model

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
        try:
            converted = version_converter.convert_version(proto, version)
        except Exception as e:  # onnx raises RuntimeError, ValidationError, ... naming the op it cannot convert
            raise Error(f"--opset {version}: onnx's version converter cannot convert {label} from opset {current}: "
                        f"{first_line(e)}; leave --opset out to keep opset {current}") from None
    # An opset needs an IR version that knows it (opset 23 came with IR 11).
    converted.ir_version = max(converted.ir_version, helper.find_min_ir_version_for(
        [helper.make_opsetid("", version)], ignore_unknown=True))
    return Model(_core.load_bytes(converted.SerializeToString(), base_dir=model._core.base_dir,
                                  weights_from=model._core))
