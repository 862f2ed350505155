"""Walking an onnx GraphProto with its subgraphs (If branches, Loop and
Scan bodies), for the code that works on protos: shape inference's copy and
the opset converter's."""

from __future__ import annotations


def bodies(node) -> list:
    """The subgraphs a NodeProto holds, in attribute order."""
    out = []
    for a in node.attribute:  # called for every node, several times per inference: no lists made per attribute
        if a.HasField("g"):
            out.append(a.g)
        if a.graphs:
            out.extend(a.graphs)
    return out


def graphs(graph) -> list:
    """The graph and its subgraphs, nested ones after their holder's."""
    out = [graph]
    for n in graph.node:
        for body in bodies(n):
            out += graphs(body)
    return out


def constant(graph, name: str):
    """An initializer's or a Constant node's array in `graph` (not its
    subgraphs), or None: not there, or its data not inline."""
    from onnx import numpy_helper

    for t in graph.initializer:
        if t.name == name:
            return numpy_helper.to_array(t) if t.data_location != t.EXTERNAL else None
    for n in graph.node:
        if n.op_type == "Constant" and n.output and n.output[0] == name:
            return next((numpy_helper.to_array(a.t) for a in n.attribute if a.name == "value"), None)
    return None
