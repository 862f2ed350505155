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
