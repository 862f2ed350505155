"""Per-pass bisection: which pass, and which of its rewrites, changed the outputs.

1. The pipeline runs from the original as `optimize` runs it; after every
   pass that changed the model, the model is checked against the original
   in onnxruntime. The first pass whose result differs
   is the culprit; the model from before it (kept in a temporary file) is
   the last good state.
2. That pass is run again, alone, on the last good state with the nodes some
   of its rewrites consumed pinned, which holds those rewrites back. A binary
   search over its n rewrites (apply the first k, hold back the rest) finds
   the first rewrite whose addition changes the outputs: at most
   1 + ceil(log2 n) re-runs and checks.
3. Rollback: from the last good state, with that rewrite's nodes pinned (or,
   when no single rewrite could be isolated, without the pass), the whole
   pipeline runs on to a fixed point; the result is checked and saved.

The original's session, inputs and outputs are made once: each check costs
one onnxruntime session and one run of the candidate, not two; candidates
go to onnxruntime as files (faster than bytes, and past 2 GB too).

Where a rewrite cannot be isolated the result names the pass only and says
why: the pass lists no rewrites (or none naming a node it consumed), its
unlisted changes already differ, or pinning some nodes changes which of
its other rewrites happen. A pass that leaves the outputs right but writes
something a later pass trusts (a wrong shape, say) is not caught at its own
step: the later pass is named.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from pyonnxopt import check
from pyonnxopt.check import CheckResult
from pyonnxopt.errors import Error
from pyonnxopt.fusion.rule import node_id
from pyonnxopt.model import Model, load
from pyonnxopt.opset import default_opset
from pyonnxopt.optimize import Start, cannot_run, converter_changed, prepare
from pyonnxopt.passes import PassOptions, run_passes
from pyonnxopt.passes.manager import MAX_ITERATIONS

Progress = Optional[Callable[[str, int], None]]
VERSION = 1


class _Workspace:
    """A temporary folder for model states: writing a state to a file and
    letting onnxruntime read it is faster than serializing to bytes, keeps no
    copy in memory, and knows no 2 GB limit (past it, external data)."""

    def __init__(self):
        self.folder = tempfile.mkdtemp(prefix="pyonnxopt-bisect-")
        self._count = itertools.count()

    def save(self, model: Model) -> str:
        path = os.path.join(self.folder, f"state{next(self._count)}.onnx")
        model.save(path)
        return path

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _discard(path: str) -> None:
    for p in (path, f"{path}.data"):
        with contextlib.suppress(OSError):  # gone, or (Windows) still mapped: the folder goes at the end
            os.unlink(p)


def _nodes_by_id(model: Model) -> dict:
    index: dict = {}
    for n in model.nodes(recursive=True):
        index.setdefault(node_id(n), []).append(n)
    return index


def _key(rewrite: dict) -> tuple:
    return rewrite.get("what", ""), tuple(rewrite.get("consumed", ()))


@dataclass
class Failure:
    """The first pass whose result differs from the original."""

    pass_name: str
    iteration: int
    first_mismatch: str
    good: str  # the file of the model just before that pass
    rewrites: list  # what the pass reported doing


class PassChecker:
    """`run_passes`'s `after_pass`: checks the model after each pass that
    changed it, keeps the last good state (a file in its workspace), and
    stops the pipeline at the first difference (recorded in `failure`).
    `checks`: how many it made. Use it as a context manager (or `close` it):
    the checker made by `starting` owns the workspace."""

    def __init__(self, reference: check.Reference, workspace: _Workspace, good: str, pinned: Iterable[str] = (),
                 progress: Progress = None, owner: bool = False):
        self.reference, self.workspace, self.good, self.pinned = reference, workspace, good, set(pinned)
        self.progress, self._owner, self._own_good = progress, owner, owner
        self.checks = 0
        self.failure: Optional[Failure] = None

    @classmethod
    def starting(cls, start: Start, *, seed: int = 0, inputs: Optional[dict] = None, rtol: float = 1e-4,
                 atol: float = 1e-5, progress: Progress = None) -> "PassChecker":
        """A checker for the pipeline run from `start` (see optimize.prepare)."""
        workspace = _Workspace()
        try:
            good = workspace.save(start.model)
            # Inputs fixed during optimization: the original runs on the fixed shapes.
            shaped_by = check.session(good) if start.fixed else None
            reference = check.Reference(start.original_ref, seed=seed, inputs=inputs, shaped_by=shaped_by,
                                        required=start.kept_outputs, rtol=rtol, atol=atol,
                                        **check.hints(start.original))
            upgraded = default_opset(start.model) != default_opset(start.original)
            converted = reference.compare(good) if upgraded else None
            if converted and converted.first_mismatch:  # else the first pass changing the model would take the blame
                raise converter_changed(default_opset(start.model), converted.first_mismatch, "",
                                        cannot_run(converted.unloadable, converted.unrunnable))
        except BaseException:
            workspace.close()
            raise
        # Pins (--exclude-node) are not saved: reapplied by node id.
        pinned = {node_id(n) for n in start.model.nodes(recursive=True) if n.pinned}
        return cls(reference, workspace, good, pinned, progress, owner=True)

    def resumed(self, pins: Iterable[str] = ()) -> "PassChecker":
        """A checker that goes on from the state before the failing pass, with `pins` added."""
        return PassChecker(self.reference, self.workspace, self.failure.good, self.pinned | set(pins), self.progress)

    def close(self) -> None:
        if self._owner:
            self.workspace.close()

    def __enter__(self) -> "PassChecker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def check(self, model_file: str) -> CheckResult:
        self.checks += 1
        return self.reference.compare(model_file)

    def check_model(self, model: Model) -> CheckResult:
        """Checks a model held in memory (through a file, removed after)."""
        path = self.workspace.save(model)
        try:
            return self.check(path)
        finally:
            _discard(path)

    def __call__(self, model: Model, run) -> bool:
        if not run.modified:
            return True
        if self.progress:
            self.progress(f"checking after {run.name}", run.iteration)
        path = self.workspace.save(model)
        result = self.check(path)
        if result.first_mismatch:
            _discard(path)
            self.failure = Failure(run.name, run.iteration, result.first_mismatch, self.good,
                                   list(run.stats.get("rewrites", [])))
            return False
        if self._own_good:
            _discard(self.good)
        self.good, self._own_good = path, True
        return True

    def load_good(self, pins: Iterable[str] = ()) -> Model:
        """The last good state (before the failing pass, when one failed), with
        the pins this checker keeps and `pins` (node ids)."""
        model = load(self.failure.good if self.failure else self.good)
        wanted = self.pinned | set(pins)
        for nid, nodes in _nodes_by_id(model).items():
            if nid in wanted:
                for n in nodes:
                    n.pinned = True
        return model


class _NotIsolated(Exception):
    pass


def locate(checker: PassChecker, options: PassOptions, progress: Progress = None) -> dict:
    """The rewrite of the failing pass that changes the outputs (see the
    module docstring); "rewrite" is None, with a "note" saying why, where no
    single rewrite can be blamed."""
    f = checker.failure
    before = checker.checks
    found = {"pass": f.pass_name, "iteration": f.iteration, "first_mismatch": f.first_mismatch,
             "rewrites": len(f.rewrites), "rewrite": None, "hold_back": [], "note": None, "isolation_checks": 0}
    index = _nodes_by_id(load(f.good))
    movable, fixed = [], []  # rewrites pinning can hold back, and the rest
    for r in f.rewrites:
        ids = [c for c in r.get("consumed", []) if c in index and c not in checker.pinned]
        (movable.append((r, ids)) if ids else fixed.append(r))

    def probe(k: int) -> bool:
        """Whether the pass, applying only the first k movable rewrites (and the fixed ones), keeps the outputs."""
        if progress:
            progress(f"isolating the rewrite of {f.pass_name}: {k} of {len(movable)} applied", f.iteration)
        model = checker.load_good(c for _, ids in movable[k:] for c in ids)
        model, report = run_passes(model, passes=[f.pass_name], max_iterations=1, options=options)
        run = report.runs[0]
        happened = Counter(_key(r) for r in run.stats.get("rewrites", []))
        expected = Counter(_key(r) for r in [*(r for r, _ in movable[:k]), *fixed])
        if happened != expected:
            raise _NotIsolated(f"holding back {len(movable) - k} of its rewrites changes which others it makes "
                               f"({sum(happened.values())} made, {sum(expected.values())} expected)")
        if not run.modified:  # nothing changed: the last good state, known good
            return True
        return checker.check_model(model).first_mismatch is None

    try:
        if not f.rewrites:
            raise _NotIsolated("the pass lists no rewrites")
        if not movable:
            raise _NotIsolated("none of its rewrites names a node it consumed, so none can be held back")
        if not probe(0):
            raise _NotIsolated("its outputs differ even with every rewrite held back (by changes it does not "
                               "list as rewrites, or by rewrites that name no consumed node)")
        good, bad = 0, len(movable)  # applying all is what failed in the pipeline
        while bad - good > 1:
            mid = (good + bad) // 2
            if probe(mid):
                good = mid
            else:
                bad = mid
        culprit, ids = movable[bad - 1]
        found["rewrite"] = {k: list(culprit.get(k, [])) if k != "what" else culprit.get("what", "")
                            for k in ("what", "consumed", "produced")}
        found["hold_back"] = ids
    except _NotIsolated as e:
        found["note"] = f"no single rewrite isolated: {e}"
    found["isolation_checks"] = checker.checks - before
    return found


MAX_ROLLBACKS = 8  # culprits rolled back on the way to a model that matches, at most


def roll_back(checker: PassChecker, found: dict, output, *, passes=None, skip: Iterable[str] = (),
              options: PassOptions = PassOptions(), max_iterations: int = MAX_ITERATIONS, progress: Progress = None) -> dict:
    """From the last good state the pipeline runs on to a fixed point with
    the culprit rewrite held back (its consumed nodes pinned) or, when none
    was isolated, without the culprit pass. It is checked after each pass as
    before: a further culprit met on the way is located and held back the
    same way (named in "rolled_back"), up to MAX_ROLLBACKS (past that, the
    state before the last culprit is kept and "complete" is False). The
    result is checked once more and saved (atomically) to `output`."""
    pins, skipped, rolled = set(), list(skip), []
    current = checker
    while True:
        if found["rewrite"] is not None and not set(found["hold_back"]) <= pins | current.pinned:
            pins |= set(found["hold_back"])
            what = "rewrite"
        else:  # nothing to pin (or pinning it did not keep it away): the whole pass
            skipped.append(found["pass"])
            what = "pass"
        rolled.append({"what": what, **{k: found[k] for k in ("pass", "iteration", "first_mismatch", "rewrite",
                                                               "note")}})
        # The state before the culprit, checked from there on.
        resumed = current.resumed(pins)
        model = resumed.load_good()
        model, _ = run_passes(model, passes=passes, skip=skipped, max_iterations=max_iterations, options=options,
                              progress=progress, after_pass=resumed)
        checker.checks += resumed.checks
        if resumed.failure is None or len(rolled) == MAX_ROLLBACKS:
            break
        current = resumed
        found = locate(resumed, options, progress)
        checker.checks += found["isolation_checks"]
    complete = resumed.failure is None
    if not complete:  # still a culprit after MAX_ROLLBACKS: keep the state before it
        model = resumed.load_good()
    model.save(os.fspath(output))
    final = checker.check(os.fspath(output))
    return {"path": os.fspath(output), "rolled_back": rolled, "complete": complete,
            "ok": final.first_mismatch is None, "first_mismatch": final.first_mismatch,
            "max_abs_diff": final.max_abs_diff, "nodes": len(list(model.nodes(recursive=True)))}


def describe(found: dict) -> str:
    """One line naming the pass and the rewrite (or why no rewrite)."""
    head = (f"pass {found['pass']} (iteration {found['iteration']}) changed the outputs "
            f"({found['first_mismatch']})")
    r = found.get("rewrite")
    if r is None:
        return f"{head}; {found['note']}"
    made = f" into {', '.join(r['produced'])}" if r["produced"] else ""
    return f"{head}: its rewrite {r['what']!r} of {', '.join(r['consumed'])}{made}"


def bisect(original, *, passes: Optional[Iterable[str]] = None, skip: Iterable[str] = (),
           options: Optional[PassOptions] = None, max_iterations: int = MAX_ITERATIONS, exclude_nodes: Iterable[str] = (),
           prune_outputs: Iterable[str] = (), input_shapes: Optional[dict] = None, batch: Optional[int] = None,
           opset: Optional[int] = None, initializer_inputs: str = "auto", seed: int = 0, inputs: Optional[dict] = None,
           rtol: float = 1e-4, atol: float = 1e-5, rollback_output=None, progress: Progress = None) -> dict:
    """Runs the pipeline from `original` (path, bytes, ModelProto or Model)
    as `optimize` would, checking after each pass; see the module docstring.
    Returns {"kind": "bisect", "ok", "pass", "iteration", "first_mismatch",
    "rewrite": {"what", "consumed", "produced"} | None, "note", "rewrites",
    "checks", "isolation_checks", "rollback": {...} | None, "seconds", ...}."""
    started = time.perf_counter()
    options = options or PassOptions()
    skip = list(skip)
    start = prepare(original, exclude_nodes, prune_outputs, input_shapes, batch, opset, initializer_inputs)
    with PassChecker.starting(start, seed=seed, inputs=inputs, rtol=rtol, atol=atol, progress=progress) as checker:
        return _bisect(checker, start, started, passes=passes, skip=skip, options=options,
                       max_iterations=max_iterations, rollback_output=rollback_output, progress=progress)


def _bisect(checker: PassChecker, start: Start, started: float, *, passes, skip: list, options: PassOptions,
            max_iterations: int, rollback_output, progress: Progress) -> dict:
    _, pipeline = run_passes(start.model, passes=passes, skip=skip, max_iterations=max_iterations, options=options,
                             progress=progress, after_pass=checker)
    result = {"kind": "bisect", "version": VERSION, "original": start.original.path or "<memory>",
              "ok": checker.failure is None, "pass": None, "iteration": None, "first_mismatch": None,
              "rewrite": None, "note": None, "rewrites": None, "passes_checked": checker.checks,
              "iterations": pipeline.iterations, "seed": checker.reference.seed, "isolation_checks": 0,
              "rollback": None}
    if checker.failure is not None:
        found = locate(checker, options, progress)
        result.update({k: found[k] for k in ("pass", "iteration", "first_mismatch", "rewrite", "note", "rewrites",
                                             "isolation_checks")})
        if rollback_output is not None:
            result["rollback"] = roll_back(checker, found, rollback_output, passes=passes, skip=skip,
                                           options=options, max_iterations=max_iterations, progress=progress)
    result["checks"] = checker.checks
    result["seconds"] = time.perf_counter() - started
    return result


def log2_bound(rewrites: int) -> int:
    """The most isolation checks `locate` makes for a pass with this many rewrites."""
    return 1 + math.ceil(math.log2(max(rewrites, 1)))


def render_bisect(result: dict, console) -> None:
    """The result for people (rich)."""
    from rich.table import Table

    from pyonnxopt.cli.render import esc

    seconds = f"{result['checks']} checks, {result['seconds']:.1f} s"
    if result["ok"]:
        console.print(f"[green]every pass keeps the outputs[/green]: checked after the {result['passes_checked']} "
                      f"pass runs that changed the model ({seconds})")
        return
    table = Table(title=f"first pass that changes the outputs ({seconds})", show_header=False)
    table.add_column("", style="bold")
    table.add_column("")
    table.add_row("pass", f"[red]{result['pass']}[/red] (iteration {result['iteration']})")
    table.add_row("first mismatch", esc(result["first_mismatch"]))
    r = result["rewrite"]
    if r is not None:
        table.add_row("rewrite", f"{esc(r['what'])} ({result['isolation_checks']} checks among {result['rewrites']})")
        table.add_row("consumed", esc(", ".join(r["consumed"])))
        table.add_row("produced", esc(", ".join(r["produced"]) or "-"))
    else:
        table.add_row("rewrite", f"[yellow]{esc(result['note'])}[/yellow]")
    rb = result.get("rollback")
    if rb is not None:
        verdict = ("[green]matches the original[/green]" if rb["ok"]
                   else f"[red]still differs: {esc(rb['first_mismatch'])}[/red]")
        for i, r in enumerate(rb["rolled_back"]):
            label = "rolled back" if i == 0 else "and, found on the way"
            if r["what"] == "rewrite":
                table.add_row(label, f"{esc(r['rewrite']['what'])} of {esc(', '.join(r['rewrite']['consumed']))} "
                                     f"({r['pass']})")
            else:
                table.add_row(label, f"the whole pass {r['pass']}")
        table.add_row("written", f"{esc(rb['path'])} ({rb['nodes']} nodes), {verdict}")
    console.print(table)


def bisect_cli(args) -> dict:
    """`verify ORIGINAL OPTIMIZED --bisect`: reads args.original and, where
    the parser has them, args.passes (comma-separated), args.skip (a list of comma-separated names),
    args.target, args.opset, args.initializer_inputs, args.seed, args.inputs / args.check_inputs (.npz, or what
    pyonnxopt.verify.inputs.load_samples reads: the first sample is used)
    and args.rollback_output. Returns the bisection's result."""
    from pyonnxopt.cli.optimize import pass_names
    from pyonnxopt.cli.render import console

    names, skip = pass_names(getattr(args, "passes", None), list(getattr(args, "skip", None) or []))
    original = args.original
    if not os.path.exists(original):
        raise Error(f"{original}: no such file")
    options = PassOptions(target=getattr(args, "target", None) or "onnx")
    inputs = _first_sample(getattr(args, "inputs", None) or getattr(args, "check_inputs", None))
    with console(stderr=True).status("bisecting") as status:
        def progress(what, iteration):
            status.update(f"bisecting: {what} (iteration {iteration})")

        return bisect(original, passes=names, skip=skip, options=options, opset=getattr(args, "opset", None),
                      initializer_inputs=getattr(args, "initializer_inputs", None) or "auto",
                      seed=getattr(args, "seed", 0) or 0,
                      inputs=inputs, rollback_output=getattr(args, "rollback_output", None), progress=progress)


def _first_sample(path) -> Optional[dict]:
    if not path:
        return None
    if str(path).endswith(".npz") and os.path.isfile(path):
        from pyonnxopt.cli.optimize import load_inputs

        return load_inputs(path)
    from pyonnxopt.verify.inputs import load_samples

    samples = load_samples(path)
    if not samples:
        raise Error(f"{path}: holds no input sample")
    return samples[0]
