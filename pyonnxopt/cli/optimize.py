"""`pyonnxopt optimize IN OUT`: the passes, checked in onnxruntime, saved atomically."""

from __future__ import annotations

import json
import os

from pyonnxopt.cli.render import console


def add_parser(sub):
    p = sub.add_parser("optimize", help="remove redundancy from a model and check the result in onnxruntime")
    p.add_argument("input", help="ONNX file to optimize (never modified)")
    p.add_argument("output", help="where to write the optimized model (may equal the input)")
    p.add_argument("--passes", help="comma-separated passes to run, in order (default: all; see `pyonnxopt passes`)")
    p.add_argument("--skip", action="append", default=[], metavar="PASS", help="a pass not to run (repeatable)")
    p.add_argument("--exclude-node", action="append", default=[], metavar="NAME",
                   help="a node name (or glob) no pass may change or remove (repeatable)")
    p.add_argument("--prune-outputs", action="append", default=[], metavar="NAME",
                   help="a graph output (name or glob, e.g. 'aux_*') to drop with what only it needs (repeatable)")
    p.add_argument("--no-check", action="store_true", help="do not compare the result with the original in onnxruntime")
    p.add_argument("--force", action="store_true", help="write the result even when the check finds a difference")
    p.add_argument("--seed", type=int, default=0, help="seed of the check's random inputs (default 0)")
    p.add_argument("--report", metavar="FILE.json", help="write the report (versioned JSON) there")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of tables")
    p.set_defaults(run=run)


def run(args) -> int:
    from pyonnxopt.errors import Error
    from pyonnxopt.optimize import optimize
    from pyonnxopt.passes import get

    names = [n.strip() for n in args.passes.split(",") if n.strip()] if args.passes else None
    for name in [*(names or []), *args.skip]:
        try:
            get(name)
        except KeyError as e:
            raise Error(f"--passes/--skip: {e.args[0]}") from None
    if not os.path.exists(args.input):
        raise Error(f"{args.input}: no such file")
    _, report = optimize(args.input, args.output, passes=names, skip=args.skip, check_outputs=not args.no_check,
                         force=args.force, seed=args.seed, exclude_nodes=args.exclude_node, prune_outputs=args.prune_outputs)
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f, indent=2)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        render(report)
    return 0


def render(report: dict) -> None:
    from rich.table import Table

    out = console()
    ops = Table(title=f"{report['input']} -> {report['output']}")
    for col, justify in (("op type", "left"), ("before", "right"), ("after", "right")):
        ops.add_column(col, justify=justify)
    before, after = report["op_counts_before"], report["op_counts_after"]
    for op in sorted(set(before) | set(after), key=lambda o: (-before.get(o, 0), o)):
        b, a = before.get(op, 0), after.get(op, 0)
        ops.add_row(op, str(b), str(a) if a == b else f"[green]{a}[/green]")
    ops.add_row("[bold]nodes[/bold]", str(report["nodes_before"]), f"[bold]{report['nodes_after']}[/bold]")
    out.print(ops)
    passes = Table(title=f"passes ({report['iterations']} iterations)")
    for col in ("pass", "iteration", "ms", "nodes removed", "initializers removed", "refused"):
        passes.add_column(col)
    for r in report["passes"]:
        if r["modified"] or r.get("refused"):
            passes.add_row(r["name"], str(r["iteration"]), f"{1e3 * r['seconds']:.2f}",
                           str(r.get("nodes_removed", 0)), str(r.get("initializers_removed", 0)),
                           "; ".join(r.get("refused", []))[:120])
    out.print(passes)
    check = report["check"]
    if check is None:
        out.print("not checked (--no-check)")
    elif "skipped" in check:
        out.print(f"[yellow]not checked: {check['skipped']}[/yellow]")
    elif check["first_mismatch"]:
        out.print(f"[red]written despite a difference (--force): {check['first_mismatch']}[/red]")
    else:
        out.print(f"checked in onnxruntime: {check['outputs']} outputs match (max abs diff {check['max_abs_diff']:.1e}, "
                  f"seed {check['seed']})")
