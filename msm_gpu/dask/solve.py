"""Batched solves on Dask: a ``dask.array`` right-hand side solved block by block.

``mg.solve(A, R)``, ``mg.least_squares(C, D)`` and ``mg.nnls(C, D)`` with a dask array R / D
(chunked along columns) return a :class:`DaskSolveResult`: a lazy ``x`` with R's column
chunks, plus lazy per-column and per-block results.  Every block is one ordinary in-memory
call of the same function on whatever worker holds the block (NumPy blocks run on the CPU
backend, CuPy blocks on CUDA, as ``backend="auto"`` does in memory), so a block's answer is
exactly the in-memory answer for its columns: columns are independent problems.  Nothing
is gathered to one process; only the small A / C travels to every task.

Chunking rule: blocks must hold whole columns.  R chunked along rows too is rechunked to
one row chunk (``R.rechunk({0: -1})``): row pieces of the same column chunk are merged, the
column chunks are kept (a block of n x c is what the solver works on anyway).

Dask is imported lazily: the rest of the library works without it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from .._input import validation as v
from ..arrays import is_cupy


def is_dask_array(x) -> bool:
    """True for a ``dask.array.Array`` (checked without importing dask)."""
    return type(x).__module__.startswith("dask.array")


def any_dask(*arrays) -> bool:
    """True when one of the arrays is a dask array (the front doors' dispatch test)."""
    return any(is_dask_array(a) for a in arrays if a is not None)


@dataclass
class DaskSolveResult:
    """Lazy outcome of a solve whose right-hand side is a dask array.

    Nothing runs until ``compute()`` / ``persist()`` (or ``dask.compute`` of the fields).
    All fields come from the same per-block tasks: compute them together (``compute()``,
    ``persist()`` or one ``dask.compute(res.x, res.blocks)``) to solve each block once;
    computing ``res.x`` and later ``res.blocks`` separately solves twice (as with any dask
    graph that is not persisted).

    Attributes
    ----------
    x : dask array
        The solution, (n,) or (n, r) with R's column chunks (one row chunk), NumPy or
        CuPy blocks like R's.
    converged_columns : dask array of bool, (r,)
        Per column: whether it met the stopping rule (one chunk per block).
    n_iter_columns : dask array of int64, (r,)
        Per column: iterations it was swept for.
    blocks : dask array of object, (n_blocks,)
        Per block of columns: the in-memory :class:`~msm_gpu.result.SolveResult` of that
        block with ``x`` dropped (``fun``, ``n_iter``, ``converged``, ``message``,
        ``objective``, ``backend``, ``time``, ``timings``, ``info`` ...).
    method : str
    """

    x: object
    converged_columns: object
    n_iter_columns: object
    blocks: object
    method: str = "msm"

    @property
    def fun(self):
        """Lazy 0-d dask array: the objective, summed over blocks (columns are separable)."""
        return self.blocks.map_blocks(_block_field, "fun", dtype=np.float64).sum()

    @property
    def n_iter(self):
        """Lazy 0-d dask array: the largest iteration count of any block."""
        return self.blocks.map_blocks(_block_field, "n_iter", dtype=np.int64).max()

    @property
    def converged(self):
        """Lazy 0-d dask array: True when every column converged."""
        return self.converged_columns.all()

    def persist(self, **kwargs) -> DaskSolveResult:
        """Solve every block once and keep x and the per-block results in (worker) memory."""
        import dask

        x, conv, nit, blocks = dask.persist(
            self.x, self.converged_columns, self.n_iter_columns, self.blocks, **kwargs
        )
        return DaskSolveResult(x, conv, nit, blocks, self.method)

    def compute(self, **kwargs):
        """Solve every block once and return an in-memory :class:`SolveResult`.

        ``x`` is the concatenated solution (this gathers it, as ``x.compute()`` does);
        ``fun`` the sum of the blocks' objectives; ``n_iter`` the largest block count;
        ``objective[t]`` the sum over blocks of each block's objective after
        ``min(t, its n_iter)`` iterations (what the in-memory run records, done columns
        being frozen); ``time`` the wall time of this call; ``timings`` the blocks'
        seconds summed (worker time); ``info`` the first block's plus ``n_blocks``.
        """
        import dask

        from ..result import SolveResult

        started = time.perf_counter()
        x, conv, nit, blocks = dask.compute(
            self.x, self.converged_columns, self.n_iter_columns, self.blocks, **kwargs
        )
        return SolveResult.from_blocks(
            list(blocks),
            x,
            converged_columns=conv,
            n_iter_columns=nit,
            started=started,
            method=self.method,
        )

    def __repr__(self):
        return (
            f"DaskSolveResult(method={self.method!r}, x={self.x!r}, "
            f"n_blocks={self.blocks.shape[0]})"
        )


# -- entry points (called from the front doors' dask hook, msm_gpu/_api.py) ------------


def solve(A, R, penalty=None, *, x0=None, callback=None, **options) -> DaskSolveResult:
    """:func:`msm_gpu.solve` for a dask array R (n x r, or n): one solve per column block.

    A is a NumPy/CuPy array or a small dask array (sent whole to every task).  x0 may be a
    NumPy/CuPy or dask array of R's shape.  The other keywords are those of ``solve`` and
    apply per block (``time_limit`` limits each block).  Checks that need the values of
    a dask R (NaN/Inf) run on the workers and raise when the result is computed.
    """
    return _dispatch("solve", A, R, penalty, x0, callback, options)


def least_squares(C, D, penalty=None, *, x0=None, callback=None, **options) -> DaskSolveResult:
    """:func:`msm_gpu.least_squares` (and ``nnls``) for a dask array D: one call per column
    block; each block's ``fun`` includes its own 1/2 ||D_block||^2, so they add up."""
    return _dispatch("least_squares", C, D, penalty, x0, callback, options)


def _dispatch(kind, A, R, penalty, x0, callback, options):
    import dask
    import dask.array as da

    if callback is not None:
        raise ValueError(
            "callback is not supported with a dask right-hand side (it would run on the "
            "workers, once per block); inspect result.blocks instead"
        )
    penalty = None if penalty is None else v.check_penalty(penalty)
    lhs, rhs = ("A", "R") if kind == "solve" else ("C", "D")
    _check_lazy(A, lhs, ndims=(2,))
    if kind == "solve" and A.shape[0] != A.shape[1]:
        raise ValueError(f"A must be square, got shape {A.shape}")
    n_rows, n = A.shape[0], A.shape[1]
    if not is_dask_array(R):
        R = da.from_array(R, chunks=R.shape, asarray=False)
    _check_lazy(R, rhs, ndims=(1, 2))
    if R.shape[0] != n_rows:
        raise ValueError(
            f"{rhs} must have {n_rows} rows to match {lhs} {tuple(A.shape)}, got shape {R.shape}"
        )
    x_shape = (n,) + tuple(R.shape[1:])
    if x0 is not None:
        _check_lazy(x0, "x0", ndims=(R.ndim,))
        if tuple(x0.shape) != x_shape:
            raise ValueError(f"x0 must have shape {x_shape}, got {tuple(x0.shape)}")
    _check_options_eagerly(kind, A, n, penalty, options)

    dtype = v.working_dtype(A, R, x0)
    one_problem = R.ndim == 1
    if one_problem:
        R = R[:, None]
        x0 = None if x0 is None else x0[:, None]
    if len(R.chunks[0]) > 1:  # blocks must hold whole columns: merge the row pieces
        R = R.rechunk({0: -1})
    col_chunks = R.chunks[1]
    if x0 is not None:
        if is_dask_array(x0):
            x0 = x0.rechunk(((n,), col_chunks))
        else:
            x0 = da.from_array(x0, chunks=((n,), col_chunks), asarray=False)
    if is_dask_array(A):
        a_dep = A.rechunk(A.shape).to_delayed().ravel()[0]
    else:
        a_dep = dask.delayed(A, pure=True)

    n_blocks = len(col_chunks)
    args = [R, a_dep] if x0 is None else [R, a_dep, x0]
    raw = da.map_blocks(
        _solve_block,
        *args,
        kind=kind,
        penalty=penalty,
        options=options,
        chunks=((1,), (1,) * n_blocks),
        dtype=object,
        meta=np.empty((0, 0), dtype=object),
        name="msm-solve-" + dask.base.tokenize(kind, R, a_dep, x0, penalty, options),
    )
    xp_meta = _module(R._meta)
    x = raw.map_blocks(
        _take_x, chunks=((n,), col_chunks), dtype=dtype, meta=xp_meta.empty((0, 0), dtype=dtype)
    )
    conv = raw.map_blocks(
        _take_columns, "converged_columns", drop_axis=0, chunks=(col_chunks,), dtype=bool
    )
    nit = raw.map_blocks(
        _take_columns, "n_iter_columns", drop_axis=0, chunks=(col_chunks,), dtype=np.int64
    )
    blocks = raw.map_blocks(
        _take_summary,
        drop_axis=0,
        chunks=((1,) * n_blocks,),
        dtype=object,
        meta=np.empty((0,), dtype=object),
    )
    if one_problem:
        x = x[:, 0]
    method = options.get("method", "msm")
    return DaskSolveResult(x, conv, nit, blocks, method if isinstance(method, str) else "msm")


def _check_lazy(x, name, *, ndims):
    """Checks that need only shape and dtype (dask arrays); in-memory arrays fully."""
    if not is_dask_array(x):
        return v.check_array(x, name, ndims=ndims)
    if np.dtype(x.dtype).kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {x.dtype}")
    if x.ndim not in ndims:
        allowed = " or ".join(f"{d}-D" for d in ndims)
        raise ValueError(f"{name} must be {allowed}, got an array of shape {x.shape}")
    if any(np.isnan(s) for s in x.shape):
        raise ValueError(f"{name} must have known chunk sizes (call {name}.compute_chunk_sizes())")
    if x.size == 0:
        raise ValueError(f"{name} must not be empty (shape {x.shape})")
    return x


def _check_options_eagerly(kind, A, n, penalty, options):
    """Refuse bad options on the client, before any task runs.

    One in-memory call of the same function with a zero right-hand side (one column) and
    ``max_iter=0`` runs every check (options, A's symmetry and diagonal, C's values, the
    convergence condition delta > 0).  For a dask A / C, whose values stay on the
    workers, the options are checked against the identity and the matrix per block.
    """
    from .. import run

    if "max_iter" in options:
        v.check_int(options["max_iter"], "max_iter", low=0)
    probe = {**options, "max_iter": 0}
    if is_dask_array(A):
        run.solve(np.eye(n), np.zeros((n, 1)), penalty, **probe)
        return
    zeros = _module(A).zeros((A.shape[0], 1), dtype=np.float64)
    fn = run.solve if kind == "solve" else run.least_squares
    fn(A, zeros, penalty, **probe)


def _module(x):
    if is_cupy(x):
        import cupy

        return cupy
    return np


# -- the tasks ---------------------------------------------------------------------------


def _solve_block(r, a, x0=None, *, kind, penalty, options):
    """One in-memory solve of a column block; returns a 1 x 1 object array (its result)."""
    from .. import run

    fn = run.solve if kind == "solve" else run.least_squares
    out = np.empty((1, 1), dtype=object)
    out[0, 0] = fn(a, r, penalty, x0=x0, **options)
    return out


def _take_x(raw):
    return raw[0, 0].x


def _take_columns(raw, field):
    return np.asarray(getattr(raw[0, 0], field))


def _take_summary(raw):
    out = np.empty(1, dtype=object)
    out[0] = replace(raw[0, 0], x=None)
    return out


def _block_field(blocks, field):
    return np.array([getattr(b, field) for b in blocks])
