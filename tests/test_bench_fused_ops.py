"""bench/fused_ops.py: every case builds, runs, and its fused op computes
what the ops it replaces compute (one round, short chains)."""

import json
import os
import sys

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
sys.path.insert(0, BENCH)

import fused_ops  # noqa: E402


def test_every_case_runs_and_agrees(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(fused_ops, "L", 2)
    out = tmp_path / "r.json"
    fused_ops.main(["--rounds", "1", "--json", str(out)])
    cases = json.loads(out.read_text())["cases"]
    assert set(cases) == set(fused_ops.cases())
    assert all(r[level]["ratio"] > 0 for r in cases.values() for level in ("disable", "all"))
    assert "skip_layer_norm (opset 17)" in capsys.readouterr().out
