"""`pyonnxopt optimize IN OUT`: the passes, checked in onnxruntime, saved atomically."""

from __future__ import annotations

import os
import re

from pyonnxopt.cli.render import console, esc
from pyonnxopt.files import to_json, write_atomic


def add_parser(sub):
    p = sub.add_parser("optimize", help="remove redundancy from a model and check the result in onnxruntime")
    p.add_argument("input", help="ONNX file to optimize (never modified)")
    p.add_argument("output", help="where to write the optimized model (may equal the input)")
    p.add_argument("--passes", help="comma-separated passes to run, in order (default: all; see `pyonnxopt passes`)")
    p.add_argument("--skip", action="append", default=[], metavar="PASS", help="passes not to run (comma-separated, or the flag repeated)")
    p.add_argument("--exclude-node", action="append", default=[], metavar="NAME",
                   help="a node name (or glob) no pass may change or remove (repeatable)")
    p.add_argument("--prune-outputs", action="append", default=[], metavar="NAME",
                   help="a graph output (name or glob, e.g. 'aux_*') to drop with what only it needs (repeatable)")
    p.add_argument("--fold-size-limit", default="1MiB", metavar="SIZE",
                   help="skip a fold whose result is larger than its inputs and than SIZE (bytes, or e.g. 64KiB, 10MB; default 1MiB)")
    p.add_argument("--allow-lossy", action="store_true",
                   help="also remove Cast round trips that lose precision (float32 -> float16 -> float32)")
    p.add_argument("--remove-training-residue", action="store_true",
                   help="remove training-mode Dropout and ai.onnx.preview.training ops (reported otherwise)")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME:DIMS",
                   help="fix an input's shape, e.g. images:1,3,640,640 (repeatable)")
    p.add_argument("--batch", type=int, metavar="N", help="fix the first dim of every input whose first dim is dynamic")
    p.add_argument("--target", choices=["onnx", "ort"], default="onnx",
                   help="onnx: standard ops only (default); ort: fusions may emit onnxruntime's com.microsoft ops")
    p.add_argument("--opset", type=int, metavar="N",
                   help="first upgrade the model to ai.onnx opset N (onnx's version converter), so fusions may emit "
                        "newer standard ops: Gelu (20), Attention and RMSNormalization (23); never downgrades")
    p.add_argument("--initializer-inputs", choices=["auto", "constants", "inputs"], default="auto",
                   help="initializers also listed as graph inputs (overridable from IR 4, so nothing reading them "
                        "folds): constants: fold them and drop them from the inputs; inputs: keep them; auto "
                        "(default): constants where every initializer is listed (an exporter's habit), else inputs")
    p.add_argument("--explain", action="append", default=[], metavar="RULE",
                   help="say where the fusion RULE fired and where it almost did, and why not (repeatable; 'all' for every rule)")
    p.add_argument("--check-inputs", metavar="FILE.npz", help="inputs for the check (name -> array) instead of random ones")
    p.add_argument("--no-check", action="store_true", help="do not compare the result with the original in onnxruntime")
    p.add_argument("--verify-each-pass", action="store_true",
                   help="check after every pass that changes the model; at the first difference stop, name the pass "
                        "and its rewrite, and write nothing (slower: one onnxruntime run per such pass)")
    p.add_argument("--force", action="store_true", help="write the result even when the check finds a difference")
    p.add_argument("--seed", type=int, default=0, help="seed of the check's random inputs (default 0)")
    p.add_argument("--report", metavar="FILE.json", help="write the report (versioned JSON) there")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of tables")
    p.set_defaults(run=run)


_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
          "g": 1000**3, "gb": 1000**3, "gib": 1024**3}


def parse_size(text: str, flag: str) -> int:
    """"1MiB" -> 1048576, "10MB" -> 10000000, "4096" -> 4096."""
    from pyonnxopt.errors import Error

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise Error(f"{flag} {text!r}: expected a size such as 1048576, 512KiB or 10MB")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def load_inputs(path: str) -> dict:
    """name -> array from an .npz file."""
    import numpy as np

    from pyonnxopt.errors import Error

    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except (OSError, ValueError) as e:
        if "allow_pickle" in str(e):
            raise Error(f"--check-inputs {path}: an array holds Python objects, which are not loaded (pickle); "
                        "save strings as numpy str arrays") from None
        raise Error(f"--check-inputs {path}: cannot read it as .npz ({e})") from None


def pass_names(passes, skip: list) -> tuple:
    """(--passes as a list, or None: all; --skip as a list), each flag
    comma-separated (--skip also repeatable), after checking that they name
    passes that exist (Error naming the flag otherwise)."""
    from pyonnxopt.errors import Error
    from pyonnxopt.passes import get

    def split(text):
        return [n.strip() for n in text.split(",") if n.strip()]

    names = split(passes) if passes else None
    skipped = [n for text in skip for n in split(text)]
    for name in [*(names or []), *skipped]:
        try:
            get(name)
        except KeyError as e:
            raise Error(f"--passes/--skip: {e.args[0]}") from None
    return names, skipped


def run(args) -> int:
    from pyonnxopt.errors import Error
    from pyonnxopt.optimize import optimize
    from pyonnxopt.shapes import parse_input_shape

    names, skip = pass_names(args.passes, args.skip)
    if not os.path.exists(args.input):
        raise Error(f"{args.input}: no such file")
    if args.verify_each_pass and args.no_check:
        raise Error("--verify-each-pass checks the result; it cannot go with --no-check")
    input_shapes: dict = {}
    for spec in args.input_shape:
        name, dims = parse_input_shape(spec)
        if input_shapes.setdefault(name, dims) != dims:
            raise Error(f"--input-shape: input {name!r} is given twice, as {input_shapes[name]} and as {dims}")
    options = dict(passes=names, skip=skip, check_outputs=not args.no_check, force=args.force, seed=args.seed,
                   exclude_nodes=args.exclude_node, prune_outputs=args.prune_outputs,
                   fold_size_limit=parse_size(args.fold_size_limit, "--fold-size-limit"), allow_lossy=args.allow_lossy,
                   remove_training_residue=args.remove_training_residue, input_shapes=input_shapes, batch=args.batch,
                   check_inputs=load_inputs(args.check_inputs) if args.check_inputs else None, target=args.target,
                   opset=args.opset, initializer_inputs=args.initializer_inputs,
                   verify_each_pass=args.verify_each_pass)
    explain = _explained_rules(args.explain)
    with console(stderr=True).status("optimizing") as status:
        def progress(name, iteration):
            status.update(f"optimizing: {name} (iteration {iteration})")

        _, report = optimize(args.input, args.output, progress=progress, **options)
    if args.report:
        write_atomic(args.report, to_json(report))
    if args.json:
        print(to_json(report), end="")
    else:
        render(report)
        if explain:
            render_explain(report, explain)
    return 0


def _explained_rules(names: list) -> list:
    """--explain's rule names (checked), "all" meaning every fusion rule."""
    from pyonnxopt.errors import Error
    from pyonnxopt.fusion import Rule
    from pyonnxopt.passes import all_passes

    rules = [p.name for p in all_passes() if isinstance(p, Rule)]
    if "all" in names:
        return rules
    for name in names:
        if name not in rules:
            raise Error(f"--explain {name}: not a fusion rule; rules: {', '.join(rules) or 'none'}")
    return names


def render_explain(report: dict, rules: list) -> None:
    """Per rule: where it fired and where it almost did, with the failed
    condition (the last iteration's view, when the rule ran several times)."""
    from rich.table import Table

    out = console()
    for rule in rules:
        runs = [r for r in report["passes"] if r["name"] == rule]
        if not runs:
            out.print(f"{esc(rule)}: did not run (skipped, or not in --passes)")
            continue
        fired = [w for r in runs for w in r["rewrites"]]
        near = runs[-1].get("near_misses", [])
        title = f"{esc(rule)}: {len(fired)} fired"
        if not fired and not near:
            out.print(f"{title}, no near miss (no node of the model came close to its pattern)")
            continue
        table = Table(title=title, min_width=len(title))  # a narrow table would wrap its title
        for col in ("where", "result"):
            table.add_column(col)
        for w in fired:
            table.add_row(esc(", ".join(w["consumed"])), "[green]fused[/green]")
        for line in near:
            where, _, why = line.partition(": ")
            table.add_row(esc(where), f"[yellow]not fused:[/yellow] {esc(why)}")
        out.print(table)


def initializer_inputs_line(listed: dict) -> str:
    """What became of the initializers that were also graph inputs."""
    n = listed["listed"]
    some = "every initializer was" if listed["every"] else f"{n} initializers were"
    if listed["as"] == "constants":
        return (f"{some} also a graph input: read as constants and no longer inputs "
                "(--initializer-inputs inputs keeps them overridable)")
    return (f"{some} also a graph input: kept as inputs that override them, so nothing reading them was folded "
            "or fused (--initializer-inputs constants folds them)")


def render(report: dict) -> None:
    from rich.table import Table

    out = console()
    ops = Table(title=f"{esc(report['input'])} -> {esc(report['output'])}")
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
                           esc("; ".join(r.get("refused", []))[:120]))
    out.print(passes)
    if report["opset_after"] != report["opset_before"]:
        out.print(f"opset upgraded: {report['opset_before']} -> {report['opset_after']}")
    if report.get("inputs_fixed"):
        out.print(f"inputs fixed: {esc(', '.join(report['inputs_fixed']))}")
    listed = report.get("initializer_inputs")
    if listed:
        out.print(initializer_inputs_line(listed))
    skipped = [x for r in report["passes"] if r["name"].startswith("fold_constants") for x in r.get("refused", [])]
    if skipped:
        out.print(f"[yellow]{len(set(skipped))} fold(s) skipped[/yellow] (see the report's passes[].refused), e.g. {esc(skipped[0])}")
    check = report["check"]
    if check is None:
        out.print("not checked (--no-check)")
    elif "skipped" in check:
        out.print(f"[yellow]not checked: {esc(check['skipped'])}[/yellow]")
    elif check["first_mismatch"]:
        out.print(f"[red]written despite a difference (--force): {esc(check['first_mismatch'])}[/red]")
    else:
        inputs = f"seed {check['seed']}" if check["seed"] is not None else "given inputs"
        if "unknown_dims" in check:
            inputs += f", unknown dims {check['unknown_dims']}"
        if "named_dims" in check:
            inputs += ", " + ", ".join(f"{esc(name)} {size}" for name, size in check["named_dims"].items())
        if "batch" in check:
            inputs += f", batch {check['batch']}"
        if check.get("samples", 1) > 1:
            inputs += "; again with its dynamic dims doubled"
        elif "doubled_skipped" in check:
            inputs += "; not with its dynamic dims doubled: the original does not run on them"
        out.print(f"checked in onnxruntime: {check['outputs']} outputs match (max abs diff {check['max_abs_diff']:.1e}, "
                  f"{inputs})")
    if "verified_each_pass" in report:
        out.print(f"also checked after each of the {report['verified_each_pass']} pass runs that changed the model")
