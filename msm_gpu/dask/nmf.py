"""NMF of a dask array Y: the alternating NNLS of :mod:`msm_gpu.apps.nmf` on blocks.

Y (m x d) is a ``dask.array`` with dense (NumPy/CuPy) or sparse (scipy.sparse/cupyx) blocks,
chunked along rows, columns or both.  The factors stay distributed: H (k x d) with Y's
column chunks, W' (k x m) with Y's row chunks.  One outer iteration is

    G = W'W  = sum_i W_i'W_i                (k x k, tree reduction, sent to the client)
    P = W'Y,   P_j = sum_i W_i' Y_ij        (k x d, blockwise products + tree reduction)
    H-step:    H_j = NNLS(G, P_j) for every column chunk j       (blockwise)
    G_h = HH', P_w = HY' = sum_j H_j Y_ij'  (the same two reductions)
    W-step:    W_i' = NNLS(G_h, P_w,i) for every row chunk i       (blockwise)

and the objective 1/2 ||Y - WH||^2 comes from G_h and P_w as in memory (O(m k^2)); only
k x k matrices and scalars reach the client.  Each block product is the in-memory one
(``nmf.Data`` on the block), so the fit follows the in-memory fit from the same start.

Inner iterations.  In memory a half-step stops its sweeps by one rule over *all* columns
(``||X_l - X_{l-1}|| <= inner_tol ||X_1 - X_0||``, Gillis & Glineur).  To reproduce it, an
MSM/HALS half-step runs in two passes: every block sweeps ``max_inner`` times and reports the
squared step of each sweep; the client sums them over blocks and finds the sweep L where
the in-memory rule stops; blocks then redo L sweeps from the same start (skipped when L =
max_inner: the first pass's iterate is kept).  Sweeps cost at most about half of the
Gram products under the default budget (:func:`~msm_gpu.factorization.solvers.auto_inner_iter`),
so the second pass adds at most that much.  ``"bpp"`` and ``"cgd"`` are column by column
already (one pass; ``inner_iterations`` is then the largest count over blocks).  ``"pg"``
(one step size for all columns) and ``"apg"`` are refused.

The outer loop itself -- extrapolation between outer iterations (Ang & Gillis, on by
default for "msm" and "hals"), the stopping rule, the choice of the best pair -- is the
in-memory one, :func:`msm_gpu.factorization.loop.alternate`; :class:`OnDask` is its
strategy for a dask Y (the extrapolated factors are blockwise
``max(new + beta (new - old), 0)``).

Start: ``init="custom"`` with W and H (NumPy, CuPy or dask) reproduces an in-memory fit
from the same start.  ``init="random"`` (and ``init=None``, the default) draws the
factors chunk by chunk with ``dask.array.random`` from the seed (same scale as in memory,
not the same numbers: the in-memory draw would need all of H in one process); the
``"nndsvd*"`` inits need an SVD of all of Y and are refused.
"""

from __future__ import annotations

import math
from contextlib import nullcontext

import numpy as np

from ..arrays import is_cupy, namespace, to_host
from ..backends import get_backend
from ..factorization import solvers as ns
from ..factorization.init import random_source
from ..factorization.loop import (
    EXPANSION_ULPS,
    Data,
    alternate,
    check_data,
    check_params,
    dtype_of,
    exact_nnls,
    is_sparse,
    n_components,
    residual_norm2,
    warn_factors_ignored,
)
from ..factorization.regularization import Regularization

#: Solvers whose half-step can run block by block with the in-memory result.
DASK_SOLVERS = ("msm", "hals", "bpp", "cgd")


def fit_transform(model, Y, W=None, H=None):
    """``NMF.fit_transform`` for a dask array Y; sets the model's attributes, returns W.

    ``W`` (returned) and ``model.components_`` are persisted dask arrays (W with Y's row
    chunks, H with Y's column chunks); ``reconstruction_err_``, ``history_`` etc. are
    plain numbers as in memory.
    """
    import dask.array as da

    p = model.get_params()
    check_params(p)
    if p["solver"] not in DASK_SOLVERS:
        raise ValueError(
            f"solver={p['solver']!r} is not available for a dask Y (its half-step couples "
            f"all columns); use one of {', '.join(map(repr, DASK_SOLVERS))}"
        )
    _check_dask_data(Y)
    _check_loss(p)
    backend = _backend_name(p, Y)
    m, d = Y.shape
    custom = p["init"] == "custom"
    k = n_components(p, m, d, H if custom else None)
    dtype = dtype_of(Y)
    ctx = OnDask(Y, backend, dtype, k)
    norm2, total, _ = ctx.statistics()
    if custom:
        wt = ctx.factor(W, (m, k), "W", transpose=True)
        h = ctx.factor(H, (k, d), "H", transpose=False)
    else:
        if W is not None or H is not None:
            warn_factors_ignored(stacklevel=4)
        if p["init"] not in (None, "random"):
            raise ValueError(
                f"init={p['init']!r} needs an SVD of all of Y; for a dask Y use "
                "init='random' (the default there) or init='custom' with W and H"
            )
        source = random_source(p["random_state"])
        if isinstance(source, np.random.Generator):
            seed = int(source.integers(0, 2**63 - 1))
        else:
            seed = int(source.randint(0, 2**31 - 1))
        rng = da.random.default_rng(seed)
        avg = math.sqrt(max(total / (m * d), 0.0) / k)
        h = avg * abs(rng.standard_normal((k, d), chunks=((k,), ctx.cols)))
        wt = avg * abs(rng.standard_normal((k, m), chunks=((k,), ctx.rows)))
        h, wt = ctx.to_blocks(h), ctx.to_blocks(wt)
    reg = Regularization.from_params(p, (m, d))
    wt, h, info = alternate(ctx, wt, h, p, reg=reg)
    # the last W-step exact, as in memory (fit_transform(Y) = transform(Y))
    wt = ctx.exact_w_step(h, p, reg, start=wt)
    info["objective_loop"] = info["objective"]
    info["objective"] = ctx.objective(wt, h, *ctx.w_step_products(h)) + reg.value(wt, h)
    info["reconstruction_err"] = ctx.exact_error(wt, h)
    model.n_features_in_ = d
    model._set_fitted(h, info)
    return wt.T


def transform(model, Y):
    """``NMF.transform`` for a dask array Y: the exact W-step of the in-memory transform,
    blockwise on Y's row chunks (returns a persisted dask array, Y's row chunks)."""
    model._check_fitted()
    p = model.get_params()
    check_params(p)
    _check_dask_data(Y)
    k, d = model.components_.shape
    if Y.shape[1] != d:
        raise ValueError(f"Y has {Y.shape[1]} features, but NMF was fitted with {d}")
    _check_loss(p)
    backend = _backend_name(p, Y)
    ctx = OnDask(Y, backend, dtype_of(Y), k)
    ctx.statistics()  # the value checks of Y
    h = ctx.factor(model.components_, (k, d), "components_", transpose=False)
    reg = Regularization.from_params(p, Y.shape)
    return ctx.exact_w_step(h, p, reg).T


# -- checks ------------------------------------------------------------------------------


def _check_dask_data(Y):
    """Shape and dtype checks on the client; values (finite, >= 0) on the workers."""
    if len(Y.shape) != 2:
        raise ValueError(f"Y must be 2-D (samples x features), got shape {Y.shape}")
    if any(np.isnan(s) for s in Y.shape):
        raise ValueError("Y must have known chunk sizes (call Y.compute_chunk_sizes())")
    if Y.shape[0] == 0 or Y.shape[1] == 0:
        raise ValueError(f"Y must not be empty, got shape {Y.shape}")
    if np.dtype(Y.dtype).kind not in "biuf":
        raise TypeError(f"Y must hold real numbers, got dtype {Y.dtype}")


def _check_loss(p):
    """The dask road minimises the Frobenius loss only."""
    from ..factorization.beta import beta_value

    if beta_value(p["beta_loss"]) != 2.0:
        raise ValueError(
            f"beta_loss={p['beta_loss']!r} is not available for a dask Y (the dask road "
            "minimises the Frobenius loss); compute Y, or pass its blocks to "
            "MiniBatchNMF.partial_fit"
        )


def _backend_name(p, Y):
    name = p["backend"]
    if not isinstance(name, str) or name.lower() not in ("auto", "cpu", "cuda"):
        raise ValueError(f"backend must be one of 'cpu', 'cuda', 'auto', got {name!r}")
    name = name.lower()
    on_gpu = name == "cuda" or (name == "auto" and is_cupy(Y._meta))
    if p["solver"] in ns.CPU_ONLY and on_gpu:
        raise ValueError(
            f"solver={p['solver']!r} runs on the CPU only; use backend='cpu' or one "
            "of 'msm', 'hals' on the GPU"
        )
    return name


class OnDask:
    """The outer loop's strategy (:class:`~msm_gpu.factorization.loop.Strategy`) for a
    dask Y: Y, its chunking and the backend choice, building every blockwise step.

    k x k Gram matrices and scalars are computed to the client; W'Y, HY' and the factors
    are persisted on the workers."""

    tag = ", dask"

    def __init__(self, Y, backend, dtype, k):
        self.Y = Y
        self.backend = backend
        self.dtype = np.dtype(dtype)
        self.k = k
        self.shape = tuple(int(s) for s in Y.shape)
        self.rows, self.cols = Y.chunks
        self.sparse = is_sparse(Y._meta)
        self.norm2 = self.nnz = self.nonzeros = None  # set by statistics()
        self.on_gpu = backend == "cuda" or (backend == "auto" and is_cupy(Y._meta))
        if self.on_gpu:
            import cupy

            self.meta = cupy.empty((0, 0), dtype=self.dtype)
        else:
            self.meta = np.empty((0, 0), dtype=self.dtype)

    # -- Y's statistics and the factors

    def statistics(self):
        """(||Y||^2, sum Y, nnz) by one pass over the blocks, which also checks the values."""
        nr, nc = len(self.rows), len(self.cols)
        stats = self.Y.map_blocks(
            _block_statistics,
            backend=self.backend,
            dtype=np.float64,
            chunks=((1,) * nr, (4,) * nc),
            meta=np.empty((0, 0)),
        )
        s = np.asarray(stats.compute()).reshape(nr, nc, 4).sum(axis=(0, 1))
        self.norm2, self.nnz, self.nonzeros = float(s[0]), int(s[2]), int(s[3])
        return float(s[0]), float(s[1]), int(s[2])

    def to_blocks(self, x):
        """Persist a (k x c) factor as backend arrays of the working dtype."""
        return x.map_blocks(
            _convert, backend=self.backend, to=self.dtype, dtype=self.dtype, meta=self.meta
        ).persist()

    def factor(self, F, shape, name, *, transpose):
        """A user's W or H (checked as in memory), as a dask array W' (k x m) or H (k x d)."""
        import dask.array as da

        if F is None:
            raise ValueError(f"init='custom' needs {name}")
        if tuple(F.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(F.shape)}")
        if is_sparse(F):
            F = F.toarray()
        if not (hasattr(F, "dask") and hasattr(F, "chunks")):
            host = to_host(F)
            if not np.isfinite(host).all():
                raise ValueError(f"{name} contains NaN or Inf")
            if (host < 0).any():
                raise ValueError(f"{name} must be nonnegative (init='custom')")
            F = da.from_array(host, chunks=shape)
        else:
            finite, nonneg = da.compute(da.isfinite(F).all(), (F >= 0).all())
            if not finite:
                raise ValueError(f"{name} contains NaN or Inf")
            if not nonneg:
                raise ValueError(f"{name} must be nonnegative (init='custom')")
        if transpose:
            F = F.T
        chunks = ((self.k,), self.rows if transpose else self.cols)
        return self.to_blocks(F.rechunk(chunks))

    # -- the loop's strategy

    def session(self):
        return nullcontext()

    def h_step_products(self, wt):
        return self.gram(wt), self.wt_y(wt)

    def w_step_products(self, h):
        return self.gram(h), self.h_yt(h)

    def extrapolate(self, ex, new, old):
        """``max(new + beta (new - old), 0)`` blockwise (Extrapolation.point), persisted."""
        import dask.array as da

        if ex.in_warmup():
            return new
        return da.maximum(new + ex.beta * (new - old), 0).persist()

    def scale_rows(self, x, s):
        return (x * np.asarray(s, dtype=x.dtype)[:, None]).persist()

    def exact_w_step(self, h, p, reg, start=None):
        """W' (k x m, Y's row chunks) solving the W-step exactly for H, as the in-memory
        :func:`~msm_gpu.factorization.loop.exact_w_step`: on the CPU its exact NNLS
        (``exact_nnls``) on G = HH' and P = HY' formed in float64, blockwise; on CUDA the
        model's solver (msm for bpp/cgd), up to max(max_iter, 2000) sweeps, inner_tol
        1e-9."""
        import dask.array as da

        dtype = self.dtype
        if not self.on_gpu:
            self.dtype = np.dtype(np.float64)
            try:
                h64 = self.to_blocks(h)
                g, p_w = reg.gram_form(*self.w_step_products(h64), "W")
                x0 = self.to_blocks(start if start is not None else p_w.map_blocks(_zeros_like))
            finally:
                self.dtype = dtype
            wt = da.map_blocks(_exact_block, x0, p_w, g=g, to=dtype, dtype=dtype, meta=self.meta)
            return wt.persist()
        g, p_w = reg.gram_form(*self.w_step_products(h), "W")
        solver = "msm" if p["solver"] in ns.CPU_ONLY else p["solver"]
        x0 = self.to_blocks(start if start is not None else p_w.map_blocks(_zeros_like))
        opts = {"omega": p["omega"], "theta": p["theta"], "inner_tol": 1e-9}
        wt, _ = self.solve_half_step(solver, g, p_w, x0, max(int(p["max_iter"]), 2000), **opts)
        return wt

    def describe(self):
        return {
            "backend": "cuda" if self.on_gpu else "cpu",
            "n_blocks": (len(self.rows), len(self.cols)),
        }

    # -- the reductions

    def gram(self, x):
        """X X' (k x k) on the client, for X = W' or H (k x c): a tree reduction."""
        import dask.array as da

        parts = da.blockwise(
            _gram_block,
            "jab",
            x,
            "aj",
            new_axes={"b": self.k},
            adjust_chunks={"j": 1},
            dtype=self.dtype,
            meta=np.empty((0, 0, 0), dtype=self.dtype),
        )
        return np.asarray(parts.sum(axis=0).compute(), dtype=self.dtype)

    def wt_y(self, wt):
        """P = W'Y (k x d, Y's column chunks): blockwise W_i'Y_ij, summed over i by a tree."""
        import dask.array as da

        part = da.blockwise(
            _wt_y_block,
            "ikj",
            wt,
            "ki",
            self.Y,
            "ij",
            adjust_chunks={"i": 1},
            backend=self.backend,
            dtype=self.dtype,
            meta=self._meta3(),
        )
        return part.sum(axis=0).persist()

    def h_yt(self, h):
        """P_w = HY' (k x m, Y's row chunks): blockwise H_j Y_ij', summed over j by a tree."""
        import dask.array as da

        part = da.blockwise(
            _h_yt_block,
            "jki",
            h,
            "kj",
            self.Y,
            "ij",
            adjust_chunks={"j": 1},
            backend=self.backend,
            dtype=self.dtype,
            meta=self._meta3(),
        )
        return part.sum(axis=0).persist()

    def _meta3(self):
        return self.meta.reshape(0, 0, 0) if hasattr(self.meta, "reshape") else None

    def objective(self, wt, h, g_h, p_w):
        """1/2 ||Y - WH||^2 from G_h = HH' and P_w = HY' in float64 sums, as in memory
        (from the residual where the expansion is within rounding of ||Y||^2)."""
        nb = len(wt.chunks[1])
        parts = wt.map_blocks(
            _objective_block,
            p_w,
            g_h=g_h,
            chunks=((1,), (2,) * nb),
            dtype=np.float64,
            meta=np.empty((0, 0)),
        )
        s = np.asarray(parts.compute()).reshape(nb, 2).sum(axis=0)
        val = self.norm2 - 2.0 * float(s[0]) + float(s[1])
        if val <= EXPANSION_ULPS * float(np.finfo(self.dtype).eps) * self.norm2:
            val = self.exact_error(wt, h) ** 2
        return 0.5 * max(val, 0.0)

    def exact_error(self, wt, h):
        """||Y - WH||_F, the sum of the blocks' squared residuals (in memory's stable
        form, :func:`~msm_gpu.factorization.loop.residual_norm2`, dense or sparse)."""
        import dask.array as da

        nr, nc = len(self.rows), len(self.cols)
        parts = da.blockwise(
            _residual_block,
            "ij",
            wt,
            "ki",
            h,
            "kj",
            self.Y,
            "ij",
            adjust_chunks={"i": 1, "j": 1},
            concatenate=True,
            backend=self.backend,
            dtype=np.float64,
            meta=np.empty((0, 0)),
        )
        assert parts.shape == (nr, nc)
        return math.sqrt(float(parts.sum().compute()))

    # -- the half-steps

    def solve_half_step(self, solver, g, p, x, max_inner, *, inner_tol, omega, theta, finish=False):
        """X_new for min_{X >= 0} 1/2 tr(X'GX) - tr(X'P), blockwise, as ``ns.half_step``
        (``finish``: the msm iterate then finished exactly, block by block).

        Returns the persisted X_new (X's chunks) and the inner-iteration count.
        """
        x_new, n_inner = self._half_step(solver, g, p, x, max_inner, inner_tol, omega, theta)
        if finish and solver == "msm":
            import dask.array as da

            x_new = da.map_blocks(
                _finish_block,
                x_new,
                p,
                g=g,
                backend=self.backend,
                to=self.dtype,
                dtype=self.dtype,
                meta=self.meta,
            ).persist()
        return x_new, n_inner

    def _half_step(self, solver, g, p, x, max_inner, inner_tol, omega, theta):
        import dask
        import dask.array as da

        nb = len(x.chunks[1])
        common = {"g": g, "solver": solver, "backend": self.backend, "to": self.dtype}
        if solver in ("msm", "hals"):
            if solver == "hals":
                omega, theta = 1.0, 0.0
            raw = da.map_blocks(
                _first_pass_block,
                x,
                p,
                omega=omega,
                theta=theta,
                max_inner=max_inner,
                chunks=((1,), (1,) * nb),
                dtype=object,
                meta=np.empty((0, 0), dtype=object),
                **common,
            )
            x1 = raw.map_blocks(_item, 0, chunks=x.chunks, dtype=self.dtype, meta=self.meta)
            sums = raw.map_blocks(
                _item,
                1,
                chunks=((1,), (max_inner,) * nb),
                dtype=np.float64,
                meta=np.empty((0, 0)),
            )
            x1, sums = dask.persist(x1, sums)
            total = np.asarray(sums.compute()).reshape(nb, max_inner).sum(axis=0)
            n_sweeps = _stopping_sweep(total, inner_tol, max_inner)
            if n_sweeps == max_inner:
                return x1, n_sweeps
            del x1
            x_new = da.map_blocks(
                _replay_block,
                x,
                p,
                omega=omega,
                theta=theta,
                n_sweeps=n_sweeps,
                dtype=self.dtype,
                meta=self.meta,
                **common,
            )
            return x_new.persist(), n_sweeps
        raw = da.map_blocks(
            _column_local_block,
            x,
            p,
            max_inner=max_inner,
            inner_tol=inner_tol,
            chunks=((1,), (1,) * nb),
            dtype=object,
            meta=np.empty((0, 0), dtype=object),
            **common,
        )
        x_new = raw.map_blocks(_item, 0, chunks=x.chunks, dtype=self.dtype, meta=self.meta)
        counts = raw.map_blocks(
            _item, 1, chunks=((1,), (1,) * nb), dtype=np.int64, meta=np.empty((0, 0), np.int64)
        )
        x_new, counts = dask.persist(x_new, counts)
        return x_new, int(np.asarray(counts.compute()).max())


def _stopping_sweep(step2, inner_tol, max_inner):
    """The sweep at which the in-memory inner rule stops, from the summed squared steps."""
    rule = ns.InnerRule(inner_tol)
    for n, s in enumerate(step2[:max_inner], start=1):
        if rule.stop(float(s)):
            return n
    return int(max_inner)


# -- the tasks (run on the workers) ------------------------------------------------------


def _backend_for(name, *blocks):
    return get_backend(name, *blocks)


def _block_statistics(y, *, backend):
    check_data(y)  # finite, >= 0, with the in-memory messages
    be = _backend_for(backend, y)
    dtype = dtype_of(y)
    data = Data(y, be, dtype)
    if data.sparse:
        total = float(data.y.data.astype(np.float64).sum())
    else:
        total = float(be.xp.sum(be.xp.astype(data.y, be.xp.float64)))
    return np.array([[data.norm2, total, float(data.nnz), float(data.nonzeros)]])


def _convert(x, *, backend, to):
    return _backend_for(backend, x).asarray(x, to)


def _gram_block(x):
    return to_host(x @ x.T)[None]


def _wt_y_block(wt, y, *, backend):
    be = _backend_for(backend, y, wt)
    dtype = wt.dtype
    data = Data(y, be, dtype)
    return data.wt_y(be.asarray(wt, dtype).T)[None]


def _h_yt_block(h, y, *, backend):
    be = _backend_for(backend, y, h)
    dtype = h.dtype
    data = Data(y, be, dtype)
    return data.h_yt(be.asarray(h, dtype))[None]


def _objective_block(wt, p_w, *, g_h):
    """(<W_i', P_w,i>, <W_i', G_h W_i'>) of one row block, in float64."""
    xp = namespace(wt)
    g = xp.asarray(g_h) if not is_cupy(wt) else _cupy_asarray(g_h)
    w64, g64 = xp.astype(wt, xp.float64), xp.astype(g, xp.float64)
    a = float(xp.sum(w64 * xp.astype(p_w, xp.float64)))
    b = float(xp.sum(w64 * (g64 @ w64)))
    return np.array([[a, b]])


def _residual_block(wt, h, y, *, backend):
    be = _backend_for(backend, y, h)
    data = Data(y, be, h.dtype)
    return np.array([[residual_norm2(data, be.asarray(wt, h.dtype), be.asarray(h, h.dtype))]])


def _cupy_asarray(x):
    import cupy

    return cupy.asarray(x)


def _zeros_like(x):
    return x * 0


def _solver_arrays(g, p, x, backend, to):
    be = _backend_for(backend, p, x)
    return be, be.asarray(g, to), be.asarray(p, to), be.asarray(x, to)


def _first_pass_block(x, p, *, g, solver, backend, to, omega, theta, max_inner):
    """max_inner MSM sweeps; returns (the iterate, the squared step of every sweep)."""
    from ..backends.base import STAT_DIFF2

    be, g, p, x = _solver_arrays(g, p, x, backend, to)
    step2 = np.zeros(max_inner)
    state = ns.msm_state(be, g, p, x, omega=omega, theta=theta)
    with state:
        for n in range(max_inner):
            stats = state.sweep()
            step2[n] = float(be.xp.sum(stats[STAT_DIFF2]))
        x_new = state.current_x()
    out = np.empty((1, 1), dtype=object)
    out[0, 0] = (x_new, step2[None, :])
    return out


def _replay_block(x, p, *, g, solver, backend, to, omega, theta, n_sweeps):
    """Exactly n_sweeps MSM sweeps (inner_tol 0 stops early only at a fixed point)."""
    be, g, p, x = _solver_arrays(g, p, x, backend, to)
    msm = "hals" if solver == "hals" else "msm"
    x_new, _ = ns.half_step(
        msm, be, g, p, x, max_inner=n_sweeps, inner_tol=0.0, omega=omega, theta=theta
    )
    return x_new


def _finish_block(x, p, *, g, backend, to):
    """The exact NNLS solution of one column block from the msm iterate x (host only)."""
    be, g, p, x = _solver_arrays(g, p, x, backend, to)
    if not ns.finish_applies(be, g):
        return x
    return ns.active_set_finish(g, p, x)


def _exact_block(x, p, *, g, to):
    """The exact NNLS of one column block in float64 (host), returned in ``to``."""
    be = _backend_for("cpu", p)
    x64 = np.asarray(x, dtype=np.float64)
    return exact_nnls(be, np.asarray(g, np.float64), np.asarray(p, np.float64), x64).astype(to)


def _column_local_block(x, p, *, g, solver, backend, to, max_inner, inner_tol):
    be, g, p, x = _solver_arrays(g, p, x, backend, to)
    x_new, n_inner = ns.half_step(solver, be, g, p, x, max_inner=max_inner, inner_tol=inner_tol)
    out = np.empty((1, 1), dtype=object)
    out[0, 0] = (x_new, np.array([[n_inner]], dtype=np.int64))
    return out


def _item(raw, index):
    return raw[0, 0][index]


# -- MiniBatchNMF on a dask array: one row chunk at a time ------------------------------------


def row_batches(Y, batch_size):
    """(index, batch) forever: Y's row chunks computed one at a time (NumPy or SciPy
    sparse on the client), each cut into batches of at most ``batch_size`` rows, pass
    after pass; ``index`` numbers the batches of one pass."""
    starts = np.cumsum((0,) + Y.chunks[0])
    while True:
        index = 0
        for lo, hi in zip(starts[:-1], starts[1:], strict=True):
            block = Y[lo:hi].compute()
            if hasattr(block, "tocsr"):
                block = block.tocsr()
            for b in range(0, hi - lo, batch_size):
                yield index, block[b : b + batch_size]
                index += 1


def minibatch_fit_transform(model, Y, p, W=None, H=None):
    """``MiniBatchNMF.fit_transform`` for a dask array Y (rows in chunks): the start from
    ``init="random"`` on the first chunk (or ``init="custom"`` with H; W is not needed:
    each batch's W is solved afresh), batches read chunk by chunk, W returned as a dask
    array (the exact W of every row chunk, computed lazily)."""
    _check_dask_data(Y)
    if p["init"] not in (None, "random", "custom"):
        raise ValueError(
            f"init={p['init']!r} needs an SVD of all of Y; for a dask Y use init='random' "
            "(the default there) or init='custom' with H"
        )
    if p["init"] is None:
        p = {**p, "init": "random"}
    m, d = (int(s) for s in Y.shape)
    first = Y[: Y.chunks[0][0]].compute()
    if hasattr(first, "tocsr"):
        first = first.tocsr()
    first = model._check_X(first, reset=True)
    model.n_features_in_ = d
    if p["init"] == "custom":  # only H is used: the batches' W are solved afresh
        if H is None:
            raise ValueError("init='custom' needs H")
        W = np.ones((first.shape[0], np.shape(H)[0]))
    model._start(first, W, H, p)
    batch_size = min(model.batch_size, m)
    model._state.rho = model.forget_factor ** (batch_size / m)
    n_steps_per_iter = sum(-(-c // batch_size) for c in Y.chunks[0])
    model._run(row_batches(Y, batch_size), m, n_steps_per_iter)
    model._publish()
    # the reconstruction error: one more pass, each chunk's exact W and its loss
    starts = np.cumsum((0,) + Y.chunks[0])
    total = 0.0
    for lo, hi in zip(starts[:-1], starts[1:], strict=True):
        block = Y[lo:hi].compute()
        block = block.tocsr() if hasattr(block, "tocsr") else block
        err = model._error(block, model._exact_w(block))
        total += err * err
    model.reconstruction_err_ = math.sqrt(total)
    return minibatch_transform(model, Y)


def minibatch_transform(model, Y):
    """``MiniBatchNMF.transform`` for a dask array: the exact W of each row chunk."""
    import dask.array as da

    _check_dask_data(Y)
    k = model.components_.shape[0]
    dtype = model.components_.dtype

    def block_w(block):
        if hasattr(block, "tocsr"):
            block = block.tocsr()
        return model.transform(block)

    Yr = Y.rechunk({1: -1})
    return da.map_blocks(block_w, Yr, chunks=(Yr.chunks[0], (k,)), dtype=dtype)
