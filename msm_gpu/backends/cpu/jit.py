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

import hashlib
import os
import tempfile
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

#: Environment variable that overrides :func:`cache_dir` (Numba's own, NUMBA_CACHE_DIR,
#: takes precedence over both).
CACHE_ENV = "MSM_GPU_CACHE_DIR"


def cache_dir() -> str:
    """The folder for compiled kernels: a subfolder named by :func:`source_digest` of
    ``$MSM_GPU_CACHE_DIR``, else of ``$XDG_CACHE_HOME/msm-gpu/numba``
    (``~/.cache/msm-gpu/numba``), else of a folder in the temporary directory when the
    home folder is not writable."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return os.path.join(explicit, source_digest())
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    candidate = os.path.join(base, "msm-gpu", "numba")
    if _writable(candidate):
        return os.path.join(candidate, source_digest())
    user = str(os.getuid()) if hasattr(os, "getuid") else "user"
    return os.path.join(tempfile.gettempdir(), f"msm-gpu-{user}", "numba", source_digest())


@lru_cache(maxsize=1)
def source_digest() -> str:
    """16 hex digits of a hash of the package's Python sources.

    Numba checks a cached kernel against its own file only, but kernels inline helpers
    from other files (the design form's sweeps, the face tables): a changed helper would
    leave its callers' machine code in the cache, stale (wrong answers after a ``git
    pull`` that leaves the caller's file alone).  A cache folder per version of the whole
    package cannot go stale; reading the sources takes a few milliseconds."""
    return tree_digest(Path(__file__).resolve().parents[2])


def tree_digest(root) -> str:
    """16 hex digits of a hash of the ``*.py`` files below ``root`` (names and bytes)."""
    root = Path(root)
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


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


def njit(fn=None, *, literal_calls=False, **options):
    """``numba.njit(cache=True, **options)`` with the cache in :func:`cache_dir`.

    Usable as ``@njit`` or ``@njit(parallel=True)``, like Numba's.  Called from another
    kernel with a constant argument (``f(x, 0)``, ``g(..., False)``), Numba compiles a
    version of the callee for that constant (a ``Literal`` type) besides the one for its
    type, each as costly to compile as the other; these kernels compile one version for
    the argument's type instead (:func:`_dispatcher_class`), unless
    ``literal_calls=True``: for a kernel that needs a version per constant.
    """

    def decorate(func):
        import numba
        from numba.core import config

        if literal_calls or config.DISABLE_JIT:
            with _user_cache():
                return numba.njit(cache=True, **options)(func)
        # numba.njit's own steps (numba.core.decorators.jit), with the dispatcher class
        # that types constant arguments by their type
        targetoptions = dict(options, nopython=True, boundscheck=options.get("boundscheck"))
        with _user_cache():
            disp = _dispatcher_class()(py_func=func, locals={}, targetoptions=targetoptions)
            disp.enable_caching()
        return disp

    return decorate if fn is None else decorate(fn)


_DISPATCHER = None


def _dispatcher_class():
    """Numba's CPU dispatcher, except that a call from a kernel with constant arguments
    compiles (or reuses) the version for their types (see :func:`njit`); a kernel that
    does not type that way (one that needs the constant) gets the constant's version."""
    global _DISPATCHER
    if _DISPATCHER is None:
        from numba.core import errors, types
        from numba.core.registry import CPUDispatcher

        class Dispatcher(CPUDispatcher):
            def get_call_template(self, args, kws):
                plain_args = tuple(types.unliteral(a) for a in args)
                plain_kws = {k: types.unliteral(v) for k, v in kws.items()}
                if plain_args != tuple(args) or plain_kws != kws:
                    try:
                        return super().get_call_template(plain_args, plain_kws)
                    except errors.TypingError:
                        pass
                return super().get_call_template(args, kws)

        # pickled by reference as ``jit._Dispatcher`` (the module's __getattr__)
        Dispatcher.__module__ = __name__
        Dispatcher.__name__ = Dispatcher.__qualname__ = "_Dispatcher"
        _DISPATCHER = Dispatcher
    return _DISPATCHER


def __getattr__(name):  # numba is imported on first use only
    if name == "_Dispatcher":
        return _dispatcher_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
