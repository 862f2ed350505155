"""The built-in fusion rules, in the order the pipeline runs them."""

from pyonnxopt.fusion.rules.fuse_conv_batchnorm import FuseConvBatchnorm
from pyonnxopt.fusion.rules.fuse_conv_scale_bias import FuseConvScaleBias
from pyonnxopt.fusion.rules.fuse_gemm_batchnorm import FuseGemmBatchnorm
from pyonnxopt.fusion.rules.fuse_matmul_add_into_gemm import FuseMatmulAddIntoGemm
from pyonnxopt.fusion.rules.fuse_pad_into_conv import FusePadIntoConv

BUILTIN_RULES: list = [
    # Conv/Gemm/Pad folding (wt-convs): padding first, then BatchNormalization,
    # then the per-channel Mul/Add it may leave, then MatMul+Add into Gemm.
    FusePadIntoConv(),
    FuseConvBatchnorm(),
    FuseConvScaleBias(),
    FuseGemmBatchnorm(),
    FuseMatmulAddIntoGemm(),
]
