"""The built-in fusion rules, in the order the pipeline runs them."""

from pyonnxopt.fusion.rules.cancel_reshapes_around_add import CancelReshapesAroundAdd
from pyonnxopt.fusion.rules.cancel_row_transposes import CancelRowTransposes
from pyonnxopt.fusion.rules.fuse_attention import FuseAttention
from pyonnxopt.fusion.rules.fuse_attention_heads import FuseAttentionHeads
from pyonnxopt.fusion.rules.fuse_attention_repeat_kv import FuseAttentionRepeatKv
from pyonnxopt.fusion.rules.fuse_bias_gelu import FuseBiasGelu
from pyonnxopt.fusion.rules.fuse_consecutive_slices import FuseConsecutiveSlices
from pyonnxopt.fusion.rules.fuse_conv_activation import FuseConvActivation
from pyonnxopt.fusion.rules.fuse_conv_batchnorm import FuseConvBatchnorm
from pyonnxopt.fusion.rules.fuse_conv_branches import FuseConvBranches
from pyonnxopt.fusion.rules.fuse_conv_input_scale import FuseConvInputScale
from pyonnxopt.fusion.rules.fuse_conv_scale_bias import FuseConvScaleBias
from pyonnxopt.fusion.rules.fuse_gelu import FuseGelu
from pyonnxopt.fusion.rules.fuse_gemm_batchnorm import FuseGemmBatchnorm
from pyonnxopt.fusion.rules.fuse_hard_swish import FuseHardSwish
from pyonnxopt.fusion.rules.fuse_layer_normalization import FuseLayerNormalization
from pyonnxopt.fusion.rules.fuse_masked_softmax import FuseMaskedSoftmax
from pyonnxopt.fusion.rules.fuse_matmul_add_into_gemm import FuseMatmulAddIntoGemm
from pyonnxopt.fusion.rules.fuse_matmul_scale import FuseMatmulScale
from pyonnxopt.fusion.rules.fuse_partial_rotary import FusePartialRotary
from pyonnxopt.fusion.rules.fuse_pad_into_conv import FusePadIntoConv
from pyonnxopt.fusion.rules.fuse_quick_gelu import FuseQuickGelu
from pyonnxopt.fusion.rules.fuse_rms_normalization import FuseRmsNormalization
from pyonnxopt.fusion.rules.fuse_rotary_heads import FuseRotaryHeads
from pyonnxopt.fusion.rules.fuse_transpose_into_gemm import FuseTransposeIntoGemm
from pyonnxopt.fusion.rules.lower_einsum import LowerEinsum
from pyonnxopt.fusion.rules.regroup_packed_heads import RegroupPackedHeads

BUILTIN_RULES: list = [
    LowerEinsum(),  # matrix products spelled as Einsum: MatMuls for every rule after it
    # Conv/Gemm/Pad folding (wt-convs): padding first, then BatchNormalization,
    # then the per-channel Mul/Add it may leave, then the added branches of
    # one input, then MatMul+Add into Gemm;
    # with --target ort, the activation (and residual) into a FusedConv last.
    FusePadIntoConv(),
    FuseHardSwish(),  # before FusedConv takes a Conv's Add (x + 3 is one)
    FuseConvBatchnorm(),
    FuseConvScaleBias(),
    FuseConvBranches(),  # the branches' BatchNormalizations are in their weights by now
    FuseConvActivation(),
    FuseGemmBatchnorm(),
    FuseMatmulAddIntoGemm(),
    # Transformer blocks (wt-nlp): the norms first, then Gelu (with --target
    # ort: its bias, and the sigmoid gates), then Attention.
    FuseLayerNormalization(),
    FuseRmsNormalization(),
    FuseGelu(),
    FuseBiasGelu(),
    FuseQuickGelu(),
    FuseConvInputScale(),  # takes a Mul an activation's pattern may end in: after them, and after_fusions
    FuseMatmulScale(),  # takes the Mul Attention's pattern reads its scale from: after_fusions
    CancelReshapesAroundAdd(),  # Swin's shifted-window mask, so that its attention fuses
    FuseMaskedSoftmax(),  # jax2onnx's renormalized mask as torch writes it, so that its attention fuses
    FuseAttention(),
    FusePartialRotary(),  # Phi's partial rotary: one RotaryEmbedding, for the next
    FuseRotaryHeads(),  # the head split after the rotary embedding, for the next
    FuseAttentionHeads(),  # an Attention already there (opset 23) or just made on 4-d heads
    FuseAttentionRepeatKv(),
    RegroupPackedHeads(),  # the head merges fuse_attention leaves on LeViT's interleaved parts
    # Data movement.
    FuseConsecutiveSlices(),
    CancelRowTransposes(),
    FuseTransposeIntoGemm(),  # after_fusions: what cancel_row_transposes leaves
]
