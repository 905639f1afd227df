"""float32 input end to end, every penalty, against float64 answers computed independently.

Each penalty is solved from float32 data through ``mg.least_squares`` (``mg.nnls`` for
NonNeg as well) and through ``mg.solve`` with a float32 Gram matrix; the result must stay
float32 and be as good as float32 data allow when judged in float64 on the same data (the
float32 numbers converted exactly to float64):

* convex penalties: its float64 objective is within a relative 1e-8 of the optimum found by
  other libraries (``numpy.linalg.lstsq`` for Zero, ``scipy.optimize.nnls`` for NonNeg,
  ``scipy.optimize.lsq_linear`` for Box, scikit-learn's ``Lasso`` coordinate descent for
  L1 and NonNegL1), and x is close to the reference x;
* nonconvex penalties (L0, Lp): there is no independent global optimum, so the float32
  answer must be a fixed point of the float64 MSM map (one float64 sweep from it moves it
  by no more than float32 rounding, and keeps its support), and its objective must be
  within a relative 1e-9 of the float64 run from the same start.

Independent of the library: the reference optima (SciPy / scikit-learn), the objectives
(evaluated here in float64) and the conversion of a ``solve`` problem (A, R) to a least-
squares one (A = L L', C = L', d = -L^-1 R: 1/2 ||C x - d||^2 = 1/2 x'Ax + R'x + const).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import scipy.optimize
from sklearn.linear_model import Lasso

import msm_gpu as mg

M, N, R = 60, 20, 4

# Bounds exactly representable in float32 (and rows with infinite ones): a float32 x
# clipped to a non-representable bound, e.g. float32(-0.3) = -0.30000001, sits outside the
# float64 bound and its float64 objective is inf.
LB = np.where(np.arange(N) % 3 == 0, -np.inf, -0.375)
UB = np.where(np.arange(N) % 4 == 0, np.inf, 0.5)

CONVEX = {
    "zero": mg.Zero(),
    "nonneg": mg.NonNeg(),
    "box_rows": mg.Box(LB, UB),
    "l1": mg.L1(8.0),
    "nonneg_l1": mg.NonNegL1(8.0),
}
NONCONVEX = {
    "l0": mg.L0(3.0),
    "l0_bounded": mg.L0(3.0, lb=0.0, ub=2.0),
    "lp_half": mg.Lp(2.0, 0.5),
    "lp_two_thirds": mg.Lp(2.0, 2.0 / 3.0),
}

#: Convex: relative objective gap allowed.  x32 carries float32 rounding (~6e-8 relative
#: per entry) on top of a float32 Gram matrix (error ~cond(C'C) 6e-8, cond 20 here); F is
#: flat to first order at the optimum, so the gap is second order: measured <= 8e-12
#: (Zero, the least constrained), <= 1e-13 for the others.  A wrong face, a mis-scaled
#: lam or a finish that stops early leaves gaps of 1e-6 and more.
GAP_RTOL = 1e-8
#: Convex: max |x32 - x_ref| / max |x_ref|, measured <= 3.5e-7.
X_RTOL = 5e-6
#: Nonconvex: ||T64(x32) - x32|| / ||x32|| for the float64 MSM map T64, measured <= 3.7e-7
#: (float32 rounding of x and of C'C, moved once by a well-conditioned sweep).
FIXED_POINT_RTOL = 3e-6
#: Nonconvex: |F(x32) - F(x64)| / |F(x64)|, measured <= 6.1e-13.
NONCONVEX_F_RTOL = 1e-9
#: res.fun against F(x) evaluated here: the library forms F from float32 terms of size
#: up to 1/2 ||D||^2 (least squares: 1/2 x'Ax + r'x + 1/2 ||D||^2, which cancel to a
#: small F when the fit is good), so its error is a few float32 eps (6e-8) of
#: |F| + 1/2 ||D||^2: measured <= 5.4e-8 of that.
FUN_RTOL = 1e-6


def make_data(seed=0):
    """C (M x N, Gaussian) and D (M x R, a sparse signal plus noise), float32."""
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((M, N)).astype(np.float32)
    x_true = rng.standard_normal((N, R)) * (rng.random((N, R)) < 0.4)
    d = c.astype(np.float64) @ x_true + 0.3 * rng.standard_normal((M, R))
    return c, d.astype(np.float32)


class Problem:
    """One float64 view of the float32 data: either least squares (C, D) or solve (A, R).

    ``kind = "least_squares"``: F(x) = 1/2 ||C x - D||^2 + h(x) with the float32 C, D.
    ``kind = "solve"``: F(x) = 1/2 x'Ax + R'x + h(x) with A = C32'C32 and R = -C32'D32
    formed in float32 (what a float32 user passes), then converted exactly to float64.
    """

    def __init__(self, kind, seed=0):
        self.kind = kind
        self.c32, self.d32 = make_data(seed)
        if kind == "solve":
            self.a32 = self.c32.T @ self.c32
            self.a32 = 0.5 * (self.a32 + self.a32.T)  # exactly symmetric, still float32
            self.r32 = -(self.c32.T @ self.d32)
            a, r = self.a32.astype(np.float64), self.r32.astype(np.float64)
            # least-squares form of the same problem, for the reference solvers
            low = np.linalg.cholesky(a)
            self.c = low.T
            self.d = -scipy.linalg.solve_triangular(low, r, lower=True)
            self.const = 0.5 * np.sum(self.d**2)  # F_solve = F_ls - const
            self.a, self.r = a, r
        else:
            self.c, self.d = self.c32.astype(np.float64), self.d32.astype(np.float64)
            self.const = 0.0
            self.a, self.r = self.c.T @ self.c, -(self.c.T @ self.d)
        self.half_d2 = 0.5 * np.sum(self.d**2)  # the scale of the terms that make up F

    def objective(self, x, penalty):
        """F(x) in float64 (inf outside dom h)."""
        x = np.asarray(x, dtype=np.float64)
        fit = 0.5 * np.sum((self.c @ x - self.d) ** 2) - self.const
        return fit + np.sum(penalty.value(x))

    def run(self, penalty, entry=None):
        """The library's float32 answer, default options: ``solve`` for kind "solve", else
        ``least_squares`` (``nnls`` when ``entry == "nnls"``)."""
        if self.kind == "solve":
            return mg.solve(self.a32, self.r32, penalty)
        if entry == "nnls":
            return mg.nnls(self.c32, self.d32)
        return mg.least_squares(self.c32, self.d32, penalty)


def check_fun(problem, res, f_here, where):
    """res.fun is F(res.x) (least squares: constant included) to float32 rounding."""
    scale = abs(f_here) + problem.half_d2
    err = abs(res.fun - f_here) / scale
    assert err <= FUN_RTOL, f"{where}: fun {res.fun!r} vs F(x) {f_here!r} ({err:.3g})"


def reference_optimum(problem, name, penalty):
    """The float64 optimum of a convex problem, column by column, from SciPy / sklearn.

    scikit-learn's Lasso minimises 1/(2 m) ||d - C x||^2 + alpha ||x||_1, so alpha =
    lam / m for our 1/2 ||C x - d||^2 + lam ||x||_1 (m = rows of C).
    """
    c, d = problem.c, problem.d
    cols = []
    for k in range(d.shape[1]):
        if name == "zero":
            x = np.linalg.lstsq(c, d[:, k], rcond=None)[0]
        elif name == "nonneg":
            x = scipy.optimize.nnls(c, d[:, k])[0]
        elif name == "box_rows":
            bounds = (LB, UB)
            x = scipy.optimize.lsq_linear(c, d[:, k], bounds=bounds, method="bvls", tol=1e-15).x
        else:
            lasso = Lasso(
                alpha=penalty.lam / c.shape[0],
                fit_intercept=False,
                positive=(name == "nonneg_l1"),
                tol=1e-15,
                max_iter=1_000_000,
            )
            x = lasso.fit(c, d[:, k]).coef_
        cols.append(x)
    return np.array(cols).T


@pytest.fixture(scope="module", params=["least_squares", "solve"])
def problem(request):
    """The float32 problem, as least squares and as solve(A, R)."""
    return Problem(request.param)


# -- convex penalties ---------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CONVEX))
def test_convex_float32_reaches_the_float64_optimum(problem, name):
    # Bugs caught: float32 input promoted (x returned as float64, or the working dtype
    # chosen as float64); the finish skipped or its float64 x not cast back for float32
    # (the MSM warm-up alone leaves gaps far above 1e-8); the float32 path scaling lam or
    # the bounds wrongly; x outside the bounds (inf objective); res.fun not F(res.x).
    penalty = CONVEX[name]
    x_ref = reference_optimum(problem, name, penalty)
    f_ref = problem.objective(x_ref, penalty)
    entries = ["nnls", "least_squares"] if problem.kind != "solve" and name == "nonneg" else [None]
    for entry in entries:
        res = problem.run(penalty, entry)
        where = f"{name} ({entry or problem.kind})"
        assert res.x.dtype == np.float32 and res.x.shape == (N, R), where
        f32 = problem.objective(res.x, penalty)
        gap = (f32 - f_ref) / abs(f_ref)
        assert np.isfinite(f32), f"{where}: the float32 x is outside dom h"
        # (a gap below -1e-10 would mean the reference is not optimal)
        assert -1e-10 <= gap <= GAP_RTOL, f"{where}: relative objective gap {gap:.3g}"
        err = np.abs(res.x - x_ref).max() / np.abs(x_ref).max()
        assert err <= X_RTOL, f"{where}: max |dx| {err:.3g}"
        check_fun(problem, res, f32, where)


def test_reference_optima_are_optimal():
    # guards the references (and their objective scaling, e.g. sklearn's 1/(2 m)): each
    # satisfies the first-order conditions, computed here.  With g the gradient of the
    # smooth part and s+ / s- the right / left slopes of lam |x| at x, a minimiser has
    # g + s+ >= 0 where x < ub (no gain moving right) and g + s- <= 0 where x > lb.
    for kind in ("least_squares", "solve"):
        problem = Problem(kind)
        scale = 1e-8 * np.abs(problem.c.T @ problem.d).max()
        for name, penalty in CONVEX.items():
            x = reference_optimum(problem, name, penalty)
            g = problem.c.T @ (problem.c @ x - problem.d)
            lam = float(penalty.lam)
            lb = np.broadcast_to(np.asarray(penalty.lb, dtype=float), (N,))[:, None]
            ub = np.broadcast_to(np.asarray(penalty.ub, dtype=float), (N,))[:, None]
            s_right = np.where(x >= 0, lam, -lam)
            s_left = np.where(x <= 0, -lam, lam)
            assert np.all((g + s_right)[x < ub] >= -scale), (kind, name)
            assert np.all((g + s_left)[x > lb] <= scale), (kind, name)
            assert np.all((x >= lb) & (x <= ub)), (kind, name)


# -- nonconvex penalties ------------------------------------------------------------------


@pytest.mark.parametrize("name", list(NONCONVEX))
def test_nonconvex_float32_is_a_float64_fixed_point(problem, name):
    # Bugs caught: the polish kept although it is not an MSM fixed point (e.g. always
    # accepting the least-squares point on the support, which ignores the Lp term: one
    # float64 sweep then moves it by 2-3 %), a float32-only error in the penalty table
    # (lam off by 1% moves the Lp answers), x returned in float64, fun not F(x).
    penalty = NONCONVEX[name]
    res = problem.run(penalty)
    x32 = res.x
    assert x32.dtype == np.float32 and x32.shape == (N, R)
    frac_zero = np.mean(x32 == 0.0)
    assert 0.2 < frac_zero < 0.9  # sparse, but not trivially zero
    x = x32.astype(np.float64)
    # the float64 MSM map: one plain sweep with the same default omega and theta
    z = mg.solve(problem.a, problem.r, penalty, x0=x, max_iter=1, tol=0, finish=None).x
    moved = np.linalg.norm(z - x) / np.linalg.norm(x)
    assert moved <= FIXED_POINT_RTOL, f"{name}: one float64 sweep moves x32 by {moved:.3g}"
    np.testing.assert_array_equal(z != 0.0, x != 0.0)
    f_here = problem.objective(x, penalty)
    assert np.isfinite(f_here)
    check_fun(problem, res, f_here, name)


@pytest.mark.parametrize("name", list(NONCONVEX))
def test_nonconvex_float32_objective_matches_float64_run(problem, name):
    # Same start (zeros), same options, float64 data (the float32 numbers): the runs find
    # the same local minimiser, so F agrees to float32 rounding.  Bugs caught: a float32
    # run ending at another point than the float64 one (a float32-only error in the
    # penalty table, a polish accepted wrongly), or on another support.  (Whether the
    # polish runs at all is invisible here: the plain float32 MSM answer is as good to
    # float32 precision.)
    penalty = NONCONVEX[name]
    x32 = problem.run(penalty).x
    if problem.kind == "solve":
        x64 = mg.solve(problem.a, problem.r, penalty).x
    else:
        x64 = mg.least_squares(problem.c, problem.d, penalty).x
    assert x64.dtype == np.float64
    f32, f64 = problem.objective(x32, penalty), problem.objective(x64, penalty)
    rel = abs(f32 - f64) / abs(f64)
    assert rel <= NONCONVEX_F_RTOL, f"{name}: F(x32) {f32!r} vs F(x64) {f64!r} ({rel:.3g})"
    np.testing.assert_array_equal(x32 != 0.0, x64 != 0.0)
