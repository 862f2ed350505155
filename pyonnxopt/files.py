"""Writing what a command produces: strict JSON, atomic files, byte sizes for people."""

from __future__ import annotations

import json
import math
import os

_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def _finite_or_text(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {k: _finite_or_text(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_or_text(v) for v in obj]
    return obj


def to_json(obj) -> str:
    """Strict JSON (what JSON.parse and jq accept): a non-finite number, such
    as the SNR of two equal tensors, is written as "inf", "-inf" or "nan"."""
    return json.dumps(_finite_or_text(obj), indent=2, allow_nan=False) + "\n"


def _numbers_back(obj):
    if isinstance(obj, str):
        return _NON_FINITE.get(obj, obj)
    if isinstance(obj, dict):
        return {k: _numbers_back(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_numbers_back(v) for v in obj]
    return obj


def from_json(text: str):
    """Reads what to_json wrote (or Python's json with Infinity/NaN)."""
    return _numbers_back(json.loads(text))


def write_atomic(path: str, text: str) -> None:
    """Writes a temporary file next to `path`, then renames it over `path`, so
    a reader (or a crash) never sees half a file."""
    # A plain open (not mkstemp) so the file gets the usual umask permissions.
    tmp = os.path.join(os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def human_bytes(n) -> str:
    """1536 -> "1.5 KiB"; None -> "-"."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
