"""Peer results from an earlier compare.py run (`--reuse JSON`).

The peers' outputs do not change between our commits, so a run may take a
peer's optimization (status, time, peak RSS, node counts) from an earlier
run's --json instead of running it again, and evaluate the output that run
kept (--keep-outputs) in this run, beside the fresh results: the check and
the latency stay measured in one run, the optimize time does not.

A row is reused for a (model, tool) when:
1. the tool is not a pyonnxopt variant;
2. the earlier run has the model, with the same size (and the zoo's sha256
   when both runs know it), and a row for the tool that ran there (not
   "not installed").
Otherwise the tool runs as usual. A reused ok row whose kept output is gone,
or no longer has the size the earlier run recorded, is not evaluated and
says so in its check.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _evaluate  # noqa: E402
from _goals import PYONNXOPT  # noqa: E402

# The optimization's own record, taken from the earlier row; what the
# evaluation measures (check, latency) comes from this run. Node counts are
# the earlier run's too: they are counts of the same file (its size is checked).
FROM_EARLIER = ("status", "runs", "runs_ok", "wall_s", "peak_rss", "peak_rss_upper_bound", "peak_rss_of_model",
                "output_bytes", "nodes_main", "nodes", "transposes", "ms_nodes", "constant_input_nodes")
NO_OUTPUT = "no output"


def model_dir(name: str) -> str:
    """A model's folder under --work (compare.py's layout: WORK/MODEL/TOOL/model.onnx)."""
    return name.replace(":", "_")


class Earlier:
    """An earlier run's --json and the folder where it kept its outputs."""

    def __init__(self, json_path: str, work: "str | None" = None):
        with open(json_path) as f:
            self.doc = json.load(f)
        self.json_path = os.path.abspath(json_path)
        args = self.doc.get("args", {})
        work = work or args.get("work")
        if not work:
            raise ValueError("the JSON does not say where that run kept its outputs: give --reuse-work")
        self.work = os.path.abspath(work)
        # Without --reuse-work, the outputs are where that run wrote them, if it kept them.
        self.kept = bool(work) or bool(args.get("keep_outputs"))

    def row(self, model: str, tool: str, model_bytes: int, sha256: "str | None") -> "dict | None":
        """The earlier row of `tool` on `model` when it can stand for a run now, else None."""
        if tool in PYONNXOPT:
            return None
        m = self.doc.get("models", {}).get(model)
        if not m or m.get("model_bytes") != model_bytes:
            return None
        if sha256 and m.get("sha256") and m["sha256"] != sha256:
            return None
        row = m.get("rows", {}).get(tool)
        if not row or row.get("status") == "not installed":
            return None
        return row

    def output(self, model: str, tool: str) -> str:
        return os.path.join(self.work, model_dir(model), tool, "model.onnx")

    def summary(self) -> dict:
        """What the header says about the earlier run."""
        env = self.doc.get("environment", {})
        return {"json": self.json_path, "work": self.work, "complete": self.doc.get("complete"),
                "environment": env}


def usable_output(row: dict, path: str) -> "str | None":
    """None when `path` is the output the earlier row describes, else why not."""
    if not os.path.exists(path):
        return f"the earlier run's output is gone: {path}"
    size = _evaluate.model_bytes(path)
    if row.get("output_bytes") is not None and size != row["output_bytes"]:
        return f"{path} has {size} bytes, the earlier run wrote {row['output_bytes']}: overwritten since"
    return None


def reused_row(earlier_row: dict, evaluation: dict, output: str, problem: "str | None") -> dict:
    """A row for the table: the earlier optimization record, this run's check and latency."""
    row = dict(evaluation)
    row.update({k: earlier_row[k] for k in FROM_EARLIER if k in earlier_row})
    row.update(reused=True, output=output)
    if problem:
        row.update(check=NO_OUTPUT, detail=problem)
    elif earlier_row.get("status", "").startswith("ok") and not evaluation:
        row.update(check=NO_OUTPUT, detail="not evaluated in this run")
    return row
