"""bench/head_layouts.py: every layout builds, runs, and computes what the
exported one computes (one round, one block)."""

import json

import head_layouts


def test_every_layout_runs_and_agrees(tmp_path, monkeypatch):
    monkeypatch.setattr(head_layouts, "L", 1)
    out = tmp_path / "r.json"
    head_layouts.main(["--rounds", "1", "--json", str(out)])
    layouts = json.loads(out.read_text())["layouts"]
    assert set(layouts) == set(head_layouts.LAYOUTS) - {"exported"}
    assert all(r[level]["ratio"] > 0 for r in layouts.values() for level in ("disable", "all"))


def test_the_layouts_have_fewer_transposes():
    import onnx

    counts = {name: sum(n.op_type == "Transpose" for n in onnx.load_from_string(head_layouts.model(name)).graph.node)
              for name in head_layouts.LAYOUTS}
    L = head_layouts.L
    assert counts == {"exported": 4 * L, "head_major": 2 * L, "packed_qkv": 3 * L, "einsum": 0}
