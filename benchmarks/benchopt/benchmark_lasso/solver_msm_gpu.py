"""msm-gpu's solver for benchopt's benchmark_lasso (https://github.com/benchopt/benchmark_lasso).

The benchmark's objective is 1/2 ||y - X beta - b||^2 + lmbd ||beta||_1 (the intercept b
only with ``fit_intercept``), the scaling of ``msm_gpu.least_squares(X, y, mg.L1(lmbd))``
(scikit-learn's ``Lasso`` divides the loss by n_samples instead, so its alpha is lmbd / n).

- ``fit_intercept`` with a dense X: the unpenalised intercept is eliminated exactly by
  centring X and y (b = mean(y) - mean(X) beta), inside the timed run.
- A sparse X is passed as it is (msm-gpu keeps it sparse); ``fit_intercept`` with a
  sparse X is skipped (centring would make X dense, and the public API has no unpenalised
  column).

Sampling: benchopt's "tolerance" strategy drives msm-gpu's own stopping rule, ``tol``
(relative KKT residual of the exact finish), capped at msm-gpu's default 1e-6:
the default answer is already exact, and a looser tol is slower, not cheaper
(``DEFAULT_TOL`` below).  Every other option keeps its default.  The first tolerance
benchopt asks for (3e38, larger than 1) stands for the starting point, so the solver
returns beta = 0 there without solving, as the peers do at ``n_iter = 0``.

Copy this file to ``<clone of benchmark_lasso>/solvers/msm_gpu.py`` (benchmarks/benchopt/
README.md).
"""

from benchopt import BaseSolver, safe_import_context

with safe_import_context() as import_ctx:
    import inspect

    import numpy as np
    from scipy import sparse

    import msm_gpu as mg

    # msm-gpu's default tol.  Its default answer is exact (the exact finish): a looser tol
    # buys no cheaper approximate answer, it only starts the finish from fewer sweeps
    # (slower), so benchopt's tolerances only ever tighten it.
    DEFAULT_TOL = inspect.signature(mg.solve).parameters["tol"].default


class Solver(BaseSolver):
    name = "msm_gpu"
    sampling_strategy = "tolerance"

    install_cmd = "conda"
    requirements = ["pip::msm-gpu"]
    references = [
        "G. Yuan, W.-S. Zheng and B. Ghanem, "
        '"A Matrix Splitting Method for Composite Function Minimization", CVPR 2017'
    ]

    def skip(self, X, y, lmbd, fit_intercept):
        if fit_intercept and sparse.issparse(X):
            return True, f"{self.name} does not fit an intercept with a sparse X"
        return False, None

    def set_objective(self, X, y, lmbd, fit_intercept):
        self.X, self.y, self.lmbd = X, y, lmbd
        self.fit_intercept = fit_intercept

    def warm_up(self):
        # Compile msm-gpu's Numba kernels before the timed runs.
        self.run_once(1.0)

    def run(self, tol):
        n_features = self.X.shape[1]
        if tol > 1:  # benchopt's first point: the start, beta = 0
            self.beta = np.zeros(n_features + self.fit_intercept)
            return
        X, y = self.X, self.y
        if self.fit_intercept:
            X_mean, y_mean = X.mean(axis=0), y.mean()
            X, y = X - X_mean, y - y_mean
        coef = mg.least_squares(X, y, mg.L1(self.lmbd), tol=min(tol, DEFAULT_TOL)).x
        if self.fit_intercept:
            coef = np.r_[coef, y_mean - X_mean @ coef]
        self.beta = coef

    def get_result(self):
        return dict(beta=self.beta)
