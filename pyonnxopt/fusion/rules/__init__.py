"""The built-in fusion rules, in the order the pipeline runs them."""

from pyonnxopt.fusion.rules.fuse_attention import FuseAttention
from pyonnxopt.fusion.rules.fuse_gelu import FuseGelu
from pyonnxopt.fusion.rules.fuse_layer_normalization import FuseLayerNormalization
from pyonnxopt.fusion.rules.fuse_rms_normalization import FuseRmsNormalization
from pyonnxopt.fusion.rules.fuse_skip_layer_normalization import FuseSkipLayerNormalization

BUILTIN_RULES: list = [
    # Transformer blocks (norms first: their Add/Mul tails must not be taken by others).
    FuseLayerNormalization(),
    FuseSkipLayerNormalization(),
    FuseRmsNormalization(),
    FuseGelu(),
    FuseAttention(),
]
