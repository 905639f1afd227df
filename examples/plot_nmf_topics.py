"""
Topics of a bag of words by Kullback-Leibler NMF
================================================

Word counts are Poisson-like: the Kullback-Leibler divergence is the loss that matches
them (``beta_loss="kullback-leibler"``), and :class:`msm_gpu.NMF` minimises it by proximal
Newton half-steps with MSM sweeps inside, reading only the nonzero counts of a sparse
document-term matrix.

We generate 800 documents from 6 themed word lists (plus common words every topic
uses), factorise the counts into 6 topics, print the top words of each topic, and
compare the objective per second with scikit-learn's multiplicative updates from the same
start.  Nothing is downloaded.
"""

import time
import warnings

import matplotlib.pyplot as plt
import numpy as np
import scipy.sparse as sp
from sklearn.decomposition import NMF as SkNMF
from sklearn.decomposition._nmf import _beta_divergence, _initialize_nmf

import msm_gpu as mg

THEMES = {
    "sport": "match goal team coach league score season player referee stadium",
    "cooking": "recipe oven flour butter sauce garlic simmer onion pepper dough",
    "space": "orbit rocket planet launch telescope galaxy moon crater comet astronaut",
    "music": "guitar melody chord concert album rhythm drummer singer tempo lyric",
    "finance": "market stock bond interest inflation bank dividend investor loan price",
    "garden": "seed soil bloom compost weed prune tomato rose shovel harvest",
}
COMMON = "the said new one year time people way day thing".split()
vocabulary = COMMON + [w for words in THEMES.values() for w in words.split()]
rng = np.random.default_rng(0)
k, n_docs, n_words = len(THEMES), 800, len(vocabulary)

# each topic: its own ten words, a little of the common words and of every other word
topics = np.full((k, n_words), 0.002)
topics[:, : len(COMMON)] = 0.02
for t in range(k):
    start = len(COMMON) + 10 * t
    topics[t, start : start + 10] = rng.dirichlet(np.ones(10)) * 0.8
topics /= topics.sum(axis=1, keepdims=True)
mix = rng.dirichlet(np.full(k, 0.15), n_docs)  # mostly one or two topics a document
lengths = rng.poisson(60, n_docs)
Y = sp.csr_matrix(rng.poisson(lengths[:, None] * (mix @ topics)).astype(np.float64))
print(f"{n_docs} documents x {n_words} words, {Y.nnz / np.prod(Y.shape):.0%} nonzero")

mg.NMF(2, beta_loss="kullback-leibler", max_iter=2, tol=0).fit(Y[:40])  # loads the kernels

# %%
# The fit, from scikit-learn's nndsvda start (the default init).
W0, H0 = _initialize_nmf(Y, k, init="nndsvda", random_state=0)
t0 = time.perf_counter()
model = mg.NMF(k, beta_loss="kullback-leibler", init="custom")
W = model.fit_transform(Y, W=W0, H=H0)
t_msm = time.perf_counter() - t0
H = model.components_
f_msm = _beta_divergence(Y, W, H, "kullback-leibler")
print(f"msm_gpu.NMF : KL = {f_msm:.1f}, {model.n_iter_} iterations, {t_msm:.2f} s")

# %%
# scikit-learn's multiplicative updates from the same start: at its defaults, and run
# for 2000 iterations as the reference.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # "maximum number of iterations reached"
    t0 = time.perf_counter()
    sk = SkNMF(k, init="custom", solver="mu", beta_loss="kullback-leibler")
    Ws = sk.fit_transform(Y, W=W0.copy(), H=H0.copy())
    t_mu = time.perf_counter() - t0
    ref = SkNMF(k, init="custom", solver="mu", beta_loss="kullback-leibler", max_iter=2000,
                tol=1e-8)  # fmt: skip
    Wr = ref.fit_transform(Y, W=W0.copy(), H=H0.copy())
f_mu = _beta_divergence(Y, Ws, sk.components_, "kullback-leibler")
f_ref = _beta_divergence(Y, Wr, ref.components_, "kullback-leibler")
print(f"scikit-learn mu, defaults : KL = {f_mu:.1f}, {sk.n_iter_} iterations, {t_mu:.2f} s")
print(f"scikit-learn mu, {ref.n_iter_} iterations : KL = {f_ref:.1f}")

# %%
# The top words of each topic (the largest entries of each row of H), and which theme
# each topic found.
for t, row in enumerate(H):
    top = [vocabulary[i] for i in np.argsort(row)[::-1][:6]]
    theme = max(THEMES, key=lambda name: sum(w in THEMES[name].split() for w in top))
    print(f"topic {t} ({theme:>7}): {' '.join(top)}")

# %%
# The objective per second (``model.history_`` holds (seconds, objective) after every
# outer iteration), beside scikit-learn's two runs.
fig, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
ax.semilogy(model.history_[:, 0], model.history_[:, 1] - f_ref * 0.999, ".-",
            label="msm_gpu.NMF (Newton + MSM)")  # fmt: skip
ax.axhline(f_mu - f_ref * 0.999, color="C1", ls="--", label=f"scikit-learn mu, {t_mu:.2f} s")
ax.axhline(f_ref - f_ref * 0.999, color="C2", ls=":", label="scikit-learn mu, 2000 its")
ax.set_xlabel("seconds")
ax.set_ylabel("KL - 0.999 KL_ref")
ax.set_title("Kullback-Leibler divergence along the fit")
ax.legend()
plt.show()
