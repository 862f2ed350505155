"""The pages in a real browser: headless chromium renders the report and the
verify page, its DOM after the script ran has the plots with their series and
a table sorted through the header's click handler, and the screenshots are
kept ($PYONNXOPT_ARTIFACTS, else <tmp>/pyonnxopt-artifacts) for people to look at."""

import os
import re
import shutil
import struct
import subprocess
import tempfile
from html.parser import HTMLParser

import pytest
from report_samples import report_dict, verify_dict

from pyonnxopt.report import report_page, verify_page

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome", "headless_shell")
BROWSER = next((shutil.which(name) for name in CANDIDATES if shutil.which(name)), None)
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no chromium binary on PATH (Debian: apt-get install chromium)")
WIDTH, HEIGHT = 1200, 2000


def chromium(tmp_path, *args):
    """Runs headless chromium with a throwaway profile; returns stdout."""
    cmd = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-extensions", "--no-first-run",
           f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class Dom(HTMLParser):
    """Elements with attributes, in document order; per table, its header
    cells' attributes and its rows' data-values."""

    def __init__(self):
        super().__init__()
        self.elements, self.heads, self.rows, self._table, self._cells = [], {}, {}, None, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.elements.append((tag, attrs))
        if tag == "table":
            self._table = attrs.get("id")
            self.rows[self._table], self.heads[self._table] = [], []
        elif tag == "th" and self._table:
            self.heads[self._table].append(attrs)
        elif tag == "tr" and self._table:
            self._cells = []
            self.rows[self._table].append(self._cells)
        elif tag == "td" and self._cells is not None:
            self._cells.append(attrs.get("data-value"))

    def find(self, tag, **attrs):
        return [a for t, a in self.elements if t == tag and all(a.get(k.replace("_", "-")) == v for k, v in attrs.items())]


def dump_dom(tmp_path, page_path, query=""):
    dom = Dom()
    dom.html = chromium(tmp_path, "--dump-dom", f"file://{page_path}{query}")
    dom.feed(dom.html)
    return dom


def screenshot(tmp_path, page_path, name):
    png = tmp_path / name
    chromium(tmp_path, f"--screenshot={png}", f"--window-size={WIDTH},{HEIGHT}", f"file://{page_path}")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (WIDTH, HEIGHT)
    # a blank page compresses to a few KiB; plots, text and tables do not
    assert len(data) > 60_000, f"{name}: {len(data)} bytes, the page looks empty"
    folder = os.environ.get("PYONNXOPT_ARTIFACTS") or os.path.join(tempfile.gettempdir(), "pyonnxopt-artifacts")
    os.makedirs(folder, exist_ok=True)
    shutil.copy(png, os.path.join(folder, name))
    return png


def plots(dom):
    """data-plot -> the series drawn in it, from the DOM chromium built."""
    found, current = {}, None
    for tag, attrs in dom.elements:
        if tag == "svg" and "data-plot" in attrs:
            current = found.setdefault(attrs["data-plot"], [])
        elif tag == "g" and attrs.get("class") == "series" and current is not None:
            current.append(attrs["data-series"])
    return found


def numbers(values):
    return [float(v) for v in values]


def test_report_page_renders_with_plots_and_sorts(tmp_path):
    page = tmp_path / "report.html"
    page.write_text(report_page(report_dict(ok=False)))
    screenshot(tmp_path, page, "report.png")

    dom = dump_dom(tmp_path, page, "?sort=layers:max_abs:desc")
    assert plots(dom) == {"op-counts": ["before", "after"], "layer-error": ["layers", "graph outputs"],
                          "latency": ["A: cnn.onnx", "B: cnn.opt.onnx"],
                          "profile": ["A: cnn.onnx", "B: cnn.opt.onnx"]}
    layers = dom.find("table", id="layers")[0]
    assert layers["data-sorted-by"] == "max_abs:desc"  # the script ran and clicked the header twice
    keys = [h["data-key"] for h in dom.heads["layers"]]
    column = keys.index("max_abs")
    assert dom.heads["layers"][column]["aria-sort"] == "descending"
    assert [h.get("aria-sort") for h in dom.heads["outputs"]] == [None] * len(keys)  # other tables untouched
    max_abs = numbers(row[column] for row in dom.rows["layers"][1:])
    assert max_abs == sorted(max_abs, reverse=True) and max_abs[0] == 0.3
    # the unsorted view keeps topological order
    plain = dump_dom(tmp_path, page)
    assert "data-sorted-by" not in plain.find("table", id="layers")[0]
    order = numbers(row[0] for row in plain.rows["layers"][1:])
    assert order == sorted(order)


def test_verify_page_renders_and_sorts_text_columns(tmp_path):
    page = tmp_path / "verify.html"
    page.write_text(verify_page(verify_dict(layers=60)))
    screenshot(tmp_path, page, "verify.png")
    dom = dump_dom(tmp_path, page, "?sort=layers:op_type:asc")
    assert plots(dom) == {"layer-error": ["layers", "graph outputs"]}
    assert dom.find("table", id="layers")[0]["data-sorted-by"] == "op_type:asc"
    assert len(dom.find("svg", **{"class": "mini"})) == 61
    body = dom.html[dom.html.index('<table id="layers"'):]
    body = body[: body.index("</table>")]
    ops = re.findall(r'</td><td>(Add|BatchNormalization|Conv|Gemm|MaxPool|Relu)</td>', body)
    assert len(ops) == 60 and ops == sorted(ops, key=str.lower)
