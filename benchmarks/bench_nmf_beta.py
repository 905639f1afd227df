"""Beta-divergence NMF beside scikit-learn's multiplicative updates (issue 49's acceptance).

Per loss and seed, from the same nndsvda start (scikit-learn's, passed as init="custom"),
in turn in one process (best of ``--repeats`` wall times):

* scikit-learn ``NMF(solver="mu")`` at its defaults (max_iter 200, tol 1e-4): time t_mu,
  objective f_mu;
* scikit-learn ``mu`` for 2000 iterations at tol 1e-8: the reference objective f_ref;
* ``mg.NMF`` at its defaults (Newton half-steps with MSM inside): time t_mg, objective
  f_mg, the time its run took to f_ref (within 1e-3, :func:`time_to_reference`); and the
  objective of our run cut at t_mu seconds (``time_limit``).

The acceptance: f_mg within 1e-3 of f_ref (relative, or below it) in no more time than
t_mu.  Objectives are scikit-learn's ``_beta_divergence`` of the returned factors.

Data (generated, no download): a text-like Poisson count matrix (documents x words from
Dirichlet topics, 400 x 600, about 14 % nonzero, k = 10) for Kullback-Leibler, and a
spectrogram-like positive matrix (harmonic templates times decaying note activations,
times exponential noise: Itakura-Saito's model, 400 x 600, k = 10) for Itakura-Saito.

    python benchmarks/bench_nmf_beta.py [--seeds 3] [--repeats 3] [--threads 1] [--json F]

On a shared machine scikit-learn's defaults run its BLAS on every core, which can cost it
several times its one-thread time; ``--threads 1`` compares both on one thread.

The functions :func:`kl_ratios` and :func:`is_ratios` return the side-by-side numbers
for the regression gate (``benchmarks/regress.py``).
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings

import numpy as np


def text_counts(m=400, d=600, k=10, seed=0):
    """Poisson counts of documents mixing k Dirichlet topics (dense float64, ~14 % nonzero)."""
    rng = np.random.default_rng(seed)
    topics = rng.dirichlet(np.full(d, 0.05), k)
    mix = rng.dirichlet(np.full(k, 0.3), m)
    lengths = rng.poisson(150, m)[:, None]
    return rng.poisson(lengths * mix @ topics).astype(np.float64)


def spectrogram(n_freq=400, n_frames=600, k=10, seed=0):
    """A positive power-spectrogram-like matrix: k harmonic templates (decaying partials)
    times note activations (onsets with exponential decays), plus a floor, times
    exponential noise (the Itakura-Saito model)."""
    rng = np.random.default_rng(seed)
    f = np.arange(n_freq, dtype=np.float64)
    W = np.zeros((n_freq, k))
    for j in range(k):
        f0 = rng.uniform(8, 40)
        for h in range(1, 12):
            W[:, j] += 0.7**h * np.exp(-0.5 * ((f - h * f0) / 1.5) ** 2)
    H = np.zeros((k, n_frames))
    for j in range(k):
        for onset in rng.choice(n_frames, 6, replace=False):
            decay = np.exp(-np.arange(n_frames - onset) / rng.uniform(10, 60))
            H[j, onset:] += rng.uniform(0.5, 2) * decay
    return (W @ H + 1e-3) * rng.exponential(1.0, (n_freq, n_frames))


def _divergence(Y, W, H, loss):
    from sklearn.decomposition._nmf import _beta_divergence

    return float(_beta_divergence(Y, W, H, loss))


def _timed(fit, repeats):
    """(best seconds, the fastest run's result): ``_common.best_of``."""
    from _common import best_of

    run = best_of(fit, k=repeats, memory=False)
    return run["seconds"], run["value"]


def compare(Y, k, loss, repeats=3):
    """One data set: the numbers of the module docstring, as a dict."""
    from _common import settle_allocator
    from sklearn.decomposition import NMF as SkNMF
    from sklearn.decomposition._nmf import _initialize_nmf

    import msm_gpu as mg

    settle_allocator()  # both timed in a long-running process's allocator state
    W0, H0 = _initialize_nmf(Y, k, init="nndsvda", random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mg.NMF(k, beta_loss=loss, init="custom", max_iter=2).fit(Y, W=W0, H=H0)  # compiled

    def sk_fit(**kw):
        model = SkNMF(k, init="custom", solver="mu", beta_loss=loss, **kw)
        W = model.fit_transform(Y, W=W0.copy(), H=H0.copy())
        return _divergence(Y, W, model.components_, loss), model.n_iter_

    def mg_fit(**kw):
        model = mg.NMF(k, init="custom", beta_loss=loss, **kw)
        started = time.perf_counter()
        W = model.fit_transform(Y, W=W0, H=H0)
        wall = time.perf_counter() - started
        return _divergence(Y, W, model.components_, loss), model.n_iter_, model.history_, wall

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t_mu, (f_mu, it_mu) = _timed(sk_fit, repeats)
        t_mg, (f_mg, it_mg, history, wall) = _timed(mg_fit, repeats)
        f_ref, it_ref = sk_fit(max_iter=2000, tol=1e-8)
        f_cut = mg_fit(max_iter=10**6, tol=0, time_limit=t_mu)[0]
    t_reach = time_to_reference(history, wall, f_ref)
    return {
        "loss": loss,
        "shape": list(Y.shape),
        "k": k,
        "t_sklearn_mu": t_mu,
        "f_sklearn_mu": f_mu,
        "iter_sklearn_mu": it_mu,
        "f_sklearn_mu_2000": f_ref,
        "iter_sklearn_mu_2000": it_ref,
        "t_msm_gpu": t_mg,
        "f_msm_gpu": f_mg,
        "iter_msm_gpu": it_mg,
        "f_msm_gpu_at_t_mu": f_cut,
        "time_ratio": t_mg / t_mu,
        "t_msm_gpu_to_ref": t_reach,
        "reach_ratio": t_reach / t_mu,
        "gap": (f_mg - f_ref) / f_ref,
        "gap_at_t_mu": (f_cut - f_ref) / f_ref,
    }


def time_to_reference(history, wall, f_ref, rel=1e-3):
    """Seconds the fit took to an objective within ``rel`` of ``f_ref`` (or below it),
    from its ``history_`` (seconds from the loop's start, objective of each iteration's
    pair): the first such iteration's time plus everything of the fit's ``wall`` time
    outside the loop (checks, start, and the final exact W-step, which would follow a
    stop there too); inf where no iteration got there."""
    history = np.asarray(history, dtype=np.float64)
    reached = np.flatnonzero(history[:, 1] <= f_ref * (1.0 + rel))
    if not reached.size:
        return math.inf
    outside = max(wall - history[-1, 0], 0.0)
    return float(history[reached[0], 0] + outside)


def kl_ratios(seed=0, repeats=3):
    """Kullback-Leibler on the text-like counts: ``compare``'s dict (time_ratio = our
    default fit's time over scikit-learn mu's at its defaults; gap = our objective's
    relative distance to mu's after 2000 iterations)."""
    return compare(text_counts(seed=seed), 10, "kullback-leibler", repeats)


def is_ratios(seed=0, repeats=3):
    """Itakura-Saito on the spectrogram-like matrix (``compare``'s dict)."""
    return compare(spectrogram(seed=seed), 10, "itakura-saito", repeats)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="threads for both (BLAS and msm-gpu's sweeps); default: each library's own",
    )
    args = parser.parse_args(argv)
    if args.threads:
        import os

        from threadpoolctl import threadpool_limits

        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # msm-gpu's thread cap
        threadpool_limits(args.threads)
    rows = []
    print(
        f"{'loss':18} {'seed':>4} {'t mu':>7} {'f mu':>11} {'f mu@2000':>11} {'t ours':>7} "
        f"{'f ours':>11} {'it mu/ours':>10} {'t/t_mu':>7} {'gap':>9} {'gap@t_mu':>9}"
    )
    for name, fn in (("kullback-leibler", kl_ratios), ("itakura-saito", is_ratios)):
        for seed in range(args.seeds):
            r = fn(seed, args.repeats)
            r["seed"] = seed
            rows.append(r)
            print(
                f"{name:18} {seed:>4} {r['t_sklearn_mu']:>7.3f} {r['f_sklearn_mu']:>11.6g} "
                f"{r['f_sklearn_mu_2000']:>11.6g} {r['t_msm_gpu']:>7.3f} {r['f_msm_gpu']:>11.6g} "
                f"{r['iter_sklearn_mu']:>4}/{r['iter_msm_gpu']:<5} {r['time_ratio']:>7.2f} "
                f"{r['gap']:>+9.1e} {r['gap_at_t_mu']:>+9.1e}",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
