"""NMF defaults against scikit-learn's defaults, from the same start.

For each data set, init and seed: scikit-learn's ``NMF(k)`` and ``mg.NMF(k)`` at their
default options, both started from the same (W0, H0) (scikit-learn's initialisation,
passed as ``init="custom"``), in turn in one process.  Printed: each objective
1/2 ||Y - WH||_F^2, the relative difference, the iterations and the wall time of each.

Data (no download): scikit-learn's digits (1797 x 64, k = 20); 8 x 8 grey patches of its
bundled sample images (china.jpg, flower.jpg; 5000 x 64, k = 16); a Zipf "text" count
matrix (2000 documents x 1000 terms, k = 10).

    python benchmarks/bench_nmf_defaults.py [--seeds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np


def digits():
    from sklearn.datasets import load_digits

    return load_digits().data


def image_patches(n=5000, size=8, seed=0):
    from sklearn.datasets import load_sample_images

    rng = np.random.default_rng(seed)
    out = []
    for img in load_sample_images().images:
        grey = img.mean(axis=2)
        rows = rng.integers(0, grey.shape[0] - size, n // 2)
        cols = rng.integers(0, grey.shape[1] - size, n // 2)
        out += [grey[r : r + size, c : c + size].ravel() for r, c in zip(rows, cols, strict=True)]
    return np.asarray(out)


def zipf_text(docs=2000, terms=1000, topics=10, seed=0):
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, terms + 1) ** 1.1
    topic_terms = np.stack([rng.permutation(weights) for _ in range(topics)])
    topic_terms /= topic_terms.sum(axis=1, keepdims=True)
    mix = rng.dirichlet(np.full(topics, 0.2), size=docs)
    lengths = rng.poisson(150, size=docs)
    probs = mix @ topic_terms
    return np.stack([rng.multinomial(n, p) for n, p in zip(lengths, probs, strict=True)]) * 1.0


DATA = {"digits": (digits, 20), "image patches": (image_patches, 16), "zipf text": (zipf_text, 10)}


def objective(Y, W, H):
    return 0.5 * float(np.linalg.norm(Y - W @ H) ** 2)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    from _common import settle_allocator

    settle_allocator()  # peers timed in one allocator state (_common's docstring)

    from sklearn.decomposition import NMF as SkNMF
    from sklearn.decomposition._nmf import _initialize_nmf

    import msm_gpu as mg

    warnings.simplefilter("ignore")  # scikit-learn's max_iter warnings
    mg.NMF(n_components=3, max_iter=3).fit(np.random.default_rng(0).random((30, 20)))  # compiled
    rows = []
    print(
        f"{'data':14} {'init':8} {'seed':>4} {'F sklearn':>12} {'F msm_gpu':>12} {'diff':>8} "
        f"{'it sk':>5} {'it mg':>5} {'s sk':>6} {'s mg':>6}"
    )
    for name, (make, k) in DATA.items():
        Y = make()
        for init in ("nndsvda", "random"):
            for seed in range(args.seeds):
                W0, H0 = _initialize_nmf(Y, k, init=init, random_state=seed)
                t = time.perf_counter()
                sk = SkNMF(k, init="custom", random_state=seed)
                W_sk = sk.fit_transform(Y, W=W0.copy(), H=H0.copy())
                t_sk = time.perf_counter() - t
                t = time.perf_counter()
                ours = mg.NMF(k, init="custom", random_state=seed)
                W_mg = ours.fit_transform(Y, W=W0.copy(), H=H0.copy())
                t_mg = time.perf_counter() - t
                f_sk = objective(Y, W_sk, sk.components_)
                f_mg = objective(Y, W_mg, ours.components_)
                row = {
                    "data": name,
                    "init": init,
                    "seed": seed,
                    "f_sklearn": f_sk,
                    "f_msm_gpu": f_mg,
                    "rel_diff": (f_mg - f_sk) / f_sk,
                    "iter_sklearn": int(sk.n_iter_),
                    "iter_msm_gpu": int(ours.n_iter_),
                    "s_sklearn": t_sk,
                    "s_msm_gpu": t_mg,
                }
                rows.append(row)
                print(
                    f"{name:14} {init:8} {seed:>4} {f_sk:>12.6g} {f_mg:>12.6g} "
                    f"{100 * row['rel_diff']:>+7.3f}% {sk.n_iter_:>5} {ours.n_iter_:>5} "
                    f"{t_sk:>6.2f} {t_mg:>6.2f}"
                )
    diffs = np.array([r["rel_diff"] for r in rows])
    t_sk = sum(r["s_sklearn"] for r in rows)
    t_mg = sum(r["s_msm_gpu"] for r in rows)
    print(
        f"\nmsm_gpu at or below scikit-learn in {np.sum(diffs <= 0)} of {len(rows)} runs; "
        f"median diff {100 * np.median(diffs):+.3f}%, worst {100 * diffs.max():+.3f}%; "
        f"total time sklearn {t_sk:.1f} s, msm_gpu {t_mg:.1f} s"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
