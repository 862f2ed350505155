"""bench/yolo_exports.py: counts an ultralytics export optimized three ways;
a missing ultralytics is a one-line error, not a traceback."""

import importlib.util
import sys

import pytest

import yolo_exports

HAVE_YOLO = all(importlib.util.find_spec(m) is not None for m in ("torch", "ultralytics"))


def test_without_ultralytics_it_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ultralytics", None)  # import ultralytics raises ImportError
    assert yolo_exports.main([]) == 2
    assert capsys.readouterr().err.strip() == "error: ultralytics is not installed: pip install ultralytics"


@pytest.mark.skipif(not HAVE_YOLO, reason="needs ultralytics (pip install ultralytics)")
def test_yolov8n_at_or_below_the_peers(monkeypatch, tmp_path, capsys):
    try:  # it imports torchvision, which fails beside a torch it was not built for
        import ultralytics.nn.tasks  # noqa: F401
    except Exception as e:
        pytest.skip(f"ultralytics does not import here: {str(e).splitlines()[0]}")
    monkeypatch.setattr(yolo_exports, "OUT", str(tmp_path))
    assert yolo_exports.main(["--models", "yolov8n_dyn"]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("model=")]  # the framework may chat
    row = dict(kv.split("=") for kv in line.split())
    assert int(row["ort"]) < int(row["default"]) <= min(int(row["onnxslim"]), int(row["onnxsim"]))
