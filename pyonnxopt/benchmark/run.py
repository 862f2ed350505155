"""bench(models, ...) -> the bench JSON ("kind": "bench"): for each model a
cold start in a fresh process, a warm session here, latency and throughput,
and optionally a profile; for two models an interleaved A/B comparison."""

from __future__ import annotations

import os
import time
from typing import Mapping, Optional, Sequence

from pyonnxopt.benchmark import ab, latency
from pyonnxopt.benchmark.cold import cold_start
from pyonnxopt.benchmark.feeds import input_specs, load_samples, model_feeds
from pyonnxopt.benchmark.profile import profile_model
from pyonnxopt.benchmark.session import (LoadError, Settings, check_settings, create_session, load_message,
                                         warm_up_runtime)
from pyonnxopt.errors import Error, first_line

LABELS = ("A", "B")
DEFAULT_ITERATIONS = 100
PROFILE_RUNS = 10


def bench(models: Sequence[str], *, provider: str = "cpu", intra_op_threads: Optional[int] = None,
          inter_op_threads: Optional[int] = None, level: str = "all", warmup: int = 10,
          iterations: Optional[int] = None, seconds: Optional[float] = None, concurrency: int = 1,
          batch_size: Optional[int] = None, inputs: Optional[str] = None, seed: int = 0, profile: bool = False,
          cold: bool = True, dims: Optional[Mapping[str, int]] = None, vocab_size: Optional[int] = None,
          progress=None) -> dict:
    """Benchmarks one model, or two (A, B) against each other. `iterations`
    or `seconds` (per model; default DEFAULT_ITERATIONS runs) bound the timed
    runs, after `warmup` untimed ones. Random inputs take `dims` {symbol:
    size} for named dynamic dims (others are 1) and keep token ids below
    `vocab_size`. `progress(text)` hears what is running."""
    started = time.perf_counter()
    say = progress or (lambda text: None)
    settings = Settings(provider, intra_op_threads, inter_op_threads, level)
    _check_arguments(models, warmup, iterations, seconds, concurrency, batch_size)
    check_settings(settings)
    if iterations is None and seconds is None:
        iterations = DEFAULT_ITERATIONS
    for label, path in zip(LABELS, models):
        if not os.path.isfile(path):
            raise Error(f"model {label} ({path}): no such file")
    # Unnamed .pb inputs take model A's input names.
    samples = load_samples(inputs, input_specs(models[0])) if inputs is not None else None

    warm_up_runtime(settings)
    records, sessions, feeds = [], [], []
    for label, path in zip(LABELS, models):
        say(f"model {label}: creating the session")
        start = time.perf_counter()
        sess = create_session(path, settings, label)
        warm_s = time.perf_counter() - start
        try:
            feed = model_feeds(path, label, inputs, seed, batch_size, samples, dims=dims, vocab_size=vocab_size)
        except Error:
            raise
        except Exception as e:  # onnx cannot read what onnxruntime could: still the model's fault
            raise LoadError(load_message(label, path, first_line(e))) from None
        say(f"model {label}: warm-up")
        try:
            latency.warm_up(sess, feed, warmup)
        except Exception as e:
            hint = "" if inputs is not None else _defaulted_dims_hint(path, dims, batch_size)
            raise Error(f"model {label} ({path}): onnxruntime cannot run it on the inputs: {first_line(e)}{hint}") \
                from None
        records.append({"label": label, "path": path, "session_create_cold_s": None, "session_create_warm_s": warm_s,
                        "latency_ms": None, "qps": None, "peak_rss_mb": None, "device_peak_mb": None,
                        "device_note": ("the cpu provider uses no device memory" if provider == "cpu" else
                                        "measured in the cold-start process (not run: --no-cold)"),
                        "profile": None})
        sessions.append(sess)
        feeds.append(feed)

    comparison = None
    if len(models) == 2:
        result = ab.interleaved(sessions, feeds, iterations, seconds,
                                progress=lambda r, n: say(f"A/B interleaved: round {r}/{n}"))
        for record, times in zip(records, result["times"]):
            record["latency_ms"] = latency.summarize(times)
        comparison = ab.comparison(result)
    else:
        say("model A: timing runs")
        records[0]["latency_ms"] = latency.summarize(latency.time_runs(sessions[0], feeds[0], iterations, seconds))

    for record, sess, feed in zip(records, sessions, feeds):
        if concurrency == 1:  # one caller: the timed runs above are the throughput run
            record["qps"] = 1e3 / record["latency_ms"]["mean"]
        else:
            say(f"model {record['label']}: throughput with {concurrency} threads")
            record["qps"] = latency.throughput(sess, feed, concurrency, iterations, seconds)
    del sessions  # the cold starts and profiles below should not share the machine with them

    for record, feed in zip(records, feeds):
        label, path = record["label"], record["path"]
        if cold:
            say(f"model {label}: cold start in a fresh process")
            c = cold_start(path, settings, feed[0], label)
            record.update(session_create_cold_s=c["create_s"], peak_rss_mb=c["peak_rss_mb"],
                          device_peak_mb=c["device_peak_mb"], device_note=c["device_note"])
        if profile:
            say(f"model {label}: profiling")
            record["profile"] = profile_model(path, settings, feed, label, warmup=min(warmup, 3),
                                              runs=min(iterations or PROFILE_RUNS, PROFILE_RUNS))
            if record["device_peak_mb"] is None and provider != "cpu":
                # No NVML: onnxruntime's own arena figure from the trace, when its provider logged one.
                arena = {p: mb for p, mb in record["profile"]["memory_peak_mb"].items() if p != "CPUExecutionProvider"}
                if arena:
                    record["device_peak_mb"] = max(arena.values())
                    record["device_note"] = "peak in use by onnxruntime's device allocator (profiler trace)"

    return {
        "kind": "bench", "version": 1,
        "settings": {"provider": provider, "intra_op_threads": intra_op_threads, "inter_op_threads": inter_op_threads,
                     "optimization_level": level, "warmup": warmup, "iterations": iterations, "seconds": seconds,
                     "concurrency": concurrency, "batch_size": batch_size,
                     "inputs": {"source": inputs or "random", "seed": None if inputs else seed,
                                "dims": None if inputs else dict(dims or {}),
                                "vocab_size": None if inputs else vocab_size}},
        "models": records,
        "comparison": comparison,
        "seconds": time.perf_counter() - started,
    }


def _defaulted_dims_hint(path: str, dims: Optional[Mapping[str, int]], batch_size: Optional[int]) -> str:
    """What to say when random inputs sized 1 where the model is dynamic
    did not run (an audio model shorter than its first Conv's kernel)."""
    defaulted = []
    for spec in input_specs(path):
        for axis, d in enumerate(spec.shape or []):
            if isinstance(d, int) or (axis == 0 and batch_size is not None):
                continue
            name = d if isinstance(d, str) else f"{spec.name}[{axis}]"
            if name not in (dims or {}) and name not in defaulted:
                defaulted.append(name)
    if not defaulted:
        return ""
    return (f" (random inputs with dynamic dims {', '.join(defaulted)} of size 1: size them with --dim SYMBOL=N, "
            "or give --inputs)")


def _check_arguments(models, warmup, iterations, seconds, concurrency, batch_size) -> None:
    if len(models) not in (1, 2):
        raise Error(f"bench takes one model or two (A and B), not {len(models)}")
    if iterations is not None and seconds is not None:
        raise Error("--iterations and --seconds: give one of them, not both")
    for flag, value in (("--iterations", iterations), ("--concurrency", concurrency), ("--batch-size", batch_size)):
        if value is not None and value < 1:
            raise Error(f"{flag} {value}: expected 1 or more")
    if warmup < 0:
        raise Error(f"--warmup {warmup}: expected 0 or more")
    if seconds is not None and not seconds > 0:
        raise Error(f"--seconds {seconds}: expected a positive time")
