"""`verify`: both models in onnxruntime on the same inputs, every graph output
and every intermediate both compute under the same name compared, plus the
structural diff.

Each model runs once per sample with all the intermediates as outputs. When
they would not fit in the byte budget at once (sizes from inferred shapes,
or measured on the first group), they are streamed in groups: each model
runs once per group and sample, the group is compared and dropped.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from typing import Callable, Optional

import numpy as np

from pyonnxopt import check, output_values, shapes
from pyonnxopt.errors import Error, MissingDependency, first_line
from pyonnxopt.verify import intermediates as im
from pyonnxopt.verify.inputs import input_specs, load_samples, random_feeds, validate_feeds
from pyonnxopt.verify.metrics import DEFAULT_TOLERANCES, compare_arrays, merge, tolerance
from pyonnxopt.verify.structure import structure_diff

log = logging.getLogger(__name__)

VERSION = 1
DEFAULT_BYTE_BUDGET = 2 << 30  # intermediates of both models held at once
UNKNOWN_SIZE_GUESS = 4 << 20  # per tensor of unknown shape, until one group is measured


class OnnxRuntimeFailure(Error):
    """onnxruntime cannot load or run one of the two models; the message says which and at which step."""


def verify(original, optimized, *, inputs=None, seed: int = 0, samples: int = 1, batch_sizes=(None,),
           vocab_size: Optional[int] = None, dims: Optional[dict] = None, tolerances: Optional[dict] = None, layers: bool = True,
           group_size: Optional[int] = None, byte_budget: int = DEFAULT_BYTE_BUDGET,
           progress: Optional[Callable[[str], None]] = None) -> dict:
    """Compares `optimized` with `original` (paths, bytes or onnx.ModelProto)
    in onnxruntime and returns the verify JSON (see the module docstring and
    docs). `inputs`: a path (see pyonnxopt.verify.inputs.load_samples), or a
    feed dict or list of them; else `samples` seeded random samples per batch
    size in `batch_sizes` (None: dynamic dims as the inputs module picks),
    with named dynamic dims from `dims` ({"seq": 128}).
    `tolerances` overrides DEFAULT_TOLERANCES per dtype name (an entry may
    give only atol or rtol). `group_size` caps how many tensors one run
    returns; `byte_budget` caps their bytes."""
    started = time.perf_counter()
    say = progress or (lambda message: None)
    if samples < 1:
        raise Error(f"samples must be at least 1, not {samples}")
    if group_size is not None and group_size < 1:
        raise Error(f"group_size must be at least 1, not {group_size}")
    table = resolve_tolerances(tolerances)
    a, b = im.open_model(original, "original"), im.open_model(optimized, "optimized")
    feeds, source = _samples(a, b, inputs, seed, samples, list(batch_sizes), vocab_size, dims)
    say("reading both models")
    structure = structure_diff(a.model, b.model)
    made = {name: (node.op_type, order) for name, (node, order) in im.producers(a.model).items()}
    original_inputs = {v.name for v in a.model.graph.inputs}
    original_constants = {v.name for v in a.model.graph.values if v.initializer is not None}
    records, missing = {}, []
    compared = []  # (name, op_type, order) in the order they are reported
    for v in b.model.graph.outputs:
        if v.name in made or v.name in original_inputs or v.name in original_constants:
            op_type, order = made.get(v.name, ("(graph input)" if v.name in original_inputs else "(initializer)", -1))
            compared.append((v.name, op_type, order))
        else:
            missing.append(v.name)
    output_names = [name for name, _, _ in compared]
    layer_list = []
    if layers:
        shapes.infer(a.model)  # sizes of the intermediates, in our in-memory copy only
        layer_list = im.common_intermediates(a.model, b.model)
        compared += [(i.name, i.op_type, i.order) for i in layer_list]
    info = {name: (op_type, order) for name, op_type, order in compared}
    # Where the original cannot run on generated inputs, its dims are the likely cause.
    hint = "" if inputs is not None else (" (generated inputs: a dynamic dim is 1 unless named in --dim NAME=SIZE; "
                                          "give sizes the model takes, or samples with --inputs)")
    _compare_all(a, b, [n for n, _, _ in compared], len(output_names), feeds, table, group_size, byte_budget,
                 records, say, hint)

    def record(name):
        op_type, order = info[name]
        return {"name": name, "op_type": op_type, "order": order, **records[name]}

    outputs = [record(n) for n in output_names if n in records]
    for name in missing:
        outputs.append({"name": name, "op_type": None, "order": None, "shape": None, "dtype": None, "max_abs": None,
                        "max_rel": None, "cosine": None, "snr_db": None, "ok": False, "histogram": None,
                        "mismatch": "not in the original model"})
    layer_records = [record(i.name) for i in layer_list if i.name in records]
    failed = [r for r in outputs + layer_records if not r["ok"]]
    # the earliest in the original's node order; outputs it lacks last
    first = min(failed, key=lambda r: (r["order"] is None, r["order"] or 0)) if failed else None
    return {
        "kind": "verify", "version": VERSION,
        "original": a.path or "<memory>", "optimized": b.path or "<memory>",
        "inputs": source, "tolerances": table,
        "ok": not failed, "first_mismatch": first["name"] if first else None,
        "outputs": outputs, "layers": layer_records, "structure": structure,
        "seconds": time.perf_counter() - started,
    }


def resolve_tolerances(overrides: Optional[dict]) -> dict:
    """DEFAULT_TOLERANCES with `overrides` ({dtype: {"atol"?, "rtol"?}}) on top."""
    table = {k: dict(v) for k, v in DEFAULT_TOLERANCES.items()}
    for dtype, tol in (overrides or {}).items():
        try:
            name = dtype if dtype == "bfloat16" else np.dtype(dtype).name
        except TypeError:
            raise Error(f"tolerance for {dtype!r}: not a dtype name (e.g. float32, float16)") from None
        unknown = set(tol) - {"atol", "rtol"}
        if unknown:
            raise Error(f"tolerance for {name}: unknown key(s) {', '.join(sorted(unknown))} (atol, rtol)")
        base = table.get(name, dict(tolerance(name)))
        table[name] = {**base, **{k: float(v) for k, v in tol.items()}}
    return table


# ---------------------------------------------------------------- inputs

def _samples(a, b, inputs, seed, samples, batch_sizes, vocab_size, dims) -> tuple:
    """The feed dicts (one per sample and batch size) and the JSON "inputs" entry."""
    specs = input_specs(a.path or a.read_bytes(), a.model)
    if inputs is None:
        batch_sizes = batch_sizes or [None]
        feeds = [random_feeds(specs, seed=seed + s, batch_size=bs, vocab_size=vocab_size, dims=dims)
                 for bs in batch_sizes for s in range(samples)]
        source = {"source": "random", "seed": seed, "samples": samples, "batch_sizes": list(batch_sizes)}
    else:
        if isinstance(inputs, dict):
            given = [inputs]
        elif isinstance(inputs, (list, tuple)):
            given = list(inputs)
        else:
            given = load_samples(inputs, specs)
        if not given:
            raise Error(f"inputs {inputs}: no samples found")
        feeds = [validate_feeds(specs, f, getattr(f, "source", f"inputs sample {i + 1}"), model="the original model")
                 for i, f in enumerate(given)]
        label = str(inputs) if not isinstance(inputs, (dict, list, tuple)) else "<memory>"
        source = {"source": label, "seed": None, "samples": len(feeds), "batch_sizes": [None]}
    optimized_inputs = [v.name for v in b.model.graph.inputs if v.initializer is None]  # IR < 4 lists initializers too
    extra = [n for n in optimized_inputs if n not in {s.name for s in specs}]
    if extra:
        raise Error(f"{b.where}: input(s) {', '.join(map(repr, extra))} are not inputs of the original model, "
                    "so the two cannot run on the same inputs")
    return feeds, source


# ---------------------------------------------------------------- sessions

def _session(ref, names: list, scratch: str):
    """A CPU session with onnxruntime's graph optimizations off (the models
    themselves are compared, not what onnxruntime makes of them) on a copy
    of the model returning `names` too, written in the `scratch` folder
    (and removed once loaded)."""
    outputs = {v.name for v in ref.model.graph.outputs}
    copy = os.path.join(scratch, f"{ref.label}.onnx")
    im.write_with_outputs(ref, [n for n in names if n not in outputs], copy)
    try:
        return check.session(copy, external_folder=ref.folder)
    except MissingDependency:
        raise
    except Exception as e:
        raise OnnxRuntimeFailure(f"{ref.where}: onnxruntime cannot load it: {first_line(e)}") from None
    finally:
        os.unlink(copy)


def _sessions(a, b, names: list, scratch: str) -> tuple:
    # One after the other: loading both at once was slower (bert_base, 2 cores:
    # 7.3 s against 5.4 s), both copying weights through the same memory.
    return _session(a, names, scratch), _session(b, names, scratch)


def _run(session, ref, names: list, feeds: dict, index: int, hint: str = "") -> list:
    wanted = {i.name for i in session.get_inputs()}
    try:
        return session.run(names, {k: v for k, v in feeds.items() if k in wanted})
    except Exception as e:
        raise OnnxRuntimeFailure(f"{ref.where}: onnxruntime cannot run it on sample {index + 1}: "
                                 f"{first_line(e)}{hint}") from None


# ---------------------------------------------------------------- comparing

def _compare_all(a, b, names, n_outputs, feeds, table, group_size, byte_budget, records, say, hint: str = "") -> None:
    """Fills `records` (name -> merged comparison) group by group; the graph
    outputs go in the first group."""
    sizes = {}
    for f in feeds:
        symbols = im.dim_symbols(a.model, f)
        for name in names:
            size = im.estimated_bytes(a.model, name, symbols)
            if size is not None:
                sizes[name] = max(sizes.get(name, 0), size)
    measured = {}
    outputs = set(names[:n_outputs])  # a graph output keeps its layout; an intermediate may not
    remaining = list(names)
    done = 0
    checked_determinism = False
    while remaining:
        guess = im.measured_guess(measured, UNKNOWN_SIZE_GUESS)
        known = {**sizes, **measured}
        group = im.plan_groups(remaining, known, byte_budget, group_size, guess)[0]
        if done == 0 and group_size is None and len(group) < n_outputs:  # outputs together, whatever their size
            group = remaining[:n_outputs]
        remaining = remaining[len(group):]
        say(f"comparing {done + 1}-{done + len(group)} of {len(names)} tensors")
        with tempfile.TemporaryDirectory(prefix="pyonnxopt-verify-") as scratch:
            sa, sb = _sessions(a, b, group, scratch)
        for index, f in enumerate(feeds):
            want = _run(sa, a, group, f, index, hint)
            got = _run(sb, b, group, f, index)
            group_ok = True
            for name, x, y in zip(group, want, got):
                result = _compare_one(x, y, table, layouts=name not in outputs)
                if result is None:  # a sequence or map: not a tensor
                    continue
                if isinstance(x, np.ndarray):
                    measured[name] = max(measured.get(name, 0), x.nbytes)
                group_ok &= result["ok"]
                records[name] = merge(records[name], result) if name in records else result
            if not group_ok and not checked_determinism:
                checked_determinism = True
                _check_determinism(sa, a, group, f, index, want)
            del want, got
        del sa, sb
        done += len(group)


def _compare_one(x, y, table, layouts: bool = False) -> Optional[dict]:
    """A tensor's comparison record; for a sequence or a map (ZipMap's
    probabilities), its structure must be the same and its numbers are
    compared as tensors, the records merged. None: not a value to compare."""
    if isinstance(x, np.ndarray) and isinstance(y, np.ndarray):
        tol = tolerance(x.dtype.name, table)
        return compare_arrays(x, y, tol["atol"], tol["rtol"], layouts)
    xs, ys = output_values.split(x), output_values.split(y)
    if xs is None or ys is None or xs[0] == ("none",) == ys[0]:
        return None
    if xs[0] != ys[0]:
        return {**compare_arrays(np.zeros(0), np.zeros(0), 0, 0), "ok": False,
                "mismatch": f"{output_values.describe(xs[0])} became {output_values.describe(ys[0])}"}
    merged = None
    for p, q in zip(xs[1], ys[1]):
        one = _compare_one(p, q, table)
        merged = one if merged is None else merge(merged, one)
    return merged


def _check_determinism(session, ref, names, feeds, index, first) -> None:
    """A mismatch means nothing when the original does not repeat itself."""
    again = _run(session, ref, names, feeds, index)
    for x, y in zip(first, again):
        if isinstance(x, np.ndarray) and isinstance(y, np.ndarray):
            same = x.shape == y.shape and np.array_equal(x, y, equal_nan=x.dtype.kind in "fc")
            if not same:
                raise Error(f"{ref.where}: its outputs change from run to run (random ops or training-mode "
                            "Dropout): there is nothing to compare with")
