"""Separable penalties h and their exact one-dimensional proximal steps.

Every MSM row update (paper, eq. (9)) solves the scalar problem

    t* = argmin_t  1/2 b t^2 + w t + h(t),        b > 0,

which is the proximal step of h/b at a = -w/b.  Each penalty here is described by
one integer *code* and a per-row parameter table ``params`` of shape ``(n, 4)`` with
columns ``[lam, lb, ub, p]``.  The Numba sweep (``backends/cpu/kernels.py``) and the
CUDA kernel (``kernels/prox.cuh``) both read exactly this table, and this module holds
the reference (array-API) implementation of the same formulas.

Codes
-----
``CODE_BOX = 0``  h(t) = indicator(lb <= t <= ub)                 (Zero, NonNeg, Box)
``CODE_L1  = 1``  h(t) = lam |t| + indicator(lb <= t <= ub)       (L1, NonNegL1)
``CODE_L0  = 2``  h(t) = lam [t != 0] + indicator(lb <= t <= ub)  (L0)
``CODE_LP  = 3``  h(t) = lam |t|^p, p in {1/2, 2/3}               (Lp)

Tie rule for nonconvex penalties: when zero and a nonzero point attain the same
1-D objective, the prox returns zero (the sparser point), as in the paper's l0 rule
``t* = 0 if w^2 <= 2 lam b``.
"""

from __future__ import annotations

import math
from numbers import Real

import numpy as np

from ..arrays import namespace

CODE_BOX = 0
CODE_L1 = 1
CODE_L0 = 2
CODE_LP = 3

#: Column indices of the parameter table.
COL_LAM, COL_LB, COL_UB, COL_P = 0, 1, 2, 3


def _check_scalar(value, name, *, nonnegative=False):
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"{name} must not be NaN")
    if nonnegative and (value < 0 or math.isinf(value)):
        raise ValueError(f"{name} must be a finite number >= 0, got {value}")
    return value


def _check_bound(value, name):
    """A bound is a real scalar (may be +-inf) or a 1-D array of them."""
    if np.isscalar(value) or (isinstance(value, np.ndarray) and value.ndim == 0):
        return _check_scalar(value.item() if isinstance(value, np.ndarray) else value, name)
    arr = np.array(value, dtype=np.float64, copy=True)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a scalar or a 1-D array (one bound per row)")
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty")
    if np.isnan(arr).any():
        raise ValueError(f"{name} must not contain NaN")
    arr.setflags(write=False)
    return arr


class Penalty:
    """Base class of separable penalties h(X) = sum_ij h(X_ij).

    Subclasses set ``code``, ``is_convex`` and the fields that ``table`` reads.
    """

    code: int = CODE_BOX
    is_convex: bool = True
    lam: float = 0.0
    lb: float | np.ndarray = -np.inf
    ub: float | np.ndarray = np.inf
    p: float = 0.0

    # -- the shared table -------------------------------------------------------
    def table(self, n: int, dtype=np.float64) -> np.ndarray:
        """Per-row parameter table ``(n, 4)`` = ``[lam, lb, ub, p]`` for the sweeps."""
        self.check_rows(n)
        params = np.empty((n, 4), dtype=dtype)
        params[:, COL_LAM] = self.lam
        params[:, COL_LB] = self.lb
        params[:, COL_UB] = self.ub
        params[:, COL_P] = self.p
        return params

    def check_rows(self, n: int) -> None:
        """Refuse per-row bounds whose length is not the problem's n rows."""
        for bound, name in ((self.lb, "lb"), (self.ub, "ub")):
            if isinstance(bound, np.ndarray) and bound.shape != (n,):
                raise ValueError(
                    f"penalty bound {name} has {bound.shape[0]} entries but the problem "
                    f"has n = {n} rows"
                )

    # -- reference formulas (array API: NumPy or CuPy arrays) -------------------
    def value(self, x):
        """Elementwise h(x); ``inf`` outside the bounds.  Sum it for h(X)."""
        return penalty_value(x, self.code, *self._broadcast_params(x))

    def prox(self, w, b):
        """Elementwise argmin_t 1/2 b t^2 + w t + h(t) (``b > 0``)."""
        return penalty_prox(w, b, self.code, *self._broadcast_params(w))

    def _broadcast_params(self, x):
        xp = namespace(x)

        def column(v):
            if isinstance(v, np.ndarray):
                v = xp.asarray(v, dtype=x.dtype)
                return xp.reshape(v, (v.shape[0],) + (1,) * (x.ndim - 1))
            return v

        return column(self.lam), column(self.lb), column(self.ub), self.p

    def __repr__(self):
        return f"{type(self).__name__}()"

    def __eq__(self, other):
        return type(self) is type(other) and repr(self) == repr(other)

    def __hash__(self):
        return hash(repr(self))


class Zero(Penalty):
    """h = 0: MSM is then Gauss-Seidel (omega = 1) / SOR for A x = -R."""

    code = CODE_BOX


class Box(Penalty):
    """h = indicator(lb <= x <= ub); bounds are scalars or per-row arrays, may be infinite."""

    code = CODE_BOX

    def __init__(self, lb=-np.inf, ub=np.inf):
        self.lb = _check_bound(lb, "lb")
        self.ub = _check_bound(ub, "ub")
        _check_order(self.lb, self.ub)

    def __repr__(self):
        return f"Box(lb={_fmt(self.lb)}, ub={_fmt(self.ub)})"


class NonNeg(Box):
    """h = indicator(x >= 0): nonnegative least squares when A = C'C."""

    def __init__(self):
        super().__init__(0.0, np.inf)

    def __repr__(self):
        return "NonNeg()"


class L1(Penalty):
    """h = lam |x|."""

    code = CODE_L1

    def __init__(self, lam):
        self.lam = _check_scalar(lam, "lam", nonnegative=True)

    def __repr__(self):
        return f"{type(self).__name__}(lam={self.lam!r})"


class NonNegL1(L1):
    """h = lam |x| + indicator(x >= 0)."""

    def __init__(self, lam):
        super().__init__(lam)
        self.lb = 0.0


class L0(Penalty):
    """h = lam [x != 0] + indicator(lb <= x <= ub)  (nonconvex).

    ``L0(lam, lb=0)`` is nonnegative l0.  The prox returns a global minimiser of the
    1-D problem; on a tie between zero and a nonzero point it returns zero.
    """

    code = CODE_L0
    is_convex = False

    def __init__(self, lam, lb=-np.inf, ub=np.inf):
        self.lam = _check_scalar(lam, "lam", nonnegative=True)
        self.lb = _check_bound(lb, "lb")
        self.ub = _check_bound(ub, "ub")
        _check_order(self.lb, self.ub)

    def __repr__(self):
        return f"L0(lam={self.lam!r}, lb={_fmt(self.lb)}, ub={_fmt(self.ub)})"


class Lp(Penalty):
    """h = lam |x|^p for p = 1/2 or 2/3 (nonconvex, closed-form prox).

    p = 1/2 uses the half-thresholding formula (Xu et al. 2012), p = 2/3 the formula of
    Cao, Sun and Xu (2013), both derived here for the scaling 1/2 b t^2 + w t.  On a tie
    between zero and the nonzero stationary point the prox returns zero.
    """

    code = CODE_LP
    is_convex = False

    def __init__(self, lam, p=0.5):
        self.lam = _check_scalar(lam, "lam", nonnegative=True)
        p = _check_scalar(p, "p")
        if not (math.isclose(p, 0.5) or math.isclose(p, 2.0 / 3.0)):
            raise ValueError(f"p must be 1/2 or 2/3 (closed-form prox), got {p}")
        self.p = 0.5 if math.isclose(p, 0.5) else 2.0 / 3.0

    def __repr__(self):
        return f"Lp(lam={self.lam!r}, p={self.p!r})"


def _fmt(bound):
    return "array" if isinstance(bound, np.ndarray) else repr(bound)


def _check_order(lb, ub):
    if np.any(np.asarray(lb) > np.asarray(ub)):
        raise ValueError("lb must be <= ub (elementwise)")


# ------------------------------------------------------------------------------
# Reference formulas.  They are written once against the array API and mirror the
# scalar code in backends/cpu/kernels.py and kernels/prox.cuh line by line.
# ------------------------------------------------------------------------------


def penalty_value(x, code, lam, lb, ub, p):
    """Elementwise h(x) for a penalty given by code and parameters."""
    xp = namespace(x)
    inside = (x >= lb) & (x <= ub)
    if code == CODE_BOX:
        base = xp.zeros_like(x)
    elif code == CODE_L1:
        base = lam * xp.abs(x)
    elif code == CODE_L0:
        base = xp.where(x != 0, lam * xp.ones_like(x), xp.zeros_like(x))
    elif code == CODE_LP:
        base = lam * xp.abs(x) ** p
    else:
        raise ValueError(f"unknown penalty code {code}")
    return xp.where(inside, base, xp.full_like(x, xp.inf))


def penalty_prox(w, b, code, lam, lb, ub, p):
    """Elementwise argmin_t 1/2 b t^2 + w t + h(t), b > 0 (see module docstring)."""
    xp = namespace(w)
    a = -w / b
    if code == CODE_BOX:
        return xp.clip(a, lb, ub)
    if code == CODE_L1:
        shrunk = xp.sign(a) * xp.maximum(xp.abs(a) - lam / b, xp.zeros_like(a))
        return xp.clip(shrunk, lb, ub)
    if code == CODE_L0:
        c = xp.clip(a, lb, ub)
        # keep c only if it beats t = 0 strictly (tie -> 0); 0 must be feasible
        gain = 0.5 * b * c * c + w * c + lam
        zero_ok = (lb <= 0) & (ub >= 0)
        return xp.where(zero_ok & (gain >= 0), xp.zeros_like(c), c)
    if code == CODE_LP:
        return _lp_prox(xp, a, lam / b, p)
    raise ValueError(f"unknown penalty code {code}")


def _lp_prox(xp, a, mu, p):
    """argmin_t 1/2 (t - a)^2 + mu |t|^p for p = 1/2 or 2/3 (global, tie -> 0).

    For a > 0 the nonzero candidate t > 0 solves t - a + mu p t^(p-1) = 0.
    p = 1/2, s = sqrt(t):  s^3 - a s + mu/2 = 0           (depressed cubic)
    p = 2/3, s = t^(1/3):  s^4 - a s + 2 mu/3 = 0         (depressed quartic, Ferrari)
    The largest positive root is the local minimiser; it is kept if its objective is
    strictly below the objective 1/2 a^2 of t = 0.
    """
    mag = xp.abs(a)
    mu = mu + xp.zeros_like(a)
    safe_mu = xp.where(mu > 0, mu, xp.ones_like(mu))
    if p == 0.5:
        # s = 2 sqrt(a/3) cos(1/3 arccos(-(3 mu / (4 a)) sqrt(3 / a))); a real root
        # s > 0 exists iff the arccos argument is >= -1, i.e. 16 a^3 >= 27 mu^2
        real = 16.0 * mag * mag * mag >= 27.0 * safe_mu * safe_mu
        safe_mag = xp.where(real, mag, xp.ones_like(mag))
        z = -(3.0 * safe_mu / (4.0 * safe_mag)) * xp.sqrt(3.0 / safe_mag)
        zc = xp.clip(z, -1.0, 1.0)
        s = 2.0 * xp.sqrt(safe_mag / 3.0) * xp.cos(xp.acos(zc) / 3.0)
        t = s * s
        tp = s  # t^(1/2), exactly as the Numba and CUDA proxes take it
    else:
        # Ferrari: y^3 - c y - a^2/8 = 0 with c = 2 mu / 3, largest root y > 0, then
        # s = (phi + sqrt(2 a / phi - phi^2)) / 2 with phi = sqrt(2 y).
        c = 2.0 * safe_mu / 3.0
        z = (3.0 * mag * mag / (16.0 * c)) * xp.sqrt(3.0 / c)
        big = z > 1.0
        y = (
            2.0
            * xp.sqrt(c / 3.0)
            * xp.where(
                big,
                xp.cosh(xp.acosh(xp.maximum(z, xp.ones_like(z))) / 3.0),
                xp.cos(xp.acos(xp.clip(z, -1.0, 1.0)) / 3.0),
            )
        )
        phi = xp.sqrt(2.0 * y)
        safe_phi = xp.where(phi > 0, phi, xp.ones_like(phi))
        disc = 2.0 * mag / safe_phi - phi * phi
        real = (disc >= 0) & (mag > 0)
        s = 0.5 * (phi + xp.sqrt(xp.maximum(disc, xp.zeros_like(disc))))
        t = s * s * s
        tp = s * s  # t^(2/3) from the root itself, not t**fl(2/3) (prox.cuh, cpu/kernels.py)
    # objective difference f(t) - f(0) = 1/2 t^2 - |a| t + mu t^p (tie -> 0; at a few
    # exact ties the rounded root makes it negative by an ulp: the two points' objectives
    # are then equal to rounding and the nonzero one is returned, by all three proxes)
    gain = 0.5 * t * t - mag * t + safe_mu * tp
    keep = real & (gain < 0)
    result = xp.where(keep, xp.sign(a) * t, xp.zeros_like(a))
    # mu == 0: plain identity
    return xp.where(mu > 0, result, a)


#: The one source of the penalty codes: the CUDA kernels get them injected at compile
#: time (``backends/cuda/backend.py:penalty_prelude``) and every path rejects any other code.
PENALTY_CODES = {"BOX": CODE_BOX, "L1": CODE_L1, "L0": CODE_L0, "LP": CODE_LP}
