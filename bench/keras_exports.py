"""Keras models converted by tf2onnx, optimized three ways and counted
against onnxslim and onnxsim.

    pip install tensorflow tf2onnx           # not in requirements.txt: torch's zoo does not need them
    python bench/keras_exports.py                         # bench/out/keras, every model at opsets 13 and 17
    python bench/keras_exports.py --models transformer --opsets 17

tf2onnx writes what torch's exporters do not: Keras's MultiHeadAttention as
`[B*H, S, d]` products between 5-d Unsqueezes, Transposes and Reshapes with
targets computed at run time (`ReduceProd` of the batch dims), its
LayerNormalization folded into one scale and shift, Dense layers on 3-d
inputs as Reshape -> MatMul -> Reshape, and NHWC convolutions between
Transposes. Every model has random weights (seed 0), biases and norm
parameters included; each result is checked in onnxruntime by `pyonnxopt
optimize` itself, and a row reads "FAILED" where that check or the run
failed.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _export_counts as export_counts  # noqa: E402

OUT = os.path.join(HERE, "out", "keras")


def _models():
    """{name: make () -> (keras.Model, input specs)}: built only when
    tensorflow is there."""
    import keras
    import numpy as np
    from keras import layers

    def transformer(seq):
        """Two encoder blocks; the exact GELU written with erf (Keras's own
        "gelu" becomes `Erfc`, which tf2onnx emits though ONNX has no such
        op)."""
        rng = np.random.default_rng(0)
        d, heads = 64, 4
        tokens = keras.Input((seq,), dtype="int32", name="tokens")
        x = layers.Embedding(1000, d)(tokens)
        if seq is not None:
            x = x + rng.normal(0, 0.1, (1, seq, d)).astype("float32")
        for _ in range(2):
            x = layers.LayerNormalization(epsilon=1e-6)(x + layers.MultiHeadAttention(heads, d // heads)(x, x))
            f = layers.Dense(4 * d, activation=lambda v: 0.5 * v * (1.0 + keras.ops.erf(v * 0.7071067811865476)))(x)
            x = layers.LayerNormalization(epsilon=1e-6)(x + layers.Dense(d)(f))
        out = layers.Dense(5)(layers.GlobalAveragePooling1D()(x))
        return keras.Model(tokens, out), [("tokens", (None, seq), "int32")]

    def application(make, size):
        return make(weights=None, input_shape=(size, size, 3)), [("input", (None, size, size, 3), "float32")]

    apps = keras.applications
    return {
        "transformer": lambda: transformer(32),
        "transformer_dynamic_length": lambda: transformer(None),
        "nasnetmobile": lambda: application(apps.NASNetMobile, 96),
        "mobilenetv2": lambda: application(apps.MobileNetV2, 96),
    }


def _randomized(model):
    """Weights that Keras starts as all 0 or all 1 (biases, norm scales and
    shifts, BatchNorm statistics) drawn at random: a 0 bias or a 1 scale
    would let the optimizers drop what a trained model keeps."""
    import numpy as np

    rng = np.random.default_rng(0)
    for w in model.weights:
        v = np.asarray(w.numpy())
        if v.dtype.kind != "f" or v.size == 0 or not np.all(v == v.flat[0]) or v.flat[0] not in (0.0, 1.0):
            continue
        v = 1.0 + rng.uniform(-0.3, 0.3, v.shape) if v.flat[0] == 1.0 else rng.normal(0, 0.1, v.shape)
        w.assign(v.astype("float32"))
    return model


def export(models: dict, names, opsets) -> list:
    import tensorflow as tf
    import tf2onnx

    def write(made, name, opset, path):
        model, inputs = made
        spec = tuple(tf.TensorSpec(shape, getattr(tf, dtype), name=n) for n, shape, dtype in inputs)
        tf2onnx.convert.from_keras(_randomized(model), input_signature=spec, opset=opset, output_path=path)

    return export_counts.export_each(OUT, names, opsets, lambda name: models[name](), write)


def main(argv=None) -> int:
    return export_counts.main(argv, description=__doc__.split("\n\n")[0], opsets="13,17",
                              needs=("tensorflow", "tf2onnx"), models=_models, export=export, out=OUT)

if __name__ == "__main__":
    sys.exit(main())
