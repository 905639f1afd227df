"""msm-gpu: batched composite quadratic problems by the Matrix Splitting Method.

Solves min_X 1/2 tr(X'AX) + tr(X'R) + sum_ij h(X_ij) (Yuan, Zheng and Ghanem, CVPR 2017)
on NumPy + Numba or on CuPy + a CUDA kernel (``backend="cuda"``).
"""

from . import backends
from ._api import least_squares, nnls, solve
from .backends import BackendUnavailableError
from .glm.losses import Logistic, Poisson, Quadratic
from .glm.newton import minimize
from .penalties import L0, L1, Box, Lp, NonNeg, NonNegL1, Penalty, Zero
from .result import IterationInfo, SolveResult

__version__ = "0.1.0"

#: The applications, imported on first use (``mg.NMF``, ``mg.denoise``, ...): their
#: estimators subclass scikit-learn's, whose import (SciPy's stats included) took most
#: of ``import msm_gpu``'s time, also for scripts that only solve.
_LAZY = {
    "NMF": "apps",
    "MiniBatchNMF": "apps",
    "L0DictionaryLearning": "apps",
    "denoise": "apps",
    "extract_patches": "apps",
    "nmf": "apps",
    "overcomplete_dct": "apps",
    "psnr": "apps",
    "reconstruct_from_patches": "apps",
    "sparse_code": "apps",
    "SparseLogisticRegression": "apps.logistic",
}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "NMF",
    "MiniBatchNMF",
    "L0DictionaryLearning",
    "denoise",
    "extract_patches",
    "nmf",
    "overcomplete_dct",
    "psnr",
    "reconstruct_from_patches",
    "sparse_code",
    "L0",
    "Logistic",
    "Poisson",
    "Quadratic",
    "SparseLogisticRegression",
    "minimize",
    "L1",
    "BackendUnavailableError",
    "Box",
    "IterationInfo",
    "Lp",
    "NonNeg",
    "NonNegL1",
    "Penalty",
    "SolveResult",
    "Zero",
    "backends",
    "least_squares",
    "nnls",
    "solve",
]
