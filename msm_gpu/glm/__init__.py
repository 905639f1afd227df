"""Beyond quadratics: losses and the proximal Newton method (:func:`msm_gpu.minimize`).

Each Newton step is a composite quadratic problem solved by MSM (:mod:`.newton`); the host
road (:mod:`.newton_host`, :mod:`.kernels`) keeps the design and applies the Hessian
``C' W C`` through its columns, never forming it.  :mod:`.losses` holds the smooth losses.
"""
