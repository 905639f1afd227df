"""Applications built on the MSM solvers: NMF (paper 5.1) and l0 sparse coding (paper 5.2)."""

from .denoise import default_lam, denoise, ksvd, psnr
from .dictionaries import (
    extract_patches,
    overcomplete_dct,
    reconstruct_from_patches,
    sample_patches,
)
from .dictionary_learning import L0DictionaryLearning
from .minibatch_nmf import MiniBatchNMF
from .nmf import NMF, nmf
from .sparse_coding import dictionary_step, sparse_code

__all__ = [
    "NMF",
    "MiniBatchNMF",
    "L0DictionaryLearning",
    "default_lam",
    "denoise",
    "dictionary_step",
    "extract_patches",
    "ksvd",
    "nmf",
    "overcomplete_dct",
    "psnr",
    "reconstruct_from_patches",
    "sample_patches",
    "sparse_code",
]
