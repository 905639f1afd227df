"""
NMF of handwritten digits
=========================

:class:`msm_gpu.NMF` factorises a nonnegative matrix ``Y ~ W H`` by alternating
nonnegative least squares: every half-step is one batched NNLS solved by MSM.  It follows
scikit-learn's estimator (``fit_transform``, ``components_``, the same initialisations).

We factorise the 1797 8 x 8 images of scikit-learn's digits into 16 parts and show the
parts (the rows of ``H``) as images, next to the objective per second of both solvers.
"""

import time
import warnings

import matplotlib.pyplot as plt
from sklearn.datasets import load_digits
from sklearn.decomposition import NMF as SkNMF

import msm_gpu as mg

Y = load_digits().data  # 1797 x 64, pixel values 0..16
k = 16
mg.NMF(n_components=2, max_iter=2, random_state=0).fit(Y[:50])  # loads the compiled kernels

t0 = time.perf_counter()
model = mg.NMF(n_components=k, max_iter=100, random_state=0)
W = model.fit_transform(Y)
t_msm = time.perf_counter() - t0
H = model.components_
print(
    f"msm_gpu.NMF : ||Y - WH||_F = {model.reconstruction_err_:.2f}, "
    f"{model.n_iter_} iterations, {t_msm:.2f} s"
)

# %%
# scikit-learn's coordinate descent at its defaults, for reference.
t0 = time.perf_counter()
sk = SkNMF(n_components=k, max_iter=100, random_state=0)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # "maximum number of iterations reached"
    sk.fit_transform(Y)
t_sk = time.perf_counter() - t0
print(
    f"scikit-learn: ||Y - WH||_F = {sk.reconstruction_err_:.2f}, "
    f"{sk.n_iter_} iterations, {t_sk:.2f} s"
)

# %%
# The 16 parts, and the objective ``1/2 ||Y - WH||^2`` along the run
# (``model.history_`` holds (seconds, objective) after every outer iteration).
fig = plt.figure(figsize=(9, 4), layout="constrained")
left, right = fig.subfigures(1, 2, width_ratios=[1, 1.1])
for ax, part in zip(left.subplots(4, 4).ravel(), H, strict=True):
    ax.imshow(part.reshape(8, 8), cmap="gray_r")
    ax.set_xticks([])
    ax.set_yticks([])
left.suptitle(f"the {k} parts (rows of H)")
ax = right.subplots()
ax.semilogy(model.history_[:, 0], model.history_[:, 1], ".-", label="msm_gpu.NMF")
ax.axhline(0.5 * sk.reconstruction_err_**2, color="C1", ls="--", label="scikit-learn, end")
ax.set_xlabel("seconds")
ax.set_ylabel("1/2 ||Y - WH||^2")
ax.set_title("objective per outer iteration")
ax.legend()
plt.show()
