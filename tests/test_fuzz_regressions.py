"""Every input fuzz/fuzz_reader.py has found, replayed through its target,
plus a quick pass of the target over the seed corpus.

A finding is added here as the (small) input that reproduced it, with what
went wrong and where; it passes once the core refuses it with ModelError or
loads it, round-trips it and serializes it to bytes protobuf can read. Each
is replayed in a fresh interpreter, so one that crashes the process fails
its test instead of ending the run.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

_TARGET = os.path.join(os.path.dirname(__file__), "..", "fuzz", "fuzz_reader.py")


def _load_target():
    spec = importlib.util.spec_from_file_location("fuzz_reader", _TARGET)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fuzz_reader = _load_target()


# name -> the input, with what went wrong above it
FINDINGS = {
    # An op_type with a byte that is not UTF-8 ("StringNormal\xe9zer"): it
    # loads and its name reads as a str with a surrogate; the target's own
    # feedback then failed to encode it (fixed in fuzz_reader.py).
    "non_utf8_op_type": bytes.fromhex(
        "0805120c6261636b656e642d746573743a680a320a01781201792210537472696e674e6f726d616ce97a65722a180a11"
        "69735f636173655f73656e7369746976651801a001021210537472696e674e6f726d616c697a65725a0f0a0178120a0a"
        "08080812040a020802620f0a0179120a0a08080812040a02080242040a00100a"
    ),
    # Graph output 'y' has a TypeProto holding an end-group tag (0x2c). Load
    # keeps TypeProto as raw bytes; Value.type decodes them (type_info.cpp)
    # and its ParseError reaches Python as RuntimeError, not ModelError.
    "type_proto_end_group_tag": bytes.fromhex(
        "120c6261636b656e642d746573743a420a120a01781201791a047465737422045369676e120a53696e676c655369676e"
        "5a0f0a0178120a0a08080112040a020807620f0a0179120a0a082c0112040a02080742040a001009"
    ),
    # Node input name b"\x8c" (not UTF-8) that nothing defines: the ModelError
    # message quotes it and the binding's PyErr_SetString fails to decode it,
    # so Python sees UnicodeDecodeError instead of ModelError.
    "non_utf8_name_in_error_message": bytes.fromhex(
        "12077079746f7263681a03302e333a760a100a018c0a013112013222055052656c751210746f7263682d6a69742d6578"
        "706f72742a0d080110014201314a040000803e5a170a013012120a100801120c0a0208020a0208030a0208045a0f0a01"
        "31120a0a08080112040a02080162170a013212120a100801120c0a0208020a0208030a020804"
    ),
    # A graph output's TypeProto dimension holds an end-group tag (0xec 0x03).
    # The model loads (TypeProto is not validated), to_bytes() copies the
    # bytes, and protobuf refuses the result: "Wire format was corrupt".
    "type_proto_written_back_corrupt": bytes.fromhex(
        "12077079746f7263681a03302e333a760a100a01300a013112013222055052656c751210746f7263682d6a69742d6578"
        "706f72742a0d080110014201314a040000803e5a170a013012120a100801120c0a0208020a0208030a0208045a0f0a01"
        "31120a0a08080112040a02080162170a013112120a100801120c0a0208020a02ec030a020804"
    ),
    # An If node whose output 'if_graph' and an unknown field come after its
    # two branch attributes, then a length running past the end. In-progress
    # reader (PendingNames indexed by order_index): the node keeps a reference
    # into the PendingNames vector, which its subgraphs' nodes grow, so the
    # late output is written to freed memory -> "double free or corruption".
    "node_output_after_subgraphs_heap_corruption": bytes.fromhex(
        "080e3ac6010aaa010a01631201791a026966220249662a3b0a0b656c73655f6272616e636832290a100a01781201651a"
        "036e656722034e65671204656c7365620f0a0165120a0a08080112040a020802a001052a3d0a0b7468656e5f6272616e"
        "6368322b0a120a01781201741a0472656c75220452656c7512047468656e620f0a0174120a0a08080112040a020802a0"
        "0105120869665f67726170685a0b0a016312060a04080912005a0f0a0178120a0a08080112040a020802620f0a017912"
        "0a0a08080112040a02080242040a001012"
    ),
    # An unknown NodeProto field whose tag is a 6-byte varint (over-long:
    # 0x80 0x00 padding). The reader took tags of up to 10 bytes and kept
    # the field verbatim; protobuf reads a tag as at most 5 bytes and
    # refused what was written back: "Wire format was corrupt".
    "six_byte_tag_kept_verbatim": bytes.fromhex(
        "0807120c6261636b656e642d746573743ad1010a160a01610a01621201631a066d795f61646422034164640a5f0a0161"
        "0a0162120564635f6461120564635f64621a0b6d795f67726164979a918bddf7b8f5800000656e742a0d0a0278734a01"
        "614a0162a001082a090a0179220163a001033a1861692e6f6e6e782e707265766965772e747261696e696e67120d4772"
        "616469656e744f664164645a0b0a016112060a04080112005a0b0a016212060a0408011200620b0a016312060a040801"
        "1200620f0a0564635f646112060a0408011200620f0a0564635f646212060a040801120042040a00100c421c0a186169"
        "2e6f6e6e782e707265766965772e747261696e696e671001"
    ),
    # An empty initializer (a 0 among its dims) whose other dims multiply
    # past what numpy can address: Tensor.numpy_view() let numpy's
    # ValueError out instead of ModelError (module.cpp: check_numpy_dims).
    "empty_tensor_with_huge_dims": bytes.fromhex(
        "080312077079746f7263681a03302e333aef010a411201312208436e6f7374616e742a320a0576616c75652a26080410"
        "074a200100000000000000010000000000000001000000000000000200000000000000a001040a120a01300a01311201"
        "322207520873686170650a411201332208436f6e7374616e742a320a0576616c75652a26080410070a20010000000000"
        "00ffffffffffffffff0003000000000000000400000000000000a001040a0f0a01320a0133120134220454006c651210"
        "746f7263682d6a69742d6578706f72745a130a0130120e0a0c080112080a0208010a020802621b0a013412160a140801"
        "12100a0208010a0208020a0208030a02080842021009"
    ),
}


_REPLAY = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("fuzz_reader", sys.argv[1])
target = importlib.util.module_from_spec(spec)
spec.loader.exec_module(target)
target.TestOneInput(bytes.fromhex(sys.argv[2]))
print("ok")
"""


@pytest.mark.parametrize("name", sorted(FINDINGS))
def test_finding(name):
    r = subprocess.run(
        [sys.executable, "-c", _REPLAY, _TARGET, FINDINGS[name].hex()], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", f"exit code {r.returncode}:\n{r.stderr[-3000:]}"


def test_seed_corpus(tmp_path):
    n = fuzz_reader.make_corpus(str(tmp_path / "corpus"))
    assert n > 100  # onnx's backend models and the hand-built ones
    for entry in sorted(os.listdir(tmp_path / "corpus")):
        with open(tmp_path / "corpus" / entry, "rb") as f:
            fuzz_reader.TestOneInput(f.read())


def test_seeds_include_subgraphs_and_functions():
    import pyonnxopt

    models = [pyonnxopt.load(m) for m in fuzz_reader.helper_models()]
    assert any(len(m.graphs()) > 1 for m in models)
    assert any(m.functions for m in models)


def test_target_refuses_garbage_quietly():
    for data in (b"", b"\x00", b"\xff" * 32, b"\x3a\x05\x0a\x03\x0a\x01"):
        fuzz_reader.TestOneInput(data)
