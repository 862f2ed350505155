#!/usr/bin/env bash
# One run on a machine with a CUDA GPU: what is there, the native build, the
# fold tests with cupy, the GPU-related bench tests, then
# bench/fold_backends.py at sizes that show where cupy wins (bench/README.md).
#
#   mkdir -p bench/out/gpu; OUT=bench/out/gpu bash bench/gpu_check.sh 2>&1 | tee bench/out/gpu/gpu_check.log
#
# 211 s on 16 cores and an H200 (the build 23 s). Every step has its own
# timeout and a failing step does not stop the next: one run should bring
# back all it can (the benchmarks, the longest part, come last).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-bench/out/gpu}
PY=${PYTHON:-python3}
mkdir -p "$OUT"

step() { echo; echo "=== $* ($(date +%T), ${SECONDS}s)"; }

step device
nvidia-smi -L
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current --format=csv
echo "cores: $(nproc); $(grep -m1 'model name' /proc/cpuinfo)"; free -g | head -2
$PY -c 'import sys, numpy, numba, onnx, onnxruntime as o; print("python", sys.version.split()[0], "numpy", numpy.__version__, "numba", numba.__version__, "onnx", onnx.__version__, "onnxruntime", o.__version__); print("onnxruntime providers:", o.get_available_providers())'
$PY -c 'import tensorrt; print("tensorrt", tensorrt.__version__)' 2>&1 | tail -1
# cupy, and the host <-> device copy rates every fold op pays (256 MB, pageable and pinned)
timeout 60 $PY - <<'EOF'
import time, numpy as np, cupy as cp
rt = cp.cuda.runtime
p = rt.getDeviceProperties(0)
print("cupy", cp.__version__, "CUDA runtime", rt.runtimeGetVersion(), "driver", rt.driverGetVersion(),
      "device", p["name"].decode(), "SMs", p["multiProcessorCount"], f"{p['totalGlobalMem'] / 2**30:.0f} GiB")
n = 64 << 20
pinned = np.frombuffer(cp.cuda.alloc_pinned_memory(4 * n), np.float32, n)
for label, host in (("pageable", np.ones(n, np.float32)), ("pinned", pinned)):
    d = cp.empty(n, np.float32)
    for direction, copy in (("to GPU", lambda: d.set(host)), ("from GPU", lambda: d.get(out=host))):
        copy()
        t = time.perf_counter()
        for _ in range(3):
            copy()
        cp.cuda.Device().synchronize()
        print(f"{label} {direction}: {3 * 4 * n / (time.perf_counter() - t) / 1e9:.1f} GB/s")
EOF

step "build the native core"
time (PYONNXOPT_BUILD_JOBS=16 $PY setup.py build_ext --inplace -j16 > "$OUT/build.log" 2>&1)
echo "build exit $?"; tail -2 "$OUT/build.log"; ls pyonnxopt/_core*.so

step "pytest tests/fold (cupy must run, not skip)"
timeout 240 $PY -m pytest tests/fold -q -rs -p no:cacheprovider --junitxml="$OUT/pytest_fold.xml"
step "pytest tests/fold -m slow (a 640 MB weight through cupy)"
timeout 90 $PY -m pytest tests/fold -q -rs -p no:cacheprovider -m slow
step "pytest tests/benchmark -k 'provider or cuda or device'"
timeout 90 $PY -m pytest tests/benchmark -q -rs -p no:cacheprovider -k "provider or cuda or device"

step "the optimizer folding on cupy (PYONNXOPT_CUPY_THRESHOLD=0) and onnxruntime's CUDA provider"
PYONNXOPT_CUPY_THRESHOLD=0 timeout 60 $PY -m pyonnxopt demo --out /tmp/demo | tail -2
PYONNXOPT_CUPY_THRESHOLD=0 timeout 60 $PY -c 'import sys, pyonnxopt
model, report = pyonnxopt.optimize("/tmp/demo/tiny_cnn.onnx")
print("folded through cupy:", "pyonnxopt.fold.cupy_backend" in sys.modules)'
if $PY -c 'import onnxruntime as o, sys; sys.exit("CUDAExecutionProvider" not in o.get_available_providers())'; then
    timeout 60 $PY -m pyonnxopt bench /tmp/demo/tiny_cnn.onnx /tmp/demo/tiny_cnn.optimized.onnx --provider cuda --iterations 50 --no-cold
else
    echo "onnxruntime here has no CUDAExecutionProvider; what --provider cuda says:"
    timeout 60 $PY -m pyonnxopt bench /tmp/demo/tiny_cnn.onnx --provider cuda --iterations 5 --no-cold
fi
step "fold_backends: every op at 1e8 elements, sweeps to 6.7e7 (256 MB float32)"
timeout 240 $PY bench/fold_backends.py --elements 1e8 --repeats 3 --sweep-max 6.8e7 \
    --sweep-ops fold_batchnorm,transpose_2d --json "$OUT/fold_gpu_1e8.json"
step "fold_backends: 1e9 elements (4 GB float32), streaming ops"
timeout 150 $PY bench/fold_backends.py --elements 1e9 --dtypes float32 --ops fold_batchnorm,cast_to_float16 \
    --repeats 2 --no-sweep --json "$OUT/fold_gpu_1e9.json"

step "done"
