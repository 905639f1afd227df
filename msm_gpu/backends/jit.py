"""Numba compilation with an on-disk cache that lives outside the installed package.

``numba.njit(cache=True)`` writes ``.nbi``/``.nbc`` files next to the source, i.e. into
``site-packages/msm_gpu/...`` for an installed copy.  ``pip uninstall`` does not know
those files and leaves the folder behind; that folder (no ``__init__.py`` any more) is then
imported as an empty namespace package and shadows a later editable install
(``AttributeError: module 'msm_gpu' has no attribute 'NonNeg'``).  :func:`njit` caches in a
per-user folder instead (:func:`cache_dir`), unless the user chose one with
``NUMBA_CACHE_DIR`` (then Numba's own setting is used unchanged).
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager

#: Environment variable that overrides :func:`cache_dir` (Numba's own, NUMBA_CACHE_DIR,
#: takes precedence over both).
CACHE_ENV = "MSM_GPU_CACHE_DIR"


def cache_dir() -> str:
    """The folder for compiled kernels: ``$MSM_GPU_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/msm-gpu/numba`` (``~/.cache/msm-gpu/numba``), else a folder in the
    temporary directory when the home folder is not writable."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    candidate = os.path.join(base, "msm-gpu", "numba")
    if _writable(candidate):
        return candidate
    user = str(os.getuid()) if hasattr(os, "getuid") else "user"
    return os.path.join(tempfile.gettempdir(), f"msm-gpu-{user}", "numba")


def _writable(path: str) -> bool:
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return False
    return os.access(path, os.W_OK)


@contextmanager
def _user_cache():
    """Point Numba's cache at :func:`cache_dir` while kernels are decorated, then restore.

    Numba fixes a function's cache folder when it is decorated, so the global setting is
    only changed for the duration of our own decorations (other libraries are unaffected).
    """
    from numba.core import config

    if config.CACHE_DIR:  # NUMBA_CACHE_DIR set by the user: respect it
        yield
        return
    config.CACHE_DIR = cache_dir()
    try:
        yield
    finally:
        config.CACHE_DIR = ""


def njit(fn=None, **options):
    """``numba.njit(cache=True, **options)`` with the cache in :func:`cache_dir`.

    Usable as ``@njit`` or ``@njit(parallel=True)``, like Numba's.
    """
    import numba

    def decorate(func):
        with _user_cache():
            return numba.njit(cache=True, **options)(func)

    return decorate if fn is None else decorate(fn)
