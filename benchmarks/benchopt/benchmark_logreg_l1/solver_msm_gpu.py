"""msm-gpu's solver for benchopt's benchmark_logreg_l1
(https://github.com/benchopt/benchmark_logreg_l1).

The benchmark's objective is sum_i log(1 + exp(-y_i x_i'beta)) + lmbd ||beta||_1 with
y in {-1, 1}.  ``msm_gpu.SparseLogisticRegression`` minimises the *mean* logistic loss
plus alpha ||beta||_1 (skglm's scaling), so alpha = lmbd / n_samples: the same problem
divided by n_samples, hence the same minimiser.  Dense or SciPy sparse X is passed as it
is.  ``fit_intercept`` (not among the objective's parameters today) is handled by the
estimator's own unpenalised intercept, appended last to beta.

Sampling: benchopt's "tolerance" strategy drives the estimator's own stopping rule,
``tol`` (proximal Newton's prox-gradient step); every other option keeps its default.
The first tolerance benchopt asks for (3e38, larger than 1) stands for the starting
point, so the solver returns beta = 0 there without solving, as the peers do at
``n_iter = 0``.

Copy this file to ``<clone of benchmark_logreg_l1>/solvers/msm_gpu.py``
(benchmarks/benchopt/README.md).
"""

from benchopt import BaseSolver, safe_import_context

with safe_import_context() as import_ctx:
    import numpy as np

    import msm_gpu as mg


class Solver(BaseSolver):
    name = "msm_gpu"
    sampling_strategy = "tolerance"

    install_cmd = "conda"
    requirements = ["pip::msm-gpu"]
    references = [
        "G. Yuan, W.-S. Zheng and B. Ghanem, "
        '"A Matrix Splitting Method for Composite Function Minimization", CVPR 2017'
    ]

    def set_objective(self, X, y, lmbd, fit_intercept=False):
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
        clf = mg.SparseLogisticRegression(
            alpha=self.lmbd / self.X.shape[0], fit_intercept=self.fit_intercept, tol=tol
        ).fit(self.X, self.y)
        beta = clf.coef_.ravel()
        if self.fit_intercept:
            beta = np.r_[beta, clf.intercept_]
        self.beta = beta

    def get_result(self):
        return dict(beta=self.beta)
