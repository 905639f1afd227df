"""Proximal-gradient baselines (the paper's comparators) on MSM's iteration loop.

:class:`ProxGradMethod` is PGM (``"pgm"``), PGM with backtracking (``"pgm_ls"``), FISTA
(``"apg"``) or FISTA with backtracking (``"apg_ls"``) as an
:class:`~msm_gpu.solvers.loop.IterativeMethod`; ``run_baseline`` runs one through
:func:`msm_gpu.solvers.loop.run_iterations`.  See :mod:`.proxgrad` for the step-size rules.
"""

from .lipschitz import lipschitz_constant
from .proxgrad import METHODS, ProxGradMethod, run_baseline

__all__ = ["METHODS", "ProxGradMethod", "lipschitz_constant", "run_baseline"]
