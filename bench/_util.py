"""Small helpers shared by the benchmark scripts: /proc readings, page-cache
residency, medians and plain-text tables. No dependencies beyond the stdlib."""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import mmap
import os
import platform
import statistics
import sys

MB = 1 << 20


def proc_status(pid: "int | str" = "self") -> dict:
    """Memory fields of /proc/PID/status in bytes (VmHWM, VmRSS, RssAnon, RssFile, ...)."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if len(parts) == 2 and parts[1] == "kB":
                    out[key] = int(parts[0]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


_libc = None


def _get_libc():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        _libc.mmap.restype = ctypes.c_void_p
        _libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        _libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    return _libc


def resident_bytes(path: str) -> int:
    """How many bytes of `path` are in the page cache (mincore), without reading it."""
    size = os.path.getsize(path)
    if size == 0:
        return 0
    libc = _get_libc()
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            return -1
        try:
            pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
            vec = (ctypes.c_ubyte * pages)()
            if libc.mincore(addr, size, vec) != 0:
                return -1
            return min(size, sum(b & 1 for b in bytes(vec)) * mmap.PAGESIZE)
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


def read_through(paths, chunk: int = 16 * MB) -> int:
    """Reads files end to end into one reused buffer (warms the page cache)."""
    buf = bytearray(chunk)
    view = memoryview(buf)
    total = 0
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while True:
                n = f.readinto(view)
                if not n:
                    break
                total += n
    return total


def evict(paths) -> None:
    """Drops clean cached pages of these files (POSIX_FADV_DONTNEED; no root needed)."""
    os.sync()
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def error_line(text: str) -> str:
    """The line that says what went wrong: the exception line of a traceback,
    else the first line that looks like an error, else the last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        head = ln.split(":", 1)[0]
        if head.endswith(("Error", "Exception", "Exit", "Interrupt")) and " " not in head:
            return ln[:160]
    for ln in lines:
        low = ln.lower()
        if "error" in low or "fail" in low:
            return ln[:160]
    return lines[-1][:160] if lines else ""


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def geomean(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    if any(x <= 0 for x in xs):
        return 0.0
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def table(headers, rows) -> str:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r):
        return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))

    out = [line(cells[0]), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells[1:]]
    return "\n".join(out)


def environment() -> dict:
    env = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "mem_total_bytes": proc_meminfo().get("MemTotal"),
    }
    for mod in ("pyonnxopt", "onnx", "onnx_ir", "numpy", "google.protobuf"):
        try:
            m = __import__(mod, fromlist=["__version__"])
            env[mod] = getattr(m, "__version__", "?")
        except Exception as e:  # noqa: BLE001 - reported, not fatal
            env[mod] = f"unavailable ({type(e).__name__})"
    return env


def proc_meminfo() -> dict:
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts:
                out[key] = int(parts[0]) * (1024 if len(parts) > 1 else 1)
    return out
