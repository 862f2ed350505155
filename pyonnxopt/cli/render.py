"""Shared terminal rendering: byte sizes and rich tables."""

from __future__ import annotations


def human_bytes(n) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr)
