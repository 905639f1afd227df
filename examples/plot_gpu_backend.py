"""
The same call on a GPU
======================

``backend="cuda"`` runs the sweeps in a CUDA kernel through CuPy (``pip install
".[cuda]"``, or ``".[cuda12]"`` for CUDA 12).  CuPy arrays in give CuPy arrays out, and
``backend="auto"`` (the default) picks the GPU for CuPy input by itself.  Asking for
``backend="cuda"`` where CUDA cannot run raises :class:`msm_gpu.BackendUnavailableError`;
:func:`msm_gpu.backends.status` says why beforehand.

This example times batched NNLS for a growing number of right-hand sides on every usable
backend.  Where no GPU is usable (as when these docs are built) it says why and runs on
the CPU only.
"""

import time

import matplotlib.pyplot as plt
import numpy as np

import msm_gpu as mg

print("usable backends:", mg.backends.available())
reason = mg.backends.status()["cuda"]
if reason is None:
    import cupy as cp

    print("CUDA is usable: timing the CPU and the GPU")
else:
    cp = None
    print(f"CUDA is not usable here ({reason}): timing the CPU only")

rng = np.random.default_rng(0)
n = 100
C = rng.uniform(size=(400, n))
batch_sizes = [100, 1000, 10000]


def timed(backend, D):
    """Seconds of one nnls call (the second of two: the first loads or compiles kernels)."""
    Cb, Db = (C, D) if backend == "cpu" else (cp.asarray(C), cp.asarray(D))
    for _ in range(2):
        t0 = time.perf_counter()
        res = mg.nnls(Cb, Db, backend=backend)
        if backend == "cuda":
            cp.cuda.Device().synchronize()
        elapsed = time.perf_counter() - t0
    return elapsed, res


# %%
# Every usable backend solves the same problems; on a GPU the two answers are compared.
backends = ["cpu"] if cp is None else ["cpu", "cuda"]
times = {b: [] for b in backends}
for r in batch_sizes:
    D = rng.uniform(size=(400, r))
    results = {}
    for b in backends:
        elapsed, results[b] = timed(b, D)
        times[b].append(elapsed)
        print(f"r = {r:6d}  {b:4s}: {elapsed:.3f} s  converged={results[b].converged}")
    if cp is not None:
        gap = abs(float(results["cuda"].fun) - results["cpu"].fun) / results["cpu"].fun
        print(f"           relative objective gap GPU vs CPU: {gap:.1e}")

fig, ax = plt.subplots(figsize=(6, 3.5))
for b in backends:
    ax.loglog(batch_sizes, times[b], "o-", label=f'backend="{b}"')
ax.set_xlabel("right-hand sides r (C is 400 x 100)")
ax.set_ylabel("seconds per nnls call")
ax.set_title("batched NNLS" + ("" if cp is not None else " (no usable GPU here: CPU only)"))
ax.legend()
fig.tight_layout()
plt.show()
