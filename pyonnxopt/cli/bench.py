"""`pyonnxopt bench MODEL [MODEL2]`: session creation, latency, throughput,
memory and (with two models) an interleaved A/B ratio, in onnxruntime."""

from __future__ import annotations

from pyonnxopt.cli.render import console, esc
from pyonnxopt.files import to_json, write_atomic


def add_parser(sub):
    p = sub.add_parser("bench", help="measure a model in onnxruntime, or compare two (A/B, interleaved)")
    p.add_argument("models", nargs="+", metavar="MODEL", help="one ONNX file, or two (A then B) to compare")
    p.add_argument("--provider", choices=["cpu", "cuda", "tensorrt"], default="cpu",
                   help="onnxruntime execution provider (default cpu)")
    p.add_argument("--threads", type=int, metavar="N", help="intra-op threads (default: onnxruntime's, one per core)")
    p.add_argument("--inter-threads", type=int, metavar="N",
                   help="inter-op threads; also runs independent nodes in parallel (default: sequential)")
    p.add_argument("--level", choices=["disable", "basic", "extended", "all"], default="all",
                   help="onnxruntime's own graph optimizations (default all; 'disable' shows the model's own effect)")
    p.add_argument("--warmup", type=int, default=10, metavar="N", help="untimed runs first (default 10)")
    amount = p.add_mutually_exclusive_group()
    amount.add_argument("--iterations", type=int, metavar="N", help="timed runs per model (default 100)")
    amount.add_argument("--seconds", type=float, metavar="S", help="time each model for S seconds instead")
    p.add_argument("--concurrency", type=int, default=1, metavar="N",
                   help="threads calling one shared session at once for the QPS figure (default 1)")
    p.add_argument("--batch-size", type=int, metavar="N", help="first dim of inputs whose first dim is dynamic")
    p.add_argument("--dim", action="append", default=[], metavar="SYMBOL=N",
                   help="size of a named dynamic dim in random inputs, e.g. seq=128 (repeatable; others are 1)")
    p.add_argument("--vocab-size", type=int, metavar="V", help="token-id inputs stay below V")
    p.add_argument("--inputs", metavar="PATH", help="inputs to run on (.npz, or a folder of samples) instead of random ones")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--profile", action="store_true", help="also profile each model: time per op type, slowest nodes")
    p.add_argument("--no-cold", action="store_true", help="skip the cold start in a fresh process (and its RSS)")
    p.add_argument("--json", action="store_true", help="print the bench JSON instead of tables")
    p.add_argument("--report", metavar="FILE.json", help="write the bench JSON there")
    p.set_defaults(run=run)


def run(args) -> int:
    from pyonnxopt.benchmark import bench
    from pyonnxopt.cli.verify import parse_dims

    with console(stderr=True).status("benchmarking") as status:
        result = bench(args.models, provider=args.provider, intra_op_threads=args.threads,
                       inter_op_threads=args.inter_threads, level=args.level, warmup=args.warmup,
                       iterations=args.iterations, seconds=args.seconds, concurrency=args.concurrency,
                       batch_size=args.batch_size, inputs=args.inputs, seed=args.seed, profile=args.profile,
                       cold=not args.no_cold, dims=parse_dims(args.dim), vocab_size=args.vocab_size,
                       progress=lambda text: status.update(f"benchmarking: {text}"))
    if args.report:
        write_atomic(args.report, to_json(result))
    if args.json:
        print(to_json(result), end="")
    else:
        render(result)
    return 0


def _ms(x) -> str:
    return "-" if x is None else f"{x:.3f} ms" if x < 10 else f"{x:.1f} ms"


def _seconds(x) -> str:
    return "-" if x is None else f"{1e3 * x:.1f} ms"


def _mb(x) -> str:
    return "-" if x is None else f"{x:.1f} MiB"


def render(result: dict) -> None:
    from rich.table import Table

    out = console()
    s = result["settings"]
    threads = s["intra_op_threads"] or "default"
    amount = f"{s['iterations']} runs" if s["iterations"] else f"{s['seconds']} s"
    out.print(f"provider {s['provider']}, level {s['optimization_level']}, intra-op threads {threads}"
              f"{', inter-op threads ' + str(s['inter_op_threads']) if s['inter_op_threads'] else ''}, "
              f"warm-up {s['warmup']}, {amount}, concurrency {s['concurrency']}"
              f"{', batch ' + str(s['batch_size']) if s['batch_size'] else ''}"
              f"{''.join(f', {k}={v}' for k, v in (s['inputs'].get('dims') or {}).items())}")
    for m in result["models"]:
        lat = m["latency_ms"]
        table = Table(title=f"{esc(m['label'])}: {esc(m['path'])}", show_header=False)
        table.add_column("metric")
        table.add_column("value", justify="right")
        rows = [("session create, cold (fresh process)", _seconds(m["session_create_cold_s"])),
                ("session create, warm", _seconds(m["session_create_warm_s"])),
                ("latency p50", _ms(lat["p50"])), ("latency p95", _ms(lat["p95"])), ("latency p99", _ms(lat["p99"])),
                ("latency mean ± stdev", f"{_ms(lat['mean'])} ± {_ms(lat['stdev'])}"),
                ("timed runs", str(lat["count"])),
                (f"throughput ({s['concurrency']} thread{'s' if s['concurrency'] > 1 else ''})",
                 "-" if m["qps"] is None else f"{m['qps']:.1f} /s"),
                ("peak RSS (cold process)", _mb(m["peak_rss_mb"])),
                ("peak device memory", _mb(m["device_peak_mb"]))]
        for row in rows:
            table.add_row(*row)
        out.print(table)
        if m.get("device_note") and s["provider"] != "cpu":
            out.print(f"  device memory: {m['device_note']}")
    c = result["comparison"]
    if c:
        if c["ratio_low"] <= 1 <= c["ratio_high"]:
            verdict = "no clear difference: the middle half of the rounds spans 1"
        else:
            verdict = f"B is {abs(1 - c['ratio']) * 100:.1f}% {'faster' if c['ratio'] < 1 else 'slower'}"
        out.print(f"[bold]B/A latency: {c['ratio']:.3f}[/bold] ({verdict}; median of {c['rounds']} interleaved "
                  f"rounds' p50 ratios, middle half {c['ratio_low']:.3f}..{c['ratio_high']:.3f}; "
                  f"ratio of overall p50s {c['ratio_of_medians']:.3f})")
    for m in result["models"]:
        if m["profile"]:
            render_profile(out, m)


def render_profile(out, m: dict) -> None:
    from rich.table import Table

    p = m["profile"]
    ops = Table(title=f"{m['label']}: time per op type ({p['runs']} profiled runs, {p['total_ms']:.2f} ms kernels/run)")
    for col, justify in (("op type", "left"), ("ms/run", "right"), ("share", "right"), ("nodes", "right")):
        ops.add_column(col, justify=justify)
    for r in p["by_op_type"][:15]:
        ops.add_row(r["op_type"], f"{r['ms']:.3f}", f"{100 * r['share']:.1f}%", str(r["count"]))
    out.print(ops)
    nodes = Table(title=f"{m['label']}: slowest nodes")
    for col, justify in (("node", "left"), ("op type", "left"), ("ms/run", "right"), ("share", "right")):
        nodes.add_column(col, justify=justify)
    for r in p["top_nodes"]:
        nodes.add_row(esc(r["name"]), esc(r["op_type"]), f"{r['ms']:.3f}", f"{100 * r['share']:.1f}%")
    out.print(nodes)
