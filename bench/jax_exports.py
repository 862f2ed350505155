"""JAX/Flax models exported by jax2onnx, optimized three ways and counted
against onnxslim and onnxsim.

    pip install jax flax jax2onnx            # not in requirements.txt: torch's zoo does not need them
    python bench/jax_exports.py                          # bench/out/jax, every model at opsets 18 and 23
    python bench/jax_exports.py --models decoder,vit --opsets 23

jax2onnx writes what torch's exporters do not: Flax's LayerNorm with the
variance as E[x^2] - E[x]^2 clamped at 0, NHWC convolutions between
Transposes, attention masks applied after the Softmax and renormalized, and
`jnp.where(mask, s, -1e9)` masks. Every model has random weights (seed 0);
each result is checked in onnxruntime by `pyonnxopt optimize` itself, and a
row reads "FAILED" where that check or the run failed.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _export_counts as export_counts  # noqa: E402

OUT = os.path.join(HERE, "out", "jax")


def _models():
    """{name: (make module, input specs)}: built only when jax is there."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    def rngs():
        return nnx.Rngs(0)

    class Block(nnx.Module):
        def __init__(self, d, heads, r, rms=False, causal=False):
            norm = nnx.RMSNorm if rms else nnx.LayerNorm
            self.n1, self.n2 = norm(d, rngs=r), norm(d, rngs=r)
            self.att = nnx.MultiHeadAttention(num_heads=heads, in_features=d, decode=False, rngs=r,
                                              deterministic=True)
            self.f1, self.f2, self.causal = nnx.Linear(d, 4 * d, rngs=r), nnx.Linear(4 * d, d, rngs=r), causal

        def __call__(self, x):
            mask = nnx.make_causal_mask(jnp.ones(x.shape[:2])) if self.causal else None
            x = x + self.att(self.n1(x), mask=mask)
            return x + self.f2(nnx.gelu(self.f1(self.n2(x))))

    class Encoder(nnx.Module):
        def __init__(self, r, rms=False, causal=False):
            self.emb = nnx.Embed(100, 64, rngs=r)
            self.blocks = nnx.List([Block(64, 4, r, rms, causal) for _ in range(2)])
            self.head = nnx.Linear(64, 100, rngs=r)

        def __call__(self, ids):
            x = self.emb(ids)
            for b in self.blocks:
                x = b(x)
            return self.head(x)

    class PaddedEncoder(nnx.Module):
        def __init__(self, r):
            self.emb, self.norm = nnx.Embed(100, 64, rngs=r), nnx.LayerNorm(64, rngs=r)
            self.att = nnx.MultiHeadAttention(num_heads=4, in_features=64, decode=False, rngs=r, deterministic=True)

        def __call__(self, ids, keep):
            x = self.emb(ids)
            return self.norm(x + self.att(x, mask=nnx.make_attention_mask(keep, keep)))

    class Decoder(nnx.Module):
        """Hand-written causal attention: jnp.where(mask, scores, -1e9)."""

        def __init__(self, r):
            self.emb, self.qkv = nnx.Embed(100, 64, rngs=r), nnx.Linear(64, 192, rngs=r)
            self.o, self.n = nnx.Linear(64, 64, rngs=r), nnx.RMSNorm(64, rngs=r)

        def __call__(self, ids):
            x = self.emb(ids)
            b, t, _ = x.shape
            q, k, v = (z.reshape(b, t, 4, 16).transpose(0, 2, 1, 3) for z in jnp.split(self.qkv(self.n(x)), 3, -1))
            s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), (q @ k.swapaxes(-1, -2)) * 0.25, -1e9)
            return x + self.o((jax.nn.softmax(s, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(b, t, 64))

    class ViT(nnx.Module):
        def __init__(self, r):
            self.patch = nnx.Conv(3, 64, (8, 8), strides=(8, 8), padding="VALID", rngs=r)
            self.cls = nnx.Param(jax.random.normal(jax.random.key(1), (1, 1, 64)) * 0.02)
            self.blocks = nnx.List([Block(64, 4, r) for _ in range(2)])
            self.norm, self.head = nnx.LayerNorm(64, rngs=r), nnx.Linear(64, 10, rngs=r)

        def __call__(self, x):
            b = x.shape[0]
            x = jnp.concatenate([jnp.broadcast_to(self.cls[...], (b, 1, 64)), self.patch(x).reshape(b, -1, 64)], 1)
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.norm(x)[:, 0])

    class Down(nnx.Module):
        def __init__(self, ci, co, r):
            self.conv, self.norm = nnx.Conv(ci, co, (3, 3), rngs=r), nnx.GroupNorm(co, num_groups=4, rngs=r)

        def __call__(self, x):
            return nnx.silu(self.norm(self.conv(x)))

    class UNet(nnx.Module):
        def __init__(self, r):
            self.d1, self.d2, self.d3 = Down(3, 16, r), Down(16, 32, r), Down(32, 16, r)
            self.up = nnx.ConvTranspose(32, 16, (2, 2), strides=(2, 2), rngs=r)
            self.out = nnx.Conv(16, 3, (1, 1), rngs=r)

        def __call__(self, x):
            a = self.d1(x)
            b = self.d2(nnx.avg_pool(a, window_shape=(2, 2), strides=(2, 2)))
            return self.out(self.d3(jnp.concatenate([a, self.up(b)], axis=-1)))

    ids = jax.ShapeDtypeStruct((2, 16), jnp.int32)
    dynamic_ids = jax.ShapeDtypeStruct(("B", "T"), jnp.int32)
    return {
        "encoder": (lambda: Encoder(rngs()), [ids]),
        "encoder_rms_causal": (lambda: Encoder(rngs(), rms=True, causal=True), [ids]),
        "padded_encoder": (lambda: PaddedEncoder(rngs()), [dynamic_ids, jax.ShapeDtypeStruct(("B", "T"), jnp.bool_)]),
        "decoder": (lambda: Decoder(rngs()), [dynamic_ids]),
        "vit": (lambda: ViT(rngs()), [(2, 32, 32, 3)]),
        "unet": (lambda: UNet(rngs()), [(1, 16, 16, 3)]),
    }


def export(models: dict, names, opsets) -> list:
    from jax2onnx import to_onnx

    def write(made, name, opset, path):
        make, inputs = made
        to_onnx(make(), inputs, model_name=name, opset=opset, return_mode="file", output_path=path)

    return export_counts.export_each(OUT, names, opsets, models.get, write)


def main(argv=None) -> int:
    return export_counts.main(argv, description=__doc__.split("\n\n")[0], opsets="18,23",
                              needs=("jax", "flax", "jax2onnx"), models=_models, export=export, out=OUT)

if __name__ == "__main__":
    sys.exit(main())
