"""eliminate_same_shape_expands: an Expand whose result provably has its
input's dims, symbol by symbol, changes nothing.

    y = Expand(x, shape)      dims(y) == dims(x), each an int or a symbol
 -> y = x

eliminate_nop does this where the shape is a constant. Exporters compute
it at run time: the TorchScript exports of transformers' attention masks
expand the [B, 1, S, S] mask to Concat(B, 1, S, S) read from the input's
Shape, so its Where, Concat and Unsqueeze go with it.

Refuses when a dim of x or y is unknown (neither an int nor a symbol) and
the others agree (a near miss); an Expand whose dims provably change, or
whose ranks are unknown, is not this rule's case and is no near miss.
"""

from __future__ import annotations

from pyonnxopt.fusion.pattern import Op, Var
from pyonnxopt.fusion.rules.eliminate_same_shape_reshapes import EliminateSameShapeReshapes


class EliminateSameShapeExpands(EliminateSameShapeReshapes):
    """Its check and rewrite are the Reshape rule's: the same proof, the same bypass."""

    name = "eliminate_same_shape_expands"
    description = "Expand whose result provably has its input's dims (symbols included) -> its input"
    min_opset = 8  # Expand

    def pattern(self, opset: int) -> Op:
        return Op("Expand", Var("x"), Var("shape"), name="expand")
