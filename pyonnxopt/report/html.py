"""The page shell and the pieces pages are built from: sortable tables,
sections, summary cards, number formats. Everything a page shows passes
through `esc` (html.escape) unless it is markup built here.

Sortable tables: click a header to sort by that column (again to reverse).
Numeric cells sort by their `data-value`; NaN and missing values go last
either way. `page.html?sort=TABLE:COLUMN:asc|desc` sorts on load by clicking
the header, so a link (or a headless browser test) can open a sorted view."""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import Optional, Sequence

_CSS = """
:root { color-scheme: light; --fg: #1f2328; --muted: #59636e; --line: #d8dee4; --ok: #1a7f37; --bad: #cf222e;
        --warn: #9a6700; --bg-alt: #f6f8fa; --accent: #4e79a7; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: #fff;
       margin: 0 auto; padding: 24px 32px 64px; max-width: 1180px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 36px 0 10px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h3 { font-size: 15px; margin: 22px 0 8px; }
.sub { color: var(--muted); margin: 0 0 16px; overflow-wrap: anywhere; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 16px 0; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 8px 12px; flex: 1 1 140px; max-width: 300px;
        background: #fff; overflow-wrap: anywhere; }
.card .label { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.card .value { font-size: 20px; font-weight: 600; font-variant-numeric: tabular-nums; }
.card .detail { color: var(--muted); font-size: 12px; }
.ok { color: var(--ok); } .bad { color: var(--bad); } .warn { color: var(--warn); }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px; font-weight: 600; }
.badge.ok { background: #dafbe1; } .badge.bad { background: #ffebe9; }
.empty { color: var(--muted); font-style: italic; border-left: 3px solid var(--line); padding: 4px 10px; }
.plot { display: block; max-width: 100%; height: auto; margin: 8px 0 16px; }
.plots { display: flex; flex-wrap: wrap; gap: 0 24px; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; font-variant-numeric: tabular-nums; }
.scroll { max-height: 560px; overflow: auto; border: 1px solid var(--line); border-radius: 6px; margin: 8px 0 16px; }
.scroll table { margin: 0; width: 100%; }
.wide { overflow-x: auto; max-width: 100%; }
th, td { padding: 4px 8px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: middle; }
th { background: var(--bg-alt); position: sticky; top: 0; font-weight: 600; white-space: nowrap; z-index: 1; }
td.num, th.num { text-align: right; white-space: nowrap; }
td.shape { white-space: nowrap; }
td.name { min-width: 200px; max-width: 380px; overflow-wrap: anywhere; font-family: ui-monospace, SFMono-Regular, Menlo, monospace;
          font-size: 12px; }
tbody tr:nth-child(even) { background: #fbfcfd; }
tr.bad td { background: #fff5f5; }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th::after { content: " ↕"; color: #aab; font-weight: 400; }
table.sortable th[aria-sort=ascending]::after { content: " ▲"; color: var(--fg); }
table.sortable th[aria-sort=descending]::after { content: " ▼"; color: var(--fg); }
details { margin: 6px 0 12px; } summary { cursor: pointer; color: var(--accent); }
code { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; }
footer { margin-top: 40px; color: var(--muted); font-size: 12px; }
"""

_JS = """
function sortBy(th) {
  const table = th.closest('table'), body = table.tBodies[0];
  const idx = Array.prototype.indexOf.call(th.parentNode.children, th);
  const dir = th.getAttribute('aria-sort') === 'ascending' ? 'descending' : 'ascending';
  for (const h of th.parentNode.children) h.removeAttribute('aria-sort');
  th.setAttribute('aria-sort', dir);
  const num = th.dataset.type === 'num';
  const key = (row) => {
    const cell = row.cells[idx];
    const raw = cell.dataset.value !== undefined ? cell.dataset.value : cell.textContent.trim();
    return num ? parseFloat(raw) : raw.toLowerCase();
  };
  const rows = Array.from(body.rows).map((r, i) => [key(r), i, r]);
  rows.sort((a, b) => {
    if (num && isNaN(a[0]) !== isNaN(b[0])) return isNaN(a[0]) ? 1 : -1;  /* missing last */
    const c = a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] - b[1];
    return dir === 'ascending' ? c : -c;
  });
  for (const r of rows) body.appendChild(r[2]);
  table.dataset.sortedBy = th.dataset.key + ':' + (dir === 'ascending' ? 'asc' : 'desc');
}
document.querySelectorAll('table.sortable th').forEach((th) => th.addEventListener('click', () => sortBy(th)));
const wanted = new URLSearchParams(location.search).get('sort');
if (wanted) {
  const [table, key, dir] = wanted.split(':');
  const th = document.querySelector('table#' + CSS.escape(table) + ' th[data-key="' + CSS.escape(key) + '"]');
  if (th) { th.click(); if ((dir || 'asc') === 'desc') th.click(); }
}
"""


def esc(text) -> str:
    return escape(str(text), quote=True)


def num(v, digits: int = 3) -> str:
    """A number for a table cell: 3 significant digits, scientific when tiny
    or huge, "–" when missing, ∞ for infinity (an exact SNR)."""
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "∞" if v > 0 else "-∞"
    if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e6):
        return f"{v:.{digits - 1}e}"
    return f"{v:.{digits}g}" if abs(v) < 10 ** digits else f"{v:,.0f}"


def sort_value(v) -> str:
    """What a numeric cell sorts by, as JavaScript's parseFloat reads it:
    the number, Infinity for an exact SNR, NaN when missing."""
    if v is None or isinstance(v, str):
        return "NaN"
    if isinstance(v, bool):
        return str(int(v))
    v = float(v)
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return repr(v)


@dataclass
class Column:
    key: str
    label: str
    numeric: bool = False


@dataclass
class Cell:
    """A table cell whose markup is built here (already escaped), with an
    optional value to sort by."""
    html: str
    value: Optional[float] = None
    css: str = ""


def _class(css: str) -> str:
    return f' class="{esc(css)}"' if css else ""


def table(table_id: str, columns: Sequence[Column], rows: Sequence[Sequence], *, sortable: bool = True,
          row_classes: Optional[Sequence[str]] = None, scroll: bool = False) -> str:
    """A table; a cell is plain text (escaped), a number (formatted, sorted
    numerically), None ("–") or a Cell."""
    head = "".join(f'<th data-key="{esc(c.key)}" data-type="{"num" if c.numeric else "text"}"'
                   f'{_class("num" if c.numeric else "")}>{esc(c.label)}</th>' for c in columns)
    body = []
    for r, row in enumerate(rows):
        cells = []
        for col, cell in zip(columns, row):
            if isinstance(cell, Cell):
                value = f' data-value="{esc(sort_value(cell.value))}"' if col.numeric else ""
                css = " ".join(x for x in ("num" if col.numeric else "", cell.css) if x)
                cells.append(f"<td{value}{_class(css)}>{cell.html}</td>")
            elif col.numeric:
                cells.append(f'<td class="num" data-value="{esc(sort_value(cell))}">{esc(num(cell))}</td>')
            else:
                cells.append(f"<td>{esc('–' if cell is None else cell)}</td>")
        body.append(f"<tr{_class(row_classes[r] if row_classes else '')}>{''.join(cells)}</tr>")
    markup = (f'<table id="{esc(table_id)}"{_class("sortable" if sortable else "")}><thead><tr>{head}</tr></thead>'
              f'<tbody>{"".join(body)}</tbody></table>')
    return f'<div class="{"scroll" if scroll else "wide"}">{markup}</div>'


def card(label: str, value: str, detail: str = "", css: str = "") -> str:
    """A summary figure; value and detail are escaped here."""
    return (f'<div class="card"><div class="label">{esc(label)}</div>'
            f'<div class="value {esc(css)}">{esc(value)}</div>'
            f'<div class="detail">{esc(detail)}</div></div>')


def empty(text: str) -> str:
    return f'<p class="empty">{esc(text)}</p>'


def section(section_id: str, title: str, body: str) -> str:
    return f'<section id="{esc(section_id)}"><h2>{esc(title)}</h2>{body}</section>'


def badge(ok: bool, yes: str = "equivalent", no: str = "mismatch") -> str:
    return f'<span class="badge {"ok" if ok else "bad"}">{esc(yes if ok else no)}</span>'


def page(title: str, heading: str, subtitle: str, body: str, footer: str = "") -> str:
    """A whole self-contained page: inline CSS and JS, nothing fetched."""
    return ("<!DOCTYPE html>\n"
            f'<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">'
            f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>"
            f"<h1>{esc(heading)}</h1><p class=\"sub\">{esc(subtitle)}</p>{body}"
            f"<footer>{esc(footer)}</footer><script>{_JS}</script></body></html>\n")
