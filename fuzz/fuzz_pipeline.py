"""Differential fuzzing of the whole pipeline on random graphs
(fuzz/random_graphs.py): each seed's model is optimized as the CLI would
(`--target onnx`, `--opset 23`, `--target ort`, `--input-shape` with the
feeds' sizes and `--fold-size-limit 16`; the check off) and both models
are run in onnxruntime, its own optimizations off. A finding is an
exception from `optimize`, a result that onnx's checker or onnxruntime
refuses, or an output whose name, type, shape or values differ.

    python fuzz/fuzz_pipeline.py --seeds 0:2000 --save /tmp/findings
    python fuzz/fuzz_pipeline.py --seeds 1234 --variants opset23 -v   # one seed again
    python fuzz/fuzz_pipeline.py --source torch --seeds 0:500          # exported torch modules
    python fuzz/fuzz_pipeline.py --source torch-dynamo --seeds 0:50    # the same, by the dynamo exporter
    python fuzz/fuzz_pipeline.py --dtype float16 --seeds 0:2000        # the same models in half precision

Exits non-zero when there is a finding. A seed whose own model onnxruntime
refuses is counted as "invalid" (a generator limit, not a finding). A
finding may still be a knife edge rather than a bug: a comparison or an
integer cast of a value that a rewrite rounds differently (fused kernels
and folded weights round differently) can flip; look at the values first.
Where a feed holds ±inf, fuse_conv_branches is skipped: summing the
branches' kernels turns their inf - inf (NaN) into ±inf, the rule's one
output change (README); it is fuzzed on the other seeds.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import traceback

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pyonnxopt  # noqa: E402
from pyonnxopt.check import session  # noqa: E402
from pyonnxopt.errors import first_line  # noqa: E402
from float16 import to_float16  # noqa: E402
from random_graphs import random_model  # noqa: E402

# "fixed": --input-shape with the feeds' sizes (every named dim fixed);
# "tight": --fold-size-limit 16 bytes, so that the rules meet unfolded
# constant subgraphs where they would have met constants.
VARIANTS = {"default": {}, "opset23": {"opset": 23}, "ort": {"target": "ort"}, "fixed": {},
            "tight": {"fold_size_limit": 16}}


class BugLog(logging.Handler):
    """Keeps what pyonnxopt logs as its own bug (a rule's check that raised,
    which the engine survives): a finding too."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []

    def emit(self, record):
        message = record.getMessage()
        if "bug" in message:
            self.lines.append(message)


def runner(model: onnx.ModelProto):
    """A function of feeds giving the model's outputs by name (one session)."""
    s = session(model.SerializeToString())
    names = [o.name for o in s.get_outputs()]
    return lambda feeds: dict(zip(names, s.run(None, feeds)))


def differences(want: dict, have: dict, original: onnx.ModelProto, optimized: onnx.ModelProto,
                exact: dict | None = None) -> list:
    """What differs between two runs' outputs, as lines; empty if nothing.
    `exact`: the float32 original's outputs, for a float16 model (see
    no_less_accurate)."""
    found = []
    def typed(m):
        return [(o.name, o.type.tensor_type.elem_type) for o in m.graph.output]

    if typed(optimized) != typed(original):
        found.append(f"outputs {typed(original)} became {typed(optimized)}")
    for name, w in want.items():
        h = have.get(name)
        if h is None:
            continue
        if h.dtype != w.dtype or h.shape != w.shape:
            found.append(f"{name}: {w.dtype}{list(w.shape)} became {h.dtype}{list(h.shape)}")
        elif not close(h, w) and not (exact is not None and no_less_accurate(h, w, exact[name])):
            diff = np.abs(h.astype(np.float64) - w.astype(np.float64))
            found.append(f"{name}: max abs diff {np.nanmax(diff) if diff.size else 0:.3g}")
    return found


def close(have: np.ndarray, want: np.ndarray) -> bool:
    """Equal NaNs and infinities; finite values within reassociation's
    rounding (a thousandth in float32, a hundredth in float16)."""
    if have.dtype.kind != "f":
        return np.array_equal(have, want)
    tolerance = 1e-2 if have.dtype == np.float16 else 1e-3
    finite = np.isfinite(want)
    if not np.array_equal(np.isnan(have), np.isnan(want)) or not np.array_equal(have[~finite & ~np.isnan(want)],
                                                                                 want[~finite & ~np.isnan(want)]):
        return False
    scale = max(1.0, float(np.abs(want[finite]).max())) if finite.any() else 1.0
    return bool(np.allclose(have[finite], want[finite], rtol=tolerance, atol=tolerance * scale))


def no_less_accurate(have: np.ndarray, want: np.ndarray, exact: np.ndarray) -> bool:
    """Whether a float16 result is as near the float32 original's output as
    the float16 original is (within twice its error, or a hundredth of the
    scale), its NaN and infinities where the original has them. Half's
    rounding is coarse: a scale moved into a weight (fuse_matmul_scale)
    rounds the attention scores elsewhere, and a Softmax or a LayerNorm of
    large values magnifies that past the plain comparison, with neither
    model nearer the exact result."""
    finite = np.isfinite(want)
    if have.dtype != np.float16 or not np.array_equal(np.isfinite(have), finite) or not finite.any():
        return False
    h, w, e = (a[finite].astype(np.float64) for a in (have, want, exact))
    scale = max(1.0, float(np.abs(w).max()))
    return float(np.abs(h - e).max()) <= 2 * float(np.abs(w - e).max()) + 1e-2 * scale


def other_sizes(model: onnx.ModelProto, run, feeds: dict, seed: int) -> tuple:
    """Feeds with new sizes for the inputs' named dims (one size per name),
    and the original's outputs on them; (None, None) where the original
    does not run there or contradicts its own stated output dims. The
    result must agree there too: a rewrite may rely on what the model
    states, not on the sizes it was tried at. Skipped where an output is
    empty or two runs of the original differ."""
    if model.graph.value_info:  # stated sizes hold only at the feeds' sizes
        return None, None
    rng = np.random.default_rng(seed)
    sizes = {}
    new = {}
    for i in model.graph.input:
        if i.name not in feeds:
            continue
        dims = []
        for d, size in zip(i.type.tensor_type.shape.dim, feeds[i.name].shape):
            if d.dim_param and size > 1:  # (a named dim of 1 may broadcast by chance: it stays)
                sizes.setdefault(d.dim_param, int(rng.choice([s for s in range(2, 8) if s != size])))
            dims.append(sizes.get(d.dim_param, size))
        new[i.name] = rng.standard_normal(dims).astype(feeds[i.name].dtype)
    if not sizes:
        return None, None
    try:
        want, again = run(new), run(new)
    except Exception:
        return None, None
    if any(want[k].size == 0 or not np.array_equal(want[k], again[k], equal_nan=True) for k in want):
        return None, None  # undefined there: onnxruntime's Concat skips an empty input of any shape
    for o in model.graph.output:
        stated = [d.dim_value if d.HasField("dim_value") else None for d in o.type.tensor_type.shape.dim]
        if any(s is not None and s != n for s, n in zip(stated, want[o.name].shape)):
            return None, None
    return new, want


def make_model(source: str, seed: int, dtype: str = "float32") -> tuple:
    """(model, feeds, float32 model): the last is the model a float16 one
    was made from, None for float32."""
    if source in ("torch", "torch-dynamo"):
        from random_torch import random_torch_model

        model, feeds = random_torch_model(seed, dynamo=source == "torch-dynamo")
    else:
        model, feeds = random_model(seed)
    if dtype != "float16":
        return model, feeds, None
    return (*to_float16(model, feeds), model)


def float32_outputs(model: onnx.ModelProto):
    """A function of float16 feeds giving the float32 `model`'s outputs on them."""
    run = runner(model)
    return lambda feeds: run({k: v.astype(np.float32) if v.dtype == np.float16 else v for k, v in feeds.items()})


def check_seed(seed: int, variants, verbose: bool = False, save: str | None = None, source: str = "graphs",
               dtype: str = "float32") -> tuple:
    """(status, lines): status is "ok", "invalid" or "finding"."""
    try:
        model, feeds, full = make_model(source, seed, dtype)
        onnx.checker.check_model(model)
        run = runner(model)
        want = run(feeds)
    except Exception as e:  # the generator's limit (or bug): onnxruntime refuses its own model
        return "invalid", [f"seed {seed}: invalid model: {type(e).__name__}: {first_line(e)[:200]}"]
    # onnxruntime runs a half op without a half kernel in float32, and keeps
    # float32 between such ops: whether a value overflows, or is rounded to
    # half before a QuantizeLinear rounds it again, depends on which ops a
    # rewrite leaves around it.
    if dtype == "float16" and any(w.dtype == np.float16 and not np.isfinite(w).all() for w in want.values()):
        return "invalid", [f"seed {seed}: the float16 model overflows (or reads NaN): not compared"]
    if dtype == "float16" and any(n.op_type == "QuantizeLinear" for n in model.graph.node):
        return "invalid", [f"seed {seed}: a float16 model that quantizes: not compared"]
    full_check = checks_fully(model)
    other_feeds, other_want = other_sizes(model, run, feeds, seed)
    exact = float32_outputs(full) if full is not None else None
    exact_here = exact(feeds) if exact else None
    exact_there = exact(other_feeds) if exact and other_feeds is not None else None
    # fuse_conv_branches' one output change is on infinite inputs (module docstring)
    skipped = {"skip": ["fuse_conv_branches"]} if any(np.isinf(f).any() for f in feeds.values()
                                                       if f.dtype.kind == "f") else {}
    lines = []
    bugs = BugLog()
    logging.getLogger("pyonnxopt").addHandler(bugs)
    for variant in variants:
        bugs.lines.clear()
        try:
            options = dict(VARIANTS[variant], **skipped)
            if variant == "fixed":
                options["input_shapes"] = {name: list(feed.shape) for name, feed in feeds.items()}
            optimized, _ = pyonnxopt.optimize(model, check_outputs=False, **options)
            proto = optimized.to_onnx()
            onnx.checker.check_model(proto, full_check=full_check)
            run_optimized = runner(proto)
            problems = differences(want, run_optimized(feeds), model, proto, exact_here)
            if other_feeds is not None and not problems and variant != "fixed":
                sizes = {k: list(v.shape) for k, v in other_feeds.items()}
                there = differences(other_want, run_optimized(other_feeds), model, proto, exact_there)
                problems = [f"at {sizes}: {p}" for p in there]
        except Exception as e:
            if isinstance(e, pyonnxopt.errors.Error) and str(e).startswith("--opset"):
                # onnx's version converter failed, and the error says so: a refusal
                if verbose:
                    print(f"seed {seed} {variant}: refused: {first_line(e)[:300]}")
                continue
            proto = None
            problems = [f"{type(e).__name__}: {first_line(e)[:300]}"]
            if verbose:
                traceback.print_exc()
        problems += list(dict.fromkeys(bugs.lines))
        if problems:
            lines += [f"seed {seed} {variant}: {p}" for p in problems]
            if save:
                os.makedirs(save, exist_ok=True)
                stem = os.path.join(save, f"{source}{seed}" + ("_float16" if dtype == "float16" else ""))
                onnx.save(model, stem + ".onnx")
                if proto is not None:
                    onnx.save(proto, f"{stem}_{variant}.onnx")
    logging.getLogger("pyonnxopt").removeHandler(bugs)
    return ("finding" if lines else "ok"), lines


def checks_fully(model: onnx.ModelProto) -> bool:
    """Whether onnx's full check (with its strict shape inference) takes the
    model: it refuses an output without a shape, which onnxruntime runs."""
    try:
        onnx.checker.check_model(model, full_check=True)
        return True
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError):
        return False


def parse_seeds(text: str) -> range:
    if ":" in text:
        a, b = text.split(":")
        return range(int(a), int(b))
    return range(int(text), int(text) + 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0:200", help="A:B (B excluded) or one seed")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated: " + ", ".join(VARIANTS))
    ap.add_argument("--source", choices=["graphs", "torch", "torch-dynamo"], default="graphs",
                    help="random graphs (fuzz/random_graphs.py) or torch modules (fuzz/random_torch.py) exported by "
                         "the TorchScript or the dynamo exporter")
    ap.add_argument("--dtype", choices=["float32", "float16"], default="float32",
                    help="float16: every float32 type, tensor and Cast of the model made float16 (fuzz/float16.py)")
    ap.add_argument("--save", help="folder for the models of each finding")
    ap.add_argument("-v", "--verbose", action="store_true", help="tracebacks, and the invalid seeds' reasons")
    args = ap.parse_args(argv)
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        ap.error(f"--variants: unknown {', '.join(unknown)} (choose from {', '.join(VARIANTS)})")
    counts = {"ok": 0, "invalid": 0, "finding": 0}
    start = time.time()
    for seed in parse_seeds(args.seeds):
        status, lines = check_seed(seed, variants, args.verbose, args.save, args.source, args.dtype)
        counts[status] += 1
        for line in lines if status == "finding" or args.verbose else []:
            print(line, flush=True)
    print(f"{sum(counts.values())} seeds in {time.time() - start:.0f} s: {counts['ok']} ok, "
          f"{counts['finding']} with findings, {counts['invalid']} invalid")
    return 1 if counts["finding"] else 0


if __name__ == "__main__":
    sys.exit(main())
