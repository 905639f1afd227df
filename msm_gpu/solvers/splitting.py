"""The matrix splitting A = B + C of the paper (eq. (4)) and its convergence conditions.

    B = L + (D + theta I) / omega            (lower triangular, solved by the sweep)
    C = A - B = L' + ((omega - 1) D - theta I) / omega

Only the diagonals of B and C are needed explicitly: the off-diagonal parts of both are
read straight from A.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_OMEGA = 1.0
DEFAULT_THETA = 0.01


@dataclass(frozen=True)
class Splitting:
    """Diagonals of B and C and the sufficient-decrease constant delta.

    Attributes
    ----------
    b_diag : ndarray (n,)
        B_jj = (A_jj + theta) / omega, the curvature of each 1-D subproblem.
    c_diag : ndarray (n,)
        C_jj = A_jj - B_jj.
    delta : float
        The constant of the theorem that applies (Theorem 1 for convex h, the
        nonconvex theorem otherwise): F(x_{k+1}) <= F(x_k) - delta/2 ||x_{k+1}-x_k||^2.
    convex : bool
        Which theorem ``delta`` comes from.
    """

    omega: float
    theta: float
    b_diag: np.ndarray
    c_diag: np.ndarray
    delta: float
    convex: bool


def convergence_delta(diag_a, omega, theta, convex):
    """delta of Theorem 1 (convex h) or of the nonconvex theorem (paper, section 3.1).

    convex:     delta = 2 theta / omega + (2 - omega) / omega * min_j A_jj
    nonconvex:  delta = min_j ( theta / omega + (1 - omega) / omega * A_jj )
    """
    diag_a = np.asarray(diag_a, dtype=np.float64)
    if convex:
        return float(2.0 * theta / omega + (2.0 - omega) / omega * diag_a.min())
    return float(np.min(theta / omega + (1.0 - omega) / omega * diag_a))


def relative_theta(diag_a, theta):
    """The absolute proximal weight theta * mean(diag A) of a relative ``theta``.

    ``solve``'s ``theta`` is relative to the scale of A, so that B = L + (D + theta_abs
    I)/omega is the same matrix up to the factor s for A and s A: without it a fixed
    theta = 0.01 swamps B_jj when A is tiny (steps shrink, the run stops far from the
    solution) and vanishes when A is huge.  The mean of the diagonal (the average
    curvature of a 1-D subproblem) is the scale: it equals theta for unit-diagonal A
    (sparse coding with unit-norm atoms), and unlike max(diag A) one large column does
    not damp all the others.  A zero diagonal (A = 0) falls back to theta itself.
    """
    diag_a = np.asarray(diag_a, dtype=np.float64)
    scale = float(np.mean(diag_a))
    return float(theta) * scale if scale > 0.0 else float(theta)


def guarded_theta(diag_a, theta):
    """theta, or a tiny positive one when theta = 0 meets a zero diagonal entry.

    A_jj = 0 (e.g. an all-zero NMF factor column, whose Gram row is zero) with theta =
    0 leaves row j without curvature; any B_jj > 0 then gives the exact 1-D answer,
    so the guard changes no iterate where theta = 0 was already valid.
    """
    diag_a = np.asarray(diag_a, dtype=np.float64)
    if theta > 0.0 or float(np.min(diag_a)) > 0.0:
        return float(theta)
    return 1e-14 * max(float(np.max(diag_a)), 1.0)


def b_diagonal(diag_a, omega, theta):
    """B_jj = (A_jj + theta) / omega: the curvature of row j's 1-D subproblem (eq. (4))."""
    return (np.asarray(diag_a, dtype=np.float64) + theta) / omega


def relative_splitting(diag_a, omega, theta, convex, *, check=True) -> Splitting:
    """:func:`make_splitting` with ``theta`` relative to the scale of A
    (:func:`relative_theta`), as ``solve`` and ``least_squares`` take it."""
    return make_splitting(diag_a, omega, relative_theta(diag_a, theta), convex, check=check)


def make_splitting(diag_a, omega, theta, convex, *, check=True) -> Splitting:
    """Build the splitting for a matrix with diagonal ``diag_a``.

    Raises
    ------
    ValueError
        If some B_jj <= 0 (the 1-D subproblem would be unbounded), or, when ``check``
        is true, if delta <= 0 so that the paper's convergence theorem does not apply.
    """
    diag_a = np.asarray(diag_a, dtype=np.float64)
    b_diag = b_diagonal(diag_a, omega, theta)
    if np.any(b_diag <= 0):
        j = int(np.argmin(b_diag))
        raise ValueError(
            f"A[{j}, {j}] = {diag_a[j]:g} with theta = {theta:g} leaves the 1-D subproblem "
            f"of row {j} without curvature (B_jj = (A_jj + theta)/omega = {b_diag[j]:g}); "
            "use theta > 0 (e.g. the default theta=0.01)"
        )
    delta = convergence_delta(diag_a, omega, theta, convex)
    if check and not delta > 0:
        if convex:
            hint = "use theta > 0 or omega < 2 (Theorem 1 needs delta > 0)"
        else:
            hint = (
                "for nonconvex penalties use omega <= 1 with theta > 0, or raise theta "
                "above (omega - 1) * max(diag(A)) (the nonconvex theorem needs delta > 0)"
            )
        raise ValueError(
            f"omega = {omega:g}, theta = {theta:g} give delta = {delta:.6g} <= 0, so MSM "
            f"is not guaranteed to converge: {hint}; pass check_convergence=False to run "
            "anyway"
        )
    return Splitting(
        omega=float(omega),
        theta=float(theta),
        b_diag=b_diag,
        c_diag=diag_a - b_diag,
        delta=delta,
        convex=convex,
    )
