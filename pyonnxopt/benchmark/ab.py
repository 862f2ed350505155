"""Two models measured in one process, interleaved, so that noise (other
processes, frequency scaling, thermal state) hits both alike.

The runs are split into rounds; round r runs A's share then B's when r is
even, B's then A's when r is odd (A B | B A | A B | ...), so neither model
always goes first. The ratio is the median of the per-round ratios (median
of B's runs / median of A's runs in that round; > 1: B is slower): pairing
runs that were close in time cancels slow drifts in the machine's load,
which the ratio of the two overall medians (also reported, as
"ratio_of_medians") does not. The spread is the interquartile range of the
per-round ratios: the middle half of what one round would have told you. It
is not a confidence interval of the ratio, which is tighter; a bootstrap
would give one, but it assumes independent runs, which consecutive runs on one machine are not."""

from __future__ import annotations

from typing import Optional

import numpy as np

from pyonnxopt.benchmark.latency import time_runs

MAX_ROUNDS = 50


def split(total: int, parts: int) -> list:
    """`total` runs in `parts` rounds, as evenly as possible."""
    return [total // parts + (1 if k < total % parts else 0) for k in range(parts)]


def interleaved(sessions: list, feeds: list, iterations: Optional[int] = None, seconds: Optional[float] = None,
                rounds: Optional[int] = None, progress=None) -> dict:
    """Times two sessions (already warmed up) in alternating rounds.
    Returns {"times": [A's seconds, B's seconds], "round_ratios": [...]}."""
    if rounds is None:
        rounds = min(MAX_ROUNDS, iterations) if iterations is not None else MAX_ROUNDS
    counts = split(iterations, rounds) if iterations is not None else [None] * rounds
    per_round_s = None if seconds is None else seconds / rounds
    times = [[], []]
    ratios = []
    for r in range(rounds):
        this_round = [None, None]
        for m in ((0, 1) if r % 2 == 0 else (1, 0)):
            this_round[m] = time_runs(sessions[m], feeds[m], counts[r], per_round_s)
            times[m].extend(this_round[m])
        ratios.append(float(np.median(this_round[1]) / np.median(this_round[0])))
        if progress:
            progress(r + 1, rounds)
    return {"times": times, "round_ratios": ratios}


def comparison(result: dict) -> dict:
    """The spec's comparison record: B/A of the p50s and its spread."""
    a, b = result["times"]
    low, mid, high = np.percentile(result["round_ratios"], [25, 50, 75])
    return {"metric": "p50", "ratio": float(mid), "ratio_low": float(low), "ratio_high": float(high),
            "rounds": len(result["round_ratios"]), "spread": "interquartile range of per-round ratios",
            "ratio_of_medians": float(np.median(b) / np.median(a))}
