"""Dim names that spell sums of other dims, as torch's dynamo exporter and
optimum write them (`past_sequence_length + sequence_length`, `2*s0 + 1`)."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Optional

_TERM = re.compile(r"\s*([+-]?)\s*(?:(\d+)\s*\*\s*)?([A-Za-z_][\w.]*|\d+)\s*")


@lru_cache(maxsize=4096)
def sum_terms(name: str) -> Optional[tuple]:
    """({symbol: factor}, constant) of a dim name that spells a sum of
    symbols as sympy prints it (`past_seq + seq`, `2*a + 1`), else None:
    `batch-size` is a name."""
    if " + " not in name and " - " not in name and "*" not in name:
        return None
    terms: dict = {}
    const, pos = 0, 0
    while pos < len(name):
        t = _TERM.match(name, pos)
        if t is None or t.end() == pos or (pos and not t.group(1)):
            return None
        sign = -1 if t.group(1) == "-" else 1
        factor = int(t.group(2) or 1) * sign
        if t.group(3).isdigit():
            if t.group(2):
                return None
            const += int(t.group(3)) * sign
        else:
            terms[t.group(3)] = terms.get(t.group(3), 0) + factor
        pos = t.end()
    terms = {k: c for k, c in terms.items() if c}
    return (terms, const) if terms else None


@lru_cache(maxsize=4096)
def spelled_sum(name: str) -> str:
    """A dim name that spells a sum of symbols (torch's dynamo exporter
    names one length `past_seq + seq` on one value and `seq + past_seq` on
    another) in one spelling: its terms sorted, constant last. Any other
    name as it is."""
    parsed = sum_terms(name)
    if parsed is None:
        return name
    terms, const = parsed
    parts = [(c, k if c in (1, -1) else f"{abs(c)}*{k}") for k, c in sorted(terms.items())]
    if const:
        parts.append((const, str(abs(const))))
    out = ("-" if parts[0][0] < 0 else "") + parts[0][1]
    return out + "".join(f" {'-' if c < 0 else '+'} {text}" for c, text in parts[1:])
