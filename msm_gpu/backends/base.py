"""What the MSM driver needs from a backend.

A backend turns a validated problem into a :class:`SweepState`, an object that owns the
iterate in whatever layout suits the hardware and performs whole MSM iterations on the
*active* columns.  The driver (``msm_gpu/solvers/msm.py``) only sees per-column statistics,
so stopping rules, objective bookkeeping and history are written once for every backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from .cpu.jit import njit

#: Rows of the per-column statistics returned by :meth:`SweepState.sweep`.
STAT_QUAD, STAT_HZ, STAT_DIFF2, STAT_XNORM2 = 0, 1, 2, 3
N_STATS = 4


def fold_matrix(a, c_diag, panel):
    """The folded matrix of docs/design.md, "CPU sweep" (a NumPy/CuPy copy, input untouched).

    The strictly lower part of every diagonal ``panel x panel`` block is zeroed and the
    diagonal is replaced by C_jj (one panel: ``triu(a, 1) + diag(C)``, the cheap path),
    so that for a panel P the single product
    ``afold[P, :] @ Y`` (Y: rows before P already new, rows from P on old) gives
    ``sum_{i<P} A_ji Z_i + sum_{i>j} A_ji X_i + C_jj X_j`` except the in-panel
    lower terms, which the sweep adds row by row (read as ``afold[j, i]``, i > j).
    """
    if isinstance(a, np.ndarray):
        # one compiled pass: small NMF half-steps call this often, and the NumPy version
        # through a strided view of the blocks is several times slower (docs/development.md)
        return _fold_host(a, np.asarray(c_diag, dtype=a.dtype), int(panel))
    from array_api_compat import array_namespace

    xp = array_namespace(a)
    n = a.shape[0]
    rows = xp.arange(n)
    if panel >= n:
        folded = xp.triu(a, k=1)
    else:
        folded = xp.asarray(a, copy=True)
        for p0 in range(0, n, panel):
            p1 = min(p0 + panel, n)
            folded[p0:p1, p0:p1] = xp.triu(folded[p0:p1, p0:p1], k=1)
    folded[rows, rows] = xp.asarray(c_diag, dtype=folded.dtype)
    return folded


@njit(nogil=True)
def _fold_host(a, c_diag, panel):
    """:func:`fold_matrix` of a host array: a C-ordered copy in one pass."""
    n = a.shape[0]
    out = np.empty((n, n), dtype=a.dtype)
    for i in range(n):
        block = (i // panel) * panel  # the first column of row i's diagonal block
        for j in range(n):
            out[i, j] = a[i, j] if (j >= i or j < block) else 0
        out[i, i] = c_diag[i]
    return out


def check_penalty_code(code) -> int:
    """``code`` as an int if it is one of ``penalties.PENALTY_CODES``, else ValueError."""
    from ..penalties import PENALTY_CODES

    if isinstance(code, bool) or not isinstance(code, (int, np.integer)):
        raise TypeError(f"penalty code must be an int, got {type(code).__name__}")
    if int(code) not in PENALTY_CODES.values():
        raise ValueError(
            f"unknown penalty code {code}: known codes are {PENALTY_CODES} "
            "(msm_gpu.penalties.PENALTY_CODES)"
        )
    return int(code)


def default_panel(n: int) -> int:
    """Rows per panel T: measured best 32-64 for n ~ 200-256, 128 for n ~ 1000."""
    if n <= 128:
        return n
    if n <= 512:
        return 64
    return 128


class SweepState(ABC):
    """Iterate of an MSM run, held by a backend in its own layout.

    Columns are identified by their position in the user's R (0..r-1).  ``active``
    lists the columns still being swept, in increasing order.
    """

    active: np.ndarray
    #: Cap on the host threads a sweep may use (None: chosen by the backend); ignored by
    #: backends that do not sweep on host threads.
    max_threads: int | None = None

    @abstractmethod
    def sweep(self):
        """Run one MSM iteration on the active columns.

        Returns
        -------
        stats : array (N_STATS, n_active), float64, backend namespace
            Per active column: STAT_QUAD, STAT_HZ, STAT_DIFF2, STAT_XNORM2 (see
            ``kernels.sweep_chunks``).
        """

    @abstractmethod
    def retire(self, keep):
        """Stop sweeping the active columns where ``keep`` (bool, n_active) is False."""

    @abstractmethod
    def current_x(self):
        """The whole n x r iterate (a new array in the backend namespace)."""

    def take_x(self):
        """The whole iterate, handed over: the state is not swept afterwards.

        Backends that can give their own array (no copy) override this.
        """
        return self.current_x()

    def objective_terms(self, x=None):
        """Per column of ``x`` (None: the whole current iterate): (F, sum_j h) as float64
        arrays, or None when the backend has no fast path (the driver then computes them
        with array calls)."""
        return None

    def sweep_with_objective(self):
        """``objective_terms()`` of the whole current iterate, then ``sweep()``, as one
        call when the backend can fuse them (the sweep's products give F at no extra
        cost): ``((F, sum_j h), stats)``, or None (nothing done) when it cannot."""
        return None

    def close(self):  # noqa: B027  (optional hook: most states hold nothing)
        """Release what the state holds between sweeps (e.g. thread settings)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class Backend(ABC):
    """A place where MSM runs: CPU (NumPy + Numba) or CUDA (CuPy + RawKernel).

    Capability flags (test these, never ``name``):

    ``on_host``
        Arrays live in host memory as NumPy arrays, so host-only solvers (SciPy,
        the Numba active-set codes of ``factorization/solvers.py``) can run on them.
    """

    name: str
    on_host: bool

    def limit_host_blas(self):
        """Context manager for runs that alternate host BLAS calls with sweeps.

        On the CPU, BLAS runs on one thread inside it: a threaded GEMM between Numba's
        parallel sweeps leaves BLAS threads spinning against Numba's.  Elsewhere a no-op.
        """
        from contextlib import nullcontext

        return nullcontext()

    @property
    @abstractmethod
    def xp(self):
        """The array namespace (array_api_compat) of this backend."""

    @abstractmethod
    def asarray(self, x, dtype):
        """Move/convert ``x`` to this backend with ``dtype`` (a copy, never a view)."""

    def asarray_readonly(self, x, dtype):
        """Like :meth:`asarray` for data that will only be read: may return a read-only
        view of ``x`` instead of a copy (never a writable view of user data)."""
        return self.asarray(x, dtype)

    @abstractmethod
    def to_user(self, x, like):
        """Convert a backend array to the array type of the user's input ``like``."""

    @abstractmethod
    def start(self, a, r, x0, splitting, table, code, panel, *, x0_owned=False) -> SweepState:
        """Create the sweep state for A (n x n), R and X0 (n x r, backend arrays).

        ``x0_owned``: the caller hands X0 over (a fresh array nobody reads afterwards):
        the state may sweep it in place instead of copying it."""
