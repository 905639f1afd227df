"""Backend registry: ``"cpu"`` (NumPy + Numba), ``"cuda"`` (CuPy + RawKernel), ``"auto"``.

``"auto"`` picks CUDA for CuPy input and the CPU for everything else.  Asking for
``"cuda"`` where it cannot run raises :class:`BackendUnavailableError` with the reason;
there is never a silent fallback.
"""

from __future__ import annotations

from ..arrays import is_cupy
from .base import Backend

BACKENDS = ("cpu", "cuda")


class BackendUnavailableError(RuntimeError):
    """The requested backend cannot run on this machine (the message says why)."""


def cuda_unavailable_reason() -> str | None:
    """Why CUDA cannot be used here (CuPy missing, no driver, no device), or None."""
    from .cuda.backend import cuda_unavailable_reason as reason

    return reason()


def status() -> dict:
    """``{name: None or reason}`` for every backend; None means usable."""
    return {"cpu": None, "cuda": cuda_unavailable_reason()}


def available() -> list[str]:
    """Names of the backends usable on this machine, e.g. ``["cpu"]`` or ``["cpu", "cuda"]``.

    See :func:`status` for the reason a backend is missing.
    """
    return [name for name, reason in status().items() if reason is None]


def get_backend(name, *arrays) -> Backend:
    """Resolve a backend name (``"cpu"``, ``"cuda"``, ``"auto"``) for the given inputs."""
    if not isinstance(name, str):
        raise TypeError(f"backend must be a string, got {type(name).__name__}")
    key = name.lower()
    if key == "auto":
        key = "cuda" if any(is_cupy(a) for a in arrays if a is not None) else "cpu"
    if key == "cpu":
        from .cpu.backend import CpuBackend

        return CpuBackend()
    if key == "cuda":
        reason = cuda_unavailable_reason()
        if reason is not None:
            raise BackendUnavailableError(f"backend='cuda' cannot run here: {reason}")
        from .cuda.backend import CudaBackend

        return CudaBackend()
    raise ValueError(f"backend must be one of 'cpu', 'cuda', 'auto', got {name!r}")
