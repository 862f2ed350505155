"""`pyonnxopt optimize --verify-each-pass` and the `verify --bisect` entry."""

import argparse
import json

import onnx
import pytest
from bisect_helpers import BAD_PASS, BAD_RULE, broken_passes_registered, chain

from pyonnxopt.cli import main
from pyonnxopt.verify.bisect import bisect_cli


@pytest.fixture
def broken_passes():
    with broken_passes_registered():
        yield

def test_verify_each_pass_stops_at_the_bad_pass_and_writes_nothing(broken_passes, tmp_path, capsys):
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(chain(adds=5, bad_add=3), src)
    assert main(["optimize", str(src), str(out), "--verify-each-pass"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1  # one line, no traceback
    assert f"pass {BAD_PASS} (iteration 1)" in err and "'add to sum' of bad" in err and "nothing was written" in err
    assert not out.exists()


def test_verify_each_pass_on_a_good_pipeline_reports_its_checks(broken_passes, tmp_path, capsys):
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(chain(adds=3, negs=2), src)
    assert main(["optimize", str(src), str(out), "--verify-each-pass", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verified_each_pass"] >= 3 and report["check"]["first_mismatch"] is None
    assert out.exists()
    # Without the flag the report has no such entry.
    assert main(["optimize", str(src), str(out), "--json"]) == 0
    assert "verified_each_pass" not in json.loads(capsys.readouterr().out)


def test_verify_each_pass_with_no_check_is_a_user_error(tmp_path, capsys):
    src = tmp_path / "in.onnx"
    onnx.save(chain(adds=1), src)
    assert main(["optimize", str(src), str(tmp_path / "o.onnx"), "--verify-each-pass", "--no-check"]) == 2
    assert "--no-check" in capsys.readouterr().err


def _args(**kw):
    base = dict(original=None, optimized=None, passes=None, skip=[], target="onnx", seed=0, inputs=None,
                rollback_output=None)
    return argparse.Namespace(**{**base, **kw})


def test_verify_bisect_names_the_pass_and_writes_the_rollback(broken_passes, tmp_path, capsys):
    src, opt, rb = tmp_path / "in.onnx", tmp_path / "opt.onnx", tmp_path / "rb.onnx"
    onnx.save(chain(adds=2, negs=4, bad_tanh_at=3), src)
    assert main(["optimize", str(src), str(opt), "--force"]) == 0  # the broken rule's model, written anyway
    capsys.readouterr()
    assert main(["verify", str(src), str(opt), "--bisect", "--rollback-output", str(rb), "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert not result["ok"] and result["bisect"]["kind"] == "bisect" and result["bisect"]["pass"] == BAD_RULE
    assert "bad_tanh" in result["bisect"]["rewrite"]["consumed"] and result["bisect"]["rollback"]["ok"]
    assert main(["verify", str(src), str(rb)]) == 0
    # Re-run without the broken rule: every pass keeps the outputs, and the table says the flags differ.
    assert main(["verify", str(src), str(opt), "--bisect", "--skip", BAD_RULE]) == 1
    out = capsys.readouterr().out
    assert "every pass keeps the outputs" in out and "other flags" in out


def test_bisect_cli_user_errors(tmp_path):
    from pyonnxopt.errors import Error

    with pytest.raises(Error, match="no such file"):
        bisect_cli(_args(original=str(tmp_path / "missing.onnx")))
    with pytest.raises(Error, match="unknown pass 'nope'"):
        bisect_cli(_args(original=str(tmp_path / "missing.onnx"), skip=["nope"]))
