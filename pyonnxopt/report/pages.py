"""The HTML pages: `verify_page(verify JSON)` and `report_page(report JSON)`.

Each is one self-contained file (inline CSS, JS and SVG; nothing fetched), so
a CI job can keep it as an artifact and anyone can open it offline. A part
that is missing (no optimize report, verify or bench not run) gets a section
that says so instead of a plot."""

from __future__ import annotations

import math
import os

from pyonnxopt.files import human_bytes
from pyonnxopt.report import svg
from pyonnxopt.report.html import Cell, Column, badge, card, empty, esc, num, page, section, table

_MAX_OPS_PLOTTED = 30
_MAX_NODES_LISTED = 500
_MAX_PROFILE_OPS = 12


def verify_page(verify: dict) -> str:
    """The verify JSON as a page: summary, per-output and per-layer tables
    (sortable, each row with its error histogram), per-layer error plot and
    the structural diff."""
    body = _verify_cards(verify) + _verify_details(verify) + section(
        "structure", "Structure: before and after", _structure(verify.get("structure")))
    subtitle = f"{verify.get('original')} → {verify.get('optimized')}"
    return page(f"verify: {_base(verify.get('optimized'))}", "pyonnxopt verify", subtitle, body,
                footer=f"{_inputs_text(verify.get('inputs'))}; {num(verify.get('seconds'))} s")


def report_page(report: dict) -> str:
    """The report JSON as a page: node counts by op type before and after,
    the optimize passes, equivalence (per-layer error) and speed (latency
    distributions, per-op profile). Works with any part missing."""
    opt, ver, bench = report.get("optimize"), report.get("verify"), report.get("bench")
    cards = [_nodes_card(opt, ver)]
    if ver is not None:
        cards.append(_status_card(ver))
    cards.extend(_speed_cards(bench))
    if ver is not None and ver.get("structure"):
        b, a = ver["structure"].get("initializer_bytes", [None, None])
        cards.append(card("weights", human_bytes(a), f"before {human_bytes(b)}"))
    body = [f'<div class="cards">{"".join(cards)}</div>',
            section("graph", "Node counts by op type", _op_counts_section(opt, ver)),
            section("optimize", "Optimize", _optimize(opt) if opt is not None else empty(
                "No optimize report in this report (write one with `pyonnxopt optimize --report FILE.json` "
                "and pass it with --optimize-report).")),
            section("verify", "Equivalence (verify)", (_verify_cards(ver) + _verify_details(ver)) if ver is not None
                    else empty("verify was not run for this report (--no-verify), so equivalence is not shown.")),
            section("bench", "Speed (bench)", _bench(bench) if bench is not None else empty(
                "bench was not run for this report (--no-bench), so speed is not shown."))]
    if ver is not None and ver.get("structure"):
        body.append(section("structure", "Structure: before and after", _structure(ver["structure"])))
    subtitle = f"{report.get('original')} → {report.get('optimized')}"
    return page(f"report: {_base(report.get('optimized'))}", "pyonnxopt report", subtitle, "".join(body),
                footer=f"created {report.get('created', '?')} by pyonnxopt {report.get('pyonnxopt', '?')}")


# ---- summary cards


def _nodes_card(opt, ver) -> str:
    before, after = _node_totals(opt, ver)
    if before is None:
        return card("nodes", "–", "no optimize report or structure")
    change = f"{100 * (after - before) / before:+.1f}%" if before else ""
    return card("nodes", f"{before:,} → {after:,}", change, "ok" if after < before else "")


def _node_totals(opt, ver):
    if opt is not None:
        return opt.get("nodes_before"), opt.get("nodes_after")
    if ver is not None and ver.get("structure") and ver["structure"].get("nodes"):
        return tuple(ver["structure"]["nodes"])
    return None, None


def _status_card(ver: dict) -> str:
    records = ver.get("outputs", []) + ver.get("layers", [])
    bad = sum(1 for r in records if not r.get("ok", True))
    if ver.get("ok"):
        return card("equivalence", "equivalent", f"{len(records)} tensors within tolerance", "ok")
    return card("equivalence", "mismatch", f"first: {ver.get('first_mismatch')} ({bad} tensors off)", "bad")


def _speed_cards(bench) -> list:
    if bench is None:
        return []
    models = bench.get("models", [])
    cards = [card(f"p50 {m.get('label', '?')}", f"{num(m['latency_ms'].get('p50'))} ms", _base(m.get("path")))
             for m in models if m.get("latency_ms")]
    comp = bench.get("comparison")
    if comp and comp.get("ratio"):
        ratio = comp["ratio"]
        verdict = f"{100 * (1 - ratio):.1f}% faster" if ratio < 1 else f"{100 * (ratio - 1):.1f}% slower"
        cards.append(card(f"B / A ({comp.get('metric', 'p50')})", f"{ratio:.3f}",
                          f"{verdict}; {num(comp.get('ratio_low'))}–{num(comp.get('ratio_high'))} over "
                          f"{comp.get('rounds', '?')} rounds", "ok" if comp.get("ratio_high", ratio) < 1 else ""))
    return cards


def _verify_cards(ver: dict) -> str:
    outputs, layers = ver.get("outputs", []), ver.get("layers", [])
    worst = max((r.get("max_abs") for r in outputs if _finite(r.get("max_abs"))), default=None)
    snr = min((_snr(r) for r in outputs if _snr(r) is not None), default=None)
    status = (f"{badge(True)} every output and surviving layer within tolerance" if ver.get("ok") else
              f"{badge(False)} first mismatch: <code>{esc(ver.get('first_mismatch'))}</code>")
    cards = [card("outputs", f"{sum(r.get('ok', True) for r in outputs)}/{len(outputs)} ok",
                  f"worst max abs {num(worst)}"),
             card("layers compared", f"{sum(r.get('ok', True) for r in layers)}/{len(layers)} ok",
                  "intermediates with the same name in both"),
             card("lowest output SNR", "–" if snr is None else f"{num(snr)} dB", "∞: bit-identical"),
             card("samples", str((ver.get("inputs") or {}).get("samples", "?")),
                  f"{_inputs_text(ver.get('inputs'))}; {num(ver.get('seconds'))} s")]
    return f'<p>{status}</p><div class="cards">{"".join(cards)}</div>'


# ---- verify


_RECORD_COLUMNS = [Column("order", "#", True), Column("name", "tensor"), Column("op_type", "op"),
                   Column("dtype", "dtype"), Column("shape", "shape"), Column("max_abs", "max abs", True),
                   Column("max_rel", "max rel", True), Column("cosine", "cosine", True),
                   Column("snr_db", "SNR dB", True), Column("ok", "ok"),
                   Column("over_tol", "|error| histogram", True)]


def _verify_details(ver: dict) -> str:
    tolerances = ver.get("tolerances") or {}
    parts = ["<h3>Graph outputs</h3>", _records(ver.get("outputs", []), "outputs", tolerances) or empty(
        "no graph outputs compared")]
    layers = ver.get("layers", [])
    parts.append("<h3>Per-layer error</h3>")
    if layers:
        parts.append(_layer_plot(ver, tolerances))
        parts.append('<p class="sub">Every intermediate tensor that survives in both models under the same name, '
                     "in the original's topological order. Click a header to sort; the histogram counts elements per "
                     "decade of |error| (red: at or above the dtype's atol).</p>")
        parts.append(_records(layers, "layers", tolerances, scroll=True))
    else:
        parts.append(empty("no intermediate tensors compared (none survives under the same name, or layers were "
                           "not compared)"))
    if tolerances:
        parts.append("<h3>Tolerances</h3>" + table(
            "tolerances", [Column("dtype", "dtype"), Column("atol", "atol", True), Column("rtol", "rtol", True)],
            [[d, t.get("atol"), t.get("rtol")] for d, t in sorted(tolerances.items())], sortable=False))
    return "".join(parts)


def _records(records: list, table_id: str, tolerances: dict, scroll: bool = False) -> str:
    if not records:
        return ""
    rows, classes = [], []
    for r in records:
        hist = r.get("histogram") or {}
        edges, counts = hist.get("edges") or [], hist.get("counts") or []
        atol = (tolerances.get(r.get("dtype")) or {}).get("atol")
        bad_from = _first_bucket_at_or_above(edges, atol)
        over = sum(counts[bad_from:]) if bad_from is not None else 0
        labels = [f"|error| in [{svg.fmt(edges[i])}, {svg.fmt(edges[i + 1])})" for i in range(len(counts))
                  ] if len(edges) == len(counts) + 1 else None
        mini = svg.mini_histogram(counts, labels=labels, bad_from=bad_from, width=98)
        ok = r.get("ok", True)
        rows.append([r.get("order"), Cell(esc(r.get("name")), css="name"), r.get("op_type"), r.get("dtype"),
                     Cell(esc(_shape(r.get("shape"))), css="shape"), r.get("max_abs"), r.get("max_rel"), r.get("cosine"), _snr(r),
                     Cell("yes" if ok else f'<span class="bad">no</span> {esc(r.get("mismatch") or "")}'),
                     Cell(f'<span title="{over} elements at or above atol">{mini}</span>', over)])
        classes.append("" if ok else "bad")
    return table(table_id, _RECORD_COLUMNS, rows, row_classes=classes, scroll=scroll)


def _first_bucket_at_or_above(edges: list, atol):
    if atol is None or not edges:
        return None
    for i, lower in enumerate(edges[:-1]):
        if lower is not None and lower >= atol:
            return i
    return None


def _layer_plot(ver: dict, tolerances: dict) -> str:
    def points(records):
        return [(r["order"], r.get("max_abs"), r.get("name")) for r in records if r.get("order") is not None]

    series = [("layers", points(ver.get("layers", [])))]
    if any(r.get("order") is not None for r in ver.get("outputs", [])):
        series.append(("graph outputs", points(ver["outputs"])))
    dtypes = [r.get("dtype") for r in ver.get("layers", [])]
    common = max(set(dtypes), key=dtypes.count) if dtypes else None
    atol = (tolerances.get(common) or {}).get("atol")
    return svg.scatter(series, title="max |error| per layer, in topological order", plot_id="layer-error",
                       x_label="layer (topological index in the original)", y_label="max abs error (log)",
                       log_y=True, reference=(atol, f"{common} atol {svg.fmt(atol)}") if atol else None)


# ---- structure


def _structure(structure) -> str:
    if not structure:
        return empty("no structural diff in the verify JSON")
    parts = []
    nodes = structure.get("nodes") or [None, None]
    inits = structure.get("initializers") or [None, None]
    ib = structure.get("initializer_bytes") or [None, None]
    parts.append('<div class="cards">' + card("nodes", f"{num(nodes[0])} → {num(nodes[1])}") +
                 card("initializers", f"{num(inits[0])} → {num(inits[1])}") +
                 card("initializer bytes", f"{human_bytes(ib[0])} → {human_bytes(ib[1])}") + "</div>")
    parts.append("<h3>Inputs and outputs</h3>")
    io_rows, classes = [], []
    for kind in ("inputs", "outputs"):
        for e in structure.get(kind) or []:
            before, after = e.get("before"), e.get("after")
            io_rows.append([kind[:-1], Cell(esc(e.get("name")), css="name"), _type(before), _type(after)])
            classes.append("" if _type(before) == _type(after) else "bad")
    parts.append(table("io", [Column("kind", "kind"), Column("name", "name"), Column("before", "before"),
                              Column("after", "after")], io_rows, row_classes=classes, sortable=False)
                 if io_rows else empty("no inputs or outputs listed"))
    for key, label in (("removed_nodes", "removed"), ("added_nodes", "added")):
        listed = structure.get(key) or []
        items = "".join(f"<li><code>{esc(n.get('name'))}</code> {esc(n.get('op_type'))}</li>"
                        for n in listed[:_MAX_NODES_LISTED])
        more = f"<li>… and {len(listed) - _MAX_NODES_LISTED} more (see the JSON)</li>" if len(
            listed) > _MAX_NODES_LISTED else ""
        parts.append(f"<details><summary>{len(listed)} nodes {label}</summary><ul>{items}{more}</ul></details>")
    return "".join(parts)


def _type(t) -> str:
    if not t:
        return "absent"
    return f"{t.get('dtype')}{_shape(t.get('shape'))}"


def _shape(shape) -> str:
    if shape is None:
        return "?"
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


# ---- op counts and optimize


def _op_counts_section(opt, ver) -> str:
    if opt is not None:
        before, after = opt.get("op_counts_before") or {}, opt.get("op_counts_after") or {}
        source = "from the optimize report"
    elif ver is not None and (ver.get("structure") or {}).get("op_counts"):
        counts = ver["structure"]["op_counts"]
        before = {op: c[0] for op, c in counts.items()}
        after = {op: c[1] for op, c in counts.items()}
        source = "from verify's structural diff"
    else:
        return empty("No optimize report and no verify structure: node counts are not known.")
    ops = sorted(set(before) | set(after), key=lambda o: (-max(before.get(o, 0), after.get(o, 0)), o))
    shown, rest = ops[:_MAX_OPS_PLOTTED], ops[_MAX_OPS_PLOTTED:]
    b = [before.get(o, 0) for o in shown]
    a = [after.get(o, 0) for o in shown]
    if rest:
        shown = shown + [f"other ({len(rest)} op types)"]
        b.append(sum(before.get(o, 0) for o in rest))
        a.append(sum(after.get(o, 0) for o in rest))
    plot = svg.grouped_bars(shown, [("before", b), ("after", a)], plot_id="op-counts",
                            title=f"nodes by op type: {sum(before.values()):,} before, {sum(after.values()):,} after",
                            value_label="nodes")
    rows = [[o, before.get(o, 0), after.get(o, 0), after.get(o, 0) - before.get(o, 0)] for o in ops]
    listing = table("op-counts-table", [Column("op", "op type"), Column("before", "before", True),
                                        Column("after", "after", True), Column("delta", "change", True)], rows)
    return (plot + f'<p class="sub">Counts {esc(source)}.</p>'
            f"<details><summary>table of all {len(ops)} op types</summary>{listing}</details>")


def _optimize(opt: dict) -> str:
    check = opt.get("check")
    if check is None:
        check_text, css = "not checked (--no-check)", ""
    elif "skipped" in check:
        check_text, css = f"not checked: {check['skipped']}", "warn"
    elif check.get("first_mismatch"):
        check_text, css = f"differs at {check['first_mismatch']} (written with --force)", "bad"
    else:
        check_text, css = f"{check.get('outputs')} outputs match, max abs diff {num(check.get('max_abs_diff'))}", "ok"
    passes = opt.get("passes") or []
    cards = [card("iterations", str(opt.get("iterations", "?")),
                  "converged" if opt.get("converged") else "stopped before a fixed point"),
             card("pass runs", f"{sum(1 for p in passes if p.get('modified'))} changed the graph", f"{len(passes)} ran"),
             card("time in passes", f"{1e3 * sum(p.get('seconds') or 0 for p in passes):.1f} ms"),
             card("optimize's own check", "ok" if css == "ok" else "see below", check_text, css)]
    rows = [[p.get("name"), p.get("iteration"), 1e3 * (p.get("seconds") or 0), p.get("nodes_removed", 0),
             p.get("nodes_added", 0), p.get("initializers_removed", 0), len(p.get("refused") or [])]
            for p in passes if p.get("modified") or p.get("refused")]
    cols = [Column("name", "pass"), Column("iteration", "iteration", True), Column("ms", "ms", True),
            Column("nodes_removed", "nodes removed", True), Column("nodes_added", "nodes added", True),
            Column("initializers_removed", "initializers removed", True), Column("refused", "refusals", True)]
    listing = table("passes", cols, rows) if rows else empty("no pass changed the graph")
    return f'<div class="cards">{"".join(cards)}</div><h3>Passes that changed something or refused</h3>{listing}'


# ---- bench


def _bench(bench: dict) -> str:
    s = bench.get("settings") or {}
    threads = f"intra-op {s.get('intra_op_threads') or 'default'}, inter-op {s.get('inter_op_threads') or 'default'}"
    runs = f"{s.get('iterations')} iterations" if s.get("iterations") else f"{s.get('seconds')} s"
    parts = [f'<p class="sub">provider {esc(s.get("provider"))}, onnxruntime optimization level '
             f'{esc(s.get("optimization_level"))}, {esc(threads)} threads, {esc(s.get("warmup"))} warm-up runs then '
             f'{esc(runs)}, concurrency {esc(s.get("concurrency"))}, batch size {esc(s.get("batch_size") or "as declared")}'
             f"; {num(bench.get('seconds'))} s in all.</p>"]
    models = bench.get("models") or []
    if not models:
        return "".join(parts) + empty("the bench JSON lists no model")
    series = [(_model_label(m), (m.get("latency_ms") or {}).get("samples") or []) for m in models]
    if any(samples for _, samples in series):
        parts.append(svg.histogram(series, title="warm latency per run", plot_id="latency", x_label="ms",
                                   mode="overlay"))
    else:
        parts.append(empty("the bench JSON keeps no latency samples, so no distribution is drawn"))
    cols = [Column("label", "model"), Column("p50", "p50 ms", True), Column("p95", "p95 ms", True),
            Column("p99", "p99 ms", True), Column("mean", "mean ms", True), Column("stdev", "stdev ms", True),
            Column("count", "runs", True), Column("qps", "QPS", True), Column("cold", "cold start s", True),
            Column("warm", "session s", True), Column("rss", "peak RSS MB", True),
            Column("device", "device MB", True)]
    rows = []
    for m in models:
        lat = m.get("latency_ms") or {}
        rows.append([_model_label(m), lat.get("p50"), lat.get("p95"), lat.get("p99"),
                     lat.get("mean"), lat.get("stdev"), lat.get("count"), m.get("qps"), m.get("session_create_cold_s"),
                     m.get("session_create_warm_s"), m.get("peak_rss_mb"), m.get("device_peak_mb")])
    parts.append(table("latency-table", cols, rows))
    comp = bench.get("comparison")
    if comp:
        parts.append(f'<p>Interleaved A/B over {esc(comp.get("rounds"))} rounds: B/A {esc(comp.get("metric"))} ratio '
                     f'<b>{num(comp.get("ratio"))}</b> (spread {num(comp.get("ratio_low"))}–'
                     f'{num(comp.get("ratio_high"))}).</p>')
    parts.append(_profiles(models))
    return "".join(parts)


def _profiles(models: list) -> str:
    profiled = [m for m in models if m.get("profile")]
    if not profiled:
        return "<h3>Profile</h3>" + empty("not profiled (the bench JSON has no onnxruntime profile)")
    totals = {}
    for m in profiled:
        for row in m["profile"].get("by_op_type") or []:
            totals[row["op_type"]] = max(totals.get(row["op_type"], 0), row.get("ms") or 0)
    ops = sorted(totals, key=lambda o: -totals[o])[:_MAX_PROFILE_OPS]
    series = []
    for m in profiled:
        by_op = {r["op_type"]: r.get("ms") for r in m["profile"].get("by_op_type") or []}
        series.append((_model_label(m), [by_op.get(o, 0) for o in ops]))
    parts = ["<h3>Profile: time per op type</h3>",
             svg.grouped_bars(ops, series, title="time per op type (onnxruntime profiler)", plot_id="profile",
                              value_label="ms per run")]
    for i, m in enumerate(profiled):
        nodes = (m["profile"].get("top_nodes") or [])[:15]
        rows = [[Cell(esc(n.get("name")), css="name"), n.get("op_type"), n.get("ms"), _percent(n.get("share"))]
                for n in nodes]
        parts.append(f"<details><summary>top nodes of {esc(_model_label(m))}</summary>" + table(
            f"top-nodes-{i}", [Column("name", "node"), Column("op_type", "op"), Column("ms", "ms", True),
                               Column("share", "share %", True)], rows) + "</details>")
    return "".join(parts)


# ---- small formats


def _model_label(m: dict) -> str:
    return f"{m.get('label', '?')}: {_base(m.get('path'))}"


def _base(path) -> str:
    return os.path.basename(str(path)) if path else "?"


def _inputs_text(inputs) -> str:
    if not inputs:
        return "inputs unknown"
    source = inputs.get("source")
    origin = f"random, seed {inputs.get('seed')}" if source == "random" else f"from {source}"
    batches = [b for b in inputs.get("batch_sizes") or [] if b is not None]
    batch = f", batch sizes {', '.join(map(str, batches))}" if batches else ""
    return f"{inputs.get('samples', '?')} samples {origin}{batch}"


def _percent(share):
    return None if share is None else 100 * share


def _snr(record: dict):
    """SNR in dB; verify writes null for an exact match, shown as ∞."""
    snr = record.get("snr_db")
    if snr is None and record.get("max_abs") == 0 and record.get("ok", True):
        return math.inf
    return snr


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
