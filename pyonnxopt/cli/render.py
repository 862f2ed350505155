"""Shared terminal rendering: the rich console."""

from __future__ import annotations


def esc(text) -> str:
    """`text` (names, paths, messages from a model) as plain text inside rich
    markup: rich would take "[rows, K]" or "[mask]" for a tag and drop it."""
    from rich.markup import escape

    return escape(str(text))


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr)
