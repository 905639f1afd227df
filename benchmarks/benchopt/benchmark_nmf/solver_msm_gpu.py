"""msm-gpu's solver for benchopt's benchmark_nmf (https://github.com/benchopt/benchmark_nmf).

The benchmark's value is the Frobenius loss 1/2 ||X - WH||_F^2 (it also reports the
Kullback-Leibler divergence), from the start ``factors_init`` it shares between the
solvers.  ``msm_gpu.NMF(rank, init="custom")`` fits W, H from copies of that start.

Sampling: "iteration", as the benchmark's other solvers: ``max_iter = n_iter`` outer
iterations with ``tol=0`` (no early stop); every other option keeps its default
(solver "msm", extrapolation on: the best pair seen is returned).  ``n_iter = 0``
returns the start.

``loss`` is the loss fitted (``beta_loss``), and the curve monitored, as in the
benchmark's scikit-learn solver.  A loss this installed msm-gpu refuses is skipped, with
its reason: the check asks the estimator itself, so the solver picks up new losses
without an edit.

Copy this file to ``<clone of benchmark_nmf>/solvers/msm_gpu.py``
(benchmarks/benchopt/README.md).
"""

from benchopt import BaseSolver, safe_import_context
from benchopt.stopping_criterion import SufficientProgressCriterion

with safe_import_context() as import_ctx:
    import warnings

    import numpy as np
    from sklearn.exceptions import ConvergenceWarning

    import msm_gpu as mg


class Solver(BaseSolver):
    name = "msm_gpu"

    install_cmd = "conda"
    requirements = ["pip::msm-gpu"]
    references = [
        "G. Yuan, W.-S. Zheng and B. Ghanem, "
        '"A Matrix Splitting Method for Composite Function Minimization", CVPR 2017'
    ]

    parameters = {"loss": ["frobenius", "kullback-leibler"]}

    stopping_criterion = SufficientProgressCriterion(
        strategy="iteration", key_to_monitor="objective_frobenius"
    )

    def skip(self, X, rank, factors_init):
        reason = _refused_loss(self.loss)
        if reason is not None:
            return True, f"{self.name} does not fit beta_loss={self.loss!r}: {reason}"
        return False, None

    def set_objective(self, X, rank, factors_init):
        self.X, self.rank = X, rank
        self.factors_init = factors_init
        self.stopping_criterion.key_to_monitor = "objective_" + self.loss
        # max_iter is the sampling knob here: reaching it is the point, not a warning.
        warnings.filterwarnings("ignore", category=ConvergenceWarning)

    def warm_up(self):
        # Compile msm-gpu's Numba kernels before the timed runs.
        self.run_once(5)

    def run(self, n_iter):
        model = mg.NMF(self.rank, max_iter=n_iter, tol=0, beta_loss=self.loss)
        if self.factors_init is None:  # no shared start: msm-gpu's default init
            self.W = model.set_params(random_state=0).fit_transform(self.X)
            self.H = model.components_
            return
        W0, H0 = (np.array(f, dtype=np.float64) for f in self.factors_init)
        if n_iter == 0:
            self.W, self.H = W0, H0
            return
        self.W = model.set_params(init="custom").fit_transform(self.X, W=W0, H=H0)
        self.H = model.components_

    def get_result(self):
        return dict(W=self.W, H=self.H)


def _refused_loss(loss):
    """None if ``mg.NMF`` fits ``loss``, else the estimator's own message refusing it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            mg.NMF(1, max_iter=1, beta_loss=loss, init="random", random_state=0).fit(
                np.ones((2, 2))
            )
    except ValueError as exc:
        return str(exc)
    return None
