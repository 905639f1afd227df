"""The CPU backend: NumPy arrays and Numba kernels.

:mod:`.backend` is the launcher; :mod:`.kernels` holds the sweeps (paper, eq. (9)) and
:mod:`.tiles` their cache-blocked forms, :mod:`.sweep_team` the threaded team that sweeps
column blocks in parallel, :mod:`.threads`, :mod:`.atomics` and :mod:`.simd` its
low-level helpers, :mod:`.blas` the single-threaded BLAS calls and :mod:`.jit` the
compile-on-first-use dispatch that keeps a first call short.
"""
