"""Where numba keeps the compiled fold kernels.

numba writes its cache into `__pycache__` beside the source and, when that
is not writable (a read-only install), into the user's cache directory; when
neither is writable, `njit(cache=True)` raises at import. This picks the
directory before the kernels are defined: None (numba's own choice) when the
package directory is writable, else the user cache dir, else a temporary one.
A NUMBA_CACHE_DIR set by the user always wins.
"""

from __future__ import annotations

import os
import tempfile
from typing import Optional


def writable(path: str) -> bool:
    """Whether files can be created in `path` (created if missing). Tries it:
    os.access says yes to root on read-only mounts."""
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            return True
    except OSError:
        return False


def user_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "pyonnxopt", "numba")


def choose_cache_dir(package_dir: str) -> Optional[str]:
    """The directory to give numba, or None to let it cache beside the source."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return None
    if writable(os.path.join(package_dir, "__pycache__")):
        return None
    for candidate in (user_cache_dir(), os.path.join(tempfile.gettempdir(), f"pyonnxopt-numba-{os.getuid()}")):
        if writable(candidate):
            return candidate
    return None


def configure(package_dir: str) -> Optional[str]:
    """Sets numba's cache directory when the package directory is read-only;
    returns the directory set, if any. Call after importing numba, before
    any @njit(cache=True) runs."""
    from numba.core import config

    path = choose_cache_dir(package_dir)
    if path is not None:
        config.CACHE_DIR = path
    return path
