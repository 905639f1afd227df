"""CUDA sources of msm-gpu (installed as the package data ``msm_gpu.kernels``)."""
