"""Scale-out over column blocks with Dask: :func:`.solve.solve` and :mod:`.nmf`.

Each block of right-hand sides is an independent batch of problems solved in memory by
:mod:`msm_gpu.run`; nothing here imports the front doors, which hand Dask arrays over to
this package.
"""
