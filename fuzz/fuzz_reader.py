"""Fuzz target for the native ONNX reader and writer (atheris / libFuzzer).

Each input is given to `pyonnxopt.load(data)`. It is either refused with
`ModelError`, or it loads, and then:

1. the use-def layer is consistent (`check_invariants()` is empty);
2. the read API works on every graph, node, value and tensor (names,
   `Value.type`, attributes, `Tensor.numpy_view()`) or raises `ModelError`;
3. `to_bytes()` is a ModelProto that protobuf itself parses;
4. `to_bytes()` loads again and re-serializes to the same bytes.

Anything else (another exception, a failed assertion, a crash, a hang past
`-timeout`) is a finding. Bytes can name no external data without a base_dir,
so the target never touches the file system.

CI, about 60 s; seeds an empty fuzz/corpus first and exits non-zero on a
finding, leaving the input in fuzz/artifacts/:

    python fuzz/fuzz_reader.py -max_total_time=60 -timeout=10 -rss_limit_mb=4096 -artifact_prefix=fuzz/artifacts/ fuzz/corpus

Other uses:

    python fuzz/fuzz_reader.py --make-corpus fuzz/corpus        # seeds only (+ onnx's node tests: --node-cases)
    python fuzz/fuzz_reader.py fuzz/artifacts/crash-<sha1>      # replays one input

libFuzzer's -fork mode does not work under atheris (every job fails at
start); a run stops at its first finding.

Every finding becomes a literal in tests/test_fuzz_regressions.py.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import zlib

try:
    import atheris
except ImportError:  # the regression tests import this file without atheris
    atheris = None

if atheris is not None and __name__ == "__main__":
    with atheris.instrument_imports(include=["pyonnxopt"]):
        import pyonnxopt
else:
    import pyonnxopt

MAX_SEED_BYTES = 100_000


def TestOneInput(data: bytes) -> None:
    try:
        model = pyonnxopt.load(data)
    except pyonnxopt.ModelError as e:
        feedback("error " + re.sub(r"'[^']*'|\d+", "_", str(e)))
        return
    check_loaded(model)
    for key in outcome_keys(model):
        feedback(key)


def check_loaded(model: "pyonnxopt.Model") -> None:
    """The checks on a model that loaded; raises on a finding."""
    import onnx

    problems = model.check_invariants()
    assert not problems, f"inconsistent use-def after load: {problems}"
    walk(model)
    first = model.to_bytes()
    try:
        onnx.ModelProto.FromString(first)
    except Exception as e:  # DecodeError, also for nesting past protobuf's depth limit
        raise AssertionError(f"protobuf cannot parse what to_bytes() wrote: {e!r}") from e
    try:
        again = pyonnxopt.load(first)
    except pyonnxopt.ModelError as e:
        raise AssertionError(f"the serialized model does not load again: {e}") from e
    second = again.to_bytes()
    assert first == second, f"serialization is not stable: {len(first)} bytes, then {len(second)}"


def walk(model: "pyonnxopt.Model") -> None:
    """Reads every attribute the API offers; only ModelError may come out."""
    try:
        for g in model.graphs():
            g.name
            for v in g.values:
                v.name, v.type, v.uses
            for n in g.nodes:
                n.name, n.op_type, n.domain, n.attributes
        for t in model.tensors():
            t.name, t.numpy_view()
    except pyonnxopt.ModelError:
        pass


# ---------------------------------------------------------------- feedback
#
# The native reader is not instrumented, so libFuzzer sees almost no new
# coverage and would keep only a handful of seeds (none with subgraphs or
# functions). Each outcome class -- an error message with names and numbers
# blanked, or a feature of a loaded model -- calls one of many distinct
# instrumented functions, so an input reaching a new class counts as new
# coverage and stays in the corpus.

_LEAVES: list = []


def _make_leaves(n: int) -> list:
    leaves = []
    for i in range(n):
        namespace: dict = {}
        exec(f"def leaf_{i}():\n    return {i}\n", namespace)
        leaves.append(atheris.instrument_func(namespace[f"leaf_{i}"]))
    return leaves


def feedback(key: str) -> None:
    if _LEAVES:
        _LEAVES[zlib.crc32(key.encode("utf-8", "surrogateescape")) % len(_LEAVES)]()


def outcome_keys(model: "pyonnxopt.Model") -> list:
    """Features of a loaded model worth keeping inputs for."""
    if not _LEAVES:
        return []
    graphs = model.graphs()
    keys = [f"graphs {min(len(graphs), 6)}", f"functions {min(len(model.functions), 3)}"]
    keys += [f"op {n.op_type}" for g in graphs for n in g.nodes]
    keys += [f"tensor {t.data_type} {len(t.dims)} {t.is_external}" for t in model.tensors()]
    return keys


# ---------------------------------------------------------------- seed corpus


def seed_models(node_cases: bool = False) -> list:
    """Serialized seeds: onnx's shipped backend models under 100 KB, a few
    hand-built models with subgraphs, functions and unusual tensors, and
    optionally the models of onnx's node tests (slow to collect: ~15 s)."""
    import glob

    import onnx

    data_dir = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    seeds = []
    for path in sorted(glob.glob(os.path.join(data_dir, "**", "*.onnx"), recursive=True)):
        if os.path.getsize(path) < MAX_SEED_BYTES:
            with open(path, "rb") as f:
                seeds.append(f.read())
    seeds += [m.SerializeToString() for m in helper_models()]
    if node_cases:
        import warnings

        from onnx.backend.test.case import node

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cases = node.collect_testcases(None)
        for case in cases:
            b = case.model.SerializeToString()
            if len(b) < MAX_SEED_BYTES:
                seeds.append(b)
    return seeds


def helper_models() -> list:
    """Small models that reach the parts of the reader the zoo rarely does."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    F = TensorProto.FLOAT
    opset = [helper.make_opsetid("", 18)]

    def vi(name, t=F, shape=(2,)):
        return helper.make_tensor_value_info(name, t, list(shape))

    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"], name="relu")], "then", [], [vi("t")])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="neg")], "else", [], [vi("e")])
    if_model = helper.make_model(
        helper.make_graph(
            [helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g)],
            "if_graph",
            [vi("c", TensorProto.BOOL, ()), vi("x")],
            [vi("y")],
        ),
        opset_imports=opset,
    )

    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep"),
            helper.make_node("Add", ["acc_in", "step"], ["acc_out"], name="add"),
        ],
        "body",
        [vi("i", TensorProto.INT64, ()), vi("cond_in", TensorProto.BOOL, ()), vi("acc_in")],
        [vi("cond_out", TensorProto.BOOL, ()), vi("acc_out")],
    )
    loop_model = helper.make_model(
        helper.make_graph(
            [helper.make_node("Loop", ["n", "", "acc0"], ["acc"], name="loop", body=body)],
            "loop_graph",
            [vi("n", TensorProto.INT64, ()), vi("acc0"), vi("step")],
            [vi("acc")],
        ),
        opset_imports=opset,
    )

    fn = helper.make_function(
        "local",
        "Twice",
        ["a"],
        ["b"],
        [helper.make_node("Add", ["a", "a"], ["b"], name="twice_add")],
        opset_imports=opset,
        attributes=["alpha"],
    )
    fn_model = helper.make_model(
        helper.make_graph([helper.make_node("Twice", ["x"], ["y"], domain="local", name="call")], "fn_graph", [vi("x")], [vi("y")]),
        opset_imports=opset + [helper.make_opsetid("local", 1)],
        functions=[fn],
    )

    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    w16 = helper.make_tensor("h", TensorProto.FLOAT16, [2], [1.0, 2.0])
    names = helper.make_tensor("s", TensorProto.STRING, [2], [b"a", b"bc"])
    i64 = helper.make_tensor("k", TensorProto.INT64, [3], [1, -2, 3])
    d64 = helper.make_tensor("d", TensorProto.DOUBLE, [2], [0.5, -1.5])
    sparse = helper.make_sparse_tensor(
        helper.make_tensor("sp", F, [2], [1.0, 2.0]), helper.make_tensor("sp_i", TensorProto.INT64, [2], [0, 3]), [2, 2]
    )
    tensors_graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
            helper.make_node("Constant", [], ["c"], name="const", value=helper.make_tensor("cv", F, [1], [3.0])),
        ],
        "tensors",
        [helper.make_tensor_value_info("x", F, ["batch", 2])],
        [helper.make_tensor_value_info("y", F, ["batch", 3]), vi("c", F, (1,))],
        initializer=[w, w16, names, i64, d64],
        sparse_initializer=[sparse],
        value_info=[vi("unused_info")],
    )
    tensors_model = helper.make_model(tensors_graph, opset_imports=opset, producer_name="seed")
    helper.set_model_props(tensors_model, {"k": "v"})
    return [if_model, loop_model, fn_model, tensors_model]


def make_corpus(directory: str, node_cases: bool = False) -> int:
    """Writes the seeds into `directory`, one file per seed named by its
    SHA-1; returns how many files it holds."""
    os.makedirs(directory, exist_ok=True)
    for b in seed_models(node_cases):
        with open(os.path.join(directory, hashlib.sha1(b).hexdigest()), "wb") as f:
            f.write(b)
    return len(os.listdir(directory))


def main(argv: list) -> None:
    if len(argv) > 1 and argv[1] == "--make-corpus":
        directory = argv[2] if len(argv) > 2 and not argv[2].startswith("-") else "fuzz/corpus"
        n = make_corpus(directory, node_cases="--node-cases" in argv)
        print(f"{directory}: {n} seeds")
        return
    if atheris is None:
        sys.exit("atheris is not installed: pip install 'pyonnxopt[fuzz]'")
    for arg in argv[1:]:
        if arg.startswith("-artifact_prefix=") and arg.endswith("/"):
            os.makedirs(arg.split("=", 1)[1], exist_ok=True)
    # Positional arguments are corpus folders or inputs to replay; an empty
    # (or missing) folder is seeded so one command works on a fresh checkout.
    for arg in argv[1:]:
        if not arg.startswith("-") and (not os.path.exists(arg) or (os.path.isdir(arg) and not os.listdir(arg))):
            print(f"seeding {arg}: {make_corpus(arg)} files", file=sys.stderr)
    _LEAVES.extend(_make_leaves(512))
    atheris.Setup(argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
