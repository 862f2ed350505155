"""Sessions: the provider, level and thread settings, and one-line errors."""

import pytest

from pyonnxopt.benchmark.session import LoadError, Settings, check_settings, create_session, ort
from pyonnxopt.errors import Error


@pytest.mark.parametrize("provider, wanted", [("cuda", "CUDAExecutionProvider"),
                                              ("tensorrt", "TensorrtExecutionProvider")])
def test_missing_provider_names_it_and_what_is_there(provider, wanted):
    available = ort().get_available_providers()
    if wanted in available:
        pytest.skip(f"{wanted} is installed here")
    with pytest.raises(Error) as e:
        check_settings(Settings(provider=provider))
    message = str(e.value)
    assert message.startswith(f"--provider {provider}: onnxruntime here has no {wanted} (available: ")
    assert ", ".join(available) in message and "install onnxruntime-gpu" in message
    assert "\n" not in message


@pytest.mark.parametrize("settings, flag", [(Settings(level="max"), "--level max"),
                                            (Settings(provider="tpu"), "--provider tpu"),
                                            (Settings(intra_op_threads=0), "--threads 0"),
                                            (Settings(inter_op_threads=-1), "--inter-threads -1")])
def test_bad_settings_name_the_flag(settings, flag):
    with pytest.raises(Error, match=f"^{flag}: expected"):
        check_settings(settings)


def test_settings_reach_the_session(chain):
    sess = create_session(chain(1), Settings(intra_op_threads=1, inter_op_threads=2, level="disable"), "A")
    assert sess.get_providers() == ["CPUExecutionProvider"]
    opts = sess.get_session_options()
    assert opts.intra_op_num_threads == 1 and opts.inter_op_num_threads == 2
    assert opts.graph_optimization_level == ort().GraphOptimizationLevel.ORT_DISABLE_ALL
    assert opts.execution_mode == ort().ExecutionMode.ORT_PARALLEL


def test_load_error_names_the_model(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(LoadError) as e:
        create_session(str(bad), Settings(), "B")
    assert str(e.value).startswith(f"model B ({bad}): onnxruntime cannot load it: ")
    assert "\n" not in str(e.value)
