"""bench/fused_ops.py: every case builds, runs, and its fused op computes
what the ops it replaces compute (one round, short chains)."""

import json

import fused_ops


def test_every_case_runs_and_agrees(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(fused_ops, "L", 2)
    out = tmp_path / "r.json"
    fused_ops.main(["--rounds", "1", "--json", str(out)])
    cases = json.loads(out.read_text())["cases"]
    assert set(cases) == set(fused_ops.cases())
    assert all(r[level]["ratio"] > 0 for r in cases.values() for level in ("disable", "all"))
    assert "skip_layer_norm (opset 17)" in capsys.readouterr().out
