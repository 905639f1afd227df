"""Smooth losses q for :func:`msm_gpu.minimize`: quadratic, logistic, Poisson.

``Quadratic(A, R)`` is the library's own problem 1/2 tr(X'AX) + tr(X'R) (solved by
:func:`msm_gpu.solve` directly).  ``Logistic`` and ``Poisson`` are generalised linear
losses of a design matrix X (m x n, dense or sparse) and r response columns Y (m x r),
every column an independent problem sharing X:

    q(W) = sum_c sum_i s_i l(z_ic, y_ic),     Z = X W + 1 b'   (b: intercepts),

with the sample weights s normalised to sum 1 (so ``q`` is a weighted *mean*, the
convention of scikit-learn's ``alpha`` and of skglm's datafits):

    logistic  l(z, y) = log(1 + exp(-y z)),  y in {-1, +1}   l'' = sigma(z) (1 - sigma(z))
    Poisson   l(z, y) = exp(z) - y z,         y >= 0          l'' = exp(z)

(the Poisson loss is scikit-learn's half deviance with the log link, up to a constant
in y).  With ``fit_intercept=True`` the coefficient vector has one more row, the last,
holding the intercept; it is never penalised.

The objects here only hold the validated user input.  :meth:`GLMLoss.prepare` moves it
to NumPy or CuPy once (the design with a column of ones appended when fitting an
intercept) and returns a :class:`PreparedGLM` whose methods the Newton loop calls.
"""

from __future__ import annotations

import numpy as np

from .._input import validation as v
from .._input.foreign import to_native
from ..arrays import is_cupy, to_host


def _is_sparse(x) -> bool:
    import scipy.sparse as sp

    return sp.issparse(x) or type(x).__module__.startswith("cupyx.scipy.sparse")


class Loss:
    """Base class of the smooth parts q accepted by :func:`msm_gpu.minimize`."""

    #: what the user's arrays came as (torch, JAX, ...: ``_input/foreign.py``); None: native
    _array_kind = None


class Quadratic(Loss):
    """q(X) = 1/2 tr(X'AX) + tr(X'R): the problem of :func:`msm_gpu.solve`.

    Parameters
    ----------
    A : (n, n) array
        Symmetric positive semidefinite.
    R : (n,) or (n, r) array
    """

    def __init__(self, A, R):
        arrays, self._array_kind = to_native({"A": A, "R": R})
        A, R = arrays["A"], arrays["R"]
        v.check_square_symmetric(A, "A")
        v.check_rhs(R, A.shape[0], "R")
        self.A = A
        self.R = R

    @property
    def n_coef(self) -> int:
        return self.A.shape[0]

    def __repr__(self):
        return f"Quadratic(n={self.A.shape[0]}, R.shape={tuple(self.R.shape)})"


class GLMLoss(Loss):
    """Common input handling of :class:`Logistic` and :class:`Poisson`."""

    name = "glm"
    #: constant c with l''(z, y) <= c for all z, y (None: unbounded)
    curvature_bound: float | None = None

    def __init__(self, X, Y, *, sample_weight=None, fit_intercept=True):
        arrays, self._array_kind = to_native({"X": X, "Y": Y, "sample_weight": sample_weight})
        X, Y, sample_weight = arrays["X"], arrays["Y"], arrays["sample_weight"]
        if X is None:
            raise TypeError("X must be an array or a sparse matrix, got None")
        if _is_sparse(X):
            if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
                raise ValueError(f"X must be a non-empty 2-D matrix, got shape {X.shape}")
            data = X.data
            if np.dtype(data.dtype).kind not in "biuf":
                raise TypeError(f"X must hold real numbers, got dtype {data.dtype}")
            if data.size and not bool((data == data).all() & (abs(data) < np.inf).all()):
                raise ValueError("X contains NaN or Inf")
        else:
            X = v.check_array(X, "X", ndims=(2,))
        Y = v.check_array(Y, "Y")
        if Y.shape[0] != X.shape[0]:
            raise ValueError(
                f"Y must have {X.shape[0]} rows to match X {tuple(X.shape)}, got shape {Y.shape}"
            )
        if sample_weight is not None:
            sample_weight = v.check_array(sample_weight, "sample_weight", ndims=(1,))
            if sample_weight.shape[0] != X.shape[0]:
                raise ValueError(
                    f"sample_weight must have {X.shape[0]} entries (one per row of X), "
                    f"got {sample_weight.shape[0]}"
                )
            sw = to_host(sample_weight).astype(np.float64)
            if (sw < 0).any():
                raise ValueError("sample_weight must be >= 0")
            if not sw.sum() > 0:
                raise ValueError("sample_weight must have a positive sum")
        if not isinstance(fit_intercept, (bool, np.bool_)):
            raise TypeError(f"fit_intercept must be a bool, got {type(fit_intercept).__name__}")
        self.X = X
        self.Y = Y
        self.sample_weight = sample_weight
        self.fit_intercept = bool(fit_intercept)
        self._y_host = self._check_targets(to_host(Y).astype(np.float64))

    # -- shapes -----------------------------------------------------------------------
    @property
    def n_features(self) -> int:
        return self.X.shape[1]

    @property
    def n_coef(self) -> int:
        """Rows of the coefficient matrix: features, plus one for the intercept."""
        return self.X.shape[1] + int(self.fit_intercept)

    @property
    def n_problems(self) -> int:
        return 1 if self.Y.ndim == 1 else self.Y.shape[1]

    def _check_targets(self, y):
        return y

    def sample_shares(self):
        """The sample weights normalised to sum 1 (host float64, (m,)); uniform if none."""
        m = self.X.shape[0]
        if self.sample_weight is None:
            return np.full(m, 1.0 / m)
        s = to_host(self.sample_weight).astype(np.float64)
        return s / s.sum()

    def __repr__(self):
        return (
            f"{type(self).__name__}(X.shape={tuple(self.X.shape)}, Y.shape={tuple(self.Y.shape)}, "
            f"fit_intercept={self.fit_intercept})"
        )

    # -- elementwise pieces (array module xp) -------------------------------------------
    def pointwise(self, xp, z, y):
        """l(z, y) elementwise."""
        raise NotImplementedError

    def derivative(self, xp, z, y):
        """dl/dz elementwise."""
        raise NotImplementedError

    def curvature(self, xp, z, y):
        """d^2 l / dz^2 elementwise."""
        raise NotImplementedError

    # -- moving to a backend --------------------------------------------------------------
    def prepare(self, xp, dtype) -> PreparedGLM:
        """The data on the array module ``xp`` (numpy or cupy) in ``dtype``."""
        return PreparedGLM(self, xp, dtype)


class Logistic(GLMLoss):
    """Mean logistic loss of a linear model (binary labels, r problems sharing X).

    Parameters
    ----------
    X : (m, n) array or sparse matrix
        Design (NumPy, CuPy, ``scipy.sparse`` or ``cupyx.scipy.sparse``).
    Y : (m,) or (m, r) array
        Labels in {0, 1} or in {-1, +1} (each column may use either coding).
    sample_weight : (m,) array, optional
        Nonnegative weights (normalised to sum 1).
    fit_intercept : bool
        Add an unpenalised intercept (the last row of the coefficients).
    """

    name = "logistic"
    curvature_bound = 0.25  # sigma (1 - sigma) <= 1/4 (Bohning & Lindsay 1988)

    def _check_targets(self, y):
        ok = (y == 0.0) | (y == 1.0) | (y == -1.0)
        if not ok.all():
            bad = y[~ok].ravel()[0]
            raise ValueError(f"Y must hold labels in {{0, 1}} or {{-1, 1}}, found {bad:g}")
        return np.where(y == 0, -1.0, y)  # {0,1} -> {-1,+1}

    def pointwise(self, xp, z, y):
        return xp.logaddexp(0.0, -y * z)

    def derivative(self, xp, z, y):
        # -y sigma(-y z), written through exp of a nonpositive number
        t = -y * z
        e = xp.exp(-xp.abs(t))
        sig = xp.where(t >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
        return -y * sig

    def curvature(self, xp, z, y):
        e = xp.exp(-xp.abs(z))
        return e / (1.0 + e) ** 2


class Poisson(GLMLoss):
    """Mean Poisson loss exp(z) - y z (log link) of a linear model.

    Parameters are those of :class:`Logistic`; Y holds nonnegative counts (any
    nonnegative reals).  The Poisson curvature exp(z) has no global bound, so the
    Newton loop always uses the exact Hessian.
    """

    name = "poisson"
    curvature_bound = None

    def _check_targets(self, y):
        if (y < 0).any():
            raise ValueError("Y must be nonnegative for the Poisson loss")
        return y

    def pointwise(self, xp, z, y):
        return xp.exp(z) - y * z

    def derivative(self, xp, z, y):
        return xp.exp(z) - y

    def curvature(self, xp, z, y):
        return xp.exp(z)


class PreparedGLM:
    """A :class:`GLMLoss` on one array module: products with the design and derivatives.

    Attributes
    ----------
    design : (m, n_coef) array or sparse matrix (CSR)
        X, with a column of ones appended when fitting an intercept.
    y : (m, r) array, targets (logistic: in {-1, +1})
    s : (m, 1) array, sample weights summing to 1
    """

    def __init__(self, loss: GLMLoss, xp, dtype):
        self.loss = loss
        self.xp = xp
        self.dtype = np.dtype(dtype)
        X = loss.X
        m = X.shape[0]
        self.sparse = _is_sparse(X)
        if self.sparse:
            if xp is np:
                import scipy.sparse as sp

                X = sp.csr_matrix(X if not is_cupy(X) else X.get(), dtype=self.dtype)
                if loss.fit_intercept:
                    X = sp.hstack([X, np.ones((m, 1), dtype=self.dtype)], format="csr")
            else:
                import cupyx.scipy.sparse as csp

                X = csp.csr_matrix(X if is_cupy(X) else csp.csr_matrix(X), dtype=self.dtype)
                if loss.fit_intercept:
                    X = csp.hstack([X, xp.ones((m, 1), dtype=self.dtype)], format="csr")
            self.design = X
            self.design_t = X.T.tocsr()
        else:
            X = xp.asarray(to_host(X) if xp is np else X, dtype=self.dtype)
            if loss.fit_intercept:
                X = xp.concatenate([X, xp.ones((m, 1), dtype=self.dtype)], axis=1)
            self.design = xp.ascontiguousarray(X)
            self.design_t = None
        y = loss._y_host
        y = y[:, None] if y.ndim == 1 else y
        self.y = xp.asarray(y, dtype=self.dtype)
        self.s = xp.asarray(loss.sample_shares()[:, None], dtype=self.dtype)
        # squared design for Hessian diagonals: diag(X' diag(w) X) = (X o X)' w
        self._design_sq_t = self.design_t.multiply(self.design_t).tocsr() if self.sparse else None

    @property
    def n_coef(self) -> int:
        return self.design.shape[1]

    # -- products ---------------------------------------------------------------------------
    def matvec(self, w):
        """Z = design @ W (m x r)."""
        return self.design @ w

    def rmatvec(self, u):
        """design' @ U (n_coef x r)."""
        if self.sparse:
            return self.design_t @ u
        return self.design.T @ u

    # -- loss pieces ---------------------------------------------------------------------------
    def targets(self, cols=None):
        """Y restricted to the problems ``cols`` (all when None)."""
        return self.y if cols is None else self.y[:, cols]

    def values(self, z, cols=None):
        """Per column q_c (float64) at linear predictor Z (of the problems ``cols``)."""
        xp = self.xp
        vals = self.s * self.loss.pointwise(xp, z, self.targets(cols))
        return xp.sum(vals.astype(np.float64), axis=0)

    def gradient(self, z, cols=None):
        """Gradient of q at Z = design @ W (n_coef x r)."""
        return self.rmatvec(self.s * self.loss.derivative(self.xp, z, self.targets(cols)))

    def hessian_weights(self, z, cols=None):
        """w (m x r) with Hessian_c = design' diag(w_c) design."""
        return self.s * self.loss.curvature(self.xp, z, self.targets(cols))

    def hessian_diagonal(self, weights):
        """diag(design' diag(w_c) design) for every column: (n_coef x r)."""
        if self._design_sq_t is None:  # dense: X o X kept once, on first use
            self._design_sq_t = (self.design * self.design).T
        return self._design_sq_t @ weights

    def hessian(self, weights, rows=None):
        """design[:, rows]' diag(weights) design[:, rows] as a dense array (weights: (m,))."""
        x = self.design if rows is None else self.design[:, rows]
        root = self.xp.sqrt(weights)[:, None]  # curvatures are >= 0
        if self.sparse:
            b = x.multiply(root).tocsr()
            return (b.T @ b).toarray()
        b = x * root
        return b.T @ b  # B'B: one SYRK, symmetric to the last bit

    def bound_hessian(self):
        """design' diag(c s) design with c the loss's curvature bound (None if unbounded)."""
        c = self.loss.curvature_bound
        if c is None:
            return None
        return self.hessian(c * self.s[:, 0])
