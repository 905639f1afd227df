"""The CUDA backend: CuPy arrays and the RawKernel sweep of ``kernels/``.

:mod:`.backend` launches the kernels (one thread block per column of X, the row sweep
sequential inside it), :mod:`.geometry` picks the launch shapes and :mod:`.model` the
cost model that chooses between kernels.  The CUDA sources are package data in
``kernels/``.
"""
