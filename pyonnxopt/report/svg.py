"""Small inline-SVG plots for the HTML pages, with no dependency: grouped
horizontal bars, histograms of samples, line/scatter with a log axis, and a
tiny histogram for a table row.

Every plot is one `<svg class="plot" data-plot=ID>` string; each series is a
`<g class="series" data-series=LABEL>`, so a test (or a script) can find what
was drawn. Text goes through html.escape. No xmlns: inline SVG in HTML does
not need it, and the page keeps no http(s) reference at all."""

from __future__ import annotations

import math
from html import escape
from typing import Optional, Sequence

# Tableau 10: distinct on a white background, and readable in grey scale order.
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac")
AXIS = "#555"
GRID = "#e3e3e3"
FONT = 11  # px; label widths below assume about 0.6 em per character
_CHAR = 0.6 * FONT


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def esc(text) -> str:
    return escape(str(text), quote=True)


def fmt(v) -> str:
    """A short label for a number: 0.0001 -> 1e-4, 1234 -> 1234, 0.25 -> 0.25."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float) and math.isinf(v):
        return "∞" if v > 0 else "-∞"
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e5 or a < 1e-3:
        mantissa, exp = f"{v:.1e}".split("e")
        mantissa = mantissa.rstrip("0").rstrip(".")
        return f"{mantissa}e{int(exp)}"
    if a >= 100 or float(v).is_integer():
        return f"{v:.0f}"
    return f"{v:.3g}"


def nice_ticks(lo: float, hi: float, count: int = 5, integer: bool = False) -> list:
    """Round tick values covering [lo, hi] (1, 2, 2.5 or 5 times a power of
    ten apart; whole numbers apart with `integer`, for counts)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        hi = lo + 1 if math.isfinite(lo) else 1.0
        lo = lo if math.isfinite(lo) else 0.0
    raw = (hi - lo) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    if integer:
        step = max(math.ceil(step), 1)
    first = math.floor(lo / step) * step
    ticks = [round(first, 12)]
    while ticks[-1] < hi - step * 1e-9:
        ticks.append(round(first + len(ticks) * step, 12))
    return ticks


def log_ticks(lo: float, hi: float) -> list:
    """Powers of ten from below lo to above hi (every other one when there are many)."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    if b == a:
        b += 1
    stride = 1 if b - a <= 8 else 2
    return [10.0 ** e for e in range(a, b + 1, stride)]


def _svg(plot_id: str, width: float, height: float, title: str, body: list) -> str:
    return (f'<svg class="plot" data-plot="{esc(plot_id)}" viewBox="0 0 {width:.0f} {height:.0f}" '
            f'width="{width:.0f}" height="{height:.0f}" role="img" aria-label="{esc(title)}" '
            f'font-family="system-ui, sans-serif" font-size="{FONT}">'
            f'<title>{esc(title)}</title>'
            f'<text x="{width / 2:.0f}" y="16" text-anchor="middle" font-size="13" font-weight="600">{esc(title)}</text>'
            + "".join(body) + "</svg>")


def _no_data(plot_id: str, title: str, width: float, why: str = "no data") -> str:
    return _svg(plot_id, width, 60, title,
                [f'<text class="no-data" x="{width / 2:.0f}" y="42" text-anchor="middle" fill="{AXIS}">{esc(why)}</text>'])


def _legend(labels: Sequence[str], x: float, y: float, colors: Optional[Sequence[str]] = None) -> str:
    """One row of colored squares and names, starting at (x, y)."""
    parts, cx = ['<g class="legend">'], x
    for i, label in enumerate(labels):
        c = colors[i] if colors else color(i)
        parts.append(f'<rect x="{cx:.1f}" y="{y - 9:.1f}" width="10" height="10" fill="{c}"/>'
                     f'<text x="{cx + 14:.1f}" y="{y:.1f}">{esc(label)}</text>')
        cx += 14 + len(str(label)) * _CHAR + 16
    parts.append("</g>")
    return "".join(parts)


def _clip(label: str, chars: int) -> str:
    label = str(label)
    return label if len(label) <= chars else label[: max(chars - 1, 1)] + "…"


def grouped_bars(categories: Sequence[str], series: Sequence[tuple], *, title: str, plot_id: str,
                 value_label: str = "", width: int = 720) -> str:
    """Horizontal bars, one group per category (e.g. op type) with one bar per
    series (e.g. before / after); `series` is [(label, [value per category])].
    The value is written at the end of each bar."""
    if not categories or not series:
        return _no_data(plot_id, title, width)
    label_chars = min(max(len(str(c)) for c in categories), 28)
    left = 20 + label_chars * (_CHAR + 0.6)
    right, top = 48, 44
    bar, gap = 12, 8
    group = bar * len(series) + gap
    height = top + group * len(categories) + 36
    vmax = max((v for _, values in series for v in values if v is not None), default=0) or 1
    whole = all(float(v).is_integer() for _, values in series for v in values if v is not None)
    ticks = nice_ticks(0, vmax, 5, integer=whole)
    span = ticks[-1] or 1
    plot_w = width - left - right

    def x(v):
        return left + plot_w * v / span

    body = [_legend([s[0] for s in series], left, 34)]
    bottom = top + group * len(categories)
    for t in ticks:
        body.append(f'<line x1="{x(t):.1f}" y1="{top}" x2="{x(t):.1f}" y2="{bottom}" stroke="{GRID}"/>'
                    f'<text x="{x(t):.1f}" y="{bottom + 14}" text-anchor="middle" fill="{AXIS}">{fmt(t)}</text>')
    if value_label:
        body.append(f'<text x="{left + plot_w / 2:.0f}" y="{bottom + 30}" text-anchor="middle" fill="{AXIS}">'
                    f'{esc(value_label)}</text>')
    for i, cat in enumerate(categories):
        y0 = top + i * group + gap / 2
        body.append(f'<text class="category" x="{left - 6:.1f}" y="{y0 + group / 2:.1f}" text-anchor="end" '
                    f'dominant-baseline="middle"><title>{esc(cat)}</title>{esc(_clip(cat, label_chars))}</text>')
    for s, (label, values) in enumerate(series):
        body.append(f'<g class="series" data-series="{esc(label)}" fill="{color(s)}">')
        for i, v in enumerate(values):
            if v is None:
                continue
            y = top + i * group + gap / 2 + s * bar
            body.append(f'<rect x="{left:.1f}" y="{y:.1f}" width="{max(x(v) - left, 0):.1f}" height="{bar - 1}">'
                        f'<title>{esc(categories[i])} {esc(label)}: {fmt(v)}</title></rect>'
                        f'<text x="{x(v) + 3:.1f}" y="{y + bar / 2:.1f}" dominant-baseline="middle" '
                        f'font-size="{FONT - 1}" fill="{AXIS}">{fmt(v)}</text>')
        body.append("</g>")
    body.append(f'<line x1="{left:.1f}" y1="{top}" x2="{left:.1f}" y2="{bottom}" stroke="{AXIS}"/>')
    return _svg(plot_id, width, height, title, body)


def _quantile(sorted_values: list, q: float) -> float:
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def histogram(series: Sequence[tuple], *, title: str, plot_id: str, x_label: str = "", bins: Optional[int] = None,
              mode: str = "overlay", width: int = 1000, panel_height: int = 160) -> str:
    """Distributions of samples (e.g. latencies in ms), `series` being
    [(label, samples)], on shared bins: overlaid (translucent) or side by side
    (one panel per series, same x axis). A dashed line marks each median. The
    x range stops at the largest per-series 99th percentile so one outlier does
    not squash the rest; samples beyond it are counted in a note. `bins`
    defaults to about 2 sqrt(n), between 8 and 40."""
    if mode not in ("overlay", "side"):
        raise ValueError(f"histogram mode {mode!r}: expected 'overlay' or 'side'")
    series = [(label, sorted(v for v in values if v is not None and math.isfinite(v))) for label, values in series]
    series = [(label, values) for label, values in series if values]
    if not series:
        return _no_data(plot_id, title, width)
    lo = min(values[0] for _, values in series)
    hi = max(_quantile(values, 0.99) for _, values in series)
    if hi <= lo:
        hi = lo + (abs(lo) * 0.1 or 1.0)
    if bins is None:
        bins = min(max(round(2 * math.sqrt(max(len(v) for _, v in series))), 8), 40)
    ticks = [t for t in nice_ticks(lo, hi, 6)]
    x_lo, x_hi = min(ticks[0], lo), max(ticks[-1], hi)
    edges = [lo + (hi - lo) * i / bins for i in range(bins + 1)]
    counts = []
    for _, values in series:
        c = [0] * bins
        for v in values:
            if v <= hi:
                c[min(int((v - lo) / (hi - lo) * bins), bins - 1)] += 1
        counts.append(c)
    beyond = sum(sum(1 for v in values if v > hi) for _, values in series)
    left, right, top = 52, 16, 44
    panels = 1 if mode == "overlay" else len(series)
    height = top + panels * (panel_height + 10) + 40
    plot_w = width - left - right

    def x(v):
        return left + plot_w * (v - x_lo) / (x_hi - x_lo)

    body = [_legend([s[0] for s in series], left, 34)]
    for p in range(panels):
        members = range(len(series)) if mode == "overlay" else [p]
        p_top = top + p * (panel_height + 10)
        p_bottom = p_top + panel_height
        cmax = max(max(counts[s]) for s in members) or 1
        yticks = nice_ticks(0, cmax, 3, integer=True)

        def y(c, p_bottom=p_bottom, ymax=yticks[-1]):
            return p_bottom - panel_height * c / ymax

        for t in yticks:
            body.append(f'<line x1="{left}" y1="{y(t):.1f}" x2="{width - right}" y2="{y(t):.1f}" stroke="{GRID}"/>'
                        f'<text x="{left - 4}" y="{y(t):.1f}" text-anchor="end" dominant-baseline="middle" '
                        f'fill="{AXIS}">{fmt(t)}</text>')
        for s in members:
            label, values = series[s]
            body.append(f'<g class="series" data-series="{esc(label)}" fill="{color(s)}" stroke="{color(s)}">')
            for i, c in enumerate(counts[s]):
                if c:
                    body.append(f'<rect x="{x(edges[i]):.1f}" y="{y(c):.1f}" width="{x(edges[i + 1]) - x(edges[i]):.1f}" '
                                f'height="{p_bottom - y(c):.1f}" fill-opacity="{0.45 if panels == 1 else 0.75}" '
                                f'stroke-width="0.5"><title>{esc(label)}: {c} in [{fmt(edges[i])}, {fmt(edges[i + 1])})'
                                f'</title></rect>')
            median = _quantile(values, 0.5)
            body.append(f'<line class="median" x1="{x(median):.1f}" y1="{p_top}" x2="{x(median):.1f}" y2="{p_bottom}" '
                        f'stroke-width="1.5" stroke-dasharray="4 3"/>'
                        f'<text x="{x(median) + 3:.1f}" y="{p_top + 10 + 12 * s * (panels == 1):.1f}" stroke="none">'
                        f'p50 {esc(label)} {fmt(median)}</text></g>')
        body.append(f'<line x1="{left}" y1="{p_bottom}" x2="{width - right}" y2="{p_bottom}" stroke="{AXIS}"/>')
    bottom = top + panels * (panel_height + 10) - 10
    for t in ticks:
        if x_lo <= t <= x_hi:
            body.append(f'<text x="{x(t):.1f}" y="{bottom + 14}" text-anchor="middle" fill="{AXIS}">{fmt(t)}</text>')
    note = f" ({beyond} sample{'s' if beyond > 1 else ''} above {fmt(hi)} not shown)" if beyond else ""
    body.append(f'<text x="{left + plot_w / 2:.0f}" y="{bottom + 30}" text-anchor="middle" fill="{AXIS}">'
                f'{esc(x_label + note)}</text>')
    return _svg(plot_id, width, height, title, body)


def scatter(series: Sequence[tuple], *, title: str, plot_id: str, x_label: str = "", y_label: str = "",
            log_y: bool = False, lines: bool = True, reference: Optional[tuple] = None, width: int = 1000,
            height: int = 300) -> str:
    """Points (and a line through them) per series: `series` is
    [(label, [(x, y) or (x, y, name)])]. With log_y, a y of 0 (exact) is drawn
    as a hollow marker on the bottom edge; None/NaN points are skipped.
    `reference` = (y, label) draws a dashed horizontal line (e.g. a tolerance)."""
    clean = []
    for label, points in series:
        pts = [(p[0], p[1], p[2] if len(p) > 2 else None) for p in points
               if p[1] is not None and not (isinstance(p[1], float) and math.isnan(p[1]))]
        clean.append((label, [p for p in pts if math.isfinite(p[1]) or p[1] > 0]))
    finite = [p[1] for _, pts in clean for p in pts if math.isfinite(p[1])]
    xs = [p[0] for _, pts in clean for p in pts]
    if not xs:
        return _no_data(plot_id, title, width)
    ref_y = reference[0] if reference else None
    finite_positive = [v for v in finite if v > 0]
    if log_y:
        positive = finite_positive + ([ref_y] if ref_y and ref_y > 0 else [])
        if not positive:
            positive = [1e-12, 1.0]
        # A decade of room below the smallest error, so exact zeros (drawn
        # on the bottom edge) stand apart from it.
        yticks = log_ticks(min(positive) / 10, max(positive))
        y_lo, y_hi = yticks[0], yticks[-1]
    else:
        vals = finite + ([ref_y] if ref_y is not None else [])
        yticks = nice_ticks(min(vals + [0]), max(vals) if vals else 1, 5)
        y_lo, y_hi = yticks[0], yticks[-1]
    x_lo, x_hi = min(xs), max(xs)
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    left, right, top, bottom = 64, 16, 52, height - 40
    plot_w, plot_h = width - left - right, bottom - top

    def px(v):
        return left + plot_w * (v - x_lo) / (x_hi - x_lo)

    def py(v):
        if log_y:
            v = min(max(v, y_lo), y_hi)
            return bottom - plot_h * (math.log10(v) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo))
        return bottom - plot_h * (min(max(v, y_lo), y_hi) - y_lo) / (y_hi - y_lo)

    body = [_legend([s[0] for s in clean], left, 34)]
    for t in yticks:
        body.append(f'<line x1="{left}" y1="{py(t):.1f}" x2="{width - right}" y2="{py(t):.1f}" stroke="{GRID}"/>'
                    f'<text x="{left - 4}" y="{py(t):.1f}" text-anchor="end" dominant-baseline="middle" '
                    f'fill="{AXIS}">{fmt(t)}</text>')
    for t in nice_ticks(x_lo, x_hi, 8):
        if x_lo <= t <= x_hi:
            body.append(f'<text x="{px(t):.1f}" y="{bottom + 14}" text-anchor="middle" fill="{AXIS}">{fmt(t)}</text>')
    body.append(f'<line x1="{left}" y1="{bottom}" x2="{width - right}" y2="{bottom}" stroke="{AXIS}"/>'
                f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="{AXIS}"/>'
                f'<text x="{left + plot_w / 2:.0f}" y="{bottom + 30}" text-anchor="middle" fill="{AXIS}">'
                f'{esc(x_label)}</text>'
                f'<text transform="translate(14 {top + plot_h / 2:.0f}) rotate(-90)" text-anchor="middle" '
                f'fill="{AXIS}">{esc(y_label)}</text>')
    if ref_y is not None and (not log_y or ref_y > 0):
        body.append(f'<g class="reference"><line x1="{left}" y1="{py(ref_y):.1f}" x2="{width - right}" '
                    f'y2="{py(ref_y):.1f}" stroke="{PALETTE[3]}" stroke-dasharray="6 4"/>'
                    f'<text x="{left + 4}" y="{py(ref_y) + (12 if py(ref_y) - top < 14 else -4):.1f}" '
                    f'fill="{PALETTE[3]}">'
                    f'{esc(reference[1])}</text></g>')
    for s, (label, pts) in enumerate(clean):
        c = color(s)
        body.append(f'<g class="series" data-series="{esc(label)}" data-points="{len(pts)}">')
        pts = sorted(pts, key=lambda p: p[0])
        if lines and len(pts) > 1:
            path = " ".join(f"{px(p[0]):.1f},{py(p[1]):.1f}" for p in pts)
            body.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-opacity="0.5"/>')
        r = 2.5 if len(pts) > 200 else 3.5
        for xv, yv, name in pts:
            hollow = log_y and yv <= 0
            tip = f"{name}: " if name else ""
            body.append(f'<circle cx="{px(xv):.1f}" cy="{py(yv):.1f}" r="{r}" '
                        f'fill="{"white" if hollow else c}" stroke="{c}">'
                        f'<title>{esc(tip)}{fmt(yv)}</title></circle>')
        body.append("</g>")
    if log_y and not finite_positive:
        body.append(f'<text class="all-zero" x="{left + plot_w / 2:.0f}" y="{top + plot_h / 2:.0f}" '
                    f'text-anchor="middle" font-size="13" fill="{AXIS}">every value is exactly 0</text>')
    if log_y and any(p[1] <= 0 for _, pts in clean for p in pts):
        body.append(f'<text x="{width - right}" y="34" text-anchor="end" fill="{AXIS}">'
                    f'○ on the bottom edge: exactly 0</text>')
    return _svg(plot_id, width, height, title, body)


def mini_histogram(counts: Sequence[int], *, labels: Optional[Sequence[str]] = None, bad_from: Optional[int] = None,
                   width: int = 112, height: int = 22) -> str:
    """A table-row sized histogram: one bar per bucket, height by log(1 + count)
    so a few large errors stay visible next to millions of tiny ones. Buckets
    from index `bad_from` on (e.g. above tolerance) are red. Hover shows counts."""
    counts = list(counts)
    if not counts or not any(counts):
        return '<svg class="mini" width="0" height="0"></svg>' if not counts else (
            f'<svg class="mini" viewBox="0 0 {width} {height}" width="{width}" height="{height}">'
            f'<line x1="0" y1="{height - 0.5}" x2="{width}" y2="{height - 0.5}" stroke="{GRID}"/></svg>')
    top = max(math.log1p(c) for c in counts)
    w = width / len(counts)
    parts = [f'<svg class="mini" viewBox="0 0 {width} {height}" width="{width}" height="{height}">',
             f'<line x1="0" y1="{height - 0.5}" x2="{width}" y2="{height - 0.5}" stroke="{GRID}"/>']
    for i, c in enumerate(counts):
        if not c:
            continue
        h = max((height - 2) * math.log1p(c) / top, 1.5)
        fill = PALETTE[3] if bad_from is not None and i >= bad_from else PALETTE[0]
        label = labels[i] if labels else str(i)
        parts.append(f'<rect x="{i * w + 0.5:.1f}" y="{height - h:.1f}" width="{max(w - 1, 1):.1f}" height="{h:.1f}" '
                     f'fill="{fill}"><title>{esc(label)}: {c}</title></rect>')
    parts.append("</svg>")
    return "".join(parts)
