"""Build of the native core `pyonnxopt._core` (pybind11, C++17).

Everything else lives in pyproject.toml. The onnxruntime flavour is picked
here because pip has no "one of" dependency: set PYONNXOPT_ONNXRUNTIME to
`onnxruntime-gpu` (or any other onnxruntime build, or `none`) before
`pip install` to keep the CPU build out of a GPU environment.
"""
import os
from glob import glob

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import setup

ParallelCompile("PYONNXOPT_BUILD_JOBS", default=0).install()

onnxruntime = os.environ.get("PYONNXOPT_ONNXRUNTIME", "onnxruntime").strip()
runtime = [] if onnxruntime.lower() in ("", "none") else [onnxruntime]

core = Pybind11Extension(
    "pyonnxopt._core",
    sorted(glob("csrc/**/*.cpp", recursive=True)),
    include_dirs=["csrc"],
    cxx_std=17,
    extra_compile_args=["-O3", "-fvisibility=hidden"],
)

setup(
    ext_modules=[core],
    cmdclass={"build_ext": build_ext},
    install_requires=["onnx>=1.16", "numpy>=1.24", "rich>=13", "numba>=0.60"] + runtime,
)
