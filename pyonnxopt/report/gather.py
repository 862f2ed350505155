"""gather(...) -> the report JSON ("kind": "report"): the optimize report
(when given), verify and bench (read from their JSON, or run here) for one
pair of models, each checked to be what it claims before it goes in."""

from __future__ import annotations

import datetime
import json
import os
from typing import Callable, Optional

from pyonnxopt.files import from_json
from pyonnxopt.errors import Error, MissingDependency

REPORT_KIND = "report"
REPORT_VERSION = 1
PART_VERSIONS = {"verify": 1, "bench": 1}


def gather(original, optimized, *, optimize_report=None, verify=None, bench=None,
           verify_options: Optional[dict] = None, bench_options: Optional[dict] = None,
           progress: Optional[Callable[[str], None]] = None) -> dict:
    """The report JSON for `original` -> `optimized` (paths).

    optimize_report: None, a dict, or the path of what `optimize --report` wrote.
    verify / bench: None (left out), a dict or a path of their JSON, or True to
    run pyonnxopt.verify.verify / pyonnxopt.benchmark.run.bench here with
    `verify_options` / `bench_options` as keyword arguments. bench runs
    original as model A and optimized as model B. `progress(text)` hears
    which step is running."""
    say = progress or (lambda text: None)
    report = {"kind": REPORT_KIND, "version": REPORT_VERSION, "original": str(original),
              "optimized": str(optimized), "optimize": None, "verify": None, "bench": None}
    if optimize_report is not None:
        report["optimize"] = check_optimize_report(_load(optimize_report, "optimize report"), _label(
            optimize_report, "optimize report"))
    if verify is True:
        say("verify: running both models")
        report["verify"] = check_part(_run_verify(original, optimized, verify_options or {}, say), "verify",
                                      "verify's result")
    elif verify is not None:
        report["verify"] = check_part(_load(verify, "verify JSON"), "verify", _label(verify, "verify JSON"))
    if bench is True:
        say("bench: timing both models")
        report["bench"] = check_part(_run_bench(original, optimized, bench_options or {}, say), "bench",
                                     "bench's result")
    elif bench is not None:
        report["bench"] = check_part(_load(bench, "bench JSON"), "bench", _label(bench, "bench JSON"))
    from pyonnxopt import __version__

    report["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    report["pyonnxopt"] = __version__
    return report


def check_part(part, kind: str, label: str) -> dict:
    """`part` is a `kind` JSON (verify or bench) of a version this code reads;
    else an Error naming `label` (the file) and what it is instead."""
    if not isinstance(part, dict):
        raise Error(f"{label}: expected a JSON object from `pyonnxopt {kind} --json`, found {type(part).__name__}")
    found = part.get("kind")
    if found != kind:
        what = f"a {found} JSON" if isinstance(found, str) else "no \"kind\" field"
        raise Error(f"{label}: not a {kind} JSON ({what}); write one with `pyonnxopt {kind} --json`")
    if part.get("version") != PART_VERSIONS[kind]:
        raise Error(f"{label}: {kind} JSON version {part.get('version')!r}; this pyonnxopt reads version "
                    f"{PART_VERSIONS[kind]} (write it again with this pyonnxopt)")
    return part


def check_optimize_report(part, label: str) -> dict:
    """What `optimize --report` writes: no "kind", this version, node counts."""
    from pyonnxopt.optimize import REPORT_VERSION as OPTIMIZE_VERSION

    if not isinstance(part, dict):
        raise Error(f"{label}: expected the JSON object `pyonnxopt optimize --report` writes, "
                    f"found {type(part).__name__}")
    if "kind" in part:
        raise Error(f"{label}: a {part['kind']} JSON, not an optimize report (written by `pyonnxopt optimize "
                    "--report FILE.json`)")
    missing = [k for k in ("nodes_before", "nodes_after", "op_counts_before", "op_counts_after") if k not in part]
    if missing:
        raise Error(f"{label}: not an optimize report (no {', '.join(missing)}); write one with "
                    "`pyonnxopt optimize --report FILE.json`")
    if part.get("version") != OPTIMIZE_VERSION:
        raise Error(f"{label}: optimize report version {part.get('version')!r}; this pyonnxopt reads version "
                    f"{OPTIMIZE_VERSION} (run optimize again with this pyonnxopt)")
    return part


def _label(source, what: str) -> str:
    return str(source) if isinstance(source, (str, os.PathLike)) else what


def _load(source, what: str):
    """A dict as is; a path read as JSON (one-line Errors naming the file)."""
    if isinstance(source, dict):
        return source
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"{what}: expected a dict or a path, got {type(source).__name__}")
    try:
        with open(source, encoding="utf-8") as f:
            return from_json(f.read())
    except FileNotFoundError:
        raise Error(f"{source}: no such file (the {what})") from None
    except OSError as e:
        raise Error(f"{source}: cannot read the {what} ({e.strerror or e})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        where = f" at line {e.lineno}" if isinstance(e, json.JSONDecodeError) else ""
        raise Error(f"{source}: the {what} is not valid JSON{where}") from None


def _run_verify(original, optimized, options: dict, say) -> dict:
    try:
        from pyonnxopt.verify import verify
    except ImportError as e:
        raise MissingDependency(f"verify cannot run here ({e}); give its JSON instead (--verify-json) "
                                "or leave it out (--no-verify)") from None
    return verify(original, optimized, progress=lambda text: say(f"verify: {text}"), **options)


def _run_bench(original, optimized, options: dict, say) -> dict:
    try:
        from pyonnxopt.benchmark.run import bench
    except ImportError as e:
        raise MissingDependency(f"bench cannot run here ({e}); give its JSON instead (--bench-json) "
                                "or leave it out (--no-bench)") from None
    return bench([str(original), str(optimized)], progress=lambda text: say(f"bench: {text}"), **options)
