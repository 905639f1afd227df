"""msm-gpu: batched composite quadratic problems by the Matrix Splitting Method.

Solves min_X 1/2 tr(X'AX) + tr(X'R) + sum_ij h(X_ij) (Yuan, Zheng and Ghanem, CVPR 2017)
on NumPy + Numba or on CuPy + a CUDA kernel (``backend="cuda"``).
"""

from . import backends
from .api import least_squares, nnls, solve
from .apps import (
    NMF,
    L0DictionaryLearning,
    denoise,
    extract_patches,
    nmf,
    overcomplete_dct,
    psnr,
    reconstruct_from_patches,
    sparse_code,
)
from .apps.logistic import SparseLogisticRegression
from .backends import BackendUnavailableError
from .losses import Logistic, Poisson, Quadratic
from .newton import minimize
from .penalties import L0, L1, Box, Lp, NonNeg, NonNegL1, Penalty, Zero
from .result import IterationInfo, SolveResult

__version__ = "0.1.0"

__all__ = [
    "NMF",
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
