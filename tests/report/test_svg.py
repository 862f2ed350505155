"""The inline-SVG plots: what each draws (series, bars, points), escaping,
axes that cover the data, and the empty cases."""

import math
import re
import xml.etree.ElementTree as ET

import pytest

from pyonnxopt.report import svg


def parse(markup):
    """The SVG as XML (well-formedness is part of the contract)."""
    return ET.fromstring(markup)


def series(root, label):
    found = [g for g in root.iter("g") if g.get("class") == "series" and g.get("data-series") == label]
    assert len(found) == 1, f"series {label!r}: {len(found)} groups"
    return found[0]


def test_nice_ticks_cover_the_range_with_round_steps():
    for lo, hi in [(0, 1.68), (0, 37), (1.2, 1.9), (0, 1e-3), (-5, 5), (0, 123456)]:
        ticks = svg.nice_ticks(lo, hi)
        assert ticks[0] <= lo and ticks[-1] >= hi
        steps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:])}
        assert len(steps) == 1
        step = steps.pop()
        mantissa = step / 10 ** math.floor(math.log10(step))
        assert round(mantissa, 6) in (1, 2, 2.5, 5)
    assert svg.nice_ticks(0, 3, integer=True) == [0, 1, 2, 3]
    assert svg.log_ticks(3e-9, 2e-3) == [10.0 ** e for e in range(-9, -1)]


def test_fmt_is_short():
    assert [svg.fmt(v) for v in (0, 1e-4, 2.5e-5, 0.25, 12, 1234.5, math.inf, None)] == [
        "0", "1e-4", "2.5e-5", "0.25", "12", "1234", "∞", "–"]


def test_grouped_bars_draw_one_bar_per_value_and_escape_labels():
    cats = ["Conv", "<script>alert(1)</script>", "Relu"]
    markup = svg.grouped_bars(cats, [("before", [4, 2, 3]), ("after", [4, 0, None])], title="ops & more",
                              plot_id="op-counts")
    root = parse(markup)
    assert root.get("data-plot") == "op-counts"
    assert "<script>" not in markup and "&lt;script&gt;" in markup and "ops &amp; more" in markup
    before, after = series(root, "before"), series(root, "after")
    assert len(before.findall("rect")) == 3 and len(after.findall("rect")) == 2  # None draws nothing
    widths = [float(r.get("width")) for r in before.findall("rect")]
    assert widths[0] > widths[2] > widths[1] > 0  # proportional to 4, 3, 2
    assert float(after.findall("rect")[1].get("width")) == 0
    right_edge = max(float(r.get("x")) + float(r.get("width")) for r in before.findall("rect"))
    assert right_edge <= float(root.get("width"))


def test_histogram_counts_every_sample_once():
    a = [1.0 + 0.01 * i for i in range(100)]
    b = [1.5 + 0.01 * i for i in range(50)] + [100.0]  # one far outlier
    root = parse(svg.histogram([("A", a), ("B", b)], title="latency", plot_id="lat", x_label="ms", bins=20))

    def total(label):
        return sum(int(re.match(r".*: (\d+) in", r.find("title").text).group(1)) for r in series(root, label).findall("rect"))

    assert total("A") == 100
    assert total("B") == 50  # the outlier is beyond the 99th percentile range...
    assert "(1 sample above" in ET.tostring(root, encoding="unicode")  # ...and said so
    assert len([ln for ln in root.iter("line") if ln.get("class") == "median"]) == 2


def test_histogram_side_by_side_gives_each_series_a_panel():
    overlay = parse(svg.histogram([("A", [1, 2, 3]), ("B", [2, 3, 4])], title="t", plot_id="p"))
    side = parse(svg.histogram([("A", [1, 2, 3]), ("B", [2, 3, 4])], title="t", plot_id="p", mode="side"))
    assert float(side.get("height")) > float(overlay.get("height"))
    with pytest.raises(ValueError, match="mode"):
        svg.histogram([("A", [1])], title="t", plot_id="p", mode="stacked")


def test_scatter_log_axis_shows_exact_zeros_on_the_bottom_edge():
    points = [(0, 0.0, "exact"), (1, 1e-6, "a"), (2, 1e-3, "b"), (3, float("nan"), "nan"), (4, None, "none")]
    root = parse(svg.scatter([("layers", points)], title="err", plot_id="layer-error", log_y=True,
                             reference=(1e-4, "float32 atol")))
    layer = series(root, "layers")
    circles = layer.findall("circle")
    assert layer.get("data-points") == "3" and len(circles) == 3
    ys = [float(c.get("cy")) for c in circles]
    assert ys[0] > ys[1] > ys[2]  # larger error is higher up
    assert circles[0].get("fill") == "white" and circles[1].get("fill") != "white"
    assert circles[0].find("title").text.startswith("exact: 0")
    ref = [g for g in root.iter("g") if g.get("class") == "reference"]
    assert len(ref) == 1 and ys[2] < float(ref[0].find("line").get("y1")) < ys[1]


def test_scatter_of_exact_matches_says_so():
    root = parse(svg.scatter([("layers", [(i, 0.0) for i in range(5)])], title="err", plot_id="p", log_y=True,
                             reference=(1e-4, "atol")))
    assert [t.text for t in root.iter("text") if t.get("class") == "all-zero"] == ["every value is exactly 0"]
    assert all(c.get("fill") == "white" for c in series(root, "layers").findall("circle"))


def test_mini_histogram_marks_buckets_at_or_above_tolerance():
    markup = svg.mini_histogram([5, 0, 100, 1], labels=["a", "b", "<c>", "d"], bad_from=3)
    root = parse(markup)
    rects = root.findall("rect")
    assert len(rects) == 3  # the empty bucket draws nothing
    assert [r.get("fill") for r in rects] == [svg.PALETTE[0], svg.PALETTE[0], svg.PALETTE[3]]
    heights = [float(r.get("height")) for r in rects]
    assert heights[1] == max(heights) and heights[2] >= 1.5  # one element stays visible
    assert "&lt;c&gt;: 100" in markup


@pytest.mark.parametrize("markup", [
    svg.grouped_bars([], [], title="t", plot_id="p"),
    svg.histogram([("A", [])], title="t", plot_id="p"),
    svg.scatter([("s", [])], title="t", plot_id="p", log_y=True),
])
def test_empty_plots_say_no_data(markup):
    root = parse(markup)
    assert [t.text for t in root.iter("text") if t.get("class") == "no-data"] == ["no data"]
