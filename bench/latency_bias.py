"""How far the "latency vs best peer" ratio reads above 1 for a tool that is
no faster and no slower than the peers: each peer in a compare.py run is
measured the way pyonnxopt is, against the best of the *other* peers.

    python bench/latency_bias.py bench/out/compare-final-1.json [more.json ...]

By the ratio of medians (the fastest of several noisy medians is low) and,
where the run kept every run's time, by the paired ratio that compare.py
now uses (peer chosen on even rounds, ratio over odd rounds). A peer whose
graph is really slower pushes these up too, so they bound the bias from
above; the median over models is the typical value.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _goals  # noqa: E402
import _util  # noqa: E402


def peer_ratios(doc: dict) -> dict:
    """level -> method -> [ratio of each peer to the best of the others, per model]."""
    out = {}
    for model in doc["models"].values():
        rows = model["rows"]
        peers = [t for t in rows if t not in _goals.PYONNXOPT and t != "original" and _goals.good(rows[t])
                 and not rows[t].get("ms_nodes")]
        for level in doc["args"]["latency_level"]:
            recs = {p: _goals.latency(rows[p], level) for p in peers if _goals.latency(rows[p], level)}
            for p, mine in recs.items():
                others = {q: r for q, r in recs.items() if q != p}
                if len(others) < 2:
                    continue
                by_level = out.setdefault(level, {"medians": [], "paired": []})
                by_level["medians"].append(mine["ms"] / min(r["ms"] for r in others.values()))
                paired = _goals.paired_latency(mine, others)
                if paired:
                    by_level["paired"].append(paired[1])
    return out


def main(argv=None) -> int:
    paths = (argv if argv is not None else sys.argv[1:])
    if not paths:
        print(__doc__.strip().splitlines()[3].strip())
        return 2
    merged = {}
    for path in paths:
        with open(path) as f:
            for level, methods in peer_ratios(json.load(f)).items():
                for method, values in methods.items():
                    merged.setdefault(level, {}).setdefault(method, []).extend(values)
    rows = [[level, method, len(v), f"{_util.median(v):.3f}", f"{_util.geomean(v):.3f}"]
            for level, methods in merged.items() for method, v in methods.items() if v]
    print(_util.table(["level", "method", "peer results", "median", "geomean"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
