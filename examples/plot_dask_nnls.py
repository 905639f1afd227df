"""
NNLS on a Dask array
====================

The right-hand sides are independent problems, so :func:`msm_gpu.nnls` accepts a Dask
array ``D`` chunked by columns: every column chunk is solved by the ordinary in-memory call
where the chunk lives, and the result is lazy until computed.  Here Dask's local threaded
scheduler runs the chunks; with ``dask.distributed`` the same code runs on a cluster (one
worker per GPU with CuPy chunks, too).

Needs ``pip install ".[dask]"``; without Dask this example only says so.
"""

import time

import matplotlib.pyplot as plt
import numpy as np

import msm_gpu as mg

try:
    import dask
    import dask.array as da
except ImportError:  # the "dask" extra is not installed
    dask = None
    print('Dask is not installed (pip install ".[dask]"): this example is skipped.')

# %%
# 20000 right-hand sides in 4 column chunks, made chunk by chunk (no 200 x 20000 array is
# ever built on the client); ``C`` is an ordinary NumPy array.
if dask is not None:
    rng = np.random.default_rng(0)
    C = rng.uniform(size=(200, 40))
    D = da.random.default_rng(0).uniform(size=(200, 20000), chunks=(200, 5000))
    mg.nnls(C, np.ones((200, 8)))  # first call in this process: loads the compiled kernels

    with dask.config.set(scheduler="threads"):
        res = mg.nnls(C, D)  # lazy: nothing has run yet
        print(res.x)  # a Dask array with D's column chunks
        t0 = time.perf_counter()
        res = res.persist()  # solve every chunk once, keep the results (on the workers)
        t_dask = time.perf_counter() - t0
        out = res.compute()  # x gathered, fun, flags, objective: nothing is solved again
        blocks = res.blocks.compute()  # per-chunk SolveResults (x dropped)

    # %%
    # The answer is the in-memory one: the columns are independent problems.
    D_np = D.compute()
    t0 = time.perf_counter()
    ref = mg.nnls(C, D_np)
    t_mem = time.perf_counter() - t0
    print(f"dask: {t_dask:.2f} s, in memory: {t_mem:.2f} s, converged: {out.converged}")
    print(f"max |x_dask - x_memory| = {np.abs(out.x - ref.x).max():.1e}")
    print(f"objective: {out.fun:.6g} (dask) {ref.fun:.6g} (in memory)")

    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.bar(range(len(blocks)), [b.time for b in blocks], color="C0")
    ax.set_xticks(range(len(blocks)), [f"chunk {i}\n5000 columns" for i in range(len(blocks))])
    ax.set_ylabel("solve time [s]")
    ax.axhline(t_mem, color="C1", ls="--", label=f"in memory, all 20000 columns: {t_mem:.2f} s")
    ax.set_title(f"mg.nnls per column chunk (Dask call {t_dask:.2f} s on {blocks.size} chunks)")
    ax.set_ylim(0, 1.3 * max(t_mem, *(b.time for b in blocks)))
    ax.legend(loc="upper left")
    fig.tight_layout()
    plt.show()
