"""The benchmark zoo: standard torchvision and transformers architectures with
random weights, exported to ONNX the ways people export them.

    python bench/zoo.py                    # build what is missing in bench/out/zoo/
    python bench/zoo.py --list             # the entries and whether they are built
    python bench/zoo.py --models resnet50,bert_base --force

Nothing is downloaded: weights are random (torch.manual_seed(0) before each
model is made), transformers models come from their default configs
(BertConfig(), GPT2Config(), T5Config()). Each entry is exported in its own
subprocess, one at a time, to bench/out/zoo/NAME/model.onnx with a meta.json
beside it (the recipe, the example input shapes, versions, export time). An
entry is rebuilt only when it is missing or its recipe changed.

Variants show the residue that real exports leave behind: `_nofold` is the
TorchScript exporter with do_constant_folding=False, `_train` exports a
model.train() module with training=TrainingMode.TRAINING (Dropout with a
training_mode input, BatchNormalization with training_mode=1), `_dyn` has
dynamic axes, `_dynamo` is the torch.export-based exporter with its own
optimizer off (optimize=False). Everything else is the TorchScript exporter
(dynamo=False) at opset 17.

torchvision: the PyPI wheel of torchvision matching torch 2.13.0+cpu is a
CUDA build whose C++ ops (_C.so) cannot load without the CUDA libraries, and
`import torchvision` then fails. `_install_torchvision_ops()` defines the two
ops the detection models need, torchvision::nms and torchvision::roi_align,
with plain PyTorch kernels before torchvision is imported; the ONNX export
maps them to NonMaxSuppression and RoiAlign exactly as with the C++ ops.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
ZOO_DIR = os.path.join(HERE, "out", "zoo")
RECIPE_VERSION = 1  # bump when an export recipe changes in a way the fields below do not show
OPSET = 17
DYNAMO_OPSET = 18
SEED = 0


@dataclass(frozen=True)
class Entry:
    name: str
    source: str  # builder key in BUILDERS
    fold: bool = True  # do_constant_folding (TorchScript exporter)
    train: bool = False  # model.train() + TrainingMode.TRAINING
    dynamic: bool = False  # dynamic axes
    exporter: str = "torchscript"  # or "dynamo"
    note: str = ""


ENTRIES = [
    Entry("resnet50", "resnet50"),
    Entry("resnet50_nofold", "resnet50", fold=False),
    Entry("resnet50_train", "resnet50", train=True),
    Entry("resnet50_dyn", "resnet50", dynamic=True, note="batch, height, width dynamic"),
    Entry("resnet50_dynamo", "resnet50", exporter="dynamo", note="torch.export-based exporter, optimize=False"),
    Entry("mobilenet_v3_large", "mobilenet_v3_large"),
    Entry("mobilenet_v3_large_train", "mobilenet_v3_large", train=True),
    Entry("efficientnet_b0", "efficientnet_b0"),
    Entry("efficientnet_b0_nofold", "efficientnet_b0", fold=False),
    Entry("convnext_tiny", "convnext_tiny"),
    Entry("vit_b_16", "vit_b_16"),
    Entry("vit_b_16_dyn", "vit_b_16", dynamic=True, note="batch dynamic"),
    Entry("swin_t", "swin_t"),
    Entry("ssdlite320", "ssdlite320_mobilenet_v3_large", note="ssdlite320_mobilenet_v3_large, one 320x320 image"),
    Entry("fasterrcnn_mobilenet_v3_large_320_fpn", "fasterrcnn_mobilenet_v3_large_320_fpn", note="one 320x320 image"),
    Entry("bert_base", "bert_base", note="BertConfig(), seq 128"),
    Entry("bert_base_nofold", "bert_base", fold=False),
    Entry("bert_base_train", "bert_base", train=True),
    Entry("bert_base_dyn", "bert_base", dynamic=True, note="batch, sequence dynamic"),
    Entry("bert_base_dynamo_dyn", "bert_base", exporter="dynamo", dynamic=True,
          note="torch.export-based exporter, optimize=False; batch, sequence dynamic (exported at batch 2)"),
    Entry("bert_base_perturbed", "bert_base_perturbed",
          note="bert_base with N(0, 0.02) added to every parameter: Linear biases not 0, LayerNorm weights not 1"),
    Entry("gpt2_past", "gpt2_past", dynamic=True,
          note="GPT2Config(), one new token over 16 past tokens; batch, seq, past_seq dynamic"),
    Entry("gpt2_past_nofold", "gpt2_past", fold=False, dynamic=True),
    Entry("gpt2_past_perturbed", "gpt2_past_perturbed", dynamic=True,
          note="gpt2_past with N(0, 0.02) added to every parameter: biases not 0, LayerNorm weights not 1"),
    Entry("t5_encoder", "t5_encoder", note="T5Config() (t5-small sizes), seq 128"),
    Entry("t5_encoder_dyn", "t5_encoder", dynamic=True, note="batch, sequence dynamic"),
]
BY_NAME = {e.name: e for e in ENTRIES}


def model_path(name: str, zoo_dir: str = ZOO_DIR) -> str:
    return os.path.join(zoo_dir, name, "model.onnx")


def recipe(entry: Entry) -> dict:
    """What determines the exported bytes: the entry, the seed, the versions."""
    from importlib.metadata import PackageNotFoundError, version

    versions = {}
    for pkg in ("torch", "torchvision", "transformers", "onnx", "onnxscript"):
        try:
            versions[pkg] = version(pkg)
        except PackageNotFoundError:
            versions[pkg] = None
    return {"recipe_version": RECIPE_VERSION, "entry": asdict(entry), "seed": SEED, "opset": OPSET,
            "dynamo_opset": DYNAMO_OPSET, "versions": versions}


def recipe_key(entry: Entry) -> str:
    return hashlib.sha256(json.dumps(recipe(entry), sort_keys=True).encode()).hexdigest()[:16]


def load_meta(name: str, zoo_dir: str = ZOO_DIR) -> "dict | None":
    try:
        with open(os.path.join(zoo_dir, name, "meta.json")) as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def is_built(entry: Entry, zoo_dir: str = ZOO_DIR) -> bool:
    meta = load_meta(entry.name, zoo_dir)
    return (meta is not None and meta.get("recipe_key") == recipe_key(entry)
            and os.path.exists(model_path(entry.name, zoo_dir)))


# ---------------------------------------------------------------- torchvision ops


def _nms_kernel(dets, scores, iou_threshold: float):
    """Greedy NMS as torchvision's CPU kernel: indices kept, by decreasing score."""
    import torch

    order = torch.argsort(scores, descending=True)
    boxes = dets[order]
    x1, y1, x2, y2 = boxes.unbind(1)
    area = (x2 - x1) * (y2 - y1)
    removed = torch.zeros(boxes.shape[0], dtype=torch.bool)
    keep = []
    for i in range(boxes.shape[0]):
        if removed[i]:
            continue
        keep.append(i)
        w = (torch.minimum(x2[i], x2) - torch.maximum(x1[i], x1)).clamp(min=0)
        h = (torch.minimum(y2[i], y2) - torch.maximum(y1[i], y1)).clamp(min=0)
        inter = w * h
        removed |= inter / (area[i] + area - inter) > iou_threshold
    return order[torch.tensor(keep, dtype=torch.int64)]


def _roi_align_kernel(input, rois, spatial_scale: float, pooled_height: int, pooled_width: int,
                      sampling_ratio: int, aligned: bool):
    import importlib

    module = importlib.import_module("torchvision.ops.roi_align")  # the module, not the function of that name
    # torchvision's own pure-PyTorch transcription of its kernel, without the
    # torch.compile wrapper (that would need a compiler and minutes).
    fn = getattr(module._roi_align, "__wrapped__", module._roi_align)
    return fn(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned)


def _has_ops() -> bool:  # a def, not a lambda: TorchScript compiles it inside batched_nms
    return True


_OPS_LIB = None


def _install_torchvision_ops() -> None:
    """Makes `import torchvision` work when its C++ ops cannot load (see the
    module docstring). Does nothing where they load."""
    global _OPS_LIB
    import glob
    import importlib.util

    import torch

    if _OPS_LIB is not None:
        return
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        return  # not installed: the torchvision entries fail with ImportError
    for path in glob.glob(os.path.join(os.path.dirname(spec.origin), "_C*.so")):
        try:
            torch.ops.load_library(path)
            return  # the real ops
        except OSError:
            pass
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")  # only for import
    lib.define("roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
               "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor")
    lib.impl("nms", _nms_kernel, "CPU")
    lib.impl("roi_align", _roi_align_kernel, "CPU")
    _OPS_LIB = lib
    import torchvision.extension
    import torchvision.ops.roi_align  # noqa: F401

    torchvision.extension._has_ops = _has_ops
    sys.modules["torchvision.ops.roi_align"]._has_ops = _has_ops


# ---------------------------------------------------------------- builders
# Each returns (module, example args, input names, output names, dynamic axes).


def _vision(arch: str, size: int = 224):
    import torch
    import torchvision

    def build(dynamic: bool):
        model = getattr(torchvision.models, arch)(weights=None)
        x = torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(SEED))
        axes = None
        if dynamic:
            spatial = {} if arch.startswith(("vit", "swin")) else {2: "height", 3: "width"}
            axes = {"image": {0: "batch", **spatial}, "logits": {0: "batch"}}
        return model, (x,), ["image"], ["logits"], axes

    return build


def _detection(arch: str, size: int = 320):
    import torch
    from torchvision.models import detection

    def build(dynamic: bool):
        model = getattr(detection, arch)(weights=None, weights_backbone=None)
        x = torch.rand(3, size, size, generator=torch.Generator().manual_seed(SEED))
        return model, ([x],), ["image"], ["boxes", "scores", "labels"], None

    return build


def _by_keyword(model, names, outputs):
    """Wraps a transformers model: positional inputs passed by keyword, a tuple of outputs."""
    import torch

    class ByKeyword(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *args):
            out = self.model(**dict(zip(names, args)))
            return tuple(out[k] for k in outputs)

    return ByKeyword()


def _bert(dynamic: bool):
    import torch
    from transformers import BertConfig, BertModel

    model = BertModel(BertConfig())
    g = torch.Generator().manual_seed(SEED)
    seq = 128
    args = (torch.randint(0, 30522, (1, seq), generator=g), torch.ones(1, seq, dtype=torch.int64),
            torch.zeros(1, seq, dtype=torch.int64))
    names = ["input_ids", "attention_mask", "token_type_ids"]
    outputs = ["last_hidden_state", "pooler_output"]
    axes = None
    if dynamic:
        axes = {**{n: {0: "batch", 1: "seq"} for n in names}, "last_hidden_state": {0: "batch", 1: "seq"},
                "pooler_output": {0: "batch"}}
    return _by_keyword(model, names, outputs), args, names, outputs, axes


def _t5_encoder(dynamic: bool):
    import torch
    from transformers import T5Config, T5EncoderModel

    model = T5EncoderModel(T5Config())
    g = torch.Generator().manual_seed(SEED)
    seq = 128
    args = (torch.randint(0, 32128, (1, seq), generator=g), torch.ones(1, seq, dtype=torch.int64))
    names = ["input_ids", "attention_mask"]
    axes = None
    if dynamic:
        axes = {**{n: {0: "batch", 1: "seq"} for n in names}, "last_hidden_state": {0: "batch", 1: "seq"}}
    return _by_keyword(model, names, ["last_hidden_state"]), args, names, ["last_hidden_state"], axes


def _gpt2_past(dynamic: bool):
    """One decoding step of GPT-2: new tokens plus the past keys and values of
    every layer as flat inputs, logits plus the present ones as outputs. No
    attention_mask input, so any past length is consistent with any batch."""
    import torch
    from transformers import DynamicCache, GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config()
    model = GPT2LMHeadModel(cfg)
    layers = cfg.n_layer

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, *past):
            cache = DynamicCache(config=cfg)
            for i in range(layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.model(input_ids=input_ids, past_key_values=cache, use_cache=True)
            present = []
            for layer in out.past_key_values.layers:
                present += [layer.keys, layer.values]
            return (out.logits, *present)

    g = torch.Generator().manual_seed(SEED)
    head = cfg.n_embd // cfg.n_head
    past = [torch.randn(1, cfg.n_head, 16, head, generator=g) for _ in range(2 * layers)]
    names = ["input_ids"] + [f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    outputs = ["logits"] + [n.replace("past_key_values", "present") for n in names[1:]]
    axes = None
    if dynamic:
        axes = {"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"},
                **{n: {0: "batch", 2: "past_seq"} for n in names[1:]},
                **{n: {0: "batch", 2: "total_seq"} for n in outputs[1:]}}
    return Step(), (torch.randint(0, cfg.vocab_size, (1, 1), generator=g), *past), names, outputs, axes


def _perturbed(build):
    """`build` with N(0, 0.02) added to every parameter (seeded). The default
    initializations leave every Linear bias 0 and every LayerNorm weight 1,
    which rewrites of x + 0 and x * 1 then remove; a trained model has none
    of that."""
    import torch

    def perturbed_build(dynamic: bool):
        model, *rest = build(dynamic)
        g = torch.Generator().manual_seed(SEED + 1)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=g) * 0.02)
        return (model, *rest)

    return perturbed_build


def _builder(source: str):
    if source in ("ssdlite320_mobilenet_v3_large", "fasterrcnn_mobilenet_v3_large_320_fpn"):
        return _detection(source)
    if source == "bert_base":
        return _bert
    if source == "bert_base_perturbed":
        return _perturbed(_bert)
    if source == "gpt2_past_perturbed":
        return _perturbed(_gpt2_past)
    if source == "t5_encoder":
        return _t5_encoder
    if source == "gpt2_past":
        return _gpt2_past
    return _vision(source)


# ---------------------------------------------------------------- export (worker side)


def export(entry: Entry, out_dir: str) -> dict:
    """Builds the model with seeded random weights and exports it; returns meta."""
    import warnings

    import torch

    warnings.filterwarnings("ignore")
    torch.manual_seed(SEED)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    # nn.MultiheadAttention's inference fast path (vit_b_16) has no ONNX export.
    torch.backends.mha.set_fastpath_enabled(False)
    _install_torchvision_ops()
    t0 = time.perf_counter()
    model, args, input_names, output_names, axes = _builder(entry.source)(entry.dynamic)
    model.train(entry.train)
    build_s = time.perf_counter() - t0
    path = os.path.join(out_dir, "model.onnx")
    t0 = time.perf_counter()
    if entry.exporter == "dynamo":
        dynamic_shapes = None
        if entry.dynamic:
            # torch.export fixes a dim it sees as 1: the example batch is 2.
            args = tuple(torch.cat([a, a]) for a in args)
            dynamic_shapes = (tuple(axes.get(n) for n in input_names),)  # forward(*args): one varargs input
        with torch.no_grad():
            prog = torch.onnx.export(model, args, dynamo=True, opset_version=DYNAMO_OPSET, input_names=input_names,
                                     output_names=output_names, dynamic_shapes=dynamic_shapes, optimize=False,
                                     external_data=False)
        prog.save(path, external_data=False)
    else:
        mode = torch.onnx.TrainingMode.TRAINING if entry.train else torch.onnx.TrainingMode.EVAL
        ctx = torch.enable_grad() if entry.train else torch.no_grad()
        with ctx:
            torch.onnx.export(model, args, path, dynamo=False, opset_version=OPSET, input_names=input_names,
                              output_names=output_names, dynamic_axes=axes, do_constant_folding=entry.fold,
                              training=mode)
    export_s = time.perf_counter() - t0
    return _describe(path, args, input_names, build_s, export_s)


def _describe(path: str, args, input_names, build_s: float, export_s: float) -> dict:
    import onnx

    flat = []
    for a in args:
        flat += a if isinstance(a, (list, tuple)) else [a]
    m = onnx.load(path, load_external_data=False)
    graph_inputs = {i.name for i in m.graph.input}
    example = {}
    for n, t in zip(input_names, flat):
        if n in graph_inputs:
            example[n] = {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")}
            if not t.is_floating_point():  # token ids, masks, type ids: values in [0, high)
                example[n]["high"] = int(t.max()) + 1
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return {"file_bytes": os.path.getsize(path), "sha256": digest, "nodes": len(m.graph.node),
            "opset": next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), None),
            "example_inputs": example, "build_s": round(build_s, 3), "export_s": round(export_s, 3)}


def worker(name: str, zoo_dir: str) -> int:
    entry = BY_NAME[name]
    out_dir = os.path.join(zoo_dir, name)
    tmp_dir = out_dir + ".tmp"
    import shutil

    shutil.rmtree(tmp_dir, ignore_errors=True)
    os.makedirs(tmp_dir)
    meta = export(entry, tmp_dir)
    meta.update({"name": name, "recipe": recipe(entry), "recipe_key": recipe_key(entry)})
    with open(os.path.join(tmp_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp_dir, out_dir)
    return 0


# ---------------------------------------------------------------- driver


def build(names, zoo_dir: str = ZOO_DIR, force: bool = False, timeout_s: float = 1800, quiet: bool = False) -> dict:
    """Builds the entries that are missing (each in its own subprocess); returns {name: error or None}."""
    results = {}
    for name in names:
        entry = BY_NAME[name]
        if not force and is_built(entry, zoo_dir):
            results[name] = None
            continue
        os.makedirs(zoo_dir, exist_ok=True)
        t0 = time.perf_counter()
        if not quiet:
            print(f"exporting {name} ...", end=" ", flush=True, file=sys.stderr)
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--out", zoo_dir]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
            err = None if proc.returncode == 0 else _last_error(proc.stderr) or f"exit code {proc.returncode}"
        except subprocess.TimeoutExpired:
            err = f"timeout after {timeout_s:.0f} s"
        results[name] = err
        if not quiet:
            print(f"{'ok' if err is None else 'FAILED: ' + err} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return results


def _last_error(stderr: str) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error" in ln or "Exception" in ln:
            return ln.strip()[:300]
    return lines[-1].strip()[:300] if lines else ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", help="comma-separated entry names (default: all)")
    ap.add_argument("--out", default=ZOO_DIR, help="zoo folder (default: bench/out/zoo)")
    ap.add_argument("--force", action="store_true", help="export again even when built")
    ap.add_argument("--list", action="store_true", help="list the entries and exit")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per export")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return worker(a.worker, a.out)
    names = [n.strip() for n in a.models.split(",") if n.strip()] if a.models else [e.name for e in ENTRIES]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        ap.error(f"unknown entries {unknown}; see --list")
    if a.list:
        for n in names:
            e, meta = BY_NAME[n], load_meta(n, a.out)
            state = "built" if is_built(e, a.out) else ("stale" if meta else "missing")
            size = f"{meta['file_bytes'] / 1e6:7.1f} MB {meta['nodes']:5d} nodes" if meta else ""
            print(f"{n:40s} {state:8s} {size}  {e.note}")
        return 0
    t0 = time.perf_counter()
    results = build(names, a.out, force=a.force, timeout_s=a.timeout)
    failed = {n: e for n, e in results.items() if e}
    print(f"zoo: {len(results) - len(failed)}/{len(results)} entries ready in {a.out} "
          f"({time.perf_counter() - t0:.0f} s)")
    for n, e in failed.items():
        print(f"  {n}: {e}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
