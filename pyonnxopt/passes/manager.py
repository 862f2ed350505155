"""Runs passes in order, repeatedly, until none changes the model (or the
iteration cap), keeping each run's time and what it changed. A pass that
waits for cleanup (the fusion rules) is left out of an iteration in which
an earlier pass that does not wait changed the model; one that waits for
the fusions runs only once every other pass has had a turn without
changing it (a whole round since its own last turn); both run in the last
allowed iteration. A pass is skipped while nothing changed the model since
its last run (value types included; an idempotent pass's own changes
aside): it would find what it found then, nothing. An iteration that
leaves the model as an earlier one left it (names aside: passes that move
nodes back and forth) ends the run after one more iteration in which no
pass waits, as in the last."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

from pyonnxopt.errors import PassError
from pyonnxopt.fusion.values import output_dim_aliases
from pyonnxopt.model import Model, load
from pyonnxopt.passes import registry
from pyonnxopt.passes.base import PassOptions

log = logging.getLogger(__name__)

# Passes that wait for the fusions take a quiet round each time they act, so
# chains of them (regroup_transposes -> fuse_attention -> flatten_linear_rows)
# need more rounds than the cleanup alone: vit_b_16_dyn converges in 12.
MAX_ITERATIONS = 20


@dataclass
class PassRun:
    name: str
    iteration: int
    seconds: float
    modified: bool
    stats: dict


@dataclass
class PipelineReport:
    runs: list = field(default_factory=list)
    iterations: int = 0
    converged: bool = False
    stopped: bool = False  # `after_pass` asked to stop
    cycled: bool = False  # an iteration gave back an earlier iteration's model


def run_passes(
    model,
    passes: Optional[Iterable[str]] = None,
    skip: Iterable[str] = (),
    max_iterations: int = MAX_ITERATIONS,
    options: Optional[PassOptions] = None,
    progress: Optional[Callable[[str, int], None]] = None,
    after_pass: Optional[Callable[[Model, PassRun], Optional[bool]]] = None,
) -> tuple:
    """Runs `passes` (default: every registered pass) minus `skip` on `model`
    (a Model, path, bytes or onnx.ModelProto) to a fixed point. Returns the
    Model and a PipelineReport. Unknown names raise KeyError before anything runs.
    `after_pass(model, run)` is called after each pass; returning False stops
    the pipeline there (the report says `stopped`), e.g. to check each pass."""
    model = load(model) if not isinstance(model, Model) else model
    options = options or PassOptions()
    names = [p.name for p in registry.all_passes()] if passes is None else list(passes)
    skipped = set(skip)
    for name in [*names, *skipped]:
        registry.get(name)  # fail on a typo before touching the model
    chosen = [registry.get(n) for n in names if n not in skipped]
    report = PipelineReport()
    done: list = []
    # Turns count every pass's place in the run, skipped or not; an
    # after_fusions pass waits while the model changed since its last turn.
    turns, changed_at, last_turn = 0, -1, {}
    ran_at: dict = {}  # each pass's turn when it last ran
    touched_at, toucher = -1, None  # the last run that changed the model or its types, and whose
    seen: set = set()  # the structure each iteration left, names aside
    final = False
    for iteration in range(1, max_iterations + 1):
        report.iterations = iteration
        last = final or iteration == max_iterations
        changed = waited = False
        cleaned = True  # no pass that does not wait for cleanup changed the model yet in this iteration
        for p in chosen:
            previous, last_turn[p.name] = last_turn.get(p.name), turns
            turns += 1
            if p.name in ran_at and (touched_at < ran_at[p.name] or (toucher is p and p.idempotent)):
                continue  # nothing new since it last ran
            unsettled = p.after_fusions and (previous is None or changed_at > previous)
            if ((p.after_cleanup and not cleaned) or unsettled) and not last:
                waited = True
                continue  # the next iteration
            if progress:
                progress(p.name, iteration)
            start = time.perf_counter()
            try:
                with output_dim_aliases(model.dim_aliases):
                    result = p.run(model, options)
            except Exception as e:
                raise PassError(f"pass {p.name} failed after {', '.join(done) or 'no other pass'}: {e}") from e
            seconds = time.perf_counter() - start
            for key, empty in (("nodes_removed", 0), ("nodes_added", 0), ("refused", []), ("rewrites", [])):
                result.stats.setdefault(key, empty)  # every pass's record has these
            run = PassRun(p.name, iteration, seconds, result.modified, result.stats)
            report.runs.append(run)
            log.debug("%s (iteration %d): %s in %.3f s", p.name, iteration, result.stats, seconds)
            done.append(p.name)
            changed = changed or result.modified
            cleaned = cleaned and (p.after_cleanup or not result.modified)
            ran_at[p.name] = last_turn[p.name]
            if result.modified:
                changed_at = last_turn[p.name]
            if result.modified or result.retyped:
                touched_at, toucher = last_turn[p.name], p
            if after_pass is not None and after_pass(model, run) is False:
                report.stopped = True
                return model, report
        if not changed and not waited:
            report.converged = True
            break
        if final:
            break
        if changed:
            shape = structure(model)
            if shape in seen:
                report.cycled = final = True
                log.info("iteration %d gave back an earlier iteration's model: one more, every pass, then stop",
                         iteration)
            seen.add(shape)
    return model, report


def structure(model: Model) -> int:
    """A hash of the main graph's nodes in topological order, each by op,
    attributes and where its inputs come from (a graph input's or an
    initializer's name, or another node's place), not by its own names."""
    g = model.graph
    place: dict = {}
    items = []
    for i, n in enumerate(g.topological_order()):
        for k, v in enumerate(n.outputs):
            if v is not None:
                place[v.name] = (i, k)
        sources = tuple(None if v is None else place.get(v.name, v.name) for v in n.inputs)
        items.append((n.op_type, n.domain, tuple(n.attribute_protos()), sources))
    items.append(tuple(place.get(v.name, v.name) for v in g.outputs))
    return hash(tuple(items))
