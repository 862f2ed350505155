"""compare.py's output: the header lines and the rich tables (per run, per
model ratios, over the zoo, the goals)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _goals  # noqa: E402
import _util  # noqa: E402
from _evaluate import MIN_LATENCY_RUNS  # noqa: E402

INF = float("inf")
EARLIER = "^"  # marks what comes from an earlier run (compare.py --reuse)
PEER_VERSIONS = ("onnxsim", "onnxslim", "onnxoptimizer", "polygraphy", "onnxscript", "onnx-ir", "onnxruntime", "onnx")


def levels_of(doc: dict) -> list:
    lv = doc["args"]["latency_level"]
    return lv if isinstance(lv, list) else [x.strip() for x in str(lv).split(",") if x.strip()]


def upgrade(doc: dict) -> None:
    """A --json written before latency had one column per level: its one
    `latency_ms` becomes the record of the level it was measured at."""
    level = levels_of(doc)[0]
    for m in doc["models"].values():
        for row in m["rows"].values():
            if "latency_ms" in row and "latency" not in row:
                row["latency"] = {level: {"ms": row["latency_ms"], "min_ms": row.get("latency_min_ms")}}


def header(doc: dict) -> str:
    env, a = doc["environment"], doc["args"]
    loads = [r["loadavg_1min"] for m in doc["models"].values() for r in m["runs"]]
    setup = doc.get("latency_setup")  # absent in runs from before the threads were pinned
    threads = (f"{setup['intra_op_threads']} intra-op thread(s), {setup['inter_op_threads']} inter-op, sequential"
               if setup else "onnxruntime's default threads")
    used = [rec["runs"] for m in doc["models"].values() for r in m["rows"].values()
            for rec in r.get("latency", {}).values() if rec.get("runs")]
    clock = {"cpu": "CPU time", "wall": "wall time"}.get(a.get("latency_clock"), "wall time")
    runs = f"{clock}, median of {a['latency_runs']} runs after a warm-up"
    if a.get("latency_budget"):
        runs += f" (fewer, at least {MIN_LATENCY_RUNS}, where they would take over {a['latency_budget']:.0f} s " \
                f"per model and level)"
    if used and min(used) != max(used):
        runs += f"; runs used {min(used)}..{max(used)}"
    if a.get("latency_block"):
        runs += f"; a model's results take turns, each round 1 untimed + {a['latency_block']} timed run(s) each"
    lines = [
        f"machine: {env.get('cpus')} CPUs, 1-min load average {min(loads, default=0):.1f}..{max(loads, default=0):.1f} "
        f"during the runs; {a['repeats']} repeats; timeout {a['timeout']:.0f} s",
        f"latency: onnxruntime {env.get('onnxruntime')} on the CPU, {threads}; optimizations "
        f"{', '.join(repr(x) for x in levels_of(doc))}; {runs}",
        "versions: " + ", ".join(f"{k} {env.get(k)}" for k in ("onnxsim", "onnxslim", "onnxoptimizer", "polygraphy",
                                                                "onnxscript", "onnxruntime", "onnx")),
    ]
    if doc.get("reused"):
        lines.append(reused_line(doc))
    return "\n".join(lines)


def reused_line(doc: dict) -> str:
    """Which rows come from an earlier run, and how that run differed from this one."""
    rec = doc["reused"]
    tools = list(dict.fromkeys(t for m in doc["models"].values() for t in m.get("reused_tools", [])))
    then, now = rec.get("environment", {}), doc["environment"]
    unfinished = ", unfinished" if rec.get("complete") is False else ""  # absent: written only at the end
    line = (f"from an earlier run ({rec['json']}{unfinished}; 1-min load average "
            f"{then.get('loadavg_start') or 0:.1f} at its start): status, time, peak MB, nodes of "
            f"{', '.join(tools) or 'no tool'} (marked {EARLIER}); their check and latency measured in this run")
    changed = [f"{k} {then.get(k)} -> {now.get(k)}" for k in PEER_VERSIONS if then.get(k) != now.get(k)]
    return line + (f"; versions changed since: {', '.join(changed)}" if changed else "")


def _fmt(x, spec):
    if x is None:
        return ""
    return "inf" if x == INF else format(x, spec)


def _latency_cell(row: dict, level: str) -> str:
    from rich.markup import escape

    rec = row.get("latency", {}).get(level) or {}
    if rec.get("ms") is not None:
        return f"{rec['ms']:.2f}"
    return escape(rec.get("error", "")[:30])


def render(doc: dict, width: "int | None") -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=width) if width else Console()
    levels = levels_of(doc)
    console.print(_runs_table(doc, levels))
    ratios = _ratios_table(doc, levels)
    if ratios is not None:
        console.print(ratios)
    if doc.get("summary"):
        console.print(_summary_table(doc, levels))
        goals = Table(title="goals")
        for col in ("pyonnxopt as", "goal", "value", "target", "met", "detail"):
            goals.add_column(col, overflow="fold")
        for g in doc.get("goals", []):
            v = g["value"]
            met = g["met"]
            goals.add_row(g["tool"], g["goal"], v if isinstance(v, str) else (_fmt(v, ".3f") or "-"), g["target"],
                          "n/a" if met is None else ("[green]yes[/green]" if met else "[red]NO[/red]"), g["detail"])
        console.print(goals)


def _runs_table(doc: dict, levels: list):
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="pyonnxopt vs peers (medians; time = whole process; check vs the original in onnxruntime)")
    if any(m.get("reused_tools") for m in doc["models"].values()):
        table.caption = (f"{EARLIER}: status, time, x sim/slim, peak MB, nodes from an earlier run (--reuse); "
                         "check and latency from this one")
    cols = [("model", "left"), ("tool", "left"), ("status", "left"), ("time s", "right"), ("x sim/slim", "right"),
            ("peak MB", "right"), ("nodes", "right"), ("Transp", "right"), ("const-in", "right"), ("check", "left"),
            *((f"ms {lv}", "right") for lv in levels), ("MB", "right")]
    for col, just in cols:
        table.add_column(col, justify=just, overflow="fold")
    for name, m in doc["models"].items():
        rows = m["rows"]
        ref = [rows[p]["wall_s"] for p in _goals.TIME_PEERS if rows.get(p, {}).get("wall_s") is not None]
        ref = min(ref) if ref else None
        order = ["original", *[t for t in doc["tools"] if t in rows]]
        for i, tool in enumerate(order):
            r = rows[tool]
            status = r.get("status", "")
            style = "green" if status.startswith("ok") else ("" if status == "input" else "red")
            check = r.get("check", "")
            if r.get("detail") and check not in ("ok", "reference", "shapes ok"):
                check = f"{check}: {r['detail']}"[:70]
            peak = _fmt(r.get("peak_rss") and r["peak_rss"] / _util.MB, ",.0f")
            if m.get("big") and r.get("peak_rss_of_model") is not None:
                peak += f" ({100 * r['peak_rss_of_model']:.0f}%)"
            nodes = _fmt(r.get("nodes"), "d") + (f" ms:{r['ms_nodes']}" if r.get("ms_nodes") else "")
            table.add_row(
                name if i == 0 else "", f"{tool} {EARLIER}" if r.get("reused") else tool,
                f"[{style}]{escape(status[:60])}[/{style}]" if style else status[:60],
                _fmt(r.get("wall_s"), ".2f"),
                _fmt(ref and r.get("wall_s") and r["wall_s"] / ref, ".2f"),
                peak, nodes, _fmt(r.get("transposes"), "d"), _fmt(r.get("constant_input_nodes"), "d"), escape(check),
                *(_latency_cell(r, lv) for lv in levels),
                _fmt(r.get("output_bytes") and r["output_bytes"] / 1e6, ".1f"),
                end_section=(i == len(order) - 1))
    return table


def _ratio_cell(x, mark: str = "") -> str:
    if x is None:
        return ""
    return "[red]fail[/red]" if x == INF else f"{x:.3f}{mark}"


def _ratios_table(doc: dict, levels: list):
    from rich.table import Table

    tools = [t for t in _goals.PYONNXOPT if any(t in m["ratios"] for m in doc["models"].values())]
    if not tools:
        return None
    ratios = Table(title="pyonnxopt / best peer, per model (time: / faster of onnxsim, onnxslim; nodes, latency: / "
                         "best peer with a right result; * peers with com.microsoft ops left out; ~ worse only "
                         f"within the noise; Transp: / the export's; time {EARLIER}: the peer times from an earlier "
                         "run)")
    ratios.add_column("model")
    keys = ["time", "nodes", *(f"ms {lv}" for lv in levels), "Transp"]
    for t in tools:
        for k in keys:
            ratios.add_column(f"{t} {k}", justify="right")
    for name, m in doc["models"].items():
        cells = []
        for t in tools:
            r = m["ratios"].get(t)
            if r is None:
                cells += [""] * len(keys)
                continue
            cells += [_ratio_cell(r.get("time_vs_fastest_sim_slim"), EARLIER if r.get("time_peers_reused") else ""),
                      _ratio_cell(r.get("nodes_vs_best_peer"), "*" if r["excluded_peers"] else "")]
            cells += [_ratio_cell(r["latency_vs_best_peer"].get(lv), "~" if r["latency_within_noise"].get(lv) else "")
                      for lv in levels]
            cells.append(_ratio_cell(r.get("transposes_vs_original")) if _goals.is_transpose_model(name) else "")
        ratios.add_row(name, *cells)
    return ratios


def _summary_table(doc: dict, levels: list):
    from rich.table import Table

    summary = Table(title="over the zoo (--big models left out)")
    cols = ["pyonnxopt as", "models", "failed", "time median", "nodes max", "nodes median",
            *(f"ms {lv} {k}" for lv in levels for k in ("max", "geomean")), "Transp max"]
    for col in cols:
        summary.add_column(col, justify="left" if col == "pyonnxopt as" else "right")
    for t, s in doc["summary"].items():
        lat = [x for lv in levels for x in (_fmt(s["latency"][lv]["max"], ".3f"),
                                              _fmt(s["latency"][lv]["geomean"], ".3f"))]
        summary.add_row(t, str(s["models"]), str(len(s["failed"])), _fmt(s["time"]["median"], ".3f"),
                        _fmt(s["nodes"]["max"], ".3f"), _fmt(s["nodes"]["median"], ".3f"), *lat,
                        _fmt(s["transposes"]["max"], ".3f"))
    return summary
