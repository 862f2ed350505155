"""`pyonnxopt report ORIGINAL OPTIMIZED`: the optimize report, verify and
bench in one JSON and one self-contained HTML page, the artifact a CI job
keeps. verify and bench run here unless their JSON is given (or they are
left out); exit code 1 when verify found a mismatch, after writing."""

from __future__ import annotations

import os

from pyonnxopt.cli.render import console, esc
from pyonnxopt.files import to_json, write_atomic

MISMATCH = 1


def add_parser(sub):
    p = sub.add_parser("report", help="one JSON and one HTML page with the optimize report, verify and bench")
    p.add_argument("original", help="the model before optimization")
    p.add_argument("optimized", help="the model after optimization")
    p.add_argument("--optimize-report", metavar="FILE.json", help="what `pyonnxopt optimize --report` wrote")
    p.add_argument("--verify-json", metavar="FILE", help="verify's JSON (`pyonnxopt verify --json`) instead of running it")
    p.add_argument("--bench-json", metavar="FILE", help="bench's JSON (`pyonnxopt bench --json`) instead of running it")
    p.add_argument("--no-verify", action="store_true", help="leave verify out")
    p.add_argument("--no-bench", action="store_true", help="leave bench out")
    p.add_argument("--json", metavar="FILE", help="write the report JSON there")
    p.add_argument("--html", metavar="FILE", help="write the HTML page there (self-contained: no network needed)")
    p.add_argument("--iterations", type=int, metavar="N", help="timed runs per model when bench runs here")
    p.add_argument("--inputs", metavar="PATH",
                   help="inputs for verify and bench (.npz, or a folder of samples) instead of random ones")
    p.set_defaults(run=run)


def run(args) -> int:
    from pyonnxopt.errors import Error
    from pyonnxopt.report import gather, report_page

    if args.verify_json and args.no_verify:
        raise Error("--verify-json and --no-verify: give one or the other")
    if args.bench_json and args.no_bench:
        raise Error("--bench-json and --no-bench: give one or the other")
    if args.iterations is not None and (args.iterations < 1 or args.bench_json or args.no_bench):
        raise Error(f"--iterations {args.iterations}: expected a positive count, with bench running here "
                    "(not with --bench-json or --no-bench)")
    for path in (args.original, args.optimized):
        if not os.path.isfile(path):
            raise Error(f"{path}: no such file")
    verify = None if args.no_verify else args.verify_json or True
    bench = None if args.no_bench else args.bench_json or True
    # The page draws time per op type, so bench profiles (a few extra runs).
    bench_options = {"profile": True, **({"iterations": args.iterations} if args.iterations else {})}
    verify_options = {}
    if args.inputs:
        if not os.path.exists(args.inputs):
            raise Error(f"--inputs {args.inputs}: no such file or folder")
        verify_options["inputs"] = bench_options["inputs"] = args.inputs
    with console(stderr=True).status("report") as status:
        report = gather(args.original, args.optimized, optimize_report=args.optimize_report, verify=verify,
                        bench=bench, verify_options=verify_options, bench_options=bench_options,
                        progress=lambda text: status.update(f"report: {text}"))
    written = []
    if args.json:
        write_atomic(args.json, to_json(report))
        written.append(args.json)
    if args.html:
        write_atomic(args.html, report_page(report))
        written.append(args.html)
    render(report, written)
    return MISMATCH if report["verify"] is not None and not report["verify"].get("ok") else 0


def render(report: dict, written: list) -> None:
    from rich.table import Table

    out = console()
    table = Table(title=f"{esc(report['original'])} -> {esc(report['optimized'])}", show_header=False)
    table.add_column("what")
    table.add_column("result")
    opt, ver, bench = report["optimize"], report["verify"], report["bench"]
    if opt is not None:
        table.add_row("nodes", f"{opt['nodes_before']} -> {opt['nodes_after']}")
    elif ver is not None and (ver.get("structure") or {}).get("nodes"):
        before, after = ver["structure"]["nodes"]
        table.add_row("nodes", f"{before} -> {after}")
    if ver is None:
        table.add_row("verify", "not run")
    elif ver.get("ok"):
        table.add_row("verify", f"[green]equivalent[/green]: {len(ver.get('outputs', []))} outputs, "
                                f"{len(ver.get('layers', []))} layers within tolerance")
    else:
        table.add_row("verify", f"[red]mismatch[/red] at {esc(ver.get('first_mismatch'))}")
    if bench is None:
        table.add_row("bench", "not run")
    else:
        for m in bench.get("models", []):
            lat = m.get("latency_ms") or {}
            table.add_row(f"p50 {m.get('label')}", f"{lat.get('p50', float('nan')):.3f} ms ({m.get('path')})")
        comp = bench.get("comparison")
        if comp:
            table.add_row(f"B/A {comp.get('metric')}", f"{comp['ratio']:.3f} "
                                                       f"({comp.get('ratio_low'):.3f}-{comp.get('ratio_high'):.3f})")
    out.print(table)
    out.print(f"wrote {', '.join(written)}" if written else "nothing written (give --html FILE and/or --json FILE)")
