"""Ultralytics YOLO models, built from their yaml with random weights,
exported by torch, optimized three ways and counted against onnxslim and
onnxsim.

    pip install ultralytics                 # not in requirements.txt: torch's zoo does not need it
    python bench/yolo_exports.py                          # bench/out/yolo, every model at opset 17
    python bench/yolo_exports.py --models yolo11n,yolov8n-seg --opsets 17

YOLO is what most users of these tools optimize (onnxslim's own bench is
YOLO's), and ultralytics writes what the zoo's detectors do not: C2f/C3k2
blocks of Split and Concat, SPPF's chained MaxPools, a DFL head (Softmax
over 16 bins, a 1x1 Conv), anchors and strides as constants of the
export's size, YOLOv10's top-k selection, YOLO12's area attention, and
segmentation, pose and rotated-box heads. Each model is exported by
`torch.onnx.export` (TorchScript) at 320x320 as ultralytics' own exporter
leaves it (head in export mode, BatchNorms not fused, so the optimizers
fold them), with BatchNorm statistics drawn at random; "_dyn" exports have
batch, height and width dynamic (the anchors stay those of 320x320, which
the check's 320 meets). Each result is checked in onnxruntime by
`pyonnxopt optimize` itself; a row reads "FAILED" where that check or the
run failed.
"""

from __future__ import annotations

import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _export_counts as export_counts  # noqa: E402

OUT = os.path.join(HERE, "out", "yolo")
SIZE = 320

# name: the task its yaml builds
_MODELS = {"yolov8n": "detect", "yolo11n": "detect", "yolov10n": "detect", "yolo12n": "detect",
           "yolov5nu": "detect", "yolov8n-seg": "segment", "yolov8n-pose": "pose", "yolo11n-obb": "obb",
           "yolo11n-cls": "classify"}


def _make(name: str, dynamic: bool):
    """(module in export mode, dynamic axes or None)."""
    import torch
    from ultralytics.nn import tasks

    kind = {"detect": tasks.DetectionModel, "segment": tasks.SegmentationModel, "pose": tasks.PoseModel,
            "obb": tasks.OBBModel, "classify": tasks.ClassificationModel}[_MODELS[name]]
    torch.manual_seed(0)
    model = kind(f"{name}.yaml", verbose=False).eval()
    with torch.no_grad():
        for m in model.modules():  # a fresh BatchNorm is the identity, which would fold away as nothing
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.1)
    for m in model.modules():  # as ultralytics' exporter sets its heads
        if hasattr(m, "export"):
            m.export, m.format = True, "onnx"
    model(torch.zeros(1, 3, SIZE, SIZE))  # the heads build their anchors on the first call
    return model, ({"images": {0: "batch", 2: "height", 3: "width"}} if dynamic else None)


def _models():
    """{name: maker}, a static and a dynamic export of each: built only when ultralytics is there."""
    return {f"{name}{suffix}": (lambda name=name, dynamic=bool(suffix): _make(name, dynamic))
            for name in _MODELS for suffix in ("", "_dyn")}


def export(models: dict, names, opsets) -> list:
    import torch

    def write(made, name, opset, path):
        model, dynamic = made
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's notes drown the rows
            torch.onnx.export(model, (torch.randn(1, 3, SIZE, SIZE),), path, input_names=["images"],
                              output_names=["output0"], opset_version=opset, dynamo=False, dynamic_axes=dynamic)

    return export_counts.export_each(OUT, names, opsets, lambda name: models[name](), write)


def main(argv=None) -> int:
    os.environ.setdefault("YOLO_OFFLINE", "1")  # no update checks: these machines have no network
    return export_counts.main(argv, description=__doc__.split("\n\n")[0], opsets="17",
                              needs=("torch", "ultralytics"), models=_models, export=export, out=OUT,
                              install="ultralytics")


if __name__ == "__main__":
    sys.exit(main())
