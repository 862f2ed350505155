"""The README's fusion table from compare.py JSON files: nodes, Transposes
and latency against the best peer, for pyonnxopt (--no-check) and, where
the run has them, pyonnxopt --opset 23 and --target ort (whose best peer
may be onnxruntime's own EXTENDED output, com.microsoft ops and all).

    python bench/readme_table.py bench/out/compare-paired-1.json bench/out/compare-paired-2.json [rerun.json]

Ratios are compare.py's own (bench/_goals.py: the best peer chosen on even
rounds, the ratio over odd ones). Models where no tool's result can be
compared (train-mode exports: random outputs) are left out.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _goals  # noqa: E402
import _util  # noqa: E402

MAIN = "pyonnxopt-nocheck"
VARIANTS = {"up": "pyonnxopt-opset23", "ort": "pyonnxopt-ort"}
LEVELS = ("disable", "all")


def _ratio(x) -> str:
    return "–" if x is None else ("fails" if x == float("inf") else f"{x:.2f}")


def _best_nodes(rows: dict, tool: str) -> "tuple | None":
    peers, _ = _goals.counted_peers(rows, tool)
    counts = {p: rows[p]["nodes"] for p in peers if rows[p].get("nodes") is not None}
    if not counts:
        return None
    best = min(counts.values())
    return best, sorted(p for p, n in counts.items() if n == best)


def table_rows(doc: dict) -> list:
    out = []
    for name, model in doc["models"].items():
        rows, ratios = model["rows"], model.get("ratios", {})
        best = _best_nodes(rows, MAIN)
        if best is None or MAIN not in ratios:
            continue
        mine = rows[MAIN]
        row = {"model": name, "export": rows["original"]["nodes"], "best": best, "nodes": mine.get("nodes"),
               "t_export": rows["original"].get("transposes"), "t": mine.get("transposes"),
               "lat": {lv: ratios[MAIN]["latency_vs_best_peer"].get(lv) for lv in LEVELS}}
        for key, tool in VARIANTS.items():
            variant = rows.get(tool)
            if variant and tool in ratios and _goals.good(variant):
                row[key] = {"nodes": variant["nodes"], "t": variant.get("transposes"), "best": _best_nodes(rows, tool),
                            "lat": {lv: ratios[tool]["latency_vs_best_peer"].get(lv) for lv in LEVELS}}
        out.append(row)
    return out


def _bold(nodes, best) -> str:
    return f"**{nodes}**" if nodes is not None and best is not None and nodes <= best[0] else str(nodes)


def _latency(lat: dict) -> str:
    return " / ".join(_ratio(lat[lv]) for lv in LEVELS)


def markdown(rows: list) -> str:
    lines = ["| model | nodes: export | best peer | pyonnxopt | Transposes: export → pyonnxopt | latency vs best "
             "peer, opt. off / default | `--opset 23`: nodes, Transposes | … latency, opt. off / default "
             "| `--target ort`: nodes (best peer) | … latency, opt. off / default |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        best, tools = r["best"]
        up, ort = r.get("up"), r.get("ort")
        up_nodes = f"{up['nodes']}, {up['t']}" if up else "–"
        ort_nodes = f"{_bold(ort['nodes'], ort['best'])} ({ort['best'][0]})" if ort and ort["best"] else "–"
        lines.append(f"| {r['model']} | {r['export']} | {best} ({', '.join(tools)}) | {_bold(r['nodes'], r['best'])} | "
                     f"{r['t_export']} → {r['t']} | {_latency(r['lat'])} | {up_nodes} | "
                     f"{_latency(up['lat']) if up else '–'} | {ort_nodes} | {_latency(ort['lat']) if ort else '–'} |")
    return "\n".join(lines)


def summary(rows: list) -> str:
    out = []
    for label, key in (("pyonnxopt", None), ("--opset 23", "up"), ("--target ort", "ort")):
        for lv in LEVELS:
            values = [(r if key is None else r[key])["lat"][lv] for r in rows if key is None or r.get(key)]
            values = [v for v in values if v not in (None, float("inf"))]
            if values:
                out.append(f"{label}, latency at '{lv}': geomean {_util.geomean(values):.3f}, median "
                           f"{_util.median(values):.3f}, worst {max(values):.2f} over {len(values)} models")
    return "\n".join(out)


def main(argv=None) -> int:
    paths = argv if argv is not None else sys.argv[1:]
    by_model = {}  # a model in a later file (a re-run) replaces its earlier row, keeping its place
    for path in paths:
        with open(path) as f:
            for row in table_rows(json.load(f)):
                by_model[row["model"]] = row
    rows = list(by_model.values())
    print(markdown(rows))
    print()
    print(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
