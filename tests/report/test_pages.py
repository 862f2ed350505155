"""The HTML pages: self-contained (no http(s) reference), every value escaped,
sortable table markup, the plots present, and a section that says so when a
part of the report is missing."""

import re
from html.parser import HTMLParser

import pytest
from report_samples import bench_dict, record, report_dict, verify_dict

from pyonnxopt.report import report_page, verify_page

VOID = {"meta", "br", "img", "input", "link", "hr", "col", "rect", "line", "circle", "polyline", "path"}


class Tags(HTMLParser):
    """Counts elements, checks that every opened element is closed in order,
    and keeps each element's attributes."""

    def __init__(self):
        super().__init__()
        self.stack, self.elements, self.errors = [], [], []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
        else:
            self.stack.pop()

    def find(self, tag, **attrs):
        return [a for t, a in self.elements if t == tag and all(a.get(k.replace("_", "-")) == v for k, v in attrs.items())]


def parse(page):
    tags = Tags()
    tags.feed(page)
    tags.close()
    assert tags.errors == [] and tags.stack == [], (tags.errors, tags.stack)
    return tags


@pytest.fixture(scope="module")
def full_report():
    return report_dict(ok=False)


def test_report_page_has_every_plot_and_table(full_report):
    page = report_page(full_report)
    tags = parse(page)
    plots = {a["data-plot"] for a in tags.find("svg") if "data-plot" in a}
    assert plots == {"op-counts", "layer-error", "latency", "profile"}
    series = {a["data-series"] for a in tags.find("g") if "data-series" in a}
    assert {"before", "after", "layers", "graph outputs", "A: cnn.onnx", "B: cnn.opt.onnx"} <= series
    tables = {a["id"] for a in tags.find("table")}
    assert {"outputs", "layers", "passes", "latency-table", "io", "op-counts-table"} <= tables
    # one mini histogram per compared tensor
    assert len(tags.find("svg", **{"class": "mini"})) == 41
    for section in ("graph", "optimize", "verify", "bench", "structure"):
        assert tags.find("section", id=section)


def test_pages_reference_nothing_on_the_network(full_report):
    for page in (report_page(full_report), verify_page(full_report["verify"])):
        assert not re.search(r"https?://", page)
        assert not re.search(r"\b(src|href)=", page)  # nothing loaded, nothing linked
        assert page.count("<script>") == 1  # ours, inline


def test_sortable_tables_carry_keys_types_and_numeric_values(full_report):
    tags = parse(report_page(full_report))
    layers = tags.find("table", id="layers")[0]
    assert layers["class"] == "sortable"
    heads = [(a["data-key"], a["data-type"]) for t, a in tags.elements if t == "th" and "data-key" in a]
    assert ("max_abs", "num") in heads and ("name", "text") in heads and ("order", "num") in heads
    page = report_page(full_report)
    # exact zero errors sort as 0, a missing value as NaN (last, either way)
    assert 'data-value="0.0">0</td>' in page
    assert 'data-value="NaN">–</td>' in page  # the profile has no device memory
    first_row = page[page.index('<table id="layers"'):].split("<tr>")[2]
    assert 'data-value="0.0"' in first_row and "/features.0/Conv_output_0" in first_row


def test_mismatch_is_marked(full_report):
    page = report_page(full_report)
    tags = parse(page)
    assert "mismatch" in page and "/features.25/MaxPool_output_0" in page
    assert len(tags.find("tr", **{"class": "bad"})) == 2  # the drifting layer and the output
    # the bucket holding 0.3 is at or above atol, so drawn red
    assert '#e15759"><title>|error| in [0.1, 1)' in page


HOSTILE = '<script>alert("x")</script>'


def test_hostile_names_are_escaped_everywhere():
    ver = verify_dict(layers=3)
    ver["original"] = f"models/{HOSTILE}.onnx"
    ver["layers"][1]["name"] = HOSTILE
    ver["layers"][1]["op_type"] = '"><img onerror=alert(1)>'
    ver["structure"]["removed_nodes"].append({"name": HOSTILE, "op_type": "<b>Op</b>"})
    ver["structure"]["op_counts"][HOSTILE] = [1, 0]
    ver["tolerances"][HOSTILE] = {"atol": 1, "rtol": 1}
    bench = bench_dict(samples=20)
    bench["models"][0]["path"] = HOSTILE
    bench["models"][0]["profile"]["by_op_type"][0]["op_type"] = HOSTILE
    bench["models"][0]["profile"]["top_nodes"][0]["name"] = HOSTILE
    opt = report_dict()["optimize"]
    opt["op_counts_before"][HOSTILE] = 3
    opt["passes"][0]["name"] = HOSTILE
    opt["passes"][0]["modified"] = True
    report = {"kind": "report", "version": 1, "original": HOSTILE, "optimized": HOSTILE, "optimize": opt,
              "verify": ver, "bench": bench, "created": HOSTILE, "pyonnxopt": HOSTILE}
    for page in (report_page(report), verify_page(ver)):
        parse(page)
        assert page.count("<script>") == 1
        assert "<img" not in page and "<b>Op" not in page
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page


@pytest.mark.parametrize("missing, says", [
    ("optimize", "No optimize report in this report"),
    ("verify", "verify was not run for this report"),
    ("bench", "bench was not run for this report"),
])
def test_a_missing_part_gets_a_section_that_says_so(missing, says):
    report = report_dict(**{missing: False})
    page = report_page(report)
    tags = parse(page)
    assert says in page
    assert tags.find("section", id=missing)
    plots = {a["data-plot"] for a in tags.find("svg") if "data-plot" in a}
    expected = {"optimize": {"op-counts", "layer-error", "latency", "profile"},  # counts from verify's structure
                "verify": {"op-counts", "latency", "profile"},
                "bench": {"op-counts", "layer-error"}}[missing]
    assert plots == expected


def test_report_with_nothing_in_it_still_renders():
    page = report_page(report_dict(optimize=False, verify=False, bench=False))
    tags = parse(page)
    assert not [a for a in tags.find("svg") if "data-plot" in a]
    assert "node counts are not known" in page and "verify was not run" in page and "bench was not run" in page


def test_verify_page_alone():
    ver = verify_dict(layers=12)
    ver["outputs"].append(record("probs", "Softmax", 13, 0.0, shape=(1, 10)))
    page = verify_page(ver)
    tags = parse(page)
    assert {a["data-plot"] for a in tags.find("svg") if "data-plot" in a} == {"layer-error"}
    assert tags.find("table", id="layers") and tags.find("table", id="io")
    assert "equivalent" in page and "2 nodes removed" in page
    assert len(tags.find("svg", **{"class": "mini"})) == 14
    # an exact match (verify writes snr_db null) shows as infinite SNR
    assert 'data-value="Infinity">∞</td>' in page  # what parseFloat reads as +inf


def test_verify_page_of_a_minimal_json():
    minimal = {"kind": "verify", "version": 1, "ok": True, "outputs": [], "layers": []}
    page = verify_page(minimal)
    parse(page)
    assert "no graph outputs compared" in page and "no structural diff" in page
