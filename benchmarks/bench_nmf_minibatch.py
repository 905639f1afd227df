"""MiniBatchNMF beside scikit-learn's MiniBatchNMF, same data, same init (issue 49).

For each loss: scikit-learn's ``MiniBatchNMF`` at its defaults (``max_iter`` passes,
its stopping rules) gives a time t_sk and an error e_sk (its ``reconstruction_err_``,
sqrt(2 loss)); ``mg.MiniBatchNMF`` with the same parameters is then run for 1, 2, 3, ...
passes until its error is at most e_sk, which gives the time t_mg to scikit-learn's
error.  Both start from scikit-learn's nndsvda init of the whole data (``random_state``),
in one process, best of ``--repeats`` wall times.

Data (no download): scikit-learn's digits (1797 x 64; Frobenius and KL), k = 10, batch
256, and a Zipf-like document-term count matrix (2000 x 1000, sparse; KL).

    python benchmarks/bench_nmf_minibatch.py [--repeats 3] [--threads 1] [--json F]

:func:`minibatch_ratios` returns the side-by-side numbers for the regression gate.
"""

from __future__ import annotations

import argparse
import json
import warnings

import numpy as np


def digits():
    from sklearn.datasets import load_digits

    return load_digits().data


def zipf_counts(docs=2000, terms=1000, topics=10, seed=0):
    """A sparse document-term count matrix (CSR) from Zipf-like topics."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, terms + 1) ** 1.1
    topic_terms = np.stack([rng.permutation(weights) for _ in range(topics)])
    topic_terms /= topic_terms.sum(axis=1, keepdims=True)
    mix = rng.dirichlet(np.full(topics, 0.2), size=docs)
    lengths = rng.poisson(150, size=docs)
    counts = np.stack(
        [rng.multinomial(n, p) for n, p in zip(lengths, mix @ topic_terms, strict=True)]
    )
    return sp.csr_matrix(counts.astype(np.float64))


def _best(fit, repeats):
    """(best seconds, the fastest run's result): ``_common.best_of``."""
    from _common import best_of

    run = best_of(fit, k=repeats, memory=False)
    return run["seconds"], run["value"]


def compare(X, loss, k=10, batch_size=256, repeats=3, max_passes=200):
    """The dict of one comparison (module docstring)."""
    from sklearn.decomposition import MiniBatchNMF as SkMiniBatchNMF

    import msm_gpu as mg

    kw = {"batch_size": batch_size, "beta_loss": loss, "random_state": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mg.MiniBatchNMF(k, max_iter=2, **kw).fit(X)  # compiled
        t_sk, sk = _best(lambda: SkMiniBatchNMF(k, **kw).fit(X), repeats)
        passes, t_mg, err = 0, np.inf, np.inf
        while passes < max_passes:
            passes = max(passes + 1, int(passes * 1.5))
            t_mg, ours = _best(lambda p=passes: mg.MiniBatchNMF(k, max_iter=p, **kw).fit(X), 1)
            err = ours.reconstruction_err_
            if err <= sk.reconstruction_err_:
                t_mg, _ = _best(
                    lambda p=passes: mg.MiniBatchNMF(k, max_iter=p, **kw).fit(X), repeats
                )
                break
    return {
        "loss": loss,
        "shape": list(X.shape),
        "k": k,
        "batch_size": batch_size,
        "t_sklearn": t_sk,
        "err_sklearn": float(sk.reconstruction_err_),
        "passes_sklearn": int(sk.n_iter_),
        "t_msm_gpu": t_mg,
        "err_msm_gpu": float(err),
        "passes_msm_gpu": passes,
        "time_ratio": t_mg / t_sk,
    }


def minibatch_ratios(repeats=3):
    """The three comparisons' dicts (time_ratio: our time to scikit-learn's error over
    its time at its defaults)."""
    return [
        compare(digits(), "frobenius", repeats=repeats),
        compare(digits(), "kullback-leibler", repeats=repeats),
        compare(zipf_counts(), "kullback-leibler", repeats=repeats),
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    from _common import settle_allocator

    settle_allocator()  # peers timed in one allocator state (_common's docstring)
    if args.threads:
        import os

        from threadpoolctl import threadpool_limits

        os.environ["OMP_NUM_THREADS"] = str(args.threads)
        threadpool_limits(args.threads)
    rows = minibatch_ratios(args.repeats)
    print(
        f"{'loss':18} {'shape':>12} {'t sk':>7} {'err sk':>10} {'passes':>6} "
        f"{'t ours':>7} {'err ours':>10} {'passes':>6} {'t/t_sk':>7}"
    )
    for r in rows:
        shape = "x".join(map(str, r["shape"]))
        print(
            f"{r['loss']:18} {shape:>12} {r['t_sklearn']:>7.3f} {r['err_sklearn']:>10.5g} "
            f"{r['passes_sklearn']:>6} {r['t_msm_gpu']:>7.3f} {r['err_msm_gpu']:>10.5g} "
            f"{r['passes_msm_gpu']:>6} {r['time_ratio']:>7.2f}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
