"""The numbers compare.py judges pyonnxopt by: its ratios to the best peer per
model, their spread over the zoo, and the goals with a verdict each.

Goals (for each pyonnxopt variant in the run; --big models left out):
1. outputs correct on every model;
2. node count at most the best peer's on every model;
3. latency in onnxruntime with its optimizations off ("disable") no worse
   than the best peer's on any model, and <= 0.95x as a geometric mean;
4. latency with onnxruntime's default optimizations ("all") no worse than
   the best peer's on any model;
5. Transposes in the detection and transformer models at most half of the
   export's;
6. optimize time against the faster of onnxsim and onnxslim (median), where
   the variant has a target; the goal names the models where their times
   come from an earlier run (compare.py --reuse: another time, another load).

"Best peer": the fewest nodes (or lowest median latency) among the peers
whose result is right. For latency the peer is chosen on the even-numbered
interleaved rounds and the ratio is the median of the per-round ratios on
the odd ones (`paired_latency`): picking the fastest of five noisy medians
and comparing with it on the same runs favours it, by about 3-5% on this
zoo when a peer is measured that way against the others (bench/README.md). A peer result with nodes in onnxruntime's own domains
(com.microsoft*) is not counted (and is named) unless the pyonnxopt variant
itself may emit them (--target ort). A pyonnxopt result that is missing or
wrong counts as an infinite ratio: it fails the goals, it is not left out.
"""

from __future__ import annotations

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _util  # noqa: E402

INF = float("inf")
PYONNXOPT = ("pyonnxopt-nocheck", "pyonnxopt", "pyonnxopt-ort", "pyonnxopt-opset23")
TARGET_ORT = ("pyonnxopt-ort",)  # variants run with --target ort
TIME_PEERS = ("onnxsim", "onnxslim")
TIME_TARGETS = {"pyonnxopt-nocheck": 0.25, "pyonnxopt": 0.6}
MAX_NODE_RATIO = 1.0
MAX_LATENCY_RATIO = {"disable": 1.0, "all": 1.0}
GEOMEAN_LATENCY_RATIO = {"disable": 0.95}
# Zoo models (by name prefix) whose exports carry layout Transposes: detection and transformers.
TRANSPOSE_MODELS = ("fasterrcnn", "ssd", "vit", "swin", "bert", "gpt2", "t5")
MAX_TRANSPOSE_FRACTION = 0.5
RIGHT = ("ok", "shapes ok", "n/a")  # n/a: the original itself does not run


def good(row: dict) -> bool:
    """A result was written and computes what the original does."""
    return row.get("wall_s") is not None and row.get("check") in RIGHT


def latency(row: dict, level: str) -> "dict | None":
    rec = row.get("latency", {}).get(level)
    return rec if rec and rec.get("ms") is not None else None


def counted_peers(rows: dict, tool: str) -> tuple:
    """(peers that count for `tool`, right results left out for their com.microsoft nodes)."""
    peers = [t for t in rows if t not in PYONNXOPT and t != "original" and good(rows[t])]
    if tool in TARGET_ORT:
        return peers, []
    return [p for p in peers if not rows[p].get("ms_nodes")], [p for p in peers if rows[p].get("ms_nodes")]


def ratio(mine: float, best: float) -> float:
    if best:
        return mine / best
    return 1.0 if mine == best else INF


MIN_PAIRED_RUNS = 6  # fewer interleaved runs: the plain ratio of medians


def paired_latency(mine: dict, theirs: dict) -> "tuple | None":
    """(best peer, median per-round ratio, its quartiles): the peer with the
    lowest median over the even-numbered rounds, the ratios over the odd
    ones, so the choice and the measurement use different runs. None when
    the records are not interleaved runs of the same count."""
    a = mine.get("samples_ms") or []
    if len(a) < MIN_PAIRED_RUNS or not mine.get("order", "").startswith("interleaved"):
        return None
    peers = {p: r["samples_ms"] for p, r in theirs.items() if len(r.get("samples_ms") or []) == len(a)}
    if not peers:
        return None
    best = min(peers, key=lambda p: _util.median(peers[p][0::2]))
    ratios = sorted(x / y for x, y in zip(a[1::2], peers[best][1::2]) if y > 0)
    if not ratios:
        return None
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return best, _util.median(ratios), (q[0], q[2])


def model_ratios(rows: dict, levels) -> dict:
    """Per pyonnxopt variant in `rows`: its ratios to the best peer on this
    model; infinite where it failed and the reference exists."""
    timed = [p for p in TIME_PEERS if rows.get(p, {}).get("wall_s") is not None]
    times = [rows[p]["wall_s"] for p in timed]
    out = {}
    for tool in PYONNXOPT:
        if tool not in rows or rows[tool].get("status") == "not installed":
            continue
        r = rows[tool]
        ok = good(r)
        peers, excluded = counted_peers(rows, tool)
        rec = {"failed": not ok, "excluded_peers": excluded}
        if times:
            rec["time_vs_fastest_sim_slim"] = ratio(r["wall_s"], min(times)) if ok else INF
            rec["time_peers_reused"] = [p for p in timed if rows[p].get("reused")]
        best = min(((rows[p]["nodes"], p) for p in peers if rows[p].get("nodes") is not None), default=None)
        if best:
            rec["nodes_vs_best_peer"], rec["nodes_best_peer"] = (ratio(r["nodes"], best[0]) if ok else INF), best[1]
        rec["latency_vs_best_peer"], rec["latency_best_peer"], rec["latency_within_noise"] = {}, {}, {}
        for level in levels:
            best = min(((latency(rows[p], level)["ms"], p) for p in peers if latency(rows[p], level)), default=None)
            if not best:
                continue
            mine = latency(r, level) if ok else None
            paired = paired_latency(mine, {p: latency(rows[p], level) for p in peers if latency(rows[p], level)}) \
                if mine else None
            rec.setdefault("latency_method", {})[level] = "paired" if paired else "medians"
            if paired:
                peer, lat_ratio, (low, high) = paired
                rec["latency_vs_best_peer"][level], rec["latency_best_peer"][level] = lat_ratio, peer
                # Worse while the per-round ratios' middle half spans 1: within the noise.
                rec["latency_within_noise"][level] = bool(lat_ratio > 1 and low <= 1)
                continue
            # A right result whose latency could not be measured is as bad as a wrong one.
            lat_ratio = ratio(mine["ms"], best[0]) if mine else INF
            rec["latency_vs_best_peer"][level], rec["latency_best_peer"][level] = lat_ratio, best[1]
            # Worse by the medians while the interquartile ranges overlap: within the noise.
            theirs = latency(rows[best[1]], level)
            rec["latency_within_noise"][level] = bool(
                mine and lat_ratio > 1 and mine.get("p25_ms", INF) <= theirs.get("p75_ms", -INF))
        before = rows.get("original", {}).get("transposes")
        if before is not None:
            after = r.get("transposes") if ok else None
            rec["transposes"] = after
            # none before and none after: nothing was left to remove
            rec["transposes_vs_original"] = INF if after is None else (ratio(after, before) if before or after else 0.0)
        out[tool] = rec
    return out


def spread(values: dict) -> dict:
    """max (and its model), median and geometric mean of model -> ratio; None values left out."""
    have = {k: v for k, v in values.items() if v is not None}
    if not have:
        return {"models": 0, "max": None, "median": None, "geomean": None}
    worst = max(have, key=have.get)
    return {"models": len(have), "max": have[worst], "max_model": worst, "median": _util.median(have.values()),
            "geomean": _util.geomean(have.values())}


def is_transpose_model(name: str) -> bool:
    return name.startswith(TRANSPOSE_MODELS)


def zoo_summary(models: dict, levels) -> dict:
    """Per pyonnxopt variant: the spread of its ratios over the zoo (--big models left out)."""
    zoo = {k: m for k, m in models.items() if not m.get("big")}
    out = {}
    for tool in PYONNXOPT:
        per = {name: m["ratios"][tool] for name, m in zoo.items() if tool in m.get("ratios", {})}
        if not per:
            continue
        s = {"models": len(per), "failed": sorted(n for n, r in per.items() if r["failed"])}
        s["time"] = {**spread({n: r.get("time_vs_fastest_sim_slim") for n, r in per.items()}),
                     "target": TIME_TARGETS.get(tool),
                     "peers_from_earlier_run": sorted(n for n, r in per.items() if r.get("time_peers_reused"))}
        s["nodes"] = spread({n: r.get("nodes_vs_best_peer") for n, r in per.items()})
        s["nodes"]["peers_left_out"] = {n: r["excluded_peers"] for n, r in per.items() if r["excluded_peers"]}
        s["latency"] = {}
        for level in levels:
            vals = {n: r["latency_vs_best_peer"].get(level) for n, r in per.items()}
            failed = sorted(n for n, v in vals.items() if v == INF)
            # The geometric mean is over the models measured; failures fail the goal on their own.
            lat = spread({n: v for n, v in vals.items() if v != INF})
            if failed:
                lat.update(max=INF, max_model=failed[0])
            lat["failed"] = failed
            lat["worse_within_noise"] = sorted(n for n, r in per.items() if r["latency_within_noise"].get(level))
            s["latency"][level] = lat
        tr = {n: r.get("transposes_vs_original") for n, r in per.items() if is_transpose_model(n)}
        s["transposes"] = {**spread(tr), "per_model": {n: v for n, v in tr.items() if v is not None}}
        out[tool] = s
    return out


def _verdict(value, target) -> "bool | None":
    return None if value is None else value <= target


def goals(summary: dict, levels) -> list:
    """Each goal, per pyonnxopt variant: its value, the target and whether it is met."""
    out = []

    def add(tool, goal, value, target, met, detail=""):
        out.append({"tool": tool, "goal": goal, "value": value, "target": target, "met": met, "detail": detail})

    for tool, s in summary.items():
        failed = s["failed"]
        add(tool, "outputs correct on every model", f"{s['models'] - len(failed)}/{s['models']}", "all",
            not failed, "wrong or no result: " + ", ".join(failed) if failed else "")
        n = s["nodes"]
        left = n["peers_left_out"]
        detail = f"median {_num(n['median'])}, worst {n.get('max_model', '-')}"
        if left:
            detail += f"; peers with com.microsoft ops left out on {len(left)} model(s)"
        add(tool, "node count <= best peer's on every model", n["max"], f"<= {MAX_NODE_RATIO}",
            _verdict(n["max"], MAX_NODE_RATIO), detail)
        for level in levels:
            lat = s["latency"][level]
            if level in MAX_LATENCY_RATIO:
                noise = lat["worse_within_noise"]
                detail = f"worst {lat.get('max_model', '-')}, {len(lat['failed'])} failed"
                if noise:
                    detail += f"; {len(noise)} worse only within the noise (IQRs overlap): {', '.join(noise)}"
                add(tool, f"latency (ort '{level}') <= best peer's on every model", lat["max"],
                    f"<= {MAX_LATENCY_RATIO[level]}", _verdict(lat["max"], MAX_LATENCY_RATIO[level]), detail)
            if level in GEOMEAN_LATENCY_RATIO:
                met = _verdict(lat["geomean"], GEOMEAN_LATENCY_RATIO[level])
                add(tool, f"latency (ort '{level}') geomean over the zoo", lat["geomean"],
                    f"<= {GEOMEAN_LATENCY_RATIO[level]}", met and not lat["failed"] if met is not None else None,
                    f"{lat['models']} models" + (f"; failed on {', '.join(lat['failed'])}" if lat["failed"] else ""))
        tr = s["transposes"]
        add(tool, "Transposes <= half the export's (detection, transformers)", tr["max"],
            f"<= {MAX_TRANSPOSE_FRACTION}", _verdict(tr["max"], MAX_TRANSPOSE_FRACTION),
            ", ".join(f"{k} {_num(v)}" for k, v in tr["per_model"].items()))
        t = s["time"]
        if t["target"] is not None:
            detail = f"{t['models']} models"
            earlier = t.get("peers_from_earlier_run")
            if earlier:
                detail += f"; peer times from an earlier run on {len(earlier)} of them ({', '.join(earlier)})"
            add(tool, "optimize time / faster of onnxsim, onnxslim (median)", t["median"], f"<= {t['target']}",
                _verdict(t["median"], t["target"]), detail)
    return out


def _num(x) -> str:
    return "-" if x is None else ("inf" if x == INF else f"{x:.3g}")
