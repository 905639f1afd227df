"""NMF's numerics, shared by the in-memory estimator and the Dask road.

The alternating outer loop (:mod:`.loop`), the half-step solvers that update W or H by
batched NNLS or HALS (:mod:`.solvers`; paper, section 5.1), the extrapolation of the
iterates (:mod:`.extrapolation`) and the initialisations (:mod:`.init`).  The estimator
:class:`msm_gpu.NMF` and :func:`msm_gpu.nmf` live in :mod:`msm_gpu.apps.nmf`.
"""
