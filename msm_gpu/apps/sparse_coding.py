"""l0 sparse coding with the Matrix Splitting Method, and the steps of dictionary learning.

Problem (paper, section 5.2), with unit-norm atoms (the columns of ``D``)::

    min_{D, H}  1/2 ||Y - D H||_F^2 + lam ||H||_0       s.t.  ||D[:, i]||_2 = 1

The H-step for a fixed ``D`` is one batched l0 problem, one column per signal:
``A = D'D`` (unit diagonal, so MSM's defaults omega = 1, theta = 0.01 satisfy the
nonconvex convergence condition) and ``R = -D'Y``; :func:`sparse_code` solves it with
:func:`msm_gpu.solve`.  :class:`~msm_gpu.L0DictionaryLearning`
(``dictionary_learning.py``) alternates that H-step with a projected-gradient dictionary
step onto unit-norm atoms (Bao, Ji, Quan and Shen 2016), :func:`dictionary_step`.

Scale of ``lam``: the objective is in the units of ``Y`` squared, so ``lam`` scales with
the square of the data.  The paper's values (5 ... 50000) refer to pixel values in
[0, 255]; for data in [0, 1] divide them by 255**2.  See
:func:`msm_gpu.apps.denoise.default_lam` for the rule in the noise level used for
denoising (``lam = LAM_PER_SIGMA2 * sigma**2``).
"""

from __future__ import annotations

import dataclasses
import time
import warnings

import numpy as np

from .._api import solve
from .._input import validation as v
from .._input.foreign import accepts_foreign_arrays
from ..options import METHODS
from ..penalties import L0
from ..result import SolveResult

__all__ = [
    "LAM_PER_SIGMA2",
    "OMP_NOISE_GAIN",
    "coding_objective",
    "dictionary_step",
    "l0_objective",
    "l0_sweeps",
    "omp",
    "sparse_code",
    "statistics_step",
]

#: ``lam = LAM_PER_SIGMA2 * sigma**2`` is the default l0 weight for noise level sigma
#: (any units: lam is in the units of the data squared).  For an orthonormal dictionary
#: the l0 H-step is hard thresholding at sqrt(2 lam) = 3.2 sigma; with the 4x overcomplete
#: DCT on 8 x 8 patches this value gave the best PSNR over camera/coins/moon crops, sigma
#: 10 and 30 (kappa in 3.2 ... 15 tried; 4.5-6 best; ``bench_sparse_coding.py lam-sweep``).
LAM_PER_SIGMA2 = 5.0

#: OMP stops when a signal's squared residual is <= m (OMP_NOISE_GAIN sigma)^2, m the
#: signal length: the K-SVD denoising rule of Elad and Aharon (2006).
OMP_NOISE_GAIN = 1.15

# ----------------------------------------------------------------------------------
# validation helpers
# ----------------------------------------------------------------------------------


def _refuse_sparse(x, name, what):
    """A clear message for a SciPy / cupyx sparse matrix where dense data are needed."""
    if hasattr(x, "tocsr") or type(x).__module__.startswith(("scipy.sparse", "cupyx")):
        raise TypeError(
            f"{name} is a sparse matrix ({type(x).__name__}); {what} needs dense data: "
            f"pass {name}.toarray()"
        )


def _as_dictionary(D, name="D"):
    _refuse_sparse(D, name, "sparse coding")
    d = np.asarray(D)
    if d.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (n_features, n_atoms), got shape {d.shape}")
    if d.size == 0:
        raise ValueError(f"{name} must not be empty, got shape {d.shape}")
    if d.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be a real numeric array, got dtype {d.dtype}")
    d = d.astype(np.float64)
    if not np.all(np.isfinite(d)):
        raise ValueError(f"{name} contains NaN or infinite values")
    norms = np.linalg.norm(d, axis=0)
    if np.any(np.abs(norms - 1.0) > 1e-6):
        worst = int(np.argmax(np.abs(norms - 1.0)))
        raise ValueError(
            f"the atoms (columns) of {name} must have unit norm; column {worst} has norm "
            f"{norms[worst]:.6g} (normalise with D / np.linalg.norm(D, axis=0))"
        )
    return d


def _as_signals(Y, m, name="Y"):
    _refuse_sparse(Y, name, "sparse coding")
    y = np.asarray(Y)
    if y.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be a real numeric array, got dtype {y.dtype}")
    if y.ndim not in (1, 2) or y.shape[0] != m:
        raise ValueError(
            f"{name} must have shape ({m},) or ({m}, n_signals) to match the dictionary, "
            f"got {y.shape}"
        )
    if y.ndim == 2 and y.shape[1] == 0:
        raise ValueError(f"{name} must hold at least one signal (column), got shape {y.shape}")
    y = y.astype(np.float64)
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return y


def output_dtype(*arrays):
    """float32 where every input is float32 (scikit-learn's dtype preservation), else
    float64: the solvers compute in float64 and cast their answer to this."""
    kinds = [np.asarray(a).dtype if not hasattr(a, "dtype") else a.dtype for a in arrays]
    return np.float32 if kinds and all(k == np.float32 for k in kinds) else np.float64


def _check_method(method, allowed=METHODS):
    if not isinstance(method, str) or method.lower() not in allowed:
        raise ValueError(f"method must be one of {', '.join(map(repr, allowed))}, got {method!r}")
    return method.lower()


def default_omp_tol(lam, m):
    """Squared-residual target of the OMP initialisation for a given ``lam``.

    The K-SVD rule ``m (OMP_NOISE_GAIN sigma)^2`` at the noise level
    ``sigma = sqrt(lam / LAM_PER_SIGMA2)`` that the denoising rule maps to ``lam``.
    """
    return m * OMP_NOISE_GAIN**2 * lam / LAM_PER_SIGMA2


# ----------------------------------------------------------------------------------
# building blocks
# ----------------------------------------------------------------------------------


def l0_objective(D, Y, H, lam):
    """``1/2 ||Y - D H||_F^2 + lam ||H||_0`` (float)."""
    resid = np.asarray(Y) - np.asarray(D) @ np.asarray(H)
    return 0.5 * float(np.vdot(resid, resid)) + lam * float(np.count_nonzero(H))


def coding_objective(D, Y, H, penalty):
    """``1/2 ||Y - D H||_F^2 + sum h(H)`` for any penalty h (float; inf outside its
    bounds)."""
    resid = np.asarray(Y) - np.asarray(D) @ np.asarray(H)
    return 0.5 * float(np.vdot(resid, resid)) + float(np.sum(penalty.value(np.asarray(H))))


def omp(D, Y, *, n_nonzero_coefs=None, tol=None, gram=None):
    """Orthogonal Matching Pursuit for every column of Y (scikit-learn's batched OMP).

    Parameters
    ----------
    D : (m, k) array
        Dictionary with unit-norm columns.
    Y : (m,) or (m, N) array
    n_nonzero_coefs : int, optional
        Atoms per signal (scikit-learn's default, 10% of m, when ``tol`` is None too).
    tol : float, optional
        Stop a signal when its squared residual norm is <= tol (overrides
        ``n_nonzero_coefs``).
    gram : (k, k) array, optional
        ``D'D`` if already computed.

    Returns
    -------
    H : ndarray of shape (k,) or (k, N)
    """
    try:
        from sklearn.linear_model import orthogonal_mp_gram
    except ImportError as exc:  # pragma: no cover - scikit-learn is a test dependency
        raise ImportError("OMP needs scikit-learn: pip install scikit-learn") from exc
    d = np.asarray(D, dtype=np.float64)
    y = np.asarray(Y, dtype=np.float64)
    one = y.ndim == 1
    y2 = y[:, None] if one else y
    g = d.T @ d if gram is None else np.asarray(gram, dtype=np.float64)
    if y2.shape[1] == 0:
        return np.zeros((d.shape[1],) if one else (d.shape[1], 0))
    kwargs = {}
    if tol is not None:
        kwargs["tol"] = float(tol)
        kwargs["norms_squared"] = np.einsum("ij,ij->j", y2, y2)
    else:
        kwargs["n_nonzero_coefs"] = n_nonzero_coefs
    h = orthogonal_mp_gram(g, d.T @ y2, copy_Gram=True, copy_Xy=False, **kwargs)
    h = np.asarray(h, dtype=np.float64).reshape(d.shape[1], y2.shape[1])
    return h[:, 0] if one else h


def _initial_codes(init, d, y, lam, gram, omp_tol, omp_n_nonzero, rng):
    k = d.shape[1]
    shape = (k,) + y.shape[1:]
    if isinstance(init, str):
        key = init.lower()
        if key == "zeros":
            return np.zeros(shape)
        if key == "random":
            return rng.standard_normal(shape)
        if key == "omp":
            if omp_tol is None and omp_n_nonzero is None:
                omp_tol = default_omp_tol(lam, d.shape[0])
            with warnings.catch_warnings():
                # a start: where the residual cannot reach omp_tol (dependent atoms, a
                # signal the dictionary spans), scikit-learn's warning is not the user's
                warnings.filterwarnings(
                    "ignore", "Orthogonal matching pursuit ended", RuntimeWarning
                )
                return omp(d, y, n_nonzero_coefs=omp_n_nonzero, tol=omp_tol, gram=gram)
        raise ValueError(f"init must be 'zeros', 'random', 'omp' or an array, got {init!r}")
    h0 = np.asarray(init, dtype=np.float64)
    if h0.shape != shape:
        raise ValueError(f"init array must have shape {shape}, got {h0.shape}")
    if not np.all(np.isfinite(h0)):
        raise ValueError("init array contains NaN or infinite values")
    return h0


def solve_h(
    A,
    R,
    lam,
    *,
    method="msm",
    x0=None,
    max_iter=20,
    tol=1e-4,
    backend="auto",
    penalty=None,
    **opts,
):
    """The l0 H-step ``min_H 1/2 tr(H'AH) + tr(H'R) + lam ||H||_0`` by MSM or a baseline.

    Thin wrapper of :func:`msm_gpu.solve` with ``L0(lam)`` (or ``penalty``, when given:
    nonnegative l0, l1 codes) and ``method`` one of "msm", "pgm", "pgm_ls", "apg",
    "apg_ls".
    """
    method = _check_method(method)
    opts.setdefault("finish", None)  # the paper's MSM H-step (no support polish, issue 9)
    pen = L0(lam) if penalty is None else penalty
    return solve(
        A, R, pen, x0=x0, max_iter=max_iter, tol=tol, backend=backend, method=method, **opts
    )


def l0_sweeps(gram, r, h0, lam, n_sweeps, *, omega=1.0, theta=0.01, backend="cpu"):
    """``n_sweeps`` MSM sweeps on ``min_H 1/2 tr(H'AH) + tr(H'R) + lam ||H||_0``, nothing else.

    The lean path of :func:`sparse_code` for a large batch (all the patches of an image):
    no objective, no per-column stopping rule (every column gets every sweep) and no input
    checks; the caller passes checked arrays (``gram`` symmetric with unit diagonal,
    ``omega <= 1``, ``theta > 0``: the nonconvex condition delta > 0 holds).  Each sweep
    still lowers the objective by at least delta/2 ||H_new - H||^2 (paper, nonconvex
    theorem).

    On the CPU the sweeps run column by column on the sparse iterate
    (:func:`msm_gpu.backends.cpu.kernels.l0_sparse_sweeps`: the same iterates as the
    dense blocked sweep up to rounding, at O(k) instead of O(k^2) per column and sweep
    while the codes have few atoms; camera's 14641 patches, 256 atoms, 5 sweeps: 0.03 s
    on one thread instead of 0.2 s on two).  On CUDA they run on the backend's sweep state.

    Returns
    -------
    H : ndarray (k, N)
    """
    from ..backends import get_backend
    from ..backends.base import default_panel
    from ..solvers.splitting import make_splitting

    be = get_backend(backend, r)
    k = gram.shape[0]
    splitting = make_splitting(np.diagonal(gram), omega, theta, False)
    if be.on_host:
        return _l0_sparse_sweeps_cpu(gram, r, h0, lam, n_sweeps, splitting.b_diag)
    a = be.asarray(gram, np.float64)
    pen = L0(lam)
    state = be.start(
        a,
        be.asarray(r, np.float64),
        be.asarray(h0, np.float64),
        splitting,
        pen.table(k, np.float64),
        pen.code,
        default_panel(k),
    )
    with state:
        for _ in range(int(n_sweeps)):
            state.sweep()
        return np.asarray(be.to_user(state.current_x(), np.zeros(0)))


#: Rough cost of the sparse l0 sweep in flops per entry and sweep (0.4 us per 256-entry
#: column sweep with ~3 atoms per column), to choose its threads like the dense sweep's.
SPARSE_SWEEP_FLOPS_PER_ENTRY = 8.0


def _l0_sparse_sweeps_cpu(gram, r, h0, lam, n_sweeps, b_diag):
    from ..backends.cpu.backend import plan
    from ..backends.cpu.kernels import l0_sparse_sweeps
    from ..backends.cpu.threads import run_ranges, thread_cap

    a = np.ascontiguousarray(gram, dtype=np.float64)
    rr = np.ascontiguousarray(r, dtype=np.float64)
    x = np.array(h0, dtype=np.float64, order="C", copy=True)
    one = x.ndim == 1
    if one:
        x, rr = x[:, None], rr.reshape(-1, 1)
    k, n_cols = x.shape
    b = np.ascontiguousarray(b_diag, dtype=np.float64)
    flops = SPARSE_SWEEP_FLOPS_PER_ENTRY * k * n_cols * int(n_sweeps)
    bounds, threads = plan(n_cols, flops, thread_cap())
    sweeps = int(n_sweeps)
    lam = float(lam)

    def sweep_range(i):
        l0_sparse_sweeps(a, b, lam, rr, x, bounds[i][0], bounds[i][1], sweeps)

    run_ranges(sweep_range, len(bounds), threads)
    return x[:, 0] if one else x


@accepts_foreign_arrays("D", "Y", "init", host=True)
def sparse_code(
    D,
    Y,
    lam,
    *,
    method="msm",
    init="zeros",
    max_iter=20,
    tol=1e-4,
    omp_tol=None,
    omp_n_nonzero=None,
    random_state=None,
    backend="auto",
    **options,
) -> SolveResult:
    """l0 sparse coding: ``min_H 1/2 ||Y - D H||_F^2 + lam ||H||_0`` for every column of Y.

    One batched problem ``A = D'D``, ``R = -D'Y`` solved by MSM (or a baseline).

    Parameters
    ----------
    D : (m, k) array
        Dictionary; its columns (atoms) must have unit norm.
    Y : (m,) or (m, N) array
        Signals as columns (e.g. 8 x 8 patches flattened: m = 64).
    lam : float >= 0
        l0 weight, in the units of Y squared (see the module docstring for the scale).
    method : {"msm", "pgm", "pgm_ls", "apg", "apg_ls"}
        "msm" is the Matrix Splitting Method; the others are the paper's baselines.
    init : {"zeros", "omp", "random"} or array
        Starting codes: zeros, OMP output (see ``omp_tol``), standard normal entries, or
        an explicit ``(k,)`` / ``(k, N)`` array.
    max_iter : int
        Iterations of the solver (MSM: sweeps).
    tol : float
        Stopping tolerance per column (see :func:`msm_gpu.solve`).
    omp_tol, omp_n_nonzero : optional
        Stopping rule of the OMP initialisation: squared residual per signal or atoms per
        signal.  Default: ``omp_tol = m * 1.15**2 * lam / LAM_PER_SIGMA2`` (the K-SVD
        rule at the noise level that :func:`msm_gpu.apps.denoise.default_lam` maps to lam).
    random_state : int, Generator or None
        Seed of ``init="random"``.
    backend : {"auto", "cpu", "cuda"}
    **options
        Passed on to :func:`msm_gpu.solve` (omega, theta, time_limit, record_objective,
        callback, ...).

    Returns
    -------
    SolveResult
        ``x`` holds the codes H, shape (k,) or (k, N) (float32 when D and Y are both
        float32, else float64; computed in float64); ``fun`` and ``objective`` are the
        full objective ``1/2 ||Y - DH||^2 + lam ||H||_0`` (the constant 1/2 ||Y||^2
        included).  ``info["init_time"]`` is the time spent in the initialisation.

    Examples
    --------
    >>> import numpy as np, msm_gpu as mg
    >>> D = mg.overcomplete_dct(patch_size=4, n_atoms=16)   # orthonormal 2-D DCT
    >>> y = 3.0 * D[:, 5] + 0.1 * D[:, 9]
    >>> h = mg.sparse_code(D, y, lam=0.5).x
    >>> np.flatnonzero(h).tolist(), round(float(h[5]), 4)
    ([5], 3.0)
    """
    started = time.perf_counter()
    lam = v.check_real(lam, "lam", low=0.0)
    method = _check_method(method)
    d = _as_dictionary(D)
    y = _as_signals(Y, d.shape[0])
    dtype = output_dtype(D, Y)
    rng = np.random.default_rng(random_state)
    gram = d.T @ d
    gram = 0.5 * (gram + gram.T)
    t0 = time.perf_counter()
    h0 = _initial_codes(init, d, y, lam, gram, omp_tol, omp_n_nonzero, rng)
    init_time = time.perf_counter() - t0
    r = -(d.T @ y)
    res = solve_h(
        gram, r, lam, method=method, x0=h0, max_iter=max_iter, tol=tol, backend=backend, **options
    )
    const = 0.5 * float(np.vdot(y, y))
    info = dict(res.info)
    info["init_time"] = init_time
    info["lam"] = lam
    return dataclasses.replace(
        res,
        x=np.asarray(res.x).astype(dtype, copy=False),
        fun=res.fun + const,
        objective=np.asarray(res.objective) + const,
        time=time.perf_counter() - started,
        info=info,
    )


#: Largest fraction of nonzero codes for which :func:`dictionary_step` forms H H' and Y H'
#: with sparse products (camera's denoising codes: ~1% nonzero, 1.3 ms -> 0.9 ms and
#: 0.5 ms -> 0.05 ms for 256 x 1000 codes).
SPARSE_CODES_DENSITY = 0.05


def _largest_eigenvalue(s):
    """Largest eigenvalue of the symmetric matrix ``s`` (LAPACK's syevr, that one only)."""
    from scipy.linalg import eigh

    n = s.shape[0]
    return float(eigh(s, eigvals_only=True, subset_by_index=[n - 1, n - 1])[0])


def dictionary_step(D, Y, H, n_steps=1, *, positive=False):
    """Projected gradient steps on ``1/2 ||Y - DH||^2`` over unit-norm atoms (Bao et al.).

    ``D <- P(D - (D H H' - Y H') / L)`` with ``L = ||H H'||_2`` (the Lipschitz constant of
    the gradient in D) and P the column-wise projection onto the unit sphere (with
    ``positive``: onto its nonnegative part, negative entries set to 0 first).  An atom
    that the step sends to zero keeps its previous value; atoms that no signal uses do
    not move.

    Parameters
    ----------
    D : (m, k) array
        Current dictionary (unit-norm columns).  Not modified.
    Y : (m, N) array
    H : (k, N) array
    n_steps : int
    positive : bool
        Keep the atoms nonnegative.

    Returns
    -------
    D_new : ndarray of shape (m, k)
    """
    d = np.array(D, dtype=np.float64)
    y = np.asarray(Y, dtype=np.float64)
    h = np.asarray(H, dtype=np.float64)
    used = np.flatnonzero(np.any(h != 0, axis=1))
    if used.size == 0:
        return d
    hu = h[used]
    if np.count_nonzero(hu) <= SPARSE_CODES_DENSITY * hu.size:
        from scipy.sparse import csr_array

        hs = csr_array(hu)  # a few atoms per signal: sparse products
        hht = (hs @ hs.T).toarray()
        yht = (hs @ y.T).T
    else:
        hht = hu @ hu.T
        yht = y @ hu.T
    d[:, used] = statistics_step(d[:, used], hht, yht, n_steps, positive=positive)
    return d


def statistics_step(D, HHt, YHt, n_steps=1, *, positive=False):
    """:func:`dictionary_step` from the products ``H H'`` (k x k) and ``Y H'`` (m x k).

    The gradient of ``1/2 ||Y - DH||^2`` in D is ``D H H' - Y H'``, so these two products
    are all a step needs: the online (streaming) learner of Mairal et al. (2009)
    accumulates them over the batches.  Returns a new (m, k) array.
    """
    du = np.array(D, dtype=np.float64)
    lip = _largest_eigenvalue(HHt)
    if not lip > 0:
        return du
    for _ in range(int(n_steps)):
        cand = du - (du @ HHt - YHt) / lip
        if positive:
            cand = np.maximum(cand, 0.0)
        norms = np.linalg.norm(cand, axis=0)
        ok = norms > 1e-12
        du = np.where(ok, cand / np.where(ok, norms, 1.0), du)
    return du
