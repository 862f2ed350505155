"""pyonnxopt.fold: every function on every available backend against the
numpy reference, bit for bit (a NaN's payload aside) except matmul (float
re-association: rtol 1e-5 for float32); the numpy reference against the
formulas it implements; BN folding against onnxruntime running the unfolded
Conv/ConvTranspose/Gemm + BatchNormalization; choosing a backend; memory."""

from __future__ import annotations

import subprocess
import sys
import tracemalloc

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pyonnxopt import fold
from pyonnxopt.check import session
from pyonnxopt.errors import BackendUnavailable
from pyonnxopt.fold import numba_cache, select

BF16 = np.dtype(ml_dtypes.bfloat16)
FLOATS = [np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.float64), BF16]


def _skip_reason(name):
    reason = select.unavailable_reason(name)
    if reason is None:
        return None
    return "cupy not installed" if "not installed" in reason else ("no CUDA device" if "CUDA" in reason else reason)


ACCELERATED = [pytest.param(b, marks=pytest.mark.skipif(_skip_reason(b) is not None, reason=f"{_skip_reason(b)}"))
               for b in ("numba", "cupy")]


def readonly(a):
    a = np.ascontiguousarray(a)
    a.flags.writeable = False
    return a


def random(shape, dtype, seed=0, scale=1.0):
    return readonly((np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype))


def assert_same_bits(have, want):
    assert have.dtype == want.dtype and have.shape == want.shape
    bits = np.dtype(f"u{want.dtype.itemsize}")
    if want.dtype.kind in "fV":
        nan = np.isnan(want.astype(np.float64))
        assert np.array_equal(np.isnan(have.astype(np.float64)), nan)
        have, want = have[~nan], want[~nan]
    assert np.array_equal(have.view(bits), want.view(bits))


def assert_new_array(result, *inputs):
    assert result.flags.c_contiguous and result.flags.writeable
    assert not any(np.shares_memory(result, a) for a in inputs)


# ---- the numpy reference against the formulas

SCALE_CASES = [((13,), 0), ((7, 130), 0), ((130, 7), 1), ((5, 6, 3, 3), 0), ((5, 6, 3, 3), 1),
               ((2, 3, 4, 5, 3), 1), ((3, 70, 1, 1), 0), ((4, 3, 5), -1)]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("shape,axis", SCALE_CASES)
def test_scale_channels_reference(shape, axis, dtype):
    w = random(shape, dtype)
    s = np.random.default_rng(1).standard_normal(shape[axis])
    out = fold.scale_channels(w, s, axis, backend="numpy")
    compute = np.float64 if dtype == np.float64 else np.float32
    bshape = [1] * len(shape)
    bshape[axis] = -1
    # computed in float32 (float64 for float64), rounded once to the weight's dtype
    assert_same_bits(out, (w.astype(compute) * s.astype(compute).reshape(bshape)).astype(dtype))
    assert_new_array(out, w)


def test_fold_batchnorm_reference():
    w = random((6, 4, 3, 3), np.float32)
    bias, scale, beta, mean = (np.random.default_rng(i).standard_normal(6).astype(np.float32) for i in range(4))
    var = np.random.default_rng(5).random(6).astype(np.float32) + 0.1
    new_w, new_b = fold.fold_batchnorm(w, bias, scale, beta, mean, var, 1e-3, 0)
    s = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + 1e-3)
    assert_same_bits(new_w, (w * s.astype(np.float32)[:, None, None, None]).astype(np.float32))
    assert_same_bits(new_b, ((bias.astype(np.float64) - mean) * s + beta).astype(np.float32))
    _, no_bias = fold.fold_batchnorm(w, None, scale, beta, mean, var, 1e-3, 0)
    assert_same_bits(no_bias, (-mean.astype(np.float64) * s + beta).astype(np.float32))


def test_batchnorm_scale_dtypes():
    var = np.array([0.5, 2.0, 0.0])
    for dtype, want in [(np.float64, np.float64), (np.float32, np.float32), (np.float16, np.float32), (BF16, np.float32)]:
        s = fold.batchnorm_scale(np.array([1.0, 2.0, 3.0]).astype(dtype), var, 1e-5)
        assert s.dtype == want and s.shape == (3,)
        np.testing.assert_allclose(s, np.array([1.0, 2.0, 3.0]) / np.sqrt(var + 1e-5), rtol=1e-7 if want == np.float64 else 1e-6)


def test_grouped_conv_transpose_scale():
    """Weight [C_in=4, C_out/groups=3, 2, 2] with groups=2: input channels 0-1
    take s[0:3], 2-3 take s[3:6]."""
    w = random((4, 3, 2, 2), np.float32)
    s = np.arange(1, 7, dtype=np.float32)
    out = fold.scale_channels(w, s, 1, groups=2)
    want = np.concatenate([w[:2] * s[None, :3, None, None], w[2:] * s[None, 3:, None, None]])
    assert_same_bits(out, want)


def test_transpose_cast_matmul_reference():
    a = random((3, 4, 5), np.float32)
    assert_same_bits(fold.transpose(a), a.transpose(2, 1, 0).copy())
    x = readonly(np.array([-2.7, -0.5, 0.5, 2.7, 1e6, -0.0], np.float32))
    assert fold.cast(x, np.int32).tolist() == [-2, 0, 0, 2, 1000000, 0]  # truncation toward zero
    assert fold.cast(x, np.bool_).tolist() == [True, True, True, True, True, False]
    assert fold.cast(np.array([70000.0], np.float32), np.float16)[0] == np.inf
    h = random((3, 5), np.float16)
    g = random((5, 2), np.float16, seed=1)
    assert_same_bits(fold.matmul(h, g), (h.astype(np.float32) @ g.astype(np.float32)).astype(np.float16))
    assert fold.matmul(np.ones(3, np.float32), np.ones(3, np.float32)).shape == ()


def test_identity_transpose_and_same_dtype_cast_copy():
    a = random((4, 5), np.float32)
    for result in (fold.transpose(a, (0, 1)), fold.cast(a, np.float32), fold.transpose(a[None], (0, 1, 2))):
        assert_new_array(result, a)


def test_argument_errors():
    w = random((4, 3), np.float32)
    with pytest.raises(ValueError, match="not a permutation"):
        fold.transpose(w, (0, 0))
    with pytest.raises(ValueError, match="3 elements, the channel axis 4"):
        fold.scale_channels(w, np.ones(3), 0)
    with pytest.raises(ValueError, match="out of range"):
        fold.scale_channels(w, np.ones(3), 2)
    with pytest.raises(TypeError, match="float weight"):
        fold.scale_channels(w.astype(np.int32), np.ones(4), 0)
    with pytest.raises(TypeError, match="one dtype"):
        fold.matmul(w, w.T.astype(np.float64))
    with pytest.raises(ValueError, match="unknown fold backend"):
        fold.transpose(w, backend="torch")


# ---- every backend equals numpy


@pytest.mark.parametrize("backend", ACCELERATED)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("shape,axis", SCALE_CASES)
def test_scale_channels_backends(backend, shape, axis, dtype):
    w = random(shape, dtype)
    s = np.random.default_rng(1).standard_normal(shape[axis])
    out = fold.scale_channels(w, s, axis, backend=backend)
    assert_same_bits(out, fold.scale_channels(w, s, axis, backend="numpy"))
    assert_new_array(out, w)


@pytest.mark.parametrize("backend", ACCELERATED)
@pytest.mark.parametrize("shape,axis,groups", [((4, 3, 2, 2), 1, 2), ((6, 70, 1), 1, 3), ((6, 2, 3, 3, 3), 1, 6)])
def test_grouped_scale_backends(backend, shape, axis, groups):
    for dtype in (np.float32, np.float16):
        w = random(shape, dtype)
        s = np.random.default_rng(1).standard_normal(groups * shape[axis])
        assert_same_bits(fold.scale_channels(w, s, axis, backend=backend, groups=groups),
                         fold.scale_channels(w, s, axis, backend="numpy", groups=groups))


@pytest.mark.parametrize("backend", ACCELERATED)
def test_fold_batchnorm_backends(backend):
    for dtype in (np.float32, np.float16):
        w = random((9, 5, 3, 3), dtype)
        params = [np.random.default_rng(i).standard_normal(9) for i in range(4)]
        var = np.random.default_rng(9).random(9)
        want = fold.fold_batchnorm(w, *params, var, 1e-5, 0, backend="numpy")
        have = fold.fold_batchnorm(w, *params, var, 1e-5, 0, backend=backend)
        assert_same_bits(have[0], want[0])
        assert_same_bits(have[1], want[1])
        assert fold.batchnorm_scale(params[1], var, 1e-5, backend=backend).tolist() == \
            fold.batchnorm_scale(params[1], var, 1e-5).tolist()


TRANSPOSE_CASES = [((7, 5, 3, 3), (1, 0, 2, 3)), ((70, 50), (1, 0)), ((2, 3, 4, 5, 6), (4, 2, 0, 3, 1)),
                   ((1, 5, 1, 3), (3, 2, 1, 0)), ((6, 4, 3), (0, 2, 1)), ((33, 1, 65), (2, 1, 0)), ((5, 0, 3), (2, 0, 1))]


@pytest.mark.parametrize("backend", ACCELERATED)
@pytest.mark.parametrize("shape,perm", TRANSPOSE_CASES)
def test_transpose_backends(backend, shape, perm):
    for dtype in (np.float32, np.float16, np.int64, np.bool_, np.int8, BF16):
        a = random(shape, dtype, scale=10)
        out = fold.transpose(a, perm, backend=backend)
        assert_same_bits(out, fold.transpose(a, perm, backend="numpy"))
        assert_new_array(out, a)
    view = np.arange(60, dtype=np.float32).reshape(6, 10)[:, ::2]  # not contiguous
    assert_same_bits(fold.transpose(view, (1, 0), backend=backend), view.T.copy())


@pytest.mark.parametrize("backend", ACCELERATED)
def test_byte_swapped_inputs(backend):
    w = readonly(np.arange(24, dtype=">f4").reshape(2, 3, 4))
    assert_same_bits(fold.scale_channels(w, np.arange(3.0), 1, backend=backend), fold.scale_channels(w, np.arange(3.0), 1, backend="numpy"))
    assert_same_bits(fold.transpose(w, (2, 0, 1), backend=backend), fold.transpose(w, (2, 0, 1), backend="numpy"))
    assert_same_bits(fold.cast(w, np.float16, backend=backend), fold.cast(w, np.float16, backend="numpy"))


# (source, destination): the fp16/bf16 conversions and ONNX Cast's
# truncation and bool, plus two that numba hands to numpy (float64 -> float16
# would round twice through float32; half -> half). Few pairs: numba compiles
# each (about 1.5 s, once per environment).
CASTS = [(np.float32, np.float16), (np.float16, np.float32), (np.float32, BF16), (BF16, np.float32),
         (np.float64, np.float32), (np.float32, np.int32), (np.float32, np.bool_), (np.float64, np.float16),
         (np.float16, BF16)]


@pytest.mark.parametrize("backend", ACCELERATED)
@pytest.mark.parametrize("src,dst", CASTS, ids=lambda d: np.dtype(d).name)
def test_cast_backends(backend, src, dst):
    x = np.random.default_rng(0).standard_normal(1001) * 50
    x[:6] = [0.0, -0.0, 0.5, -2.5, np.inf, np.nan]
    if "iub".find(np.dtype(dst).kind) >= 0 or "iub".find(np.dtype(src).kind) >= 0:
        # NaN, infinity and out-of-range values to integers are undefined in ONNX
        x = np.clip(np.nan_to_num(x), -100, 100)
    if np.dtype(dst) == np.int8:
        x = np.clip(x, -128, 127)
    a = readonly(x.astype(src))
    out = fold.cast(a, dst, backend=backend)
    assert_same_bits(out, fold.cast(a, dst, backend="numpy"))
    assert_new_array(out, a)


def test_half_rounding_edges_numba():
    """Rounding float32 to the halves from bits: every half, its neighbours
    and the midpoints between halves (ties to even), subnormals, overflow."""
    if _skip_reason("numba"):
        pytest.skip(_skip_reason("numba"))
    for dtype in (np.dtype(np.float16), BF16):
        halves = np.arange(1 << 16, dtype=np.uint16).view(dtype).astype(np.float32)
        halves = halves[np.isfinite(halves)]
        near = np.concatenate([halves, np.nextafter(halves, np.inf), np.nextafter(halves, -np.inf),
                               halves[:-1] / 2 + halves[1:] / 2, [np.inf, -np.inf, np.nan, 1e-45, 3e38]]).astype(np.float32)
        assert_same_bits(fold.cast(near, dtype, backend="numba"), fold.cast(near, dtype, backend="numpy"))


@pytest.mark.parametrize("backend", ACCELERATED)
def test_matmul_backends(backend):
    cases = [((3, 70), (70, 5)), ((2, 3, 8), (8, 4)), ((8,), (8, 3)), ((8,), (8,)), ((4, 1, 3, 5), (2, 5, 2))]
    for sa, sb in cases:
        for dtype in (np.float32, np.float64, np.float16, np.int32):
            a, b = random(sa, dtype, scale=3), random(sb, dtype, seed=1, scale=3)
            have, want = fold.matmul(a, b, backend=backend), fold.matmul(a, b, backend="numpy")
            assert have.dtype == want.dtype and have.shape == want.shape
            tol = {np.float16: 1e-3, np.float32: 1e-5, np.float64: 1e-12}.get(dtype, 0)
            np.testing.assert_allclose(have.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


@pytest.fixture
def tiny_gpu_pieces(monkeypatch):
    """cupy's backend cutting work into pieces of 96 bytes, so that small
    weights cross every kind of piece boundary (the real pieces are 256 MB)."""
    if _skip_reason("cupy"):
        pytest.skip(_skip_reason("cupy"))
    from pyonnxopt.fold import cupy_backend

    monkeypatch.setattr(cupy_backend, "_PIECE", 96)


# Rows of [rows, inner] longer than a piece (cut along their length), exactly
# one row per piece, several rows per piece with a short last one, and
# grouped weights whose pieces straddle groups.
PIECE_CASES = [((7, 5, 3, 3), 0, 1), ((6, 40), 0, 1), ((3, 100), 1, 1), ((2, 3, 50), 1, 1),
               ((4, 3, 2, 2), 1, 2), ((6, 5, 3), 1, 3)]


@pytest.mark.parametrize("shape,axis,groups", PIECE_CASES)
def test_cupy_pieces_scale(tiny_gpu_pieces, shape, axis, groups):
    for dtype in (np.float32, np.float16, np.float64):
        w = random(shape, dtype)
        s = np.random.default_rng(1).standard_normal(groups * shape[axis])
        assert_same_bits(fold.scale_channels(w, s, axis, backend="cupy", groups=groups),
                         fold.scale_channels(w, s, axis, backend="numpy", groups=groups))


def test_cupy_pieces_cast(tiny_gpu_pieces):
    x = random((1001,), np.float32, scale=1000)
    for src, dst in [(np.float32, np.float16), (np.float16, np.float32), (np.float64, np.float32), (np.float32, np.int32)]:
        a = readonly(x.astype(src))
        assert_same_bits(fold.cast(a, dst, backend="cupy"), fold.cast(a, dst, backend="numpy"))


@pytest.mark.slow
def test_cupy_real_pieces_of_a_big_weight():
    """A 640 MB float32 weight: several real 256 MB pieces of whole rows,
    rows of 320 MB cut along their length, a cast and a whole-array transpose."""
    if _skip_reason("cupy"):
        pytest.skip(_skip_reason("cupy"))
    w = random((256, 1 << 16, 10), np.float32)
    s0 = np.random.default_rng(1).standard_normal(256)
    for weight, s, axis in [(w, s0, 0), (w.reshape(2, 1, -1), s0[:1], 1)]:
        assert_same_bits(fold.scale_channels(weight, s, axis, backend="cupy"),
                         fold.scale_channels(weight, s, axis, backend="numpy"))
    assert_same_bits(fold.cast(w, np.float16, backend="cupy"), fold.cast(w, np.float16, backend="numpy"))
    m = w.reshape(256 * 10, -1)
    assert_same_bits(fold.transpose(m, (1, 0), backend="cupy"), fold.transpose(m, (1, 0), backend="numpy"))


# ---- against onnxruntime


def _run(nodes, inits, x):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # onnx's newest (14 in onnx 1.23) is past what older onnxruntimes load (1.30: 13)
    return session(model.SerializeToString()).run(None, {"x": x})[0]


@pytest.mark.parametrize("op,groups", [("Conv", 1), ("ConvTranspose", 1), ("ConvTranspose", 2), ("Gemm", 1)])
def test_fold_batchnorm_equals_onnxruntime(op, groups):
    """onnxruntime (float32, its own optimizations off): op + BatchNormalization
    against the op with fold_batchnorm's weights. Measured over 5 seeds: max
    |difference| at most 4e-7 of max |output| (outputs up to ~50)."""
    rng = np.random.default_rng(0)
    c_in, c_out = 4, 6
    if op == "Conv":
        w, axis, x, attrs = rng.standard_normal((c_out, c_in, 3, 3)), 0, rng.standard_normal((2, c_in, 7, 7)), {}
    elif op == "ConvTranspose":
        w, axis, x, attrs = rng.standard_normal((c_in, c_out // groups, 3, 3)), 1, rng.standard_normal((2, c_in, 5, 5)), {"group": groups}
    else:  # Gemm with transB: weight [N, K], output channels on axis 0
        w, axis, x, attrs = rng.standard_normal((c_out, 10)), 0, rng.standard_normal((3, 10)), {"transB": 1}
    w = w.astype(np.float32)
    x = x.astype(np.float32)
    b = rng.standard_normal(c_out).astype(np.float32)
    scale, beta, mean = (rng.standard_normal(c_out).astype(np.float32) for _ in range(3))
    var = (rng.random(c_out) + 0.05).astype(np.float32)
    eps = 1e-3
    unfolded = _run([helper.make_node(op, ["x", "w", "b"], ["z"], **attrs),
                     helper.make_node("BatchNormalization", ["z", "scale", "beta", "mean", "var"], ["y"], epsilon=eps)],
                    dict(w=w, b=b, scale=scale, beta=beta, mean=mean, var=var), x)
    for backend in ["numpy"] + [b_ for b_ in ("numba", "cupy") if fold.available(b_)]:
        new_w, new_b = fold.fold_batchnorm(readonly(w), b, scale, beta, mean, var, eps, axis, backend=backend, groups=groups)
        folded = _run([helper.make_node(op, ["x", "w", "b"], ["y"], **attrs)], dict(w=new_w, b=new_b), x)
        assert np.abs(folded - unfolded).max() <= 1e-6 * np.abs(unfolded).max()
        np.testing.assert_allclose(folded, unfolded, rtol=1e-5, atol=1e-5)


# ---- choosing a backend


@pytest.fixture
def fake_availability(monkeypatch):
    """Say which backends can run, without importing them."""
    def set_available(*names):
        monkeypatch.setattr(select, "unavailable_reason", lambda n: None if n in ("numpy",) + names else "not here")
    return set_available


def test_choose_backend_by_size(monkeypatch, fake_availability):
    monkeypatch.setattr(select, "NUMBA_THRESHOLD", 1000)
    monkeypatch.setattr(select, "NUMBA_WARM_THRESHOLD", 1000)
    monkeypatch.setattr(select, "CUPY_THRESHOLD", 5000)
    monkeypatch.delenv("PYONNXOPT_NUMBA_THRESHOLD", raising=False)
    monkeypatch.delenv("PYONNXOPT_CUPY_THRESHOLD", raising=False)
    fake_availability("numba", "cupy")
    assert [fold.choose_backend(n) for n in (999, 1000, 4999, 5000)] == ["numpy", "numba", "numba", "cupy"]
    fake_availability("numba")
    assert fold.choose_backend(10**9) == "numba"
    fake_availability()
    assert fold.choose_backend(10**9) == "numpy"
    fake_availability("numba", "cupy")
    monkeypatch.setenv("PYONNXOPT_NUMBA_THRESHOLD", "1e2")
    monkeypatch.setenv("PYONNXOPT_CUPY_THRESHOLD", "200")
    assert [fold.choose_backend(n) for n in (99, 100, 200)] == ["numpy", "numba", "cupy"]
    monkeypatch.setenv("PYONNXOPT_NUMBA_THRESHOLD", "lots")
    monkeypatch.delenv("PYONNXOPT_CUPY_THRESHOLD")
    assert fold.choose_backend(999) == "numpy"  # a bad value is logged and the default kept


def test_numba_threshold_drops_once_loaded(monkeypatch):
    monkeypatch.delenv("PYONNXOPT_NUMBA_THRESHOLD", raising=False)
    monkeypatch.setitem(sys.modules, "pyonnxopt.fold.numba_backend", object())
    assert select.numba_threshold() == select.NUMBA_WARM_THRESHOLD
    monkeypatch.delitem(sys.modules, "pyonnxopt.fold.numba_backend")
    assert select.numba_threshold() == select.NUMBA_THRESHOLD


def test_automatic_choice_runs_the_chosen_backend(monkeypatch):
    if _skip_reason("numba"):
        pytest.skip(_skip_reason("numba"))
    monkeypatch.setenv("PYONNXOPT_NUMBA_THRESHOLD", "0")
    monkeypatch.setenv("PYONNXOPT_CUPY_THRESHOLD", str(1 << 62))
    used = []
    real = fold.backend_module
    monkeypatch.setattr(fold, "backend_module", lambda name: used.append(name) or real(name))
    w = random((5, 4, 3, 3), np.float32)
    assert_same_bits(fold.fold_batchnorm(w, None, *np.ones((4, 5)), 1e-5, 0)[0],
                     fold.fold_batchnorm(w, None, *np.ones((4, 5)), 1e-5, 0, backend="numpy")[0])
    assert used[0] == "numba"


def test_automatic_choice_redoes_out_of_memory_in_numpy(monkeypatch):
    class OutOfMemory:
        @staticmethod
        def scale_channels(*args):
            raise MemoryError("GPU out of memory")

    real = fold.backend_module
    monkeypatch.setattr(fold, "choose_backend", lambda nbytes: "cupy")
    monkeypatch.setattr(fold, "backend_module", lambda name: OutOfMemory if name == "cupy" else real(name))
    w = random((5, 4), np.float32)
    assert_same_bits(fold.scale_channels(w, np.arange(5.0), 0), fold.scale_channels(w, np.arange(5.0), 0, backend="numpy"))
    with pytest.raises(MemoryError):  # asked for by name: no fallback
        fold.scale_channels(w, np.arange(5.0), 0, backend="cupy")


@pytest.fixture
def numba_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba fails
    monkeypatch.delitem(sys.modules, "pyonnxopt.fold.numba_backend", raising=False)
    select.unavailable_reason.cache_clear()
    yield
    select.unavailable_reason.cache_clear()


def test_explicit_unavailable_backend_says_what_to_install(numba_missing, monkeypatch):
    with pytest.raises(BackendUnavailable) as e:
        fold.transpose(np.ones((2, 3)), backend="numba")
    assert str(e.value) == "fold backend 'numba' is unavailable: numba is not installed (pip install numba)"
    monkeypatch.setenv("PYONNXOPT_NUMBA_THRESHOLD", "0")
    assert fold.choose_backend(1 << 30) in ("numpy", "cupy")  # silently without numba
    assert fold.transpose(np.ones((2, 3))).shape == (3, 2)


def test_cupy_unavailable_message():
    reason = select.unavailable_reason("cupy")
    if reason is None:
        pytest.skip("cupy runs here")
    with pytest.raises(BackendUnavailable) as e:
        fold.cast(np.ones(3), np.float32, backend="cupy")
    message = str(e.value)
    assert "\n" not in message and message.startswith("fold backend 'cupy' is unavailable: ")
    assert "pip install cupy-cuda12x" in message or "no CUDA device was found" in message


def test_small_folds_do_not_import_numba():
    code = ("import sys, numpy as np; from pyonnxopt import fold; "
            "fold.fold_batchnorm(np.ones((64, 64, 3, 3), np.float32), None, *np.ones((4, 64)), 1e-5, 0); "
            "fold.transpose(np.ones((300, 300), np.float16)); fold.cast(np.ones(1000), np.float16); "
            "print(sorted(m for m in ('numba', 'cupy', 'pyonnxopt.fold.numba_backend') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


# ---- memory and the numba cache


@pytest.mark.parametrize("backend", ["numpy"] + ACCELERATED[:1])
def test_no_temporaries_the_size_of_the_weight(backend):
    w = random((256, 64, 3, 3), np.float16)  # 0.6 MB, with numpy's buffered float32 conversion
    fold.scale_channels(w, np.ones(256), 0, backend=backend)  # kernels loaded before measuring
    tracemalloc.start()
    try:
        fold.scale_channels(w, np.ones(256), 0, backend=backend)
        fold.transpose(w, (1, 0, 2, 3), backend=backend)
        fold.cast(w, np.float32, backend=backend)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * w.nbytes + 64 * 1024  # the float32 result of the cast is the biggest


def test_numba_cache_dir_when_the_package_is_read_only(tmp_path, monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert numba_cache.choose_cache_dir(str(tmp_path / "pkg")) is None  # writable: numba's default
    blocked = tmp_path / "file"
    blocked.write_text("")  # a directory cannot be made under a file: read-only, even for root
    assert numba_cache.choose_cache_dir(str(blocked)) == str(tmp_path / "cache" / "pyonnxopt" / "numba")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    assert "pyonnxopt-numba-" in numba_cache.choose_cache_dir(str(blocked))  # a temporary dir
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "mine"))
    assert numba_cache.choose_cache_dir(str(blocked)) is None  # the user's choice stands
