"""One decoding step of two exports of a decoder with a cache (A then B),
timed as fused_ops.py times (one thread, ORT_DISABLE_ALL and the default
level, taking turns, outputs compared first): what a rewrite of the work
done per generated token is worth once the cache is long (pyonnxopt bench
uses the smallest cache, where that work hardly shows).

Dims named like a past or total length get --past (total: --past + 1),
every other dynamic dim 1; ids are random, masks ones, floats normal.

    python bench/decode_step.py OLD.onnx NEW.onnx --past 512
"""

from __future__ import annotations

import argparse

import numpy as np
import onnxruntime as ort
from fused_ops import print_row, time_case

NAMES = ("a", "b")  # time_case's keys: a_ms, b_ms


def _dim(d, past: int) -> int:
    if isinstance(d, int):
        return d
    name = (d or "").lower()
    return past + 1 if "total" in name else past if "past" in name else 1


def feeds(path: str, past: int, seed: int = 0) -> dict:
    """Inputs for the model at `path` with a cache of `past` tokens."""
    rng = np.random.default_rng(seed)
    out = {}
    for i in ort.InferenceSession(path, providers=["CPUExecutionProvider"]).get_inputs():
        shape = [_dim(d, past) for d in i.shape]
        if "int" in i.type:
            out[i.name] = np.ones(shape, np.int64) if "mask" in i.name else rng.integers(0, 100, shape).astype(np.int64)
        else:
            out[i.name] = rng.standard_normal(shape).astype(np.float16 if "float16" in i.type else np.float32)
    return out


def compare(a_path: str, b_path: str, past: int, rounds: int) -> dict:
    """time_case's result: per level a_ms, b_ms, the ratio B / A and max_abs_diff."""
    return time_case(a_path, b_path, feeds(a_path, past), rounds, NAMES)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a", help="the first export (A)")
    p.add_argument("b", help="the second export (B)")
    p.add_argument("--past", type=int, default=512, help="cache length (default 512)")
    p.add_argument("--rounds", type=int, default=60, help="interleaved runs of each per level (default 60)")
    args = p.parse_args(argv)
    r = compare(args.a, args.b, args.past, args.rounds)
    print(f"{'decode step':14s} {'ORT_DISABLE_ALL':>28s} {'ORT_ENABLE_ALL':>28s}")
    print_row(f"past {args.past}", 14, r, NAMES)
    print(f"largest output difference {max(v['max_abs_diff'] for v in r.values()):.2e}")


if __name__ == "__main__":
    main()
