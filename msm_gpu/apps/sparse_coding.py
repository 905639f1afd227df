"""l0 sparse coding and l0 dictionary learning with the Matrix Splitting Method.

Problem (paper, section 5.2), with unit-norm atoms (the columns of ``D``)::

    min_{D, H}  1/2 ||Y - D H||_F^2 + lam ||H||_0       s.t.  ||D[:, i]||_2 = 1

The H-step for a fixed ``D`` is one batched l0 problem, one column per signal:
``A = D'D`` (unit diagonal, so MSM's defaults omega = 1, theta = 0.01 satisfy the
nonconvex convergence condition) and ``R = -D'Y``; :func:`sparse_code` solves it with
:func:`msm_gpu.solve`.  :class:`L0DictionaryLearning` alternates that H-step with a
projected-gradient dictionary step onto unit-norm atoms (Bao, Ji, Quan and Shen 2016).

Scale of ``lam``: the objective is in the units of ``Y`` squared, so ``lam`` scales with
the square of the data.  The paper's values (5 ... 50000) refer to pixel values in
[0, 255]; for data in [0, 1] divide them by 255**2.  See
:func:`msm_gpu.apps.denoise.default_lam` for the rule in the noise level used for
denoising (``lam = LAM_PER_SIGMA2 * sigma**2``).
"""

from __future__ import annotations

import dataclasses
import time
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted

from .._api import solve
from .._input import validation as v
from .._input.foreign import accepts_foreign_arrays
from ..options import METHODS
from ..penalties import L0
from ..result import SolveResult
from ._estimator import (
    BACKEND_CONSTRAINT,
    RANDOM_STATE_CONSTRAINT,
    CaseInsensitiveStrOptions,
    fit_context,
    validate_X,
)

__all__ = [
    "LAM_PER_SIGMA2",
    "OMP_NOISE_GAIN",
    "L0DictionaryLearning",
    "dictionary_step",
    "l0_objective",
    "l0_sweeps",
    "omp",
    "sparse_code",
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


def _as_dictionary(D, name="D"):
    d = np.asarray(D)
    if d.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (n_features, n_atoms), got shape {d.shape}")
    if not np.issubdtype(d.dtype, np.number) or np.iscomplexobj(d):
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
    y = np.asarray(Y)
    if not np.issubdtype(y.dtype, np.number) or np.iscomplexobj(y):
        raise TypeError(f"{name} must be a real numeric array, got dtype {y.dtype}")
    if y.ndim not in (1, 2) or y.shape[0] != m:
        raise ValueError(
            f"{name} must have shape ({m},) or ({m}, n_signals) to match the dictionary, "
            f"got {y.shape}"
        )
    y = y.astype(np.float64)
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return y


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
            return omp(d, y, n_nonzero_coefs=omp_n_nonzero, tol=omp_tol, gram=gram)
        raise ValueError(f"init must be 'zeros', 'random', 'omp' or an array, got {init!r}")
    h0 = np.asarray(init, dtype=np.float64)
    if h0.shape != shape:
        raise ValueError(f"init array must have shape {shape}, got {h0.shape}")
    if not np.all(np.isfinite(h0)):
        raise ValueError("init array contains NaN or infinite values")
    return h0


def solve_h(A, R, lam, *, method="msm", x0=None, max_iter=20, tol=1e-4, backend="auto", **opts):
    """The l0 H-step ``min_H 1/2 tr(H'AH) + tr(H'R) + lam ||H||_0`` by MSM or a baseline.

    Thin wrapper of :func:`msm_gpu.solve` with ``L0(lam)`` and ``method`` one of "msm",
    "pgm", "pgm_ls", "apg", "apg_ls".
    """
    method = _check_method(method)
    opts.setdefault("finish", None)  # the paper's MSM H-step (no support polish, issue 9)
    return solve(
        A, R, L0(lam), x0=x0, max_iter=max_iter, tol=tol, backend=backend, method=method, **opts
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
        ``x`` holds the codes H, shape (k,) or (k, N); ``fun`` and ``objective`` are the
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


def dictionary_step(D, Y, H, n_steps=1):
    """Projected gradient steps on ``1/2 ||Y - DH||^2`` over unit-norm atoms (Bao et al.).

    ``D <- P(D - (D H H' - Y H') / L)`` with ``L = ||H H'||_2`` (the Lipschitz constant of
    the gradient in D) and P the column-wise projection onto the unit sphere.  An atom
    that the step sends to zero keeps its previous value; atoms that no signal uses do
    not move.

    Parameters
    ----------
    D : (m, k) array
        Current dictionary (unit-norm columns).  Not modified.
    Y : (m, N) array
    H : (k, N) array
    n_steps : int

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
    lip = _largest_eigenvalue(hht)
    if lip <= 0:
        return d
    du = d[:, used]
    for _ in range(int(n_steps)):
        g = du @ hht - yht
        cand = du - g / lip
        norms = np.linalg.norm(cand, axis=0)
        ok = norms > 1e-12
        du = np.where(ok, cand / np.where(ok, norms, 1.0), du)
    d[:, used] = du
    return d


# ----------------------------------------------------------------------------------
# estimator
# ----------------------------------------------------------------------------------


class L0DictionaryLearning(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """l0 dictionary learning by alternating minimisation (MSM or PGM H-steps).

    Minimises ``1/2 ||Y - D H||_F^2 + lam ||H||_0`` over unit-norm atoms D and codes H.
    Each outer iteration runs ``h_iter`` iterations of the H-step (:func:`sparse_code`,
    warm-started) and ``d_iter`` projected-gradient dictionary steps
    (:func:`dictionary_step`, Bao et al. 2016).

    Follows scikit-learn's conventions: ``fit(X)`` takes X of shape
    ``(n_samples, n_features)`` (one signal, e.g. a flattened patch, per row) and
    ``components_`` has shape ``(n_components, n_features)`` (one atom per row).
    ``dictionary_`` is the same dictionary with atoms as columns, ready for
    :func:`sparse_code`.

    Parameters
    ----------
    n_components : int
        Number of atoms k.
    lam : float
        l0 weight in the units of X squared (paper's scale: pixels in [0, 255]).
    n_iter : int
        Outer (alternating) iterations.
    init : {"omp", "zeros", "random"} or array (n_samples, n_components)
        Initial codes (``"random"``: standard normal entries, as in the paper).
    method : {"msm", "pgm", "pgm_ls", "apg", "apg_ls"}
        H-step solver.
    dict_init : {"dct", "random", "data"} or array (n_components, n_features)
        Initial dictionary: overcomplete DCT (needs n_features and n_components perfect
        squares), Gaussian, or randomly chosen (normalised) signals.
    h_iter : int
        H-step iterations per outer iteration.
    d_iter : int
        Dictionary steps per outer iteration.
    tol : float
        Tolerance of the H-step solver (its per-signal stopping rule).  0: every signal
        gets all ``h_iter`` iterations; with ``method="msm"`` the H-step is then
        :func:`l0_sweeps` (the sweeps alone, sparse on the CPU).
    omp_tol, omp_n_nonzero : optional
        Stopping rule of ``init="omp"`` (see :func:`sparse_code`).
    random_state : int, Generator or None
    backend : {"auto", "cpu", "cuda"}
    verbose : bool
        Show a progress bar with the objective.

    Attributes
    ----------
    components_ : ndarray (n_components, n_features)
    dictionary_ : ndarray (n_features, n_components)
    codes_ : ndarray (n_components, n_samples)
        Codes of the training signals after the last H-step.
    objective_ : ndarray
        Objective after initialisation and after every outer iteration.
    n_iter_ : int
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Column names of ``X``, when it was a DataFrame with string column names.
    timings_ : dict
        Seconds in "init", "h_step" and "d_step".

    Examples
    --------
    >>> import numpy as np, msm_gpu as mg
    >>> X = np.random.default_rng(0).standard_normal((200, 16))
    >>> model = mg.L0DictionaryLearning(n_components=16, lam=0.5, n_iter=3).fit(X)
    >>> model.components_.shape, bool(model.objective_[-1] <= model.objective_[0])
    ((16, 16), True)
    """

    # Checked by scikit-learn's ``_fit_context`` when fit starts; array values of init
    # and dict_init (shapes, finite, nonzero atoms) are checked where they are used.
    _parameter_constraints: dict = {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "lam": [Interval(Real, 0, None, closed="left")],
        "n_iter": [Interval(Integral, 0, None, closed="left")],
        "init": [CaseInsensitiveStrOptions({"omp", "zeros", "random"}), "array-like"],
        "method": [CaseInsensitiveStrOptions(set(METHODS))],
        "dict_init": [CaseInsensitiveStrOptions({"dct", "random", "data"}), "array-like"],
        "h_iter": [Interval(Integral, 1, None, closed="left")],
        "d_iter": [Interval(Integral, 0, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "omp_tol": [Interval(Real, 0, None, closed="left"), None],
        "omp_n_nonzero": [Interval(Integral, 1, None, closed="left"), None],
        "random_state": RANDOM_STATE_CONSTRAINT,
        "backend": BACKEND_CONSTRAINT,
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        n_components=256,
        lam=1.0,
        n_iter=10,
        *,
        init="omp",
        method="msm",
        dict_init="dct",
        h_iter=5,
        d_iter=1,
        tol=1e-4,
        omp_tol=None,
        omp_n_nonzero=None,
        random_state=None,
        backend="auto",
        verbose=False,
    ):
        self.n_components = n_components
        self.lam = lam
        self.n_iter = n_iter
        self.init = init
        self.method = method
        self.dict_init = dict_init
        self.h_iter = h_iter
        self.d_iter = d_iter
        self.tol = tol
        self.omp_tol = omp_tol
        self.omp_n_nonzero = omp_n_nonzero
        self.random_state = random_state
        self.backend = backend
        self.verbose = verbose

    @property
    def dictionary_(self):
        """The learned dictionary with atoms as columns, shape (n_features, n_components)."""
        check_is_fitted(self, "components_")  # NotFittedError, an AttributeError too
        return self.components_.T

    def _initial_dictionary(self, m, rng, y):
        k = int(self.n_components)
        init = self.dict_init
        if isinstance(init, str):
            key = init.lower()
            if key == "dct":
                from .dictionaries import overcomplete_dct

                p = int(round(np.sqrt(m)))
                kk = int(round(np.sqrt(k)))
                if p * p != m or kk * kk != k:
                    raise ValueError(
                        "dict_init='dct' needs n_features and n_components perfect squares, "
                        f"got {m} and {k}; use dict_init='random' or 'data'"
                    )
                return overcomplete_dct(p, k)
            if key == "random":
                d = rng.standard_normal((m, k))
            elif key == "data":
                idx = rng.choice(y.shape[1], size=k, replace=y.shape[1] < k)
                d = y[:, idx] + 1e-10 * rng.standard_normal((m, k))
            else:
                raise ValueError(
                    f"dict_init must be 'dct', 'random', 'data' or an array, got {init!r}"
                )
            return d / np.linalg.norm(d, axis=0)
        comp = np.asarray(init, dtype=np.float64)
        if comp.shape != (k, m):
            raise ValueError(
                f"dict_init array must have shape (n_components, n_features) = {(k, m)}, "
                f"got {comp.shape}"
            )
        norms = np.linalg.norm(comp, axis=1)
        if np.any(norms == 0) or not np.all(np.isfinite(comp)):
            raise ValueError("dict_init array must have finite, nonzero atoms (rows)")
        return (comp / norms[:, None]).T

    @property
    def _n_features_out(self):
        """k, for ``get_feature_names_out`` (``l0dictionarylearning0``, ...)."""
        return self.components_.shape[0]

    @fit_context
    def fit(self, X, y=None):
        """Learn the dictionary from X of shape (n_samples, n_features); returns self."""
        self._fit(X)
        return self

    @fit_context
    def fit_transform(self, X, y=None):
        """Fit and return the codes of X, shape (n_samples, n_components)."""
        return self._fit(X).T

    def transform(self, X, *, init="omp", max_iter=None):
        """Codes of X (n_samples, n_features) for the learned dictionary (n_samples, k)."""
        check_is_fitted(self, "components_")
        X = validate_X(self, X, reset=False)
        x = _as_signals(X.T, self.components_.shape[1], "X.T")
        res = sparse_code(
            self.dictionary_,
            x,
            self.lam,
            method=self.method,
            init=init,
            max_iter=self.h_iter * 4 if max_iter is None else max_iter,
            tol=self.tol,
            omp_tol=self.omp_tol,
            omp_n_nonzero=self.omp_n_nonzero,
            random_state=self.random_state,
            backend=self.backend,
            record_objective=False,
        )
        return res.x.T

    def _fit(self, X):
        lam = v.check_real(self.lam, "lam", low=0.0)
        method = _check_method(self.method)
        # types and ranges of the parameters: _parameter_constraints (fit_context)
        x = validate_X(self, X, reset=True)
        yy = _as_signals(x.T, x.shape[1], "X.T")
        tol = v.check_real(self.tol, "tol", low=0.0)
        # MSM with no stopping rule is the sweeps alone: the lean path (sparse sweeps on CPU)
        lean = method == "msm" and tol == 0.0
        rng = np.random.default_rng(self.random_state)
        m = yy.shape[0]
        t0 = time.perf_counter()
        d = self._initial_dictionary(m, rng, yy)
        init = self.init
        if not isinstance(init, str):
            init = np.asarray(init, dtype=np.float64).T
        h = _initial_codes(
            init, d, yy, lam, d.T @ d, self.omp_tol, self.omp_n_nonzero, rng
        ).reshape(d.shape[1], yy.shape[1])
        timings = {"init": time.perf_counter() - t0, "h_step": 0.0, "d_step": 0.0}
        objective = [l0_objective(d, yy, h, lam)]
        iterator = range(int(self.n_iter))
        bar = None
        if self.verbose:
            from tqdm.auto import tqdm

            bar = tqdm(iterator, desc=f"L0 dictionary learning ({method})", unit="it")
            iterator = bar
        for _ in iterator:
            t1 = time.perf_counter()
            gram = d.T @ d
            gram = 0.5 * (gram + gram.T)
            if lean:
                h = l0_sweeps(gram, -(d.T @ yy), h, lam, int(self.h_iter), backend=self.backend)
            else:
                res = solve_h(
                    gram,
                    -(d.T @ yy),
                    lam,
                    method=method,
                    x0=h,
                    max_iter=int(self.h_iter),
                    tol=self.tol,
                    backend=self.backend,
                    record_objective=False,
                )
                h = np.asarray(res.x)
            t2 = time.perf_counter()
            d = dictionary_step(d, yy, h, n_steps=int(self.d_iter))
            t3 = time.perf_counter()
            timings["h_step"] += t2 - t1
            timings["d_step"] += t3 - t2
            objective.append(l0_objective(d, yy, h, lam))
            if bar is not None:
                bar.set_postfix(objective=f"{objective[-1]:.6g}", nnz=int(np.count_nonzero(h)))
        if bar is not None:
            bar.close()
        self.components_ = d.T.copy()
        self.codes_ = h
        self.objective_ = np.asarray(objective)
        self.n_iter_ = int(self.n_iter)
        self.timings_ = timings
        return h
