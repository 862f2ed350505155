"""Shared terminal rendering: the rich console."""

from __future__ import annotations


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr)
