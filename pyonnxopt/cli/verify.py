"""`pyonnxopt verify ORIGINAL OPTIMIZED`: both models in onnxruntime on the
same inputs, every output and shared intermediate compared, the structural
diff. Exit code 0 when everything is within tolerance, 1 on a mismatch (for
CI), 2 on a user error."""

from __future__ import annotations

import re

from pyonnxopt.cli.render import console, esc
from pyonnxopt.files import human_bytes, to_json, write_atomic

MISMATCH = 1
WORST_LAYERS_SHOWN = 20


def add_parser(sub):
    p = sub.add_parser("verify", help="compare an optimized model with its original, output by output and layer by layer",
                       description="Runs both models in onnxruntime (CPU, its graph optimizations off) on the same "
                                   "inputs and compares every graph output and every intermediate tensor both compute "
                                   "under the same name. Exit code: 0 all within tolerance, 1 a mismatch, 2 a user "
                                   "error.")
    p.add_argument("original", help="the model before optimization (never modified)")
    p.add_argument("optimized", help="the optimized model (never modified)")
    p.add_argument("--inputs", metavar="PATH",
                   help="the inputs: an .npz file, a folder of .npz files or of .pb tensors (onnx test-data layout), "
                        "instead of seeded random ones")
    p.add_argument("--samples", type=int, default=1, metavar="N", help="random samples per batch size (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the first random sample (default 0; sample i uses seed+i)")
    p.add_argument("--batch-size", action="append", default=[], metavar="N",
                   help="batch size for a dynamic first dim (repeatable or comma list, e.g. 1,8: each is verified)")
    p.add_argument("--vocab-size", type=int, metavar="V", help="token-id inputs stay below V")
    p.add_argument("--dim", action="append", default=[], metavar="SYMBOL=N",
                   help="size of a named dynamic dim in random inputs, e.g. seq=128 (repeatable; others are 1)")
    p.add_argument("--atol", type=float, help="absolute tolerance for every float dtype")
    p.add_argument("--rtol", type=float, help="relative tolerance for every float dtype")
    p.add_argument("--tolerance", action="append", default=[], metavar="DTYPE:atol=A,rtol=R",
                   help="tolerance for one dtype, e.g. float16:atol=1e-2,rtol=1e-2 (repeatable; wins over --atol/--rtol)")
    p.add_argument("--no-layers", action="store_true", help="compare the graph outputs only")
    p.add_argument("--group-size", type=int, metavar="N",
                   help="at most N tensors per run (default: as many as fit in --memory-budget)")
    p.add_argument("--memory-budget", default="2GiB", metavar="SIZE",
                   help="bytes of intermediates held at once, both models together (default 2GiB)")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of tables")
    p.add_argument("--report", metavar="FILE.json", help="write the result (JSON) there")
    p.add_argument("--html", metavar="FILE", help="write an HTML page with a sortable per-layer table and error histograms")
    p.add_argument("--bisect", action="store_true",
                   help="on a mismatch, re-run optimize on ORIGINAL checking after each pass, and name the first "
                        "pass and rewrite that changed the outputs")
    p.add_argument("--rollback-output", metavar="FILE",
                   help="with --bisect: write the optimized model with that one rewrite rolled back")
    p.add_argument("--passes", help="with --bisect: the passes optimize ran (comma-separated; default: all)")
    p.add_argument("--skip", action="append", default=[], metavar="PASS", help="with --bisect: passes optimize skipped (comma-separated, or repeated)")
    p.add_argument("--target", choices=["onnx", "ort"], default="onnx", help="with --bisect: optimize's --target")
    p.add_argument("--opset", type=int, metavar="N", help="with --bisect: optimize's --opset")
    p.add_argument("--initializer-inputs", choices=["auto", "constants", "inputs"], default="auto",
                   help="with --bisect: optimize's --initializer-inputs")
    p.set_defaults(run=run)


def parse_batch_sizes(values: list) -> list:
    """["1,8", "16"] -> [1, 8, 16]; none given -> [None] (the model's own dims)."""
    from pyonnxopt.errors import Error

    sizes = []
    for text in values:
        for part in text.split(","):
            part = part.strip()
            if not re.fullmatch(r"[1-9]\d*", part):
                raise Error(f"--batch-size {text!r}: expected positive integers, e.g. 1 or 1,8")
            sizes.append(int(part))
    return sizes or [None]


def parse_dims(values: list) -> dict:
    """["seq=128", "past=0"] -> {"seq": 128, "past": 0}."""
    from pyonnxopt.errors import Error

    dims = {}
    for text in values:
        m = re.fullmatch(r"\s*([^=\s]+)\s*=\s*(\d+)\s*", text)
        if not m:
            raise Error(f"--dim {text!r}: expected SYMBOL=N, e.g. seq=128")
        dims[m.group(1)] = int(m.group(2))
    return dims


def parse_tolerances(atol, rtol, specs: list) -> dict:
    """--atol/--rtol for every float dtype, then each --tolerance DTYPE:atol=A,rtol=R on top."""
    from pyonnxopt.errors import Error
    from pyonnxopt.verify.metrics import DEFAULT_TOLERANCES

    overrides = {}
    common = {k: v for k, v in (("atol", atol), ("rtol", rtol)) if v is not None}
    for name, value in common.items():
        if value < 0:
            raise Error(f"--{name} {value}: must not be negative")
    if common:
        overrides = {dtype: dict(common) for dtype in DEFAULT_TOLERANCES}
    for spec in specs:
        m = re.fullmatch(r"\s*([A-Za-z0-9_]+)\s*:(.+)", spec)
        if not m:
            raise Error(f"--tolerance {spec!r}: expected DTYPE:atol=A,rtol=R (e.g. float16:atol=1e-2,rtol=1e-2)")
        entry = overrides.setdefault(m.group(1), {})
        for part in m.group(2).split(","):
            key, _, value = part.partition("=")
            key = key.strip()
            try:
                number = float(value)
            except ValueError:
                number = None
            if key not in ("atol", "rtol") or number is None or number < 0:
                raise Error(f"--tolerance {spec!r}: {part.strip()!r} is not atol=NUMBER or rtol=NUMBER (non-negative)")
            entry[key] = number
    return overrides


def run(args) -> int:
    from pyonnxopt.cli.optimize import parse_size
    from pyonnxopt.errors import Error
    from pyonnxopt.report.pages import verify_page
    from pyonnxopt.verify import verify
    from pyonnxopt.verify.bisect import bisect_cli, render_bisect

    if args.samples < 1:
        raise Error(f"--samples {args.samples}: must be at least 1")
    if args.group_size is not None and args.group_size < 1:
        raise Error(f"--group-size {args.group_size}: must be at least 1")
    if args.rollback_output and not args.bisect:
        raise Error("--rollback-output needs --bisect")
    options = dict(inputs=args.inputs, seed=args.seed, samples=args.samples,
                   batch_sizes=parse_batch_sizes(args.batch_size), vocab_size=args.vocab_size,
                   dims=parse_dims(args.dim),
                   tolerances=parse_tolerances(args.atol, args.rtol, args.tolerance), layers=not args.no_layers,
                   group_size=args.group_size, byte_budget=parse_size(args.memory_budget, "--memory-budget"))
    with console(stderr=True).status("verifying") as status:
        result = verify(args.original, args.optimized, progress=lambda m: status.update(f"verifying: {m}"), **options)
    if args.bisect and not result["ok"]:
        result["bisect"] = bisect_cli(args)
    if args.report:
        write_atomic(args.report, to_json(result))
    if args.html:
        write_atomic(args.html, verify_page(result))
    if args.json:
        print(to_json(result), end="")
    else:
        render(result)
        if result.get("bisect"):
            render_bisect(result["bisect"], console())
            if result["bisect"]["ok"]:
                console().print("the pipeline re-run from the original with these flags keeps the outputs; the "
                                "optimized model was made with other flags (give the same --passes/--skip/--target/--opset/--initializer-inputs)")
    return 0 if result["ok"] else MISMATCH





def _num(x, fmt: str = ".1e") -> str:
    return "-" if x is None else format(x, fmt)


def _snr(r: dict) -> str:
    if r["snr_db"] is None:
        return "exact" if r["ok"] and r["max_abs"] == 0 else "-"
    return f"{r['snr_db']:.1f}"


def _status(r: dict) -> str:
    return "[green]ok[/green]" if r["ok"] else f"[red]{esc(r['mismatch'])}[/red]"


def _tensor_table(title: str, records: list):
    from rich.table import Table

    table = Table(title=title)
    table.add_column("#", justify="right")
    table.add_column("name", overflow="fold", ratio=3)
    table.add_column("op")
    table.add_column("tensor", overflow="fold", ratio=2)
    for col in ("max abs", "max rel", "cosine", "SNR dB"):
        table.add_column(col, justify="right")
    table.add_column("", overflow="fold", ratio=2)
    for r in records:
        shape = "-" if r["shape"] is None else "x".join(map(str, r["shape"])) or "scalar"
        table.add_row("-" if r["order"] is None else str(r["order"]), esc(r["name"]), esc(r["op_type"] or "-"),
                      f"{r['dtype'] or '-'} {shape}", _num(r["max_abs"]), _num(r["max_rel"]), _num(r["cosine"], ".5f"),
                      _snr(r), _status(r))
    return table


def worst_layers(layers: list, n: int = WORST_LAYERS_SHOWN) -> list:
    """The n layers furthest off: mismatches first, then by max abs error."""
    return sorted(layers, key=lambda r: (r["ok"], -(r["max_abs"] if r["max_abs"] is not None else float("inf"))))[:n]


def render(result: dict) -> None:
    from rich.table import Table

    out = console()
    inputs = result["inputs"]
    where = (f"random, seed {inputs['seed']}" if inputs["source"] == "random" else inputs["source"])
    sizes = [b for b in inputs["batch_sizes"] if b is not None]
    summary = Table(title=f"[bold]{esc(result['original'])} -> {esc(result['optimized'])}[/bold]", show_header=False, box=None)
    summary.add_column(style="cyan")
    summary.add_column()
    layers_bad = sum(not r["ok"] for r in result["layers"])
    outputs_bad = sum(not r["ok"] for r in result["outputs"])
    rows = [
        ("result", "[green]equivalent within tolerance[/green]" if result["ok"]
         else f"[red]mismatch, first at {esc(result['first_mismatch'])}[/red]"),
        ("inputs", f"{inputs['samples']} sample(s), {where}" + (f", batch sizes {sizes}" if sizes else "")),
        ("outputs", f"{len(result['outputs'])} compared, {outputs_bad} off"),
        ("layers", f"{len(result['layers'])} compared, {layers_bad} off"),
        ("tolerances", "; ".join(f"{d} atol {t['atol']:g} rtol {t['rtol']:g}" for d, t in result["tolerances"].items())),
        ("seconds", f"{result['seconds']:.2f}"),
    ]
    for k, v in rows:
        summary.add_row(k, v)
    out.print(summary)
    out.print(_tensor_table("outputs", result["outputs"]))
    if result["layers"]:
        shown = worst_layers(result["layers"])
        title = f"worst layers ({len(shown)} of {len(result['layers'])}; all in --json/--report/--html)"
        out.print(_tensor_table(title, shown))
    render_structure(result["structure"])


def render_structure(s: dict) -> None:
    from rich.table import Table

    out = console()
    ops = Table(title="structure")
    for col, justify in (("", "left"), ("before", "right"), ("after", "right")):
        ops.add_column(col, justify=justify)
    for op, (b, a) in s["op_counts"].items():
        ops.add_row(op, str(b), str(a) if a == b else f"[green]{a}[/green]")
    ops.add_row("[bold]nodes[/bold]", str(s["nodes"][0]), f"[bold]{s['nodes'][1]}[/bold]")
    ops.add_row("initializers", str(s["initializers"][0]), str(s["initializers"][1]))
    ops.add_row("initializer bytes", human_bytes(s["initializer_bytes"][0]), human_bytes(s["initializer_bytes"][1]))
    ops.add_row("nodes removed / added", "", f"{len(s['removed_nodes'])} / {len(s['added_nodes'])}")
    out.print(ops)
    changed = [io for kind in ("inputs", "outputs") for io in s[kind] if io["before"] != io["after"]]
    if changed:
        io = Table(title="inputs and outputs that changed")
        for col in ("name", "before", "after"):
            io.add_column(col)
        for x in changed:
            io.add_row(esc(x["name"]), esc(_type_text(x["before"])), esc(_type_text(x["after"])))
        out.print(io)


def _type_text(t) -> str:
    if t is None:
        return "(absent)"
    shape = t["shape"]
    return f"{t['dtype']}{list(shape) if shape is not None else ''}"
