"""What a model holds: the facts `pyonnxopt info` prints, as plain data."""

from __future__ import annotations

import os
from collections import Counter

from pyonnxopt.model import Model


def _io(values) -> list:
    out = []
    for v in values:
        t = v.type
        out.append({
            "name": v.name,
            "type": t.get("text", "?"),
            "dtype": t.get("text", "?").split("[")[0] if t.get("kind") == "tensor" else t.get("kind", "unknown"),
            "shape": t.get("shape"),
        })
    return out


def model_info(model: Model) -> dict:
    """ir_version, opsets, producer, inputs/outputs with shapes and dtypes,
    node counts by op type, initializers, external data, subgraphs, functions."""
    main = model.graph
    graphs = model.graphs()
    function_bodies = {f.body for f in model.functions}
    # Op counts cover the main graph and the If/Loop/Scan bodies inside it.
    model_graphs = [g for g in graphs if g not in function_bodies and (g == main or g.parent is not None)]
    ops = Counter()
    for g in model_graphs:
        for n in g.nodes:
            ops[f"{n.domain}::{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type] += 1
    initializers = [t for g in model_graphs for t in g.initializers]
    external = {}
    for t in model.tensors():
        if t.is_external:
            entry = external.setdefault(t.external_location, {"location": t.external_location, "tensors": 0, "bytes": 0})
            entry["tensors"] += 1
            entry["bytes"] += t.nbytes
    file_bytes = os.path.getsize(model.path) if model.path and os.path.exists(model.path) else None
    return {
        "path": model.path or None,
        "file_bytes": file_bytes,
        "ir_version": model.ir_version,
        "opset_imports": model.opset_imports,
        "producer_name": model.producer_name,
        "producer_version": model.producer_version,
        "graph_name": main.name if main else None,
        "inputs": _io(main.inputs) if main else [],
        "outputs": _io(main.outputs) if main else [],
        "node_count": len(main) if main else 0,
        "node_count_all_graphs": sum(len(g) for g in graphs),
        "op_counts": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
        "initializer_count": len(initializers),
        # (overridable from IR 4: see optimize's initializer_inputs)
        "initializer_input_count": sum(1 for v in main.inputs if v.initializer is not None) if main else 0,
        "initializer_bytes": sum(t.nbytes for t in initializers),
        "external_data": sorted(external.values(), key=lambda e: e["location"]),
        "external_bytes": sum(e["bytes"] for e in external.values()),
        "sparse_initializer_count": sum(g.sparse_initializer_count for g in model_graphs),
        "subgraph_count": sum(1 for g in model_graphs if g.parent is not None),
        "function_count": len(model.functions),
        "functions": [f"{f.domain}::{f.name}" if f.domain else f.name for f in model.functions],
        "training_info_count": model._core.training_info_count,
        "metadata_props": model.metadata_props,
    }
