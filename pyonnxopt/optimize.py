"""`optimize`: load, run the passes to a fixed point, check the result against
the original in onnxruntime, and (when asked) save it."""

from __future__ import annotations

import fnmatch
import logging
import os
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Optional, Union

from pyonnxopt import check, shapes
from pyonnxopt.errors import Error, ModelError, VerificationError
from pyonnxopt.model import Model, load
from pyonnxopt.opset import default_opset, upgrade
from pyonnxopt.passes import PassOptions, run_passes
from pyonnxopt.passes.manager import MAX_ITERATIONS

REPORT_VERSION = 2
log = logging.getLogger(__name__)


def _op_counts(model: Model) -> dict:
    return dict(Counter(n.op_type for n in model.nodes(recursive=True)))


def _pin(model: Model, patterns: Iterable[str]) -> None:
    nodes = list(model.nodes(recursive=True))
    for pattern in patterns:
        matched = [n for n in nodes if fnmatch.fnmatchcase(n.name, pattern)]
        if not matched:
            raise Error(f"--exclude-node {pattern!r} matches no node name")
        for n in matched:
            n.pinned = True


def _prune(model: Model, patterns: Iterable[str]) -> None:
    names = [v.name for v in model.graph.outputs]
    drop = set()
    for pattern in patterns:
        matched = {n for n in names if fnmatch.fnmatchcase(n, pattern)}
        if not matched:
            raise Error(f"--prune-outputs {pattern!r} matches no graph output (outputs: {', '.join(names)})")
        drop |= matched
    if drop and drop >= set(names):
        raise Error("--prune-outputs would drop every graph output")
    for i in reversed(range(len(names))):
        if names[i] in drop:
            model.graph.remove_output(i)


TARGETS = ("onnx", "ort")


@dataclass
class Start:
    """What the passes start from: the original (as given, and as a path or
    bytes for onnxruntime), the copy the passes work on (pinned, pruned,
    input shapes fixed), the graph outputs kept and the inputs fixed."""

    original: Model
    original_ref: Union[str, bytes]
    model: Model
    kept_outputs: list
    fixed: list
    initializer_inputs: Optional[dict] = None  # what _unlist_initializer_inputs found and did


INITIALIZER_INPUTS = ("auto", "constants", "inputs")


def prepare(source, exclude_nodes: Iterable[str] = (), prune_outputs: Iterable[str] = (),
            input_shapes: Optional[dict] = None, batch: Optional[int] = None, opset: Optional[int] = None,
            initializer_inputs: str = "auto") -> Start:
    """The model the passes start from, as `optimize` prepares it."""
    if initializer_inputs not in INITIALIZER_INPUTS:
        raise ValueError(f"initializer_inputs {initializer_inputs!r}: expected one of {', '.join(INITIALIZER_INPUTS)}")
    if isinstance(source, Model):  # possibly edited in memory: its current state counts, not its file
        original_ref = source.to_bytes()
        original = source
    else:
        original = load(source)
        original_ref = original.path or original.to_bytes()
    # The passes work on their own copy: the caller's model stays as it was.
    model = load(original_ref)
    listed = _unlist_initializer_inputs(model, initializer_inputs)
    if opset is not None:
        model = upgrade(model, opset, original.path)
    _pin(model, exclude_nodes)
    _prune(model, prune_outputs)
    kept_outputs = [v.name for v in model.graph.outputs]
    fixed = shapes.fix_input_shapes(model, input_shapes or {}, batch) if input_shapes or batch is not None else []
    return Start(original, original_ref, model, kept_outputs, fixed, listed)


def _unlist_initializer_inputs(model: Model, mode: str) -> Optional[dict]:
    """Initializers that are also graph inputs. IR 3 lists every initializer
    among the inputs, and onnxruntime reads them as the constants they are
    there: they become plain initializers, at IR 4 (which opsets up to 9 go
    with), as onnxsim and onnxslim write them. From IR 4 such an input
    overrides its initializer, so nothing reading it folds or fuses (no
    BatchNormalization into its Conv). "auto" takes them as constants where
    every initializer is listed (an exporter's habit: torch's
    keep_initializers_as_inputs, old tf2onnx), and keeps them as inputs
    where only some are (defaults a user may mean to override: a threshold,
    a scale); "constants" and "inputs" decide for every model. Returns what
    was found and done, or None where no initializer is an input."""
    graph = model.graph
    if graph is None:
        return None
    listed = sum(1 for v in graph.inputs if v.initializer is not None)
    if not listed:
        return None
    old_ir = model.ir_version is not None and model.ir_version < 4
    every = listed == len(graph.initializers)
    constants = old_ir or mode == "constants" or (mode == "auto" and every)
    if constants:
        graph.unlist_initializer_inputs()
        if old_ir:
            model._core.ir_version = 4
    return {"listed": listed, "as": "constants" if constants else "inputs", "every": every}


def optimize(
    source,
    output: Optional[str] = None,
    *,
    passes: Optional[Iterable[str]] = None,
    skip: Iterable[str] = (),
    check_outputs: bool = True,
    force: bool = False,
    seed: int = 0,
    max_iterations: int = MAX_ITERATIONS,
    exclude_nodes: Iterable[str] = (),
    prune_outputs: Iterable[str] = (),
    fold_size_limit: int = 1 << 20,
    allow_lossy: bool = False,
    remove_training_residue: bool = False,
    input_shapes: Optional[dict] = None,
    batch: Optional[int] = None,
    check_inputs: Optional[dict] = None,
    target: str = "onnx",
    opset: Optional[int] = None,
    initializer_inputs: str = "auto",
    verify_each_pass: bool = False,
    progress=None,
) -> tuple:
    """Optimizes a model (path, bytes, onnx.ModelProto or Model) and returns
    (Model, report dict). With `output`, saves it there (atomically) unless
    the check finds a differing output, which raises VerificationError naming
    it (or is only reported, with `force`). `exclude_nodes` are node names or
    globs no pass may touch; one that matches no node is an error.
    `prune_outputs` are graph-output names or globs (e.g. "aux_*") to drop,
    with the branches only they needed; the check compares the outputs kept.
    `target`: "onnx" emits standard ops only; "ort" lets fusions emit
    onnxruntime's com.microsoft ops (FusedConv, FastGelu, MultiHeadAttention, ...).
    `opset` upgrades the model's ai.onnx opset first (onnx's version
    converter), so that fusions may emit the newer standard ops (Gelu at 20,
    Attention and RMSNormalization at 23); never a downgrade.
    `initializer_inputs`: how to read initializers that are also graph
    inputs (from IR 4 an input overrides them): "constants" folds them and
    drops them from the inputs, "inputs" keeps them overridable (nothing
    reading them folds), "auto" takes them as constants only where every
    initializer is listed (an exporter's habit). IR 3 models always list
    them all, and they are constants there.
    `verify_each_pass` checks the model against the original after every pass
    that changed it and stops at the first that changes an output, raising
    VerificationError naming that pass and, where it can be isolated, the
    rewrite (see pyonnxopt.verify.bisect)."""
    if target not in TARGETS:
        raise ValueError(f"target {target!r}: expected one of {', '.join(TARGETS)}")
    start = prepare(source, exclude_nodes, prune_outputs, input_shapes, batch, opset, initializer_inputs)
    original, original_ref, model, kept_outputs, fixed = (start.original, start.original_ref, start.model,
                                                         start.kept_outputs, start.fixed)
    before = _op_counts(original)
    options = PassOptions(fold_size_limit=fold_size_limit, allow_lossy=allow_lossy,
                          remove_training_residue=remove_training_residue, target=target)
    checker = None
    if verify_each_pass:
        from pyonnxopt.verify.bisect import PassChecker

        checker = PassChecker.starting(start, seed=seed, inputs=check_inputs, progress=progress)
    try:
        model, pipeline = run_passes(model, passes=passes, skip=skip, max_iterations=max_iterations,
                                     options=options, progress=progress, after_pass=checker)
        if checker is not None and checker.failure is not None:
            from pyonnxopt.verify.bisect import describe, locate

            found = locate(checker, options, progress)
            raise VerificationError(f"{describe(found)}; nothing was written")
    finally:
        if checker is not None:
            checker.close()
    report = {
        "version": REPORT_VERSION,
        "input": original.path or None,
        "output": output,
        "nodes_before": sum(before.values()),
        "nodes_after": len(list(model.nodes(recursive=True))),
        "op_counts_before": before,
        "op_counts_after": _op_counts(model),
        "inputs_fixed": fixed,
        "initializer_inputs": start.initializer_inputs,
        "options": {"fold_size_limit": fold_size_limit, "allow_lossy": allow_lossy,
                    "remove_training_residue": remove_training_residue, "target": target, "opset": opset,
                    "initializer_inputs": initializer_inputs},
        "opset_before": default_opset(original),
        "opset_after": default_opset(model),
        "iterations": pipeline.iterations,
        "converged": pipeline.converged,
        "passes": [dict(name=r.name, iteration=r.iteration, seconds=r.seconds, modified=r.modified, **r.stats)
                   for r in pipeline.runs],
        "check": None,
    }
    if checker is not None:
        report["verified_each_pass"] = checker.checks
    written = False
    if check_outputs:
        try:
            optimized_ref = model.to_bytes()
        except ModelError:  # past 2 GB inline: check the written files instead
            if output is None:
                raise
            model.save(os.fspath(output))
            optimized_ref, written = os.fspath(output), True
        hints = check.hints(original)
        report["check"] = _check(original_ref, optimized_ref, seed, check_inputs, bool(fixed), kept_outputs, hints)
        mismatch = report["check"].get("first_mismatch")
        if mismatch and not force:
            if written:
                os.unlink(os.fspath(output))
            unloadable = report["check"].get("unloadable")
            if unloadable and fixed:
                raise VerificationError(f"onnxruntime cannot load the model with the input shapes given "
                                        f"(--input-shape/--batch): {unloadable}; nothing was written (does the "
                                        "model take those sizes?)")
            if unloadable and report["check"].get("original_fails"):
                raise VerificationError(f"onnxruntime cannot load the optimized model ({unloadable}); the original "
                                        "loads but runs on none of the check's inputs either "
                                        f"({report['check']['original_fails']}), so it was broken before; nothing "
                                        "was written (use --force to write it anyway, or --check-inputs)")
            if unloadable and report["opset_after"] != report["opset_before"]:
                raise VerificationError(f"onnxruntime cannot run the model upgraded to opset {report['opset_after']}: "
                                        f"{unloadable}; nothing was written (try a lower --opset, or none)")
            if report["opset_after"] != report["opset_before"]:
                # The converter's own doing, or the passes'? The model it
                # wrote is made again (only on this path) and checked alone.
                converted = prepare(original_ref, exclude_nodes, prune_outputs, input_shapes, batch, opset,
                                    initializer_inputs).model
                try:
                    converted_ref = converted.to_bytes()
                except ModelError:  # past 2 GB inline: the passes' mismatch is all we can say
                    converted_ref = None
                converted_check = converted_ref and _check(original_ref, converted_ref, seed, check_inputs,
                                                           bool(fixed), kept_outputs, hints)
                if converted_check and converted_check.get("first_mismatch"):
                    raise converter_changed(report["opset_after"], converted_check["first_mismatch"], "--force",
                                            cannot_run(converted_check.get("unloadable"),
                                                       converted_check.get("unrunnable")))
            raise VerificationError(f"the optimized model differs from the original at output {mismatch}"
                                    f"{_noise_note(report['check'])}; nothing was written (use --force to write it "
                                    "anyway)")
    if output is not None and not written:
        model.save(os.fspath(output))
    return model, report


def cannot_run(unloadable: Optional[str], unrunnable: Optional[str]) -> Optional[str]:
    """The check's words where onnxruntime could not load or run a converted
    model, as converter_changed takes them."""
    if unloadable:
        return f"onnxruntime cannot load its result: {unloadable}"
    return f"onnxruntime cannot run its result {unrunnable}" if unrunnable else None


def converter_changed(opset: int, output: str, last_resort: str = "",
                      cannot_run: Optional[str] = None) -> VerificationError:
    """The error for a model onnx's version converter changed before any pass
    ran; `cannot_run` (see cannot_run) where onnxruntime could not load or
    run the converted model at all."""
    if cannot_run:
        return VerificationError(f"onnx's version converter (--opset {opset}) writes a model onnxruntime cannot "
                                 f"run ({cannot_run}), before any pass; nothing was written (try a lower --opset)")
    hints = ["check on inputs of real sizes with --check-inputs", "try a lower --opset"] + \
        ([last_resort] if last_resort else [])
    return VerificationError(f"onnx's version converter (--opset {opset}) already changes output {output}, before "
                             f"any pass; nothing was written ({', '.join(hints[:-1])}, or {hints[-1]})")


def _noise_note(check_report: dict) -> str:
    """How far onnxruntime's own optimizations move the original, where that
    is more than the difference found: then the difference is within what
    the original does under onnxruntime's defaults (a model quantizing its
    activations at run time moves by whole quantization steps)."""
    noise = check_report.get("onnxruntime_noise")
    if not noise or noise < check_report.get("max_abs_diff", float("inf")):
        return ""
    return (f"; onnxruntime's own optimizations move the original's outputs by up to {noise:.3g} on the same "
            "inputs, so this may be rounding the model amplifies (compare with `pyonnxopt verify`)")


def _check(original_ref, optimized_ref, seed: int, inputs: Optional[dict], fixed: bool, outputs: list,
           hints: dict) -> dict:
    """Compares in onnxruntime. With fixed input shapes the original runs on
    inputs of the fixed shapes (which it accepts: its dims were dynamic);
    `hints`: check.hints of the original."""
    try:
        result = check.compare(original_ref, optimized_ref, seed=seed, inputs=inputs, shapes_from_optimized=fixed,
                               required_outputs=outputs, **hints)
    except check.CheckUnavailable as e:
        log.info("not checked: %s", e)  # in the report; the CLI prints it
        return {"skipped": str(e)}
    out = {"outputs": result.outputs, "max_abs_diff": result.max_abs_diff,
           "first_mismatch": result.first_mismatch, "seed": None if inputs else seed}
    if result.unloadable:
        out["unloadable"] = result.unloadable
    if result.original_fails:
        out["original_fails"] = result.original_fails
    if result.unrunnable:
        out["unrunnable"] = result.unrunnable
    if result.unknown_dims > 1 and not inputs:
        out["unknown_dims"] = result.unknown_dims
    if result.named_dims and not inputs:
        out["named_dims"] = result.named_dims
    if result.batch > 1 and not inputs:
        out["batch"] = result.batch
    if result.samples > 1:
        out["samples"] = result.samples
    if result.doubled_skipped:
        out["doubled_skipped"] = result.doubled_skipped
    if result.onnxruntime_noise is not None:
        out["onnxruntime_noise"] = result.onnxruntime_noise
    return out
