"""Property: ``solve`` raises ValueError/TypeError or returns a finite x with a correct flag.

Random shapes, dtypes, scales (A and R scaled independently, 1e-300 .. 1e300 in float64,
1e-30 .. 1e30 in float32), penalties and matrices (well conditioned, singular PSD,
indefinite), with and without the up-front checks.  The problem is built at unit scale
(A0, R0, h0) and scaled so that X = xs X0 and F = fs F0 (xs = sR / sA, fs = sR^2 / sA): the
checks run at unit scale.  ``converged=True`` must mean finite x and F, F equal to the
directly computed objective and, for convex h and PSD A, a vanishing proximal-gradient
residual ||x - prox_{h/L}(x - (A x + r) / L)|| (zero exactly at a minimiser).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import objective, random_psd
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

import msm_gpu as mg

CONVEX = {"zero", "nonneg", "box", "l1", "nonnegl1"}


def make_penalty(kind, xs, fs):
    """h with h(xs t) = fs h0(t), h0 the penalty of the same kind at xs = fs = 1."""
    if kind == "zero":
        return mg.Zero()
    if kind == "nonneg":
        return mg.NonNeg()
    if kind == "box":
        return mg.Box(-0.5 * xs, 0.7 * xs)
    if kind == "l1":
        return mg.L1(0.1 * fs / xs)
    if kind == "nonnegl1":
        return mg.NonNegL1(0.1 * fs / xs)
    if kind == "l0":
        return mg.L0(0.05 * fs)
    return mg.Lp(0.05 * fs / math.sqrt(xs), 0.5)


def make_matrix(kind, rng, n):
    if kind == "pd":
        a = random_psd(rng, n) + 0.5 * np.eye(n)
    elif kind == "singular":
        a = random_psd(rng, n, rank=max(1, n // 2))
    else:  # indefinite with a positive diagonal: only an eigenvalue test can tell
        a = random_psd(rng, n) + 0.1 * np.eye(n)
        if n == 1:
            return -a
        i, j = rng.choice(n, size=2, replace=False)
        bump = rng.uniform(1.5, 4.0) * math.sqrt(a[i, i] * a[j, j])  # 2 x 2 minor < 0
        a[i, j] += bump
        a[j, i] += bump
    return 0.5 * (a + a.T)


def _explained_error(exc, kind, check, xs, fs, dtype):
    """A ValueError must be one of the legitimate refusals, with its reason."""
    text = str(exc)
    if "must be positive semidefinite, but A[" in text:  # a negative diagonal entry
        return kind == "indefinite"
    if "not positive semidefinite" in text:
        return kind == "indefinite" and check
    out_of_range = "outside the range" in text or "out of range" in text
    exp_limit = 30 if dtype == np.float32 else 280
    extreme = abs(math.log10(xs)) > exp_limit or abs(math.log10(fs)) > 280
    return out_of_range and extreme


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(
    seed=st.integers(0, 2**31),
    n=st.integers(1, 12),
    r=st.integers(1, 3),
    dtype=st.sampled_from([np.float64, np.float32]),
    scale=st.tuples(st.floats(-1.0, 1.0), st.floats(-1.0, 1.0)),
    pen_kind=st.sampled_from(["zero", "nonneg", "box", "l1", "nonnegl1", "l0", "lp"]),
    mat_kind=st.sampled_from(["pd", "singular", "indefinite"]),
    check=st.booleans(),
    one_column=st.booleans(),
)
def test_solve_raises_or_returns_a_truthful_result(
    seed, n, r, dtype, scale, pen_kind, mat_kind, check, one_column
):
    rng = np.random.default_rng(seed)
    top = 30 if dtype == np.float32 else 300
    sa, sr = 10.0 ** round(scale[0] * top), 10.0 ** round(scale[1] * top)
    xs, fs = sr / sa, sr * sr / sa if math.isfinite(sr * sr / sa) else math.inf
    assume(0 < fs < math.inf and 0 < xs < math.inf)
    a0 = make_matrix(mat_kind, rng, n)
    r0 = rng.normal(size=n if one_column else (n, r))
    a_user = (a0 * sa).astype(dtype)
    r_user = (r0 * sr).astype(dtype)
    assume(np.all(np.isfinite(a_user)) and np.all(np.isfinite(r_user)))
    try:
        pen = make_penalty(pen_kind, xs, fs)
    except (ValueError, OverflowError):
        assume(False)
    assume(not pen.lam or (0 < pen.lam < math.inf))
    tol = 1e-5 if dtype == np.float32 else 1e-8
    try:
        with np.errstate(all="ignore"):
            res = mg.solve(a_user, r_user, pen, check_convergence=check, tol=tol, max_iter=3000)
    except TypeError as exc:  # no TypeError is expected for these inputs
        raise AssertionError(f"unexpected TypeError: {exc}") from exc
    except ValueError as exc:
        assert _explained_error(exc, mat_kind, check, xs, fs, dtype), str(exc)
        event(f"refused: {str(exc)[:40]}")
        return

    x = np.asarray(res.x, dtype=np.float64)
    assert res.x.dtype == dtype and res.x.shape == r_user.shape
    if res.converged:
        assert np.all(np.isfinite(x)) and math.isfinite(res.fun)
    if mat_kind != "indefinite":
        assert np.all(np.isfinite(x)), res.message
    else:
        assert check is False  # with the check on, indefinite A is refused up front
        if pen_kind == "zero":  # unbounded below: can never converge
            assert not res.converged and "not positive semidefinite" in res.message
    event(f"{mat_kind}, converged={res.converged}")
    if not res.converged:
        # why, in words: out of iterations, A not PSD, or (exact finish) the KKT test failed
        why = ("max_iter", "not positive semidefinite", "KKT residual above tol")
        assert any(reason in res.message for reason in why), res.message
        if mat_kind == "pd" and pen_kind in CONVEX:
            pytest.fail(f"a well-conditioned convex problem did not converge: {res.message}")
        return

    # converged: the objective is the direct one, and for convex h at PSD A a minimiser
    a_unit = a_user.astype(np.float64) / sa
    r_unit = r_user.astype(np.float64) / sr
    x_unit = x / xs
    pen0 = make_penalty(pen_kind, 1.0, 1.0)
    f_unit = objective(a_unit, r_unit, x_unit, pen0)
    rtol = 1e-3 if dtype == np.float32 else 1e-7
    scale_f = abs(f_unit) + float(np.sum(r_unit**2)) + 1e-300
    assert abs(res.fun / fs - f_unit) <= rtol * scale_f, (res.fun / fs, f_unit)
    if pen_kind in CONVEX and mat_kind != "indefinite":
        lip = max(float(np.linalg.eigvalsh(a_unit)[-1]), 1e-12)
        x2 = x_unit.reshape(n, -1)
        grad = a_unit @ x2 + r_unit.reshape(n, -1)
        resid = x2 - pen0.prox(-(lip * x2 - grad), np.full_like(x2, lip))
        size = np.linalg.norm(x2) + np.linalg.norm(r_unit) / lip
        limit = (1e-2 if dtype == np.float32 else 1e-4) * size
        if mat_kind == "pd":
            limit /= 10
        assert np.linalg.norm(resid) <= limit, (np.linalg.norm(resid), size, res.n_iter)
