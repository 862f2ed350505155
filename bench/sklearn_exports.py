"""scikit-learn models converted by skl2onnx, optimized three ways and
counted against onnxslim and onnxsim.

    pip install scikit-learn skl2onnx        # not in requirements.txt: torch's zoo does not need them
    python bench/sklearn_exports.py                         # bench/out/sklearn, every model at opsets 15 and 17
    python bench/sklearn_exports.py --models tfidf_logreg --opsets 17

skl2onnx writes what the deep-learning exporters do not: ai.onnx.ml ops
(LinearClassifier, Scaler, OneHotEncoder, TfIdfVectorizer, ZipMap), string
inputs, classifiers that end in a ZipMap (a sequence of maps from label to
probability), and scoring arithmetic spelled out op by op (GaussianNB's
log-likelihoods, QDA's quadratic forms, polynomial features as a Mul per
pair of columns, KNN as TopK over distances). Every model is fitted on
seeded random data; `pyonnxopt optimize` checks each result in onnxruntime
(strings drawn from the model's own categories and vocabulary), and a row
reads "FAILED" where that check or the run failed.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _export_counts as export_counts  # noqa: E402

OUT = os.path.join(HERE, "out", "sklearn")


def _models():
    """{name: make () -> (fitted estimator, skl2onnx initial types, options)}:
    built only when scikit-learn and skl2onnx are there."""
    import numpy as np
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType
    from sklearn import (discriminant_analysis, feature_extraction, gaussian_process, linear_model, naive_bayes,
                         neighbors, neural_network, pipeline, preprocessing)

    rng = np.random.default_rng(0)
    x = rng.standard_normal((80, 6)).astype(np.float32)
    classes = (x[:, 0] + x[:, 1] > 0).astype(int) + (x[:, 2] > 0.5).astype(int)
    target = x @ rng.standard_normal(6).astype(np.float32)
    floats = [("x", FloatTensorType([None, 6]))]
    docs = np.array(["the cat sat", "a dog ran", "the dog sat down", "cats and dogs", "a cat ran"] * 4)

    def fitted(estimator, y=classes, data=x, types=floats):
        return lambda: (estimator.fit(data, y), types)

    return {
        "logreg": fitted(linear_model.LogisticRegression(max_iter=500)),
        "gaussian_nb": fitted(naive_bayes.GaussianNB()),
        "qda": fitted(discriminant_analysis.QuadraticDiscriminantAnalysis()),
        "mlp": fitted(neural_network.MLPClassifier((8, 8), max_iter=300, random_state=0)),
        "knn": fitted(neighbors.KNeighborsClassifier(3)),
        "poly_scale_logreg": fitted(pipeline.make_pipeline(preprocessing.PolynomialFeatures(2),
                                                           preprocessing.StandardScaler(),
                                                           linear_model.LogisticRegression(max_iter=500))),
        "gaussian_process": fitted(gaussian_process.GaussianProcessRegressor(), y=target),
        "tfidf_logreg": fitted(pipeline.make_pipeline(feature_extraction.text.TfidfVectorizer(),
                                                      linear_model.LogisticRegression()),
                               y=np.arange(len(docs)) % 2, data=docs, types=[("text", StringTensorType([None, 1]))]),
    }


def export(models: dict, names, opsets) -> list:
    from skl2onnx import convert_sklearn

    def write(made, name, opset, path):
        estimator, types = made
        onx = convert_sklearn(estimator, initial_types=types, target_opset={"": opset, "ai.onnx.ml": 3})
        with open(path, "wb") as f:
            f.write(onx.SerializeToString())

    return export_counts.export_each(OUT, names, opsets, lambda name: models[name](), write)


def main(argv=None) -> int:
    return export_counts.main(argv, description=__doc__.split("\n\n")[0], opsets="15,17",
                              needs=("sklearn", "skl2onnx"), install="scikit-learn skl2onnx", models=_models,
                              export=export, out=OUT)


if __name__ == "__main__":
    sys.exit(main())
