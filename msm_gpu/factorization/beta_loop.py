"""NMF with a beta-divergence loss (Kullback-Leibler, Itakura-Saito, any beta) on the CPU.

    min_{W, H >= 0}  sum_ij d_beta(Y_ij | (WH)_ij) + penalties (scikit-learn's)

Two solvers alternate the half-steps:

* ``"msm"`` (default): the proximal Newton half-steps of
  :mod:`~msm_gpu.factorization.newton_kernels` (MSM sweeps on each column's second-order
  model, Armijo on the divergence), H-step then W-step;
* ``"mu"``: the multiplicative updates of Lee & Seung (2001) and Fevotte & Idier (2011),
  W then H, with scikit-learn's formulas (the MM exponent gamma for beta < 1 and beta >
  2, its EPSILON floors), for parity and comparison.

The objective after each outer iteration comes from the W-step (the Newton kernels
return each column's value; after ``"mu"`` one evaluation pass).  The stopping rules are
the Frobenius loop's (``tol`` on the relative decrease, ``max_iter``, ``time_limit``).
After the loop the W-step is solved to convergence (:func:`solve_w`, also ``transform``).
"""

from __future__ import annotations

import math
import time
import warnings

import numpy as np
import scipy.sparse as sp

from ..backends.cpu.jit import njit
from ..backends.cpu.threads import run_ranges, serial_blas, sweep_threads, thread_cap
from . import newton_kernels as nk
from . import newton_rows as nr
from .loop import Data, is_sparse, power_of_two_times, stable_objective

#: scikit-learn's floor for WH in the multiplicative updates (``_nmf.EPSILON``, float32's
#: eps, absolute: here in the units of Y / 2^e).
EPSILON = float(np.finfo(np.float32).eps)

#: Newton half-steps during the fit: Newton iterations per column and model sweeps per
#: iteration (measured on the issue-49 KL/IS acceptance data; ``benchmarks/bench_nmf_beta.py``).
FIT_NEWTON = 1
FIT_SWEEPS = 30
FIT_SWEEP_TOL = 0.1
#: The Newton kernels' time per counted flop over the tiled MSM sweep's, whose rate
#: ``sweep_threads``' threshold assumes (docs/development.md, "Threads of the Newton
#: half-steps").
SCALAR_COST = 10.0
#: The per-entry work of the GEMM road's passes in counted flops, set so that 150 x 200
#: and larger take two threads (docs/development.md, "Threads of the Newton half-steps").
ROWS_ENTRY_COST = 160
#: The objective the Newton loop tracks by the measured changes is evaluated afresh
#: every this many iterations.
RESYNC = 10
#: ... and in the exact W-step (fit's last one, ``transform``, a mini-batch's W): a few
#: sweeps finished by the exact active set on each model.
SOLVE_NEWTON = 100
SOLVE_SWEEPS = 10
SOLVE_SWEEP_TOL = 0.1
#: ... until the Newton step is below this share of x (a row that converges linearly,
#: as Itakura-Saito's can, would otherwise take all SOLVE_NEWTON iterations).
SOLVE_STEP_TOL = 1e-9
#: Rows that reach the W-step's cap get this many times its iterations again (the cap
#: had left Itakura-Saito rows on digits 9% above their optimum); those that reach that
#: one too are checked by CHECK_NEWTON more, and a warning names the rows whose
#: objective still falls by more than SETTLED_REL of itself there.
EXTRA_NEWTON = 10
CHECK_NEWTON = 20
SETTLED_REL = 1e-12


class BetaData:
    """Y / 2^e for the beta half-steps, float64: its nonzeros by rows and by columns (KL),
    Y and Y' dense (the kinds that read every entry), or for beta = 2 (``solver="mu"``)
    Y as stored, with the Frobenius :class:`~msm_gpu.factorization.loop.Data` for the
    objective."""

    #: Y and Y' as dense arrays where the GEMM road may read them (None: it may not).
    dense_rows = dense_cols = None

    def __init__(self, Y, exponent, beta):
        self.beta = float(beta)
        self.kind = nk.kind_of(self.beta)
        self.shape = tuple(Y.shape)
        self.exponent = int(exponent)
        self.fro = None
        factor = 2.0 ** (-self.exponent)
        if self.beta == 2.0:
            from ..backends import get_backend

            self.fro = Data(Y, get_backend("cpu"), np.float64, exponent)
            y = self.fro.y
            self.by_rows = y
            self.by_cols = self.fro.yt if self.fro.sparse else np.ascontiguousarray(y.T)
            self.nnz = self.fro.nnz
            total = float(y.data.sum()) if self.fro.sparse else float(y.sum())
            self.mean = total / (self.shape[0] * self.shape[1])
        elif self.kind == nk.KIND_KL:
            y = sp.csr_matrix(Y, dtype=np.float64, copy=True)
            y.sum_duplicates()
            y.eliminate_zeros()
            y.sort_indices()
            if self.exponent:
                y.data *= factor
            self.by_rows = y  # rows of Y: the W-step's columns
            self.by_cols = y.T.tocsr()  # columns of Y: the H-step's columns
            self.by_cols.sort_indices()
            self.nnz = int(y.nnz)
            self.mean = float(y.data.sum()) / (self.shape[0] * self.shape[1])
            if self.nnz >= nr.KL_DENSE_SHARE * self.shape[0] * self.shape[1]:
                # mostly nonzero (whether stored dense or sparse): Y and Y' dense as well,
                # for the fit's half-steps by GEMMs (newton_rows)
                self.dense_rows = y.toarray()
                self.dense_cols = np.ascontiguousarray(self.dense_rows.T)
        else:
            y = Y.toarray() if is_sparse(Y) else np.asarray(Y)
            y = np.array(y, dtype=np.float64, order="C", copy=True)
            if self.exponent:
                y *= factor
            self.by_rows = y
            self.by_cols = np.ascontiguousarray(y.T)
            self.nnz = y.size
            self.mean = float(y.mean())
            self.dense_rows, self.dense_cols = self.by_rows, self.by_cols
        self.zmin = nk.Z_FLOOR * max(self.mean, 1e-300)

    @property
    def pattern(self):
        return self.kind == nk.KIND_KL

    def rows_of(self, rows):
        """The same data restricted to Y's ``rows``, for W-steps on them alone."""
        sub = object.__new__(BetaData)
        sub.__dict__.update(self.__dict__)
        sub.by_rows = self.by_rows[rows]
        sub.by_cols = None
        if self.dense_rows is not None:
            sub.dense_rows = self.dense_rows[rows] if sp.issparse(self.by_rows) else sub.by_rows
            sub.dense_cols = None
        sub.shape = (len(rows), self.shape[1])
        sub.nnz = int(sub.by_rows.nnz) if sp.issparse(sub.by_rows) else sub.by_rows.size
        return sub


def newton_half_step(
    data,
    side,
    F,
    X,
    l1,
    l2,
    *,
    omega,
    theta,
    newton,
    sweeps,
    sweep_tol,
    step_tol=0.0,
    exact=False,
    evaluate=False,
):
    """One Newton half-step in place: ``side`` "H" updates X = H' (d x k) for F = W
    (m x k); "W" updates X = W (m x k) for F = H' (d x k).  Returns the change of each
    column's q (``evaluate``: q itself, X unchanged) and the (Newton iterations, sweeps,
    line-search trials) per column."""
    source = data.by_cols if side == "H" else data.by_rows
    c, k = X.shape
    out_f = np.zeros(c)
    counts = np.zeros((c, 3), dtype=np.int64)
    fsum = F.sum(axis=0)
    dense = data.dense_cols if side == "H" else data.dense_rows
    one_newton = int(newton) == 1 and not (exact or evaluate) and dense is not None
    if one_newton and nr.takes(data.kind, k, dense.size):
        rows = (dense, fsum, l1, l2, omega, theta, sweeps, sweep_tol, out_f, counts)
        _newton_rows(data, F, X, *rows)
        return out_f, counts
    pattern, dense = nk.kernels(data.kind)
    args = (float(l1), float(l2), data.zmin, float(omega), float(theta))
    args += (int(newton), int(sweeps), float(sweep_tol), float(step_tol), bool(exact))
    args += (bool(evaluate),)
    args += (out_f, counts)
    if data.pattern:
        head = (data.beta, F, fsum, source.indptr, source.indices, source.data, X)
        kernel = pattern
    else:
        head = (data.beta, np.ascontiguousarray(F.T), fsum, source, X)
        kernel = dense
    # columns in ranges on the sweep threads (the kernels release the GIL): one Newton
    # iteration costs about nnz (k (k + 5) / 2 multiply-adds + a log and two divisions,
    # counted as 40), in scalar code at SCALAR_COST times the tiled sweep's time a flop,
    # the unit of sweep_threads' threshold
    work = SCALAR_COST * float(data.nnz) * (k * (k + 5) / 2 + 40) * max(int(newton), 1)
    n_threads = sweep_threads(work, c, thread_cap())
    bounds = np.linspace(0, c, 4 * n_threads + 1 if n_threads > 1 else 2).astype(int)

    def run(i):
        kernel(*head, int(bounds[i]), int(bounds[i + 1]), *args)

    run_ranges(run, len(bounds) - 1, n_threads)
    return out_f, counts


def _newton_rows(data, F, X, source, fsum, l1, l2, omega, theta, sweeps, sweep_tol, out_f, counts):
    """The fit's half-step on dense data: one Newton iteration a column, its products
    as GEMMs over blocks of columns (:mod:`~msm_gpu.factorization.newton_rows`), the
    blocks on the sweep threads, each GEMM on one BLAS thread."""
    c, k = X.shape
    n = F.shape[0]
    F = np.ascontiguousarray(F)
    Ft = np.ascontiguousarray(F.T)
    K = nr.pair_products(F)
    bounds = nr.block_bounds(c, n)
    # GEMMs (k (k + 7) / 2 multiply-adds an entry) at the tiled sweep's rate, the
    # per-entry passes (derivatives, line search) counted as ROWS_ENTRY_COST flops in
    # scalar code (docs/development.md, "Threads of the Newton half-steps")
    work = float(source.size) * (k * (k + 7) / 2 + SCALAR_COST * ROWS_ENTRY_COST)
    n_threads = sweep_threads(work, len(bounds) - 1, thread_cap())

    def run(i):
        j0, j1 = int(bounds[i]), int(bounds[i + 1])
        nr.newton_block(
            data.kind, data.beta, F, Ft, K, fsum, source[j0:j1], X[j0:j1], float(l1), float(l2),
            data.zmin, float(omega), float(theta), int(sweeps), float(sweep_tol),
            out_f[j0:j1], counts[j0:j1],
        )  # fmt: skip

    run_ranges(run, len(bounds) - 1, n_threads)


def objective(data, W, Ht, reg):
    """The divergence of Y from W H' plus both penalties (one evaluation pass)."""
    if data.fro is not None:
        wt, h = W.T, Ht.T
        g_h, p_w = h @ h.T, data.fro.h_yt(h)
        return stable_objective(data.fro, wt, h, g_h, p_w) + reg.value(wt, h)
    if data.kind == nk.KIND_IS and not data.pattern:
        return _is_divergence(data, W, Ht) + reg.factor_value(W, "W") + reg.factor_value(Ht, "H")
    f_cols, _ = newton_half_step(
        data, "W", Ht, W, reg.l1_w, reg.l2_w, omega=1.0, theta=0.0, newton=0,
        sweeps=0, sweep_tol=0.0, evaluate=True,
    )  # fmt: skip
    return float(f_cols.sum()) + reg.factor_value(Ht, "H")


def _is_divergence(data, W, Ht):
    """Itakura-Saito's sum_ij (r_ij - 1) - log(r_ij), r = Y / (W H'), by blocks of Y's
    rows on the sweep threads: a GEMM and NumPy's vectorised log1p (the compiled
    kernels' log1p is a scalar call, several times slower an entry)."""
    Y = data.by_rows
    m, n = Y.shape
    bounds = nr.block_bounds(m, n)
    parts = np.zeros(len(bounds) - 1)
    work = float(data.nnz) * (2 * W.shape[1] + SCALAR_COST * 10)
    n_threads = sweep_threads(work, len(parts), thread_cap())

    def run(i):
        j0, j1 = int(bounds[i]), int(bounds[i + 1])
        Z = W[j0:j1] @ Ht.T
        if not (Z > 0.0).all():  # (NaN included) the divergence is infinite there
            parts[i] = math.inf
            return
        q = np.divide(Y[j0:j1], Z, out=Z)
        q -= 1.0
        terms = np.log1p(q)
        parts[i] = float(np.subtract(q, terms, out=terms).sum())  # entrywise: q ~ 0 near a fit

    run_ranges(run, len(parts), n_threads)
    return float(parts.sum())


def divergence(data, W, Ht):
    """sum_ij d_beta(Y_ij | (WH)_ij) alone (Data's units)."""
    from .regularization import Regularization

    return objective(data, W, Ht, Regularization())


# -- multiplicative updates (scikit-learn's formulas) ------------------------------------------


def _gamma(beta):
    """The MM exponent of Fevotte & Idier (2011), as scikit-learn."""
    if beta < 1.0:
        return 1.0 / (2.0 - beta)
    if beta > 2.0:
        return 1.0 / (beta - 1.0)
    return 1.0


@njit(nogil=True, fastmath=nk.FAST)
def _kl_numerator(indptr, indices, values, rows_f, cols_f, floor, out):
    """out[r] = sum_j (y_rj / max((WH)_rj, floor)) cols_f[j] over row r's stored entries,
    with (WH)_rj = rows_f[r] . cols_f[j]: scikit-learn's KL numerator (Y / WH) H' (or
    its transpose) on Y's nonzeros, without forming the sparse quotient."""
    k = rows_f.shape[1]
    for r in range(indptr.shape[0] - 1):
        for t in range(k):
            out[r, t] = 0.0
        for q in range(indptr[r], indptr[r + 1]):
            j = indices[q]
            z = 0.0
            for t in range(k):
                z += rows_f[r, t] * cols_f[j, t]
            ratio = values[q] / (z if z > floor else floor)
            for t in range(k):
                out[r, t] += ratio * cols_f[j, t]


def _wh(data, W, Ht):
    """WH, dense (the kinds that read every entry)."""
    return W @ Ht.T


def _mu_dense_terms(y, wh, other, beta):
    """scikit-learn's multiplicative-update numerator (Y (WH)^(beta-2)) F and denominator
    (WH)^(beta-1) F for a dense Y, with its EPSILON floors; ``wh`` is overwritten."""
    whd = wh.copy()
    if beta < 1.0:
        whd[whd < EPSILON] = EPSILON
    if beta < 2.0:
        wh[wh < EPSILON] = EPSILON
    ws = y / (wh * wh) if beta == 0.0 else y * wh ** (beta - 2.0)
    return ws @ other, (whd ** (beta - 1.0)) @ other


def mu_update_w(data, W, Ht, l1, l2):
    """scikit-learn's ``_multiplicative_update_w`` (update in place, W then clipped for
    beta < 1 as scikit-learn does)."""
    beta = data.beta
    y = data.by_rows
    if beta == 2.0:
        numerator = y @ Ht
        denominator = W @ (Ht.T @ Ht)
    else:
        if data.pattern:  # KL: (Y / WH) H' on the nonzeros
            numerator = np.empty_like(W)
            _kl_numerator(y.indptr, y.indices, y.data, W, Ht, EPSILON, numerator)
            denominator = np.broadcast_to(Ht.sum(axis=0), W.shape).copy()
        else:
            numerator, denominator = _mu_dense_terms(y, _wh(data, W, Ht), Ht, beta)
    if l1 > 0:
        denominator = denominator + l1
    if l2 > 0:
        denominator = denominator + l2 * W
    denominator[denominator == 0] = EPSILON
    delta = numerator / denominator
    gamma = _gamma(beta)
    if gamma != 1.0:
        delta **= gamma
    W *= delta
    if beta < 1.0:
        W[W < np.finfo(np.float64).eps] = 0.0


def _mu_h_terms(data, W, Ht, l1, l2):
    """The numerator and denominator (d x k, of H') of scikit-learn's H update."""
    beta = data.beta
    yt = data.by_cols
    if beta == 2.0:
        numerator = yt @ W
        denominator = Ht @ (W.T @ W)
    elif data.pattern:
        numerator = np.empty_like(Ht)
        _kl_numerator(yt.indptr, yt.indices, yt.data, Ht, W, EPSILON, numerator)
        wsum = W.sum(axis=0)
        wsum[wsum == 0] = 1.0
        denominator = np.broadcast_to(wsum, Ht.shape).copy()
    else:
        numerator, denominator = _mu_dense_terms(yt, Ht @ W.T, W, beta)  # on (WH)', d x m
    numerator = np.asarray(numerator)
    if l1 > 0:
        denominator = denominator + l1
    if l2 > 0:
        denominator = denominator + l2 * Ht
    denominator[denominator == 0] = EPSILON
    return numerator, denominator


def mu_update_h(data, W, Ht, l1, l2):
    """scikit-learn's ``_multiplicative_update_h`` on H' (in place)."""
    numerator, denominator = _mu_h_terms(data, W, Ht, l1, l2)
    delta = numerator / denominator
    gamma = _gamma(data.beta)
    if gamma != 1.0:
        delta **= gamma
    Ht *= delta
    if data.beta <= 1.0:
        Ht[Ht < np.finfo(np.float64).eps] = 0.0


def mu_online_h(data, W, Ht, l1, l2, A, B, rho):
    """scikit-learn's online H update of ``MiniBatchNMF`` (Lefevre et al. 2011) on H'
    (in place): the numerators and denominators are accumulated in A and B (d x k) with
    the forgetting weight rho."""
    numerator, denominator = _mu_h_terms(data, W, Ht, l1, l2)
    gamma = _gamma(data.beta)
    if gamma != 1.0:
        Ht **= 1.0 / gamma
    numerator *= Ht
    A *= rho
    B *= rho
    A += numerator
    B += denominator
    np.divide(A, B, out=Ht)
    if gamma != 1.0:
        Ht **= gamma
    if data.beta <= 1.0:
        Ht[Ht < np.finfo(np.float64).eps] = 0.0


# -- the loop -----------------------------------------------------------------------------


def _extrapolated(ex, new, old):
    """``ex.point`` for a factor stored with its components as columns (W, H'): C order."""
    return np.ascontiguousarray(ex.point(new.T, old.T).T)


def alternate_beta(data, W, Ht, p, reg):
    """The outer loop from W (m x k) and H' (d x k), both float64 C-ordered.  Returns the
    best pair (W, H') met and the info dict (the Frobenius loop's keys).

    ``"msm"`` with ``extrapolation=True`` extrapolates between outer iterations as the
    Frobenius loop does (Ang & Gillis 2019): the H-step's result is pushed along its last
    move, the pair (W, H_hat) evaluated (one pass: the W-step's line searches then measure
    its changes from there), W solved for H_hat and pushed likewise; an objective that
    rose restarts from the plain iterates.  ``"auto"`` leaves it off here: the Newton
    half-steps needed more time with it on the KL and IS data of
    ``benchmarks/bench_nmf_beta.py`` (KL 400 x 600: 0.19 s against 0.08 s to the default
    tol).  Without extrapolation the objective follows the changes the line searches
    measured and is evaluated afresh every RESYNC iterations.  ``"mu"`` never
    extrapolates (scikit-learn's iterates)."""
    from .extrapolation import Extrapolation

    solver = p["solver"]
    tol, max_iter, time_limit = p["tol"], p["max_iter"], p["time_limit"]
    opts = {"omega": p["omega"], "theta": p["theta"]}
    fit = {"newton": FIT_NEWTON, "sweeps": FIT_SWEEPS, "sweep_tol": FIT_SWEEP_TOL}
    if not (isinstance(p["inner_iter"], str) and p["inner_iter"] == "auto"):
        fit["sweeps"] = int(p["inner_iter"])
    ex = Extrapolation() if solver == "msm" and p["extrapolation"] is True else None
    reg_h, reg_w = (reg.l1_h, reg.l2_h), (reg.l1_w, reg.l2_w)
    start = time.perf_counter()
    with serial_blas():
        f = objective(data, W, Ht, reg)
        history = [(0.0, f)]
        inner = []
        message = f"reached max_iter = {max_iter}"
        converged = False
        n_iter = 0
        best = (f, W.copy(), Ht.copy()) if math.isfinite(f) else (math.inf, W.copy(), Ht.copy())
        W_prev, H_prev = W, Ht
        while n_iter < max_iter:
            restarted = False
            if solver == "mu":
                mu_update_w(data, W, Ht, *reg_w)
                mu_update_h(data, W, Ht, *reg_h)
                f_new = objective(data, W, Ht, reg)
                counts = (1, 1)
                pair = (W, Ht)
            elif ex is None:  # f follows the changes the line searches measured
                dh, ch = newton_half_step(data, "H", W, Ht, *reg_h, **opts, **fit)
                dw, cw = newton_half_step(data, "W", Ht, W, *reg_w, **opts, **fit)
                f_new = f + float(dh.sum()) + float(dw.sum())
                if (n_iter + 1) % RESYNC == 0 or not math.isfinite(f_new):
                    # (an infinite start, a zero row of W where Y's is not, leaves the
                    # changes undefined: the objective is evaluated afresh)
                    f_new = objective(data, W, Ht, reg)
                counts = (int(ch[:, 1].sum()), int(cw[:, 1].sum()))
                pair = (W, Ht)
            else:
                H_new = Ht.copy()
                _, ch = newton_half_step(data, "H", W, H_new, *reg_h, **opts, **fit)
                H_hat = _extrapolated(ex, H_new, H_prev)
                f_hat = objective(data, W, H_hat, reg)
                if not math.isfinite(f_hat):  # past a barrier: the plain H-step
                    H_hat = H_new
                    f_hat = objective(data, W, H_hat, reg)
                W_new = W.copy()
                dw, cw = newton_half_step(data, "W", H_hat, W_new, *reg_w, **opts, **fit)
                f_new = f_hat + float(dw.sum())
                counts = (int(ch[:, 1].sum()), int(cw[:, 1].sum()))
                pair = (W_new, H_hat)
                if math.isfinite(f_new) and ex.update(f_new, f):
                    W, Ht = _extrapolated(ex, W_new, W_prev), H_hat
                else:  # restart from the plain iterates
                    if not math.isfinite(f_new):
                        ex.update(math.inf, f)
                    W, Ht = W_new, H_new
                    restarted = True
                W_prev, H_prev = W_new, H_new
            n_iter += 1
            f_prev, f = f, f_new
            history.append((time.perf_counter() - start, f))
            inner.append(counts)
            if math.isfinite(f) and f < best[0]:
                best = (f, pair[0].copy(), pair[1].copy())
            if not math.isfinite(f) and ex is None:
                message = f"stopped: the objective is not finite ({f}) after {n_iter} iterations"
                break
            if (
                tol > 0
                and not restarted
                and math.isfinite(f_prev)
                and math.isfinite(f)
                and f_prev - f <= tol * f_prev
            ):
                message = f"converged: relative decrease of the objective <= tol = {tol:g}"
                converged = True
                break
            if time_limit is not None and time.perf_counter() - start >= time_limit:
                message = f"reached time_limit = {time_limit:g} s"
                break
    f_best, W, Ht = best
    info = {
        "n_iter": n_iter,
        "history": np.asarray(history, dtype=np.float64).reshape(-1, 2),
        "converged": converged,
        "message": message,
        "inner_iterations": np.asarray(inner, dtype=np.int64).reshape(-1, 2),
        "inner_iter": (fit["sweeps"], fit["sweeps"]),
        "time": time.perf_counter() - start,
        "solver": solver,
        "backend": "cpu",
        "objective": f_best,
        "extrapolation": ex is not None,
        "restarts": 0 if ex is None else ex.restarts,
        "rescaled": 0,
        "beta": data.beta,
    }
    return W, Ht, info


def solve_w(data, Ht, reg, p, W=None, max_newton=None, value=True):
    """W (m x k) minimising the divergence of Y from W H' plus W's penalty, by Newton
    half-steps to convergence (at most ``max_newton`` iterations, default SOLVE_NEWTON),
    from W (the fit's) or from scikit-learn's transform start sqrt(mean(Y) / k).  Returns
    W and the objective (both penalties; None unless ``value``)."""
    m, k = data.shape[0], Ht.shape[1]
    if W is None:
        W = np.full((m, k), math.sqrt(max(data.mean, 1e-300) / k))
    else:
        W = np.array(W, dtype=np.float64, order="C", copy=True)
    newton = SOLVE_NEWTON if max_newton is None else int(max_newton)
    solve = {"sweeps": SOLVE_SWEEPS, "sweep_tol": SOLVE_SWEEP_TOL, "step_tol": SOLVE_STEP_TOL}
    with serial_blas():
        _, counts = newton_half_step(
            data, "W", Ht, W, reg.l1_w, reg.l2_w, omega=1.0, theta=0.0, newton=newton,
            exact=True, **solve,
        )  # fmt: skip
        capped = np.flatnonzero(counts[:, 0] >= newton)
        if capped.size:
            # rows whose Newton steps had not settled (Itakura-Saito's can crawl): more
            # iterations for those rows alone, and a warning where F still moved
            _settle_rows(data, Ht, reg, W, capped, EXTRA_NEWTON * newton, solve)
        f = objective(data, W, Ht, reg) if value else None
    return W, f


def _settle_rows(data, Ht, reg, W, rows, newton, solve):
    """More Newton iterations (``newton``) for W's ``rows``, in place.  Rows that reach
    this cap too get a last check of :data:`CHECK_NEWTON` iterations: a
    ConvergenceWarning where it still lowers a row's objective by more than
    :data:`SETTLED_REL` of it (the row is still moving, not merely failing the step test
    in a flat direction)."""
    sub = data.rows_of(rows)
    Wr = np.ascontiguousarray(W[rows])
    step = {"l1": reg.l1_w, "l2": reg.l2_w, "omega": 1.0, "theta": 0.0, **solve}
    _, counts = newton_half_step(sub, "W", Ht, Wr, newton=newton, exact=True, **step)
    W[rows] = Wr
    rows = rows[counts[:, 0] >= newton]
    if not rows.size:
        return
    sub = data.rows_of(rows)
    Wr = np.ascontiguousarray(W[rows])
    value, _ = newton_half_step(sub, "W", Ht, Wr, newton=1, evaluate=True, **step)
    change, _ = newton_half_step(sub, "W", Ht, Wr, newton=CHECK_NEWTON, exact=True, **step)
    W[rows] = Wr
    moving = int(np.count_nonzero(-change > SETTLED_REL * np.abs(value)))
    if moving:
        from sklearn.exceptions import ConvergenceWarning

        warnings.warn(
            f"the W-step for the fitted H had not settled in {moving} of {W.shape[0]} rows "
            f"after {newton} Newton iterations (their objective still fell by more than "
            f"{SETTLED_REL:g} of itself): those rows may not be optimal (raise max_iter, "
            "or transform_max_iter)",
            ConvergenceWarning,
            stacklevel=4,
        )


def check_data_for_beta(Y, beta):
    """scikit-learn's refusal of zeros for beta <= 0 (their divergence is infinite)."""
    if beta > 0.0:
        return
    if is_sparse(Y):
        has_zero = Y.nnz < Y.shape[0] * Y.shape[1] or bool((Y.data == 0).any())
    else:
        has_zero = bool((np.asarray(Y) == 0).any())
    if has_zero:
        raise ValueError(
            "When beta_loss <= 0 and Y contains zeros, the divergence is infinite and the "
            "solver may diverge (scikit-learn refuses it too). Please add small values to Y, "
            "or use a positive beta_loss."
        )


# -- the estimator's two calls -----------------------------------------------------------------


def fit_beta(Y, params, W=None, H=None):
    """``NMF.fit_transform`` for beta != 2 or ``solver="mu"`` (CPU): checks, the start,
    the loop, the exact last W-step.  Returns W (m x k), H (k x d) in Y's units and
    dtype (NumPy) and the info dict (objective and history in Y's units)."""
    from .beta import beta_value
    from .loop import (
        check_data,
        check_params,
        dtype_of,
        exact_w_step,
        history_in_user_units,
        n_components,
        scale_exponent,
        start_factors,
    )
    from .regularization import Regularization

    check_params(params)
    beta = beta_value(params["beta_loss"])
    Y = check_data(Y)
    check_data_for_beta(Y, beta)
    backend = _host_backend(params, Y)
    m, d = Y.shape
    k = n_components(params, m, d, H if params["init"] == "custom" else None)
    dtype = dtype_of(Y)
    e = scale_exponent(Y)
    data = BetaData(Y, e, beta)
    # the start from Y / 2^e, as every loss's (loop.start_factors)
    W0, H0 = start_factors(Y, data.by_rows, params, k, backend, dtype, e, W, H)
    Wx = np.array(W0, dtype=np.float64, order="C")
    Ht = np.array(np.asarray(H0).T, dtype=np.float64, order="C")
    reg = Regularization.from_params(params, (m, d)).rescaled(e, beta)
    Wx, Ht, info = alternate_beta(data, Wx, Ht, params, reg)
    # the last W-step solved to convergence: fit_transform(Y) is transform(Y)
    info["objective_loop"] = info["objective"]
    if data.fro is not None:
        wt = exact_w_step(data.fro, backend, np.ascontiguousarray(Ht.T), params, reg, Wx.T)
        Wx = np.ascontiguousarray(wt.T)
        loss = divergence(data, Wx, Ht)  # one pass over Y; the penalties need none
        info["objective"] = loss + reg.value(Wx.T, Ht.T)
    else:
        Wx, info["objective"] = solve_w(data, Ht, reg, params, Wx)
        loss = divergence(data, Wx, Ht)
    scale = beta * e
    info["reconstruction_err"] = power_of_two_times(math.sqrt(2.0 * max(loss, 0.0)), 0.5 * scale)
    info["objective"] = power_of_two_times(info["objective"], scale)
    info["objective_loop"] = power_of_two_times(info["objective_loop"], scale)
    info["history"] = history_in_user_units(info["history"], e, beta)
    half = 2.0 ** (e // 2)
    W_out = np.ascontiguousarray(Wx * half, dtype=dtype)
    H_out = np.ascontiguousarray(Ht.T * half, dtype=dtype)
    return W_out, H_out, info


def transform_beta(Y, components, params):
    """``NMF.transform`` for beta != 2 (CPU): W for the fitted H by Newton to rounding,
    from scikit-learn's transform start, in Y's units and dtype."""
    from .beta import beta_value
    from .loop import check_data, dtype_of, scale_exponent
    from .regularization import Regularization

    beta = beta_value(params["beta_loss"])
    Y = check_data(Y)
    check_data_for_beta(Y, beta)
    _host_backend(params, Y)
    e = scale_exponent(Y)
    data = BetaData(Y, e, beta)
    half = 2.0 ** (e // 2)
    Ht = np.array(np.asarray(components).T, dtype=np.float64, order="C") / half
    reg = Regularization.from_params(params, Y.shape).rescaled(e, beta)
    Wx, _ = solve_w(data, Ht, reg, params, value=False)
    return np.ascontiguousarray(Wx * half, dtype=dtype_of(Y))


def _host_backend(params, Y):
    """The CPU backend; beta-divergence NMF and ``solver="mu"`` run on the host only."""
    from ..arrays import is_cupy
    from ..backends import get_backend

    name = params["backend"]
    if (isinstance(name, str) and name.lower() == "cuda") or is_cupy(Y):
        raise ValueError(
            f"beta_loss={params['beta_loss']!r} with solver={params['solver']!r} runs on the "
            "CPU only (NumPy or SciPy input, backend='cpu' or 'auto'); the GPU road "
            "minimises the Frobenius loss"
        )
    return get_backend("cpu")
