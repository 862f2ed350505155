"""Checking an optimized model against its original in onnxruntime, on
seeded inputs that respect dtypes (symbolic dims become 1, or larger where
the original cannot run on 1: a strided stem, a pooling window)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Iterable, Optional

import numpy as np

from pyonnxopt import output_values, string_inputs
from pyonnxopt.dim_names import sum_terms
from pyonnxopt.errors import Error, MissingDependency, first_line
from pyonnxopt.weight_dims import weight_implied_dims, with_implied


class CheckUnavailable(Error):
    """The original model cannot be run here, so there is nothing to compare with."""

_ORT_TYPES = {
    "tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int16)": np.int16, "tensor(int8)": np.int8,
    "tensor(uint64)": np.uint64, "tensor(uint32)": np.uint32, "tensor(uint16)": np.uint16, "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_, "tensor(string)": np.object_,
}


def _ort():
    try:
        import onnxruntime
    except ImportError as e:
        raise MissingDependency("checking needs onnxruntime: pip install onnxruntime (or onnxruntime-gpu)") from e
    return onnxruntime


def session(model_source, external_folder: Optional[str] = None, optimized: bool = False):
    """A CPU session with onnxruntime's own graph optimizations off, so the check
    compares the two models, not what onnxruntime makes of them (`optimized`:
    on, at their default level). `external_folder`: where external data lies
    when `model_source` is not beside it (a copy in a scratch folder)."""
    ort = _ort()
    ort.set_default_logger_severity(3)  # a failing run is reported by us, in one line
    opts = ort.SessionOptions()
    if not optimized:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 4  # its kernel errors too: the check may try several input sizes
    # Idle onnxruntime threads would spin on the cores the other model needs.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if external_folder:
        opts.add_session_config_entry("session.model_external_initializers_file_folder_path", external_folder)
    return ort.InferenceSession(model_source, opts, providers=["CPUExecutionProvider"])


# Sizes for unknown dims past an input's first axis, tried in turn until the
# original runs: 1 first (cheap), then enough for a ViT's 16x16 patches, a
# GoogLeNet's five halvings or a wav2vec2 feature extractor (400 samples);
# the others are the image sizes models are trained at, whose position
# tables a ViT's input must match (64 and 128 for small ones, 224, 256,
# 384 and 512, SAM's 1024), and YOLO's 320 and 640, whose detection heads
# keep the anchor grid of the export's size. A size that does not fit
# fails early, at the stem or the first Add of the positions, or at the
# head: the ladder costs little.
CHECK_SIZES = (1, 32, 64, 128, 224, 256, 320, 384, 512, 640, 1024)


# One generated input; past it, --check-inputs. An image input with all four
# dims unknown is 4 GiB at 1024 (8 while numpy draws it in float64).
MAX_INPUT_BYTES = 1 << 30


def random_inputs(sess, seed: int = 0, given: Iterable[str] = (), size: int = 1,
                  symbols: Optional[dict] = None, batch: int = 1, words: tuple = ()) -> dict:
    """Seeded inputs: floats ~ N(0, 1), integers 0 or 1 (index-like inputs
    such as token ids, token types and masks stay in range of any table),
    booleans at random, strings drawn from `words` (string_inputs.vocabulary
    of the model); unknown dims are `batch` on an input's first axis
    and `size` after it, but a named dim in `symbols` takes its size
    there. Inputs named in `given` (the caller has them) are left out."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, (dtype, shape) in _input_shapes(sess, given, size, symbols, batch).items():
        if np.prod(shape, dtype=np.float64) * np.dtype(dtype).itemsize > MAX_INPUT_BYTES:
            raise CheckUnavailable(f"input '{name}' of shape {shape} is too large to generate for the check "
                                   f"(over {MAX_INPUT_BYTES >> 30} GiB); give smaller inputs with --check-inputs")
        if np.issubdtype(dtype, np.floating):  # drawn in float32 unless float64: no float64 copy of a big input
            draw = np.float64 if dtype == np.float64 else np.float32
            feeds[name] = rng.standard_normal(shape, dtype=draw).astype(dtype, copy=False)
        elif dtype is np.bool_:
            feeds[name] = rng.integers(0, 2, shape).astype(np.bool_)
        elif dtype is np.object_:
            feeds[name] = string_inputs.draw(rng, words, shape)
        else:
            feeds[name] = rng.integers(0, 2, shape).astype(dtype)
    return feeds


def _input_shapes(sess, given: Iterable[str], size: int, symbols: Optional[dict], batch: int) -> dict:
    """name -> (numpy dtype, shape) of the inputs random_inputs makes. A
    dim named as a sum of the others (optimum's attention mask, `past_seq +
    seq`) is that sum of their sizes, unless `symbols` sizes it."""
    out = {}
    symbols = dict(symbols or {})
    for i in sess.get_inputs():
        for axis, d in enumerate(i.shape or []):
            if isinstance(d, str) and d and sum_terms(d) is None:
                symbols.setdefault(d, batch if axis == 0 else size)
    for i in sess.get_inputs():
        for d in i.shape or []:
            parsed = isinstance(d, str) and d not in symbols and sum_terms(d)
            if parsed:
                total = parsed[1] + sum(factor * symbols.get(term, size) for term, factor in parsed[0].items())
                if total >= 0:
                    symbols[d] = total
    for i in sess.get_inputs():
        if i.name in given:
            continue
        dtype = _ORT_TYPES.get(i.type)
        if dtype is None:
            raise CheckUnavailable(f"input '{i.name}' has type {i.type}, which the check cannot generate "
                                   "(give inputs with --check-inputs FILE.npz)")
        out[i.name] = (dtype, [d if isinstance(d, int) and d >= 0 else symbols.get(d, batch if axis == 0 else size)
                               for axis, d in enumerate(i.shape or [])])
    return out


@dataclass
class CheckResult:
    outputs: int
    max_abs_diff: float
    first_mismatch: Optional[str] = None
    unloadable: Optional[str] = None  # onnxruntime's words when it could not load the candidate
    unrunnable: Optional[str] = None  # ... or not run it on a sample the original ran on
    unknown_dims: int = 1  # the size generated inputs had for unknown dims past the first axis
    named_dims: Optional[dict] = None  # sizes given to named dims, where they had to differ (total = past + seq)
    batch: int = 1  # the size generated inputs had for unknown first dims
    samples: int = 1  # input samples compared (a second with the dynamic dims doubled)
    doubled_skipped: Optional[str] = None  # the original's words where it could not run the doubled sample
    # On a mismatch: how far onnxruntime's own optimizations move the original's outputs on the same inputs
    # (max abs), where it runs with them; a model that quantizes activations at run time moves by whole steps.
    onnxruntime_noise: Optional[float] = None
    # Where the candidate could not load: why the original cannot run either, if it cannot (a broken export)
    original_fails: Optional[str] = None

    @staticmethod
    def not_loaded(e: BaseException) -> "CheckResult":
        why = first_line(e)
        return CheckResult(0, float("inf"), f"(none: onnxruntime cannot load the optimized model: {why})", why)


# The second sample doubles every dynamic dim of the first; past this many
# input bytes it is left out (a CNN's image at 224 would cost 8 times).
SECOND_SAMPLE_BYTES = 64 << 20


@dataclass
class _Sample:
    feeds: dict
    where: str
    unknown_dims: int = 1
    named_dims: Optional[dict] = None
    batch: int = 1
    want: dict = field(default_factory=dict)  # the original's outputs by name, run once each


class Reference:
    """The original, run once per output on the check's inputs; `compare`
    then runs only the candidate. `original`: a loaded session (or what
    `session` takes); inputs are shaped as `shaped_by` declares them (a
    session, default the original's) and `inputs` (name -> array) replaces
    any of them. `required` outputs must all be in every candidate.
    `implied` ({input: {axis: size}}, see weight_dims): dynamic dims the
    model's weights fix, read as declared with those sizes. `words`: what
    generated string inputs hold (string_inputs.vocabulary).

    Generated inputs come in two samples where the model has dynamic dims:
    the first that the original runs on (small sizes), then the same with
    every dynamic dim doubled (a batch of 2, sums such as total = past + seq
    kept), so that a rewrite right only at batch 1 or at one token shows.
    The second is dropped where the original cannot run on it."""

    def __init__(self, original, *, seed: int = 0, inputs: Optional[dict] = None, shaped_by=None,
                 required: Optional[list] = None, rtol: float = 1e-4, atol: float = 1e-5, narrow_eps: float = 0.0,
                 implied: Optional[dict] = None, words: tuple = ()):
        if isinstance(original, (str, bytes, os.PathLike)):
            try:
                original = session(original)
            except MissingDependency:
                raise
            except Exception as e:  # custom ops, unsupported opsets, ...: onnxruntime's own words
                raise CheckUnavailable(f"onnxruntime cannot run the original: {first_line(e)}") from e
        self._session = original
        self._names = {o.name for o in original.get_outputs()}
        shaped_by = _FixedDims(shaped_by or original, implied or {})
        names = [i.name for i in shaped_by.get_inputs()]
        for name in inputs or {}:
            if name not in names:
                raise Error(f"check inputs: the model has no input {name!r} (inputs: {', '.join(names)})")
        self.required, self.rtol, self.atol, self.narrow_eps = list(required or []), rtol, atol, narrow_eps
        self.seed = None if inputs else seed
        self._words = words
        self._failed: Optional[tuple] = None  # (sample, output names) of the last compare's mismatch
        self._steady = False  # whether the original was seen to give the same outputs twice
        given = set(inputs or {})
        grows = _grows(shaped_by, given)
        self._sizes = CHECK_SIZES if grows else CHECK_SIZES[:1]
        named = _named_dim_tries(shaped_by, given) if grows else []
        batched = _batched(shaped_by, given)
        # (unknown dims past the first axis, named dims' sizes, the batch); last, a batch of 2: a Squeeze
        # without axes takes a batch of 1 away too (hummingbird's GEMM trees), so such a model runs from 2
        tries = [(size, None, 1) for size in self._sizes] + [(size, sym, 1) for size, sym in named] + \
            ([(1, None, 2)] if batched else [])
        tried = ([f"unknown dims {', '.join(map(str, self._sizes))}"] if grows else []) + \
            (["each named dim 2 with the others 1"] if named else []) + (["batches of 1 and 2"] if batched else [])
        self._tried = "" if len(tries) == 1 else f" (tried: {'; '.join(tried)})"
        wanted = self.required or [o.name for o in original.get_outputs()]
        first_failure = None
        for size, symbols, batch in tries:
            feeds = random_inputs(shaped_by, seed, given=given, size=size, symbols=symbols, batch=batch, words=words)
            feeds.update({name: np.asarray(value) for name, value in (inputs or {}).items()})
            where = "given inputs" if inputs else f"seed {seed}" + (f", unknown dims {size}" if grows else "")
            if symbols and not inputs:
                where += ", " + ", ".join(f"{name} {value}" for name, value in symbols.items())
            if batch != 1 and not inputs:
                where += f", batch {batch}"
            sample = _Sample(feeds, where, size, symbols, batch)
            try:  # the outputs that must be there (else all): a run that fails says to try the next one
                self._expect(sample, wanted)
                break
            except CheckUnavailable as e:
                first_failure = first_failure or e
                if (size, symbols, batch) == tries[-1]:
                    raise first_failure from e
        self._samples = [sample]
        self.unknown_dims, self.named_dims, self.batch = sample.unknown_dims, sample.named_dims, sample.batch
        self.doubled_skipped: Optional[str] = None  # why the second sample was left out, where the original said
        if not inputs:
            self._add_doubled(shaped_by, sample, wanted)

    def _add_doubled(self, shaped_by, first: _Sample, wanted: list) -> None:
        """The second sample (see the class), when the model has dynamic
        dims, it stays under SECOND_SAMPLE_BYTES and the original runs on it."""
        symbols: dict = {}
        dynamic = False
        for i in shaped_by.get_inputs():
            for d, n in zip(i.shape or [], first.feeds[i.name].shape):
                if not (isinstance(d, int) and d >= 0):
                    dynamic = True
                    if isinstance(d, str) and d:
                        symbols[d] = 2 * n
        if not dynamic:
            return
        shapes = _input_shapes(shaped_by, (), 2 * first.unknown_dims, symbols, 2 * first.batch)
        if sum(np.prod(shape, dtype=np.float64) * np.dtype(t).itemsize for t, shape in shapes.values()) \
                > SECOND_SAMPLE_BYTES:
            return
        feeds = random_inputs(shaped_by, self.seed + 1, size=2 * first.unknown_dims, symbols=symbols,
                              batch=2 * first.batch, words=self._words)
        sizes = ", ".join(f"{name} {value}" for name, value in symbols.items())
        sample = _Sample(feeds, f"seed {self.seed + 1}, dynamic dims doubled" + (f": {sizes}" if sizes else ""))
        try:
            self._expect(sample, wanted)
        except CheckUnavailable as e:  # sizes the model does not take (a fixed position table, a strided stem)
            self.doubled_skipped = first_line(e.__cause__ or e)
            return
        self._samples.append(sample)

    @property
    def where(self) -> str:
        """The first sample's inputs, in words."""
        return self._samples[0].where

    def _run_original(self, sample: _Sample, names: list) -> list:
        try:
            return self._session.run(names, sample.feeds)
        except Exception as e:
            raise CheckUnavailable(f"onnxruntime cannot run the original on the check's inputs{self._tried}; give them "
                                   f"with --check-inputs: {first_line(e)}") from e

    def _expect(self, sample: _Sample, names: list) -> list:
        missing = [n for n in names if n not in sample.want]
        if missing:
            sample.want.update(zip(missing, self._run_original(sample, missing)))
        return [sample.want[n] for n in names]

    def compare(self, candidate) -> CheckResult:
        """Every output of `candidate` (a session, a path or serialized bytes)
        against the original's output of the same name, on each sample."""
        if not hasattr(candidate, "run"):
            try:
                candidate = session(candidate)
            except MissingDependency:
                raise
            except Exception as e:
                return CheckResult.not_loaded(e)
        # Its outputs (pruned ones are gone on purpose), each compared with the original's of the same name.
        names = [o.name for o in candidate.get_outputs()]
        for name in self.required:
            if name not in names:
                return CheckResult(len(names), float("inf"), f"{name}: missing from the optimized model")
        for name in names:
            if name not in self._names:
                return CheckResult(len(names), float("inf"), f"{name}: not an output of the original")
        inputs = {i.name for i in candidate.get_inputs()}
        worst = 0.0
        for sample in self._samples:
            result = self._compare_on(candidate, sample, names, inputs)
            worst = max(worst, result.max_abs_diff)
            if result.first_mismatch:
                self._failed = (sample, names)
                break
        result.max_abs_diff = worst
        result.unknown_dims, result.named_dims, result.samples = self.unknown_dims, self.named_dims, len(self._samples)
        result.batch = self.batch
        result.doubled_skipped = self.doubled_skipped
        return result

    def _compare_on(self, candidate, sample: _Sample, names: list, inputs: set) -> CheckResult:
        want = self._expect(sample, names)  # the original first: inputs it cannot take say nothing about the candidate
        try:
            got = candidate.run(names, {k: v for k, v in sample.feeds.items() if k in inputs})
        except Exception as e:
            why = f"on {sample.where}: {first_line(e)}"
            return CheckResult(0, float("inf"), f"(none: onnxruntime cannot run the optimized model {why})",
                               unrunnable=why)
        result = _compare_outputs(names, want, got, self.rtol, self.atol, sample.where, self.narrow_eps)
        if result.first_mismatch and not self._steady:
            again = self._run_original(sample, names)
            if _compare_outputs(names, want, again, self.rtol, self.atol, "").first_mismatch:
                raise CheckUnavailable("the original's outputs change from run to run (random ops or training-mode "
                                       "Dropout): there is nothing to compare with")
            self._steady = True
        return result

    def onnxruntime_noise(self, source) -> Optional[float]:
        """After a mismatch, how far the original (`source`, what `session`
        takes) moves under onnxruntime's own optimizations on the failing
        sample: the largest abs difference over its float outputs. None where
        there was no mismatch, or it does not run that way."""
        if self._failed is None:
            return None
        sample, names = self._failed
        try:
            moved = session(source, optimized=True).run(names, sample.feeds)
        except Exception:  # onnxruntime's optimizers fail on it: nothing to say
            return None
        return max((_max_abs_diff(x, y) for x, y in zip(self._expect(sample, names), moved)
                    if isinstance(x, np.ndarray) and x.dtype.kind == "f" and x.shape == np.shape(y)), default=0.0)


def compare(original, optimized, seed: int = 0, rtol: float = 1e-4, atol: float = 1e-5,
            inputs: Optional[dict] = None, shapes_from_optimized: bool = False,
            required_outputs: Optional[list] = None, narrow_eps: float = 0.0,
            implied: Optional[dict] = None, words: tuple = ()) -> CheckResult:
    """Runs both (paths or serialized bytes) on the same inputs and compares
    every output of the optimized model with the original's output of the
    same name. Inputs are seeded random ones, shaped as the original declares
    them (or as the optimized model does, with `shapes_from_optimized`, for
    input dims fixed during optimization); `inputs` (name -> array) replaces
    any of them; dims the weights fix (`implied`, see Reference) take
    those sizes; string inputs are drawn from `words`. `required_outputs`
    must all still be there. Floats match
    within rtol, and atol scaled up to 1e-6 of the output's largest value (so
    a large output's rounding in a fused kernel is not a mismatch); for
    float16 and bfloat16 see _float_tolerance."""
    # The two sessions load at once (onnxruntime releases the GIL): a check
    # costs one model load of wall time, not two.
    with ThreadPoolExecutor(2) as pool:
        loading_a, loading_b = pool.submit(session, original), pool.submit(session, optimized)
        try:
            a = loading_a.result()
        except MissingDependency:
            raise
        except Exception as e:  # custom ops, unsupported opsets, ...: onnxruntime's own words
            raise CheckUnavailable(f"onnxruntime cannot run the original: {first_line(e)}") from e
        try:
            b = loading_b.result()
        except Exception as e:
            result = CheckResult.not_loaded(e)
            try:  # is it our doing? An original that runs on no input was broken before (onnxruntime's load
                # skips checks its run does not)
                Reference(a, seed=seed, inputs=inputs, required=required_outputs, implied=implied, words=words)
            except CheckUnavailable as failure:
                while isinstance(failure, CheckUnavailable) and failure.__cause__ is not None:
                    failure = failure.__cause__  # onnxruntime's words
                result.original_fails = first_line(failure)
            return result
    reference = Reference(a, seed=seed, inputs=inputs, shaped_by=b if shapes_from_optimized else None,
                          required=required_outputs, rtol=rtol, atol=atol, narrow_eps=narrow_eps,
                          implied=implied, words=words)
    result = reference.compare(b)
    if result.first_mismatch and not (result.unloadable or result.unrunnable):
        result.onnxruntime_noise = reference.onnxruntime_noise(original)
    return result


def hints(model) -> dict:
    """What the original model (a pyonnxopt.Model) tells the check beyond
    its session, as keyword arguments of Reference and compare: the rounding
    step of the narrowest float type it computes in (narrow_eps), the dims
    its weights fix (implied, weight_dims) and the strings it names (words,
    string_inputs)."""
    return {"narrow_eps": narrow_eps(model), "implied": weight_implied_dims(model),
            "words": string_inputs.vocabulary(model)}


_NARROW_EPS = {10: 2.0**-10, 16: 2.0**-7}  # float16, bfloat16


def narrow_eps(model) -> float:
    """The rounding step of the narrowest float type a model (a Model)
    computes in, where that is float16 or bfloat16 (weights of that type, or
    a Cast to it), else 0: a float32 output computed in float16 on the way
    (a converter's keep-io-types model) rounds as float16 does."""
    eps = [_NARROW_EPS.get(t.data_type, 0.0) for t in model.tensors()]
    eps += [_NARROW_EPS.get(n.attributes.get("to"), 0.0) for n in model.nodes(recursive=True) if n.op_type == "Cast"]
    return max(eps, default=0.0)


class _FixedDims:
    """A session's inputs as the check generates them: the dims the weights
    fix (weight_dims) read as declared with those sizes."""

    @dataclass
    class Input:
        name: str
        type: str
        shape: list

    def __init__(self, sess, implied: dict):
        declared = sess.get_inputs()
        shapes = with_implied({i.name: list(i.shape or []) for i in declared}, implied)
        self._inputs = [self.Input(i.name, i.type, shapes[i.name]) for i in declared]

    def get_inputs(self) -> list:
        return self._inputs


def _named_dim_tries(sess, given: set) -> list:
    """Tries for inputs whose named dims are related, one per named dim: it
    is 2, every other named dim 1. A decoder's attention mask covers the
    past and the new tokens: total = past + seq = 1 + 1. [(1, {name: size})]"""
    names = list(dict.fromkeys(d for i in sess.get_inputs() if i.name not in given for d in (i.shape or [])
                               if isinstance(d, str) and d))
    return [(1, {n: 2 if n == total else 1 for n in names}) for total in names] if len(names) >= 3 else []


def _batched(sess, given: set) -> bool:
    """Whether some generated input has an unknown first dim."""
    return any(i.shape and not (isinstance(i.shape[0], int) and i.shape[0] >= 0) for i in sess.get_inputs()
               if i.name not in given)


def _grows(sess, given: set) -> bool:
    """Whether some generated input has an unknown dim past its first axis."""
    return any(not (isinstance(d, int) and d >= 0) for i in sess.get_inputs() if i.name not in given
               for d in (i.shape or [])[1:])


def _compare_outputs(names, want, got, rtol, atol, where, narrow_eps: float = 0.0) -> CheckResult:
    worst = 0.0
    for name, x, y in zip(names, want, got):
        xs, ys = output_values.split(x), output_values.split(y)
        if xs is None or ys is None:  # nothing the checks know how to read: equal or not
            if not (xs is None and ys is None and x == y):
                return CheckResult(len(names), worst, f"{name}: values differ ({where})")
            continue
        if xs[0] != ys[0]:
            return CheckResult(len(names), float("inf"), f"{name}: {output_values.describe(xs[0])} became "
                                                          f"{output_values.describe(ys[0])} ({where})")
        for p, q in zip(xs[1], ys[1]):
            why, diff = _compare_tensor(p, q, rtol, atol, narrow_eps)
            worst = max(worst, diff)
            if why:
                return CheckResult(len(names), worst, f"{name}: {why} ({where})")
    return CheckResult(len(names), worst)


def _compare_tensor(x, y, rtol, atol, narrow_eps: float) -> tuple:
    """(what differs or None, max abs diff)."""
    if x.shape != y.shape or x.dtype != y.dtype:
        return f"shape/dtype {x.shape}/{x.dtype} became {y.shape}/{y.dtype}", float("inf")
    if x.dtype.kind not in "fc":
        return (None if np.array_equal(x, y) else "values differ"), 0.0
    diff = _max_abs_diff(x, y)
    scale = float(np.max(np.abs(x), initial=0.0, where=np.isfinite(x) & np.isfinite(y)))
    rtol_x, atol_x = _float_tolerance(x.dtype, rtol, atol, scale, narrow_eps)
    if not np.allclose(x, y, rtol=rtol_x, atol=atol_x, equal_nan=True):
        return f"max abs diff {diff:.3g}", diff
    return None, diff


def _max_abs_diff(x, y) -> float:
    """The largest |x - y| where both are finite (floats of one shape)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return float(np.max(np.abs(x - y), initial=0.0, where=np.isfinite(x) & np.isfinite(y)))


def _float_tolerance(dtype, rtol: float, atol: float, scale: float, narrow_eps: float = 0.0) -> tuple:
    """(rtol, atol) for an output of `dtype` whose largest value is `scale`.
    A rewrite may round differently (a folded constant, a fused kernel), and
    in float16 (eps 9.8e-4) or bfloat16 (7.8e-3) one rounding step is larger
    than float32's rtol: these compare within 8 steps relative and 4 steps
    of the largest value absolute (a float16 BERT-base whose attention is one
    fused op lands 2 such steps from the original, and 0.006 from float32
    both). float32 and float64 keep rtol, atol, unless the model computes in
    a narrower type on the way (`narrow_eps`, see narrow_eps()): then that
    type's steps count."""
    if np.dtype(dtype).name == "bfloat16":  # ml_dtypes' type, which np.finfo does not describe
        eps = 2.0**-7
    else:
        eps = float(np.finfo(dtype).eps)
    eps = max(eps, narrow_eps)
    narrow = eps > 1e-6  # float16 or bfloat16, or computed in them
    return max(rtol, 8 * eps), max(atol, (4 * eps if narrow else 1e-6) * scale)
