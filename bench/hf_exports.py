"""Hugging Face transformers architectures, small and with random weights,
exported by torch, optimized three ways and counted against onnxslim and
onnxsim.

    pip install -r bench/requirements.txt               # transformers, torch first (see there)
    python bench/hf_exports.py                          # bench/out/hf, every model at opset 17
    python bench/hf_exports.py --models llama,whisper --opsets 17,18

The zoo has one model of each kind; the models users bring come from many
more architectures, each spelling its attention, norms, position codes and
masks its own way. Below opset 18 a model goes through torch's TorchScript
exporter (`dynamo=False`) with its batch and sequence dims dynamic, from
opset 18 through the dynamo exporter with static shapes. Each model has 2
layers, 4 heads, hidden size 64 and random weights (seed 0), biases and norm
parameters included (a 0 bias or a 1 scale would let the optimizers drop
what a trained model keeps); the base model runs without a head and its
first output is the graph's. Each result is checked in onnxruntime by
`pyonnxopt optimize` itself; a row reads "FAILED" where that check or the
run failed, "unchecked" where onnxruntime cannot run the export itself.
"""

from __future__ import annotations

import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _export_counts as export_counts  # noqa: E402

OUT = os.path.join(HERE, "out", "hf")

# Small sizes under the names the configs use; each config takes those it has.
_SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
              n_embd=64, n_layer=2, n_head=4, n_inner=128, d_model=64, d_ff=128, d_kv=16, num_layers=2,
              num_heads=4, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
              decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, ffn_dim=128,
              word_embed_proj_dim=64, vocab_size=1000, max_position_embeddings=128, use_cache=False)

# name: (model_type, input kind, overrides of _SMALL)
_ARCHS = {
    "bert": ("bert", "text", {}),
    "roberta": ("roberta", "text", {}),
    "distilbert": ("distilbert", "text", {"dim": 64, "n_layers": 2, "hidden_dim": 128}),
    "albert": ("albert", "text", {"embedding_size": 32}),
    "electra": ("electra", "text", {"embedding_size": 32}),
    "deberta_v2": ("deberta-v2", "text", {}),
    "modernbert": ("modernbert", "text", {"global_attn_every_n_layers": 2, "local_attention": 16}),
    "gpt2": ("gpt2", "decoder", {}),
    "gpt_neox": ("gpt_neox", "decoder", {}),
    "llama": ("llama", "decoder", {"num_key_value_heads": 2}),
    "qwen3": ("qwen3", "decoder", {"num_key_value_heads": 2, "head_dim": 16}),
    "gemma": ("gemma", "decoder", {"num_key_value_heads": 1, "head_dim": 16}),
    "phi": ("phi", "decoder", {}),
    "opt": ("opt", "decoder", {}),
    "bloom": ("bloom", "decoder", {}),
    "falcon": ("falcon", "decoder", {}),
    "mistral": ("mistral", "decoder", {"num_key_value_heads": 2}),
    "qwen2": ("qwen2", "decoder", {"num_key_value_heads": 2}),
    "gemma3_text": ("gemma3_text", "decoder", {"num_key_value_heads": 1, "head_dim": 16, "sliding_window": 8}),
    "stablelm": ("stablelm", "decoder", {"num_key_value_heads": 4}),
    "gpt_bigcode": ("gpt_bigcode", "decoder", {}),
    "gpt_neo": ("gpt_neo", "decoder", {"attention_types": [[["global", "local"], 1]], "window_size": 8}),
    "mpt": ("mpt", "decoder", {"n_heads": 4, "n_layers": 2, "expansion_ratio": 2}),
    "mamba": ("mamba", "decoder", {"state_size": 8}),
    "t5": ("t5", "seq2seq", {}),
    "bart": ("bart", "seq2seq", {}),
    "marian": ("marian", "seq2seq", {}),
    "pegasus": ("pegasus", "seq2seq", {}),
    "whisper": ("whisper", "speech2text", {"num_mel_bins": 16, "max_source_positions": 32,
                                           "max_target_positions": 32}),
    "vit": ("vit", "image", {"image_size": 32, "patch_size": 8}),
    "deit": ("deit", "image", {"image_size": 32, "patch_size": 8}),
    "beit": ("beit", "image", {"image_size": 32, "patch_size": 8, "use_relative_position_bias": True}),
    "dinov2": ("dinov2", "image", {"image_size": 32, "patch_size": 8}),
    "clip_vision": ("clip_vision_model", "image", {"image_size": 32, "patch_size": 8}),
    "mobilevit": ("mobilevit", "image", {"image_size": 64}),
    "resnet": ("resnet", "image", {"embedding_size": 16, "hidden_sizes": [16, 32, 64, 128], "depths": [1, 1, 1, 1]}),
    "swin": ("swin", "image", {"image_size": 32, "patch_size": 4, "embed_dim": 16, "depths": [1, 1],
                               "num_heads": [2, 4], "window_size": 4}),
    "convnext": ("convnext", "image", {"hidden_sizes": [16, 32], "depths": [1, 1]}),
    "segformer": ("segformer", "image", {"num_encoder_blocks": 2, "depths": [1, 1], "sr_ratios": [2, 1],
                                         "hidden_sizes": [16, 32], "num_attention_heads": [1, 2],
                                         "patch_sizes": [7, 3], "strides": [4, 2], "mlp_ratios": [2, 2]}),
    "wav2vec2": ("wav2vec2", "audio", {"conv_dim": [16, 16], "conv_stride": [5, 2], "conv_kernel": [10, 3],
                                       "num_conv_pos_embeddings": 16, "num_conv_pos_embedding_groups": 4}),
    "hubert": ("hubert", "audio", {"conv_dim": [16, 16], "conv_stride": [5, 2], "conv_kernel": [10, 3],
                                   "num_conv_pos_embeddings": 16, "num_conv_pos_embedding_groups": 4}),
    "wavlm": ("wavlm", "audio", {"conv_dim": [16, 16], "conv_stride": [5, 2], "conv_kernel": [10, 3],
                                 "num_conv_pos_embeddings": 16, "num_conv_pos_embedding_groups": 4,
                                 "num_buckets": 32, "max_bucket_distance": 64}),
}

_BATCH, _SEQ = 2, 16


def _inputs(kind: str, config):
    """(names, tensors, dynamic axes) of one example batch."""
    import torch

    g = torch.Generator().manual_seed(0)
    if kind in ("text", "decoder", "seq2seq"):
        ids = torch.randint(0, config.vocab_size, (_BATCH, _SEQ), generator=g)
        mask = torch.ones(_BATCH, _SEQ, dtype=torch.int64)
        mask[1, -3:] = 0  # one padded row, so the mask is read
        names, tensors = ["input_ids", "attention_mask"], [ids, mask]
        if kind == "seq2seq":
            names.append("decoder_input_ids")
            tensors.append(ids[:, : _SEQ // 2])
        if config.model_type == "mamba":  # its scan is unrolled over the traced length: only the batch varies
            return names[:1], tensors[:1], {names[0]: {0: "batch"}}
        return names, tensors, {n: {0: "batch", 1: "decoder_sequence" if n.startswith("decoder") else "sequence"}
                                for n in names}
    if kind == "image":
        size = getattr(config, "image_size", 32)
        size = size if isinstance(size, int) else 32
        channels = getattr(config, "num_channels", 3)
        pixels = torch.randn(_BATCH, channels, size, size, generator=g)
        return ["pixel_values"], [pixels], {"pixel_values": {0: "batch"}}
    if kind == "audio":
        return ["input_values"], [torch.randn(_BATCH, 800, generator=g)], {"input_values": {0: "batch", 1: "samples"}}
    frames = 2 * config.max_source_positions  # whisper's encoder wants exactly this many
    names = ["input_features", "decoder_input_ids"]
    tensors = [torch.randn(_BATCH, config.num_mel_bins, frames, generator=g),
               torch.randint(0, config.vocab_size, (_BATCH, 4), generator=g)]
    return names, tensors, {"input_features": {0: "batch"}, "decoder_input_ids": {0: "batch", 1: "length"}}


def _randomized(model):
    """Parameters that start as all 0 or all 1 (biases, norm scales and
    shifts) drawn at random."""
    import torch

    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if not p.is_floating_point() or p.numel() == 0:
                continue
            first = p.flatten()[0].item()
            if first in (0.0, 1.0) and bool((p == first).all()):
                noise = torch.randn(p.shape, generator=g)
                p.copy_(1.0 + 0.2 * noise if first == 1.0 else 0.1 * noise)
    return model


def _make(name: str):
    """(module returning the model's first output, input names, tensors, dynamic axes)."""
    import torch
    import transformers

    model_type, kind, overrides = _ARCHS[name]
    default = transformers.AutoConfig.for_model(model_type)
    aliases = getattr(default, "attribute_map", {})
    small = {k: v for k, v in _SMALL.items()
             if hasattr(default, k) and k not in overrides and aliases.get(k) not in overrides}
    if (getattr(default, "pad_token_id", None) or 0) >= _SMALL["vocab_size"]:
        small["pad_token_id"] = 0  # an embedding's padding row must be inside the small vocabulary
    config = transformers.AutoConfig.for_model(model_type, **small, **overrides)
    torch.manual_seed(0)
    model = _randomized(transformers.AutoModel.from_config(config).eval())
    names, tensors, dynamic = _inputs(kind, config)

    class FirstOutput(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *args):
            return self.model(**dict(zip(names, args)), return_dict=False)[0]

    return FirstOutput().eval(), names, tensors, dynamic  # a wrapper left training makes dynamo write Dropouts


def _models():
    """{name: maker}: built only when transformers is there."""
    return {name: (lambda name=name: _make(name)) for name in _ARCHS}


def export(models: dict, names, opsets) -> list:
    import torch

    def write(made, name, opset, path):
        module, inputs, tensors, dynamic = made
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the exporters' tracer notes drown the rows
            torch.onnx.export(module, tuple(tensors), path, input_names=inputs, output_names=["output"],
                              opset_version=opset, dynamo=opset >= 18, verbose=False,
                              dynamic_axes=None if opset >= 18 else dynamic)

    return export_counts.export_each(OUT, names, opsets, lambda name: models[name](), write)


def main(argv=None) -> int:
    return export_counts.main(argv, description=__doc__.split("\n\n")[0], opsets="17",
                              needs=("torch", "transformers"), models=_models, export=export, out=OUT,
                              install="-r bench/requirements.txt")


if __name__ == "__main__":
    sys.exit(main())
