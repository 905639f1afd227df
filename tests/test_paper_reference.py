"""One MSM sweep written from the paper in plain NumPy, against every sweep of the library.

Yuan, Zheng and Ghanem (CVPR 2017), eq. (4): with A = L + D + L', the splitting is

    B = L + (D + theta_abs I) / omega,    C = A - B,    theta_abs = theta * mean(diag A)

(theta relative to the scale of A, as the README's "Choosing omega and theta" documents),
and one iteration solves B Z + R + C X + dh(Z) = 0 by forward substitution, row by row:

    w_j = R_j + (C X)_j + sum_{i<j} B_ji Z_i,     Z_j = argmin_t 1/2 B_jj t^2 + w_j t + h(t).

What is independent of the library here: the matrices B and C (formed whole, not as the
library's folded matrix), theta_abs, the row-by-row substitution, and every 1-D prox
(closed forms for Zero / NonNeg / Box / L1 / NonNegL1 / L0; for Lp a numerical
minimisation: bounded Brent on the convex part of the 1-D objective, refined by Newton's
method, compared with t = 0).  Nothing from ``msm_gpu`` is imported for the reference;
``msm_gpu.solvers.splitting.make_splitting`` builds the object that ``CpuBackend.start`` expects
(the library side only), and its ``b_diag`` / ``c_diag`` are checked against this file's
B_jj and C_jj.

Compared with the reference, from the same X0, after one iteration: (a) the CPU
backend's Numba sweep at several panel sizes, (b) the emulated CUDA kernel in every layout
(skipped only without g++), (c) ``msm_gpu.solve(..., max_iter=1, tol=0, finish=None)``,
which also rescales the data by powers of two (msm_gpu/_input/scaling.py) and must still agree
to rounding.  theta != 0 and omega != 1 throughout (omega > 1 for convex penalties, < 1
for nonconvex ones, as the README's convergence conditions allow).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.optimize

sys.path.insert(0, str(Path(__file__).resolve().parent))


import msm_gpu as mg  # noqa: E402
from msm_gpu.backends.cpu.backend import CpuBackend
from msm_gpu.backends.cuda.backend import CudaSweepState
from msm_gpu.solvers.splitting import make_splitting

N, M = 37, 6  # 37 rows: panels of 16 leave a short last panel; sub-panels of 8 too
THETA = 0.05
OMEGA_CONVEX, OMEGA_NONCONVEX = 1.3, 0.8
LAYOUTS = ["fused", "resident", "panel"]
PANELS = [5, 16, N]
RTOL = 1e-12  # float64: one sweep, O(n) terms per w_j; measured <= 4e-16 relative
RTOL_LP = 1e-11  # Lp: the numerical reference (Brent + Newton), measured <= 6e-16
MARGIN = 1e-7  # no entry of the reference within this of a discontinuity of its prox


# -- the reference: splitting, 1-D proxes, sweep ---------------------------------------


def paper_splitting(a, omega, theta):
    """B and C of eq. (4) as full matrices, with theta relative to mean(diag A).

    Returns
    -------
    b, c : ndarray (n, n)
        B lower triangular, C = A - B.
    theta_abs : float
    """
    d = np.diag(a).astype(np.float64)
    theta_abs = theta * d.mean()
    b = np.tril(a, -1) + np.diag((d + theta_abs) / omega)
    return b, a - b, theta_abs


def lp_prox_numeric(w, b, lam, p):
    """argmin_t 1/2 b t^2 + w t + lam |t|^p by numerical minimisation (no closed form).

    With u = |t| on the side sign(t) = sign(a), a = -w/b (the other side only adds
    w t > 0), g(u) = b/2 u^2 - |w| u + lam u^p has g'' = b + lam p (p - 1) u^(p-2): g is
    concave below u_c = (lam p (1 - p) / b)^(1/(2-p)) and convex above, and g' > 0 for
    u >= |a|.  So the only possible nonzero local minimiser lies in [u_c, |a|], where g is
    convex: bounded Brent finds it, Newton's method on g' = 0 polishes it, and it is kept
    if g < 0 = g(0) strictly (a tie goes to 0).

    Returns
    -------
    t : float
    margin : float
        |g(u*)|, the distance of this input from a tie (inf when no nonzero local
        minimiser exists).
    """
    mag = abs(w) / b
    if mag == 0.0 or lam == 0.0:
        return -w / b, np.inf
    u_c = (lam * p * (1.0 - p) / b) ** (1.0 / (2.0 - p))
    if u_c >= mag:
        return 0.0, np.inf

    def g(u):
        return 0.5 * b * u * u - abs(w) * u + lam * u**p

    res = scipy.optimize.minimize_scalar(
        g, bounds=(u_c, mag), method="bounded", options={"xatol": 1e-12 * mag}
    )
    u = float(res.x)
    for _ in range(20):
        d1 = b * u - abs(w) + lam * p * u ** (p - 1.0)
        d2 = b + lam * p * (p - 1.0) * u ** (p - 2.0)
        if d2 <= 0.0:
            break
        u_new = min(max(u - d1 / d2, u_c), mag)
        if u_new == u:
            break
        u = u_new
    if b * u - abs(w) + lam * p * u ** (p - 1.0) > 1e-9 * abs(w):
        return 0.0, np.inf  # the minimum on [u_c, |a|] is the end u_c: g increasing there
    value = g(u)
    return (float(np.sign(-w)) * u if value < 0.0 else 0.0), abs(value)


def prox_1d(spec, j, w, b):
    """The 1-D step argmin_t 1/2 b t^2 + w t + h_j(t) of the penalty ``spec``, row j.

    Parameters
    ----------
    spec : dict
        ``kind`` in {"box", "l1", "nonneg_l1", "l0", "lp"} and its parameters (``lb``,
        ``ub`` scalars or per-row arrays; ``lam``; ``p``).
    j : int
    w, b : float

    Returns
    -------
    t : float
    margin : float
        How far the input is from a discontinuity of the prox (inf for continuous ones).
    """
    a = -w / b
    lb = np.broadcast_to(spec.get("lb", -np.inf), (N,))[j]
    ub = np.broadcast_to(spec.get("ub", np.inf), (N,))[j]
    kind = spec["kind"]
    if kind == "box":
        return min(max(a, lb), ub), np.inf
    if kind == "l1":
        return np.sign(a) * max(abs(a) - spec["lam"] / b, 0.0), np.inf
    if kind == "nonneg_l1":
        return max(a - spec["lam"] / b, 0.0), np.inf
    if kind == "l0":
        c = min(max(a, lb), ub)  # the best nonzero point; 0 is feasible for these cases
        gain = 0.5 * b * c * c + w * c + spec["lam"]  # phi(c) - phi(0)
        return (c if gain < 0.0 else 0.0), abs(gain)
    if kind == "lp":
        return lp_prox_numeric(w, b, spec["lam"], spec["p"])
    raise ValueError(kind)


def paper_sweep(a, r, x, spec, omega, theta):
    """One MSM iteration from X by forward substitution with B and C of eq. (4), float64.

    Returns
    -------
    z : ndarray (n, m)
    margin : float
        The smallest distance of any row update from a discontinuity of its prox.
    """
    a, r, x = (np.asarray(v, dtype=np.float64) for v in (a, r, x))
    b, c, _ = paper_splitting(a, omega, theta)
    rhs = r + c @ x
    z = np.zeros_like(x)
    margin = np.inf
    for j in range(a.shape[0]):
        w_row = rhs[j] + b[j, :j] @ z[:j]
        for col in range(x.shape[1]):
            z[j, col], m = prox_1d(spec, j, w_row[col], b[j, j])
            margin = min(margin, m)
    return z, margin


# -- the problems ------------------------------------------------------------------------


def per_row_bounds(rng):
    """Per-row lb <= 0 <= ub, some infinite, some finite (and a few rows with lb = ub = 0)."""
    lb = np.where(rng.random(N) < 0.25, -np.inf, rng.uniform(-0.6, 0.0, N))
    ub = np.where(rng.random(N) < 0.25, np.inf, rng.uniform(0.0, 0.6, N))
    lb[[3, 20]] = ub[[3, 20]] = 0.0
    return lb, ub


# name -> (spec for the reference, penalty for the library); lam in the data's units
LB_ROWS, UB_ROWS = per_row_bounds(np.random.default_rng(7))
CASES = {
    "zero": ({"kind": "box"}, mg.Zero()),
    "nonneg": ({"kind": "box", "lb": 0.0}, mg.NonNeg()),
    "box_rows": ({"kind": "box", "lb": LB_ROWS, "ub": UB_ROWS}, mg.Box(LB_ROWS, UB_ROWS)),
    "l1": ({"kind": "l1", "lam": 2.0}, mg.L1(2.0)),
    "nonneg_l1": ({"kind": "nonneg_l1", "lam": 1.5}, mg.NonNegL1(1.5)),
    "l0": ({"kind": "l0", "lam": 3.0}, mg.L0(3.0)),
    "l0_bounded": (
        {"kind": "l0", "lam": 1.0, "lb": 0.0, "ub": 0.7},
        mg.L0(1.0, lb=0.0, ub=0.7),
    ),
    "lp_half": ({"kind": "lp", "lam": 2.0, "p": 0.5}, mg.Lp(2.0, 0.5)),
    "lp_two_thirds": ({"kind": "lp", "lam": 2.0, "p": 2.0 / 3.0}, mg.Lp(2.0, 2.0 / 3.0)),
}
THRESHOLDING = {"l1", "nonneg_l1", "l0", "l0_bounded", "lp_half", "lp_two_thirds"}


def make_data(seed, dtype=np.float64):
    """A (exactly symmetric, positive definite, entries ~3), R (~10) and X0 (~1.5).

    max |A| and max |R| are far from 1, so ``solve``'s power-of-two rescaling changes the
    exponents of x, F and lam (checked by test_solve_rescaling_is_really_exercised).
    """
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((N, N + 10))
    a = 3.0 * (g @ g.T / (N + 10) + 0.05 * np.eye(N))
    a = 0.5 * (a + a.T)
    r = 10.0 * rng.standard_normal((N, M))
    x0 = 1.5 * rng.standard_normal((N, M))
    return a.astype(dtype), r.astype(dtype), x0.astype(dtype)


def omega_for(penalty):
    return OMEGA_CONVEX if penalty.is_convex else OMEGA_NONCONVEX


def rel_err(got, want):
    """max |got - want| / max |want|."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return np.abs(got - want).max() / np.abs(want).max()


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    """(name, spec, penalty, data, reference Z) for one penalty, float64."""
    name = request.param
    spec, penalty = CASES[name]
    a, r, x0 = make_data(seed=11)
    z_ref, margin = paper_sweep(a, r, x0, spec, omega_for(penalty), THETA)
    # the data are away from every tie / threshold jump (a different seed otherwise)
    assert margin > MARGIN, f"{name}: an entry is within {margin:.2g} of a discontinuity"
    if name in THRESHOLDING:
        # both sides of the threshold occur, so a wrong threshold changes the answer
        assert 0.1 < np.mean(z_ref == 0.0) < 0.9, f"{name}: zeros {np.mean(z_ref == 0.0)}"
    if name == "box_rows":
        # finite lower and upper bounds are active, and rows with an infinite bound go
        # beyond every finite one (|z| > 0.6), so a bound read from the wrong row shows
        lb, ub = LB_ROWS[:, None], UB_ROWS[:, None]
        assert np.any((z_ref == lb) & np.isfinite(lb)) and np.any((z_ref == ub) & np.isfinite(ub))
        assert np.any(np.abs(z_ref) > 0.6)
    return name, spec, penalty, (a, r, x0), z_ref


def tolerance(name):
    return RTOL_LP if name.startswith("lp") else RTOL


# -- the reference itself ---------------------------------------------------------------


def test_reference_prox_numeric_matches_closed_form_thresholds():
    # the Lp reference against the classical half-thresholding value (Xu et al. 2012):
    # 1/2 (t - a)^2 + mu |t|^(1/2) has its threshold at a = 3/2 mu^(2/3), where the
    # nonzero minimiser is 2a/3.  Bug caught in this file: a wrong inflection point or
    # sign in lp_prox_numeric.
    mu = 0.8
    thr = 1.5 * mu ** (2.0 / 3.0)
    assert lp_prox_numeric(-thr * (1 - 1e-6), 1.0, mu, 0.5)[0] == 0.0
    t, _ = lp_prox_numeric(-thr * (1 + 1e-6), 1.0, mu, 0.5)
    assert t == pytest.approx(2.0 * thr / 3.0, rel=1e-3)
    t, _ = lp_prox_numeric(thr * 3, 1.0, mu, 0.5)
    assert t < 0 and 0.5 * t * t + thr * 3 * t + mu * abs(t) ** 0.5 < 0


# -- (a) the CPU backend --------------------------------------------------------------------


def library_splitting(a, penalty, omega, theta_abs):
    """The Splitting object ``CpuBackend.start`` expects, checked against B_jj and C_jj."""
    b, c, _ = paper_splitting(np.asarray(a, dtype=np.float64), omega, THETA)
    split = make_splitting(np.diag(a).astype(np.float64), omega, theta_abs, penalty.is_convex)
    np.testing.assert_allclose(split.b_diag, np.diag(b), rtol=1e-15)
    np.testing.assert_allclose(split.c_diag, np.diag(c), rtol=1e-14, atol=1e-15)
    return split


@pytest.mark.parametrize("panel", PANELS)
def test_cpu_backend_sweep_matches_paper(case, panel):
    # Bugs caught: a wrong B_jj or C_jj (theta not divided by omega, C_jj with the wrong
    # sign), the folded matrix missing or double-counting in-panel terms (panel 5 and 16
    # split the rows; panel N is one panel), old instead of new values for i < j, a wrong
    # prox anywhere in the Numba sweep (including its own L0 and Box branches).
    name, _, penalty, (a, r, x0), z_ref = case
    _, _, theta_abs = paper_splitting(a, omega_for(penalty), THETA)
    split = library_splitting(a, penalty, omega_for(penalty), theta_abs)
    state = CpuBackend().start(a, r, x0, split, penalty.table(N), penalty.code, panel)
    try:
        state.sweep()
        z = state.current_x()
    finally:
        state.close()
    assert rel_err(z, z_ref) <= tolerance(name), f"{name}: {rel_err(z, z_ref):.3g}"


# -- (b) the emulated CUDA kernel ---------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_emulated_cuda_sweep_matches_paper(emu, case, layout):
    # Bugs caught: the kernel using B_jj where C_jj belongs (or 1/B_jj rounded wrongly),
    # a layout (fused: A in shared memory; resident: A from global memory; panel: a GEMM
    # per panel and the in-panel kernel) mixing old and new rows, a wrong device prox.
    name, _, penalty, (a, r, x0), z_ref = case
    _, _, theta_abs = paper_splitting(a, omega_for(penalty), THETA)
    split = library_splitting(a, penalty, omega_for(penalty), theta_abs)
    state = CudaSweepState(
        np, emu, a, r, x0, split.b_diag, split.c_diag, penalty.table(N), penalty.code, 16,
        layout=layout,
    )  # fmt: skip
    assert state.layout == layout
    state.sweep()
    z = state.current_x()
    assert rel_err(z, z_ref) <= tolerance(name), f"{name}/{layout}: {rel_err(z, z_ref):.3g}"


# -- (c) solve, one plain MSM iteration ---------------------------------------------------


def test_solve_one_iteration_matches_paper(case):
    # Bugs caught: theta taken as absolute (or relative to max(diag A)) instead of
    # theta * mean(diag A); the power-of-two rescaling applied to lam with the wrong
    # exponent (L1: 2^(x-f), L0: 2^-f, Lp: 2^(p x - f)) or not to the bounds; x0 not
    # rescaled; more or fewer than one sweep for max_iter=1, tol=0.
    name, _, penalty, (a, r, x0), z_ref = case
    omega = omega_for(penalty)
    res = mg.solve(a, r, penalty, x0=x0, omega=omega, theta=THETA, max_iter=1, tol=0, finish=None)
    _, _, theta_abs = paper_splitting(a, omega, THETA)
    assert res.n_iter == 1 and res.x.dtype == np.float64 and res.x.shape == (N, M)
    assert res.info["theta_abs"] == pytest.approx(theta_abs, rel=1e-14)
    assert rel_err(res.x, z_ref) <= tolerance(name), f"{name}: {rel_err(res.x, z_ref):.3g}"


def test_solve_rescaling_is_really_exercised():
    # guards the claim of the test above: the data's max |A| and max |R| are not powers
    # of two near 1, so solve divides by 2^e with e != 0 (a rescaling bug would show)
    a, r, _ = make_data(seed=11)
    assert np.frexp(np.abs(a).max())[1] >= 2 and np.frexp(np.abs(r).max())[1] >= 4


# -- float32 ---------------------------------------------------------------------------------

#: float32: every w_j sums ~n products of size ~|R| in float32 (eps 6e-8), and B_jj, C_jj
#: and the table are rounded to float32 as well: measured max relative error 1.1e-7
#: (solve), 1.5e-7 (CPU, panel), 2.8e-7 (fused, resident); 2e-6 leaves room for other
#: summation orders while a wrong term (~1e-2 relative at least) cannot hide.
RTOL_F32 = 2e-6


@pytest.fixture(scope="module")
def float32_case():
    """(penalty, omega, splitting, data, reference Z) of the float32 case: L1."""
    spec, penalty = CASES["l1"]
    a, r, x0 = make_data(seed=5, dtype=np.float32)
    omega = OMEGA_CONVEX
    z_ref, _ = paper_sweep(a, r, x0, spec, omega, THETA)  # float64, on the float32 data
    assert 0.1 < np.mean(z_ref == 0.0) < 0.9
    _, _, theta_abs = paper_splitting(a.astype(np.float64), omega, THETA)
    split = library_splitting(a, penalty, omega, theta_abs)
    return penalty, omega, split, (a, r, x0), z_ref


@pytest.mark.parametrize("where", ["cpu", *LAYOUTS, "solve"])
def test_float32_one_sweep_matches_paper(float32_case, where, request):
    # One penalty (L1) in float32 through every library path, against the float64
    # reference on the same (float32) data.  Bugs caught: a float32 path reading B, C or
    # the penalty table in the wrong precision, a float32-only kernel instantiation with
    # a wrong formula, solve's rescaling of float32 data going through a rounding step.
    penalty, omega, split, (a, r, x0), z_ref = float32_case
    if where == "cpu":
        state = CpuBackend().start(a, r, x0, split, penalty.table(N), penalty.code, 16)
        try:
            state.sweep()
            z = state.current_x()
        finally:
            state.close()
    elif where == "solve":
        z = mg.solve(
            a, r, penalty, x0=x0, omega=omega, theta=THETA, max_iter=1, tol=0, finish=None
        ).x
    else:
        state = CudaSweepState(
            np, request.getfixturevalue("emu"), a, r, x0, split.b_diag, split.c_diag,
            penalty.table(N), penalty.code, 16, layout=where,
        )  # fmt: skip
        state.sweep()
        z = state.current_x()
    assert z.dtype == np.float32
    assert rel_err(z, z_ref) <= RTOL_F32, f"{where}: {rel_err(z, z_ref):.3g}"
