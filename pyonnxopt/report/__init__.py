"""One before/after report for a pair of models: the optimize report, verify
and bench gathered into one JSON (`gather`) and one self-contained HTML page
with plots (`report_page`; `verify_page` for verify alone).

    from pyonnxopt.report import gather, report_page
    report = gather("model.onnx", "model.opt.onnx", optimize_report="opt.json", verify=True, bench=True)
    open("report.html", "w").write(report_page(report))
"""

from pyonnxopt.report.gather import check_part, gather
from pyonnxopt.report.pages import report_page, verify_page

__all__ = ["check_part", "gather", "report_page", "verify_page"]
