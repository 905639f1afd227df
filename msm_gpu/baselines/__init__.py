"""Proximal-gradient baselines (the paper's comparators) with MSM's driver contract.

``run_baseline(method, backend, a, r, x0, penalty, ...)`` runs PGM (``"pgm"``), PGM
with backtracking (``"pgm_ls"``), FISTA (``"apg"``) or FISTA with backtracking
(``"apg_ls"``) and returns the same dict as :func:`msm_gpu.driver.run_msm` plus
``info`` (with ``L`` = lambda_max(A)).  See :mod:`.proxgrad` for the step-size rules.
"""

from .lipschitz import lipschitz_constant
from .proxgrad import METHODS, run_baseline

__all__ = ["METHODS", "lipschitz_constant", "run_baseline"]
