"""msm-gpu's solver for benchopt's benchmark_lasso_path
(https://github.com/benchopt/benchmark_lasso_path).

The benchmark asks for the Lasso 1/2 ||y - X beta_k - b_k||^2 + lambda_k ||beta_k||_1 at
every lambda_k of glmnet's path (lambda_0 the largest).  msm-gpu solves many right-hand
sides in one call, but with one penalty for all of them; the path becomes such a batch
through the Lasso's scaling identity: with s_k = lambda_k / lambda_0 and beta = s_k v,

    1/2 ||y - X beta||^2 + lambda_k ||beta||_1
        = s_k^2 (1/2 ||y / s_k - X v||^2 + lambda_0 ||v||_1),

so column k of ``msm_gpu.least_squares(X, Y, mg.L1(lambda_0))`` with Y[:, k] = y / s_k,
times s_k, is the solution at lambda_k.  All the path is one batched call (no warm
starts needed).

- ``fit_intercept`` with a dense X: the unpenalised intercepts are eliminated exactly by
  centring X and y (b_k = mean(y) - mean(X) beta_k), inside the timed run.
- A sparse X is passed as it is; ``fit_intercept`` with a sparse X is skipped (centring
  would make X dense, and the public API has no unpenalised column).

Sampling: benchopt's "tolerance" strategy drives msm-gpu's own stopping rule, ``tol``
(relative KKT residual of the exact finish, per column), capped at msm-gpu's default 1e-6:
the default answer is already exact, and a looser tol is slower, not cheaper
(``DEFAULT_TOL`` below).  Every other option keeps its default.  The first tolerance
benchopt asks for (3e38, larger than 1) stands for the starting point, so the solver
returns zeros there without solving, as the peers do at ``n_iter = 0``.

Copy this file to ``<clone of benchmark_lasso_path>/solvers/msm_gpu.py``
(benchmarks/benchopt/README.md).
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

    def skip(self, X, y, lambdas, fit_intercept):
        if fit_intercept and sparse.issparse(X):
            return True, f"{self.name} does not fit an intercept with a sparse X"
        if not np.min(lambdas) > 0:
            # lambda = 0 has no scaled form (and no unique solution for a wide X)
            return True, f"{self.name} needs every lambda > 0"
        return False, None

    def set_objective(self, X, y, lambdas, fit_intercept):
        self.X, self.y = X, y
        self.lambdas = np.asarray(lambdas, dtype=np.float64)
        self.fit_intercept = fit_intercept

    def warm_up(self):
        # Compile msm-gpu's Numba kernels before the timed runs.
        self.run_once(1.0)

    def run(self, tol):
        n_features = self.X.shape[1]
        n_lambdas = self.lambdas.shape[0]
        if tol > 1:  # benchopt's first point: the start, all coefficients 0
            self.coefs = np.zeros((n_features + self.fit_intercept, n_lambdas))
            return
        X, y = self.X, self.y
        if self.fit_intercept:
            X_mean, y_mean = X.mean(axis=0), y.mean()
            X, y = X - X_mean, y - y_mean
        lam0 = self.lambdas.max()
        scale = self.lambdas / lam0
        Y = y[:, None] / scale[None, :]
        coefs = mg.least_squares(X, Y, mg.L1(lam0), tol=min(tol, DEFAULT_TOL)).x * scale
        if self.fit_intercept:
            coefs = np.vstack([coefs, y_mean - X_mean @ coefs])
        self.coefs = coefs

    def get_result(self):
        return dict(coefs=self.coefs)
