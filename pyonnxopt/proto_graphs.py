"""Walking an onnx GraphProto with its subgraphs (If branches, Loop and
Scan bodies), for the code that works on protos: shape inference's copy and
the opset converter's."""

from __future__ import annotations


def bodies(node) -> list:
    """The subgraphs a NodeProto holds, in attribute order."""
    return [b for a in node.attribute for b in ([a.g] if a.HasField("g") else []) + list(a.graphs)]


def graphs(graph) -> list:
    """The graph and its subgraphs, nested ones after their holder's."""
    out = [graph]
    for n in graph.node:
        for body in bodies(n):
            out += graphs(body)
    return out
