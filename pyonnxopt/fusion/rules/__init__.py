"""The built-in fusion rules, in the order the pipeline runs them."""

from pyonnxopt.fusion.rules.fuse_gelu import FuseGelu

BUILTIN_RULES: list = [
    # Transformer blocks (norms first: their Add/Mul tails must not be taken by others).
    FuseGelu(),
]
