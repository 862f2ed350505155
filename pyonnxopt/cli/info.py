"""`pyonnxopt info MODEL`: what a model holds, as a table or JSON."""

from __future__ import annotations

import json

from pyonnxopt.cli.render import console, esc
from pyonnxopt.files import human_bytes


def add_parser(sub):
    p = sub.add_parser("info", help="show what a model holds (opsets, I/O, ops, weights, external data)")
    p.add_argument("model", help="ONNX file")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--allow-external-outside", action="store_true",
                   help="allow external-data locations outside the model's folder")
    p.set_defaults(run=run)


def run(args) -> int:
    import pyonnxopt
    from pyonnxopt.info import model_info

    model = pyonnxopt.load(args.model, allow_external_outside=args.allow_external_outside)
    info = model_info(model)
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        render(info)
    return 0


def render(info: dict) -> None:
    from rich.table import Table

    out = console()
    overview = Table(title=f"[bold]{esc(info['path'] or 'model')}[/bold]", show_header=False, box=None)
    overview.add_column(style="cyan")
    overview.add_column()
    opsets = ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in info["opset_imports"].items())
    producer = " ".join(x for x in (info["producer_name"], info["producer_version"]) if x)
    rows = [
        ("file size", human_bytes(info["file_bytes"])),
        ("ir_version", str(info["ir_version"])),
        ("opsets", opsets or "-"),
        ("producer", producer or "-"),
        ("nodes", f"{info['node_count']} in the main graph, {info['node_count_all_graphs']} in all graphs"),
        ("initializers", f"{info['initializer_count']} ({human_bytes(info['initializer_bytes'])})"
                         + (f", {info['initializer_input_count']} also graph inputs" if info["initializer_input_count"]
                            else "")),
        ("sparse initializers", str(info["sparse_initializer_count"])),
        ("subgraphs", str(info["subgraph_count"])),
        ("training info", str(info["training_info_count"])),
        ("functions", ", ".join(info["functions"]) or "0"),
    ]
    for k, v in rows:
        overview.add_row(k, esc(v))
    out.print(overview)

    io = Table(title="inputs and outputs")
    for col in ("", "name", "type"):
        io.add_column(col)
    for kind in ("inputs", "outputs"):
        for v in info[kind]:
            io.add_row(kind[:-1], esc(v["name"]), esc(v["type"]))
    out.print(io)

    ops = Table(title="nodes by op type")
    ops.add_column("op type")
    ops.add_column("count", justify="right")
    for op, n in info["op_counts"].items():
        ops.add_row(esc(op), str(n))
    out.print(ops)

    if info["external_data"]:
        ext = Table(title="external data")
        for col in ("file", "tensors", "bytes"):
            ext.add_column(col)
        for e in info["external_data"]:
            ext.add_row(esc(e["location"]), str(e["tensors"]), human_bytes(e["bytes"]))
        out.print(ext)
