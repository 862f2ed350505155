"""`pyonnxopt passes`: the passes there are, one line each."""

from __future__ import annotations

import json

from pyonnxopt.cli.render import console, esc


def add_parser(sub):
    p = sub.add_parser("passes", help="list the optimization passes")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=run)


def run(args) -> int:
    from rich.table import Table

    from pyonnxopt.passes import all_passes

    rows = [{"name": p.name, "description": p.description} for p in all_passes()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title="passes")
    table.add_column("name", style="cyan")
    table.add_column("what it does")
    for r in rows:
        table.add_row(esc(r["name"]), esc(r["description"]))
    console().print(table)
    return 0
