"""NMF comparison in the paper's protocol (section 5.1, Table of objective after t seconds).

For every data set and rank n, each solver starts from the same random nonnegative
initialisations (sqrt(mean(Y)/n) |N(0,1)|, as scikit-learn's init="random"), runs with
tol=0 up to the largest time limit, and the objective 1/2 ||Y - WH||_F^2 reached after t
seconds is averaged over the initialisations.  Solvers: this library's msm, hals, pg,
apg, bpp, cgd and, as outside peers, scikit-learn's NMF(solver="cd") and
NMF(solver="mu") (each point of a scikit-learn curve is its own run with max_iter =
1, 2, 4, ... from the same start, since scikit-learn has no callback; times include
each call's setup, as do ours).  The best per row is marked with ``*``.

Data (all shipped or generated here): scikit-learn's digits (1797 x 64), scikit-image's
lfw_subset faces (200 x 625), scikit-learn's two sample images as grey pixel matrices
(stacked, 854 x 640) and a generated sparse document-term matrix with Zipf-like word
frequencies drawn from a few Zipf topics (``--text-shape``, 1% density).

``--target`` runs the side-by-side check of the MSM target instead (issue 11): from
scikit-learn's own random init (seeds 0, 1, 2, built once and passed to every solver),
scikit-learn cd for 200 iterations vs MSM and bpp for the same time, on digits (k=20),
china.jpg as a grey pixel matrix (k=30) and a 3000 x 8000 Zipf-like text matrix (1%,
k=40); it reports the time MSM needs to reach cd's objective as a fraction of cd's time
and MSM's objective over bpp's after cd's time (medians over the seeds).

Examples
--------
    python benchmarks/bench_nmf.py --quick            # a few minutes on 2 cores
    python benchmarks/bench_nmf.py --ranks 10 20 50 100 --times 5 10 20 --inits 5
    python benchmarks/bench_nmf.py --target
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _machine import describe  # noqa: E402

from msm_gpu.apps import nmf

OURS = ("msm", "hals", "pg", "apg", "bpp", "cgd")
PEERS = ("sk-cd", "sk-mu")


# -- data -------------------------------------------------------------------------------


def zipf_corpus(n_docs, n_terms, *, density=0.01, n_topics=20, exponent=1.1, seed=0):
    """A sparse document-term count matrix (CSR, float64) with Zipf-like word frequencies.

    Each topic is a Zipf law p(rank r) ~ 1/(r + 2.7)^exponent over its own random
    permutation of the vocabulary; each document mixes 1-3 topics (Dirichlet weights)
    and draws about enough words to give the requested density.
    """
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, n_terms + 1, dtype=np.float64)
    cdf = np.cumsum(1.0 / (ranks + 2.7) ** exponent)
    cdf /= cdf[-1]
    perms = np.stack([rng.permutation(n_terms) for _ in range(n_topics)])
    words_per_doc = max(1, int(1.6 * density * n_terms))
    rows, cols = [], []
    for start in range(0, n_docs, 1000):
        stop = min(start + 1000, n_docs)
        nd = stop - start
        lengths = rng.poisson(words_per_doc, nd) + 1
        doc = np.repeat(np.arange(start, stop), lengths)
        n_top = rng.integers(1, 4, nd)
        topics = rng.integers(0, n_topics, (nd, 3))
        weights = rng.dirichlet(np.ones(3), nd) * (np.arange(3)[None, :] < n_top[:, None])
        weights /= weights.sum(axis=1, keepdims=True)
        local = doc - start
        u = rng.random(local.size)
        cum = np.cumsum(weights, axis=1)[local]
        slot = (u[:, None] > cum).sum(axis=1).clip(0, 2)
        topic = topics[local, slot]
        rank = np.searchsorted(cdf, rng.random(local.size))
        rows.append(doc)
        cols.append(perms[topic, rank])
    rows = np.concatenate(rows)
    cols = np.concatenate(cols)
    y = sp.coo_matrix(
        (np.ones(rows.size), (rows, cols)), shape=(n_docs, n_terms), dtype=np.float64
    ).tocsr()
    y.sum_duplicates()
    return y


def load(name, text_shape):
    if name == "digits":
        from sklearn.datasets import load_digits

        return load_digits().data.astype(np.float64)
    if name == "faces":
        from skimage.data import lfw_subset

        faces = lfw_subset()
        return faces.reshape(faces.shape[0], -1).astype(np.float64)
    if name == "images":
        from sklearn.datasets import load_sample_images

        grey = [img.astype(np.float64).mean(axis=2) for img in load_sample_images().images]
        return np.vstack(grey)
    if name == "china":
        from sklearn.datasets import load_sample_image

        return load_sample_image("china.jpg").astype(np.float64).mean(axis=2)
    if name == "text":
        docs, terms, density = text_shape
        return zipf_corpus(docs, terms, density=density)
    raise ValueError(f"unknown data set {name!r}")


def shape_text(y):
    kind = "sparse" if sp.issparse(y) else "dense"
    extra = f", density {y.nnz / (y.shape[0] * y.shape[1]):.2%}" if sp.issparse(y) else ""
    return f"{y.shape[0]} x {y.shape[1]} {kind}{extra}"


def init_factors(y, k, seed):
    rng = np.random.default_rng(seed)
    m, d = y.shape
    mean = (y.sum() / (m * d)) if sp.issparse(y) else y.mean()
    avg = np.sqrt(mean / k)
    return avg * np.abs(rng.standard_normal((m, k))), avg * np.abs(rng.standard_normal((k, d)))


# -- runs -------------------------------------------------------------------------------


def run_ours(solver, y, W0, H0, t_max, **options):
    """(seconds, objective) curve of one run; times include the call's own setup."""
    started = time.perf_counter()
    _, _, info = nmf(
        y,
        W0.shape[1],
        solver=solver,
        init="custom",
        W=W0,
        H=H0,
        tol=0,
        max_iter=10**9,
        time_limit=t_max,
        **options,
    )
    total = time.perf_counter() - started
    hist = info["history"].copy()
    hist[1:, 0] += max(total - info["time"], 0.0)  # setup + final error, charged to us
    return hist


def run_sklearn(solver, y, W0, H0, t_max, max_iter_cap=4096):
    """Points (seconds, objective) of independent scikit-learn runs, max_iter = 1, 2, 4, ..."""
    from sklearn.decomposition import NMF as SkNMF

    hist = [(0.0, objective_of(y, W0, H0))]
    it = 1
    while it <= max_iter_cap:
        model = SkNMF(W0.shape[1], solver=solver, init="custom", max_iter=it, tol=1e-12)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            started = time.perf_counter()
            model.fit_transform(y, W=W0.copy(), H=H0.copy())
            elapsed = time.perf_counter() - started
        hist.append((elapsed, 0.5 * model.reconstruction_err_**2))
        if elapsed > t_max:
            break
        it *= 2
    return np.asarray(hist)


def objective_of(y, W, H):
    if sp.issparse(y):
        norm2 = float((y.data**2).sum())
        cross = float(np.sum(W * (y @ H.T)))
        return 0.5 * max(norm2 - 2 * cross + float(np.sum((W.T @ W) * (H @ H.T))), 0.0)
    return 0.5 * float(np.sum((y - W @ H) ** 2))


def value_at(hist, t):
    """Objective of the last point reached within t seconds (the start if none)."""
    ok = hist[:, 0] <= t
    return float(hist[ok, 1][-1]) if ok.any() else float(hist[0, 1])


# -- table and plots ----------------------------------------------------------------------


def print_table(rows, solvers):
    head = f"{'data':>7} {'n':>4} {'t (s)':>6} " + " ".join(f"{s:>12}" for s in solvers)
    print(head)
    print("-" * len(head))
    for (name, k, t), values in rows:
        best = min(values[s] for s in solvers)
        cells = []
        for s in solvers:
            v = values[s]
            mark = "*" if v <= best * (1 + 1e-12) else " "
            cells.append(f"{v:>11.4e}{mark}")
        print(f"{name:>7} {k:>4} {t:>6g} " + " ".join(cells))


def plot(name, curves, ranks, solvers, t_max, out_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(ranks), figsize=(4.5 * len(ranks), 3.6), squeeze=False)
    grid = np.linspace(0.0, t_max, 200)
    for ax, k in zip(axes[0], ranks, strict=True):
        for s in solvers:
            runs = curves[(k, s)]
            mean = np.mean([[value_at(h, t) for t in grid] for h in runs], axis=0)
            ax.plot(grid, mean, label=s, lw=1.5, ls="--" if s.startswith("sk-") else "-")
        ax.set_yscale("log")
        ax.set_xlabel("seconds")
        ax.set_title(f"{name}, n = {k}")
    axes[0][0].set_ylabel("1/2 ||Y - WH||_F^2 (mean over inits)")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    path = Path(out_dir) / f"nmf_{name}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- the MSM target -------------------------------------------------------------------------

#: (data set, rank) of the target (issue 11).
TARGETS = (("digits", 20), ("china", 30), ("text", 40))
TARGET_TEXT_SHAPE = (3000, 8000, 0.01)


def sklearn_random_init(y, k, seed):
    """scikit-learn's own init="random" factors (built once, passed to every solver)."""
    from sklearn.decomposition._nmf import _initialize_nmf

    return _initialize_nmf(y, k, init="random", random_state=seed)


def run_sklearn_cd(y, W0, H0, max_iter=200):
    """(seconds, objective) of scikit-learn's NMF(solver="cd") from (W0, H0)."""
    from sklearn.decomposition import NMF as SkNMF

    model = SkNMF(W0.shape[1], solver="cd", init="custom", max_iter=max_iter, tol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        started = time.perf_counter()
        model.fit_transform(y, W=W0.copy(), H=H0.copy())
        elapsed = time.perf_counter() - started
    return elapsed, 0.5 * model.reconstruction_err_**2


def time_to_reach(hist, f):
    """First time a (seconds, objective) curve is <= f (inf if never)."""
    reached = hist[hist[:, 1] <= f]
    return float(reached[0, 0]) if len(reached) else float("inf")


def target(seeds=(0, 1, 2), datasets=None):
    """MSM vs scikit-learn cd (200 iterations) and vs bpp at equal time, same starts.

    Per data set and seed, interleaved in one run: scikit-learn cd for 200 iterations
    (time t_cd, objective f_cd), then MSM and bpp each for t_cd seconds from the same
    start.  Prints the time MSM needs to reach f_cd as a fraction of t_cd (target
    <= 0.5, median over the seeds) and both objectives after t_cd seconds (target: MSM's
    no worse than bpp's).
    """
    rows = []
    for name, k in TARGETS:
        if datasets and name not in datasets:
            continue
        y = load(name, TARGET_TEXT_SHAPE)
        print(f"{name}: {shape_text(y)}, k = {k}", flush=True)
        W, H = sklearn_random_init(y, k, 0)
        for s in ("msm", "bpp"):  # JIT / cache warm-up, not timed
            nmf(y, k, solver=s, init="custom", W=W, H=H, max_iter=2)
        ratios, msm_f, bpp_f = [], [], []
        for seed in seeds:
            W0, H0 = sklearn_random_init(y, k, seed)
            t_cd, f_cd = run_sklearn_cd(y, W0, H0)
            msm = run_ours("msm", y, W0, H0, t_cd)
            bpp = run_ours("bpp", y, W0, H0, t_cd)
            t_msm = time_to_reach(msm, f_cd)
            f_msm, f_bpp = value_at(msm, t_cd), value_at(bpp, t_cd)
            ratios.append(t_msm / t_cd)
            msm_f.append(f_msm)
            bpp_f.append(f_bpp)
            print(
                f"  seed {seed}: cd 200 it {t_cd:6.2f} s -> {f_cd:.6e} | MSM reaches it "
                f"after {t_msm:6.2f} s = {t_msm / t_cd:.2f} x cd | after {t_cd:.2f} s: "
                f"MSM {f_msm:.6e}, bpp {f_bpp:.6e} (MSM/bpp = {f_msm / f_bpp:.5f})",
                flush=True,
            )
        rows.append((name, k, np.median(ratios), np.median(msm_f), np.median(bpp_f)))
    print("\nmedian over seeds " + ", ".join(map(str, seeds)))
    print(f"{'data':>7} {'k':>3} {'MSM time / cd time':>19} {'MSM f / bpp f':>14}  targets")
    for name, k, ratio, fm, fb in rows:
        ok = "met" if ratio <= 0.5 and fm <= fb else "NOT met"
        print(f"{name:>7} {k:>3} {ratio:>19.2f} {fm / fb:>14.5f}  {ok}")
    return rows


def frobenius_ratios(datasets=(("digits", 20), ("faces", 20)), seeds=(0, 1, 2), repeats=1):
    """The regression gate's Frobenius numbers (issue 49): per data set, start (scikit-learn's
    random and nndsvda inits, ``seeds``) the time ``mg.NMF`` at its defaults (tol=0, for
    1.5x cd's time) takes to reach scikit-learn cd's 200-iteration objective, over cd's
    time (inf: not reached in 1.5x cd's time, another stationary point).  Returns one dict
    per data set and init with the per-seed ratios and their median."""
    from sklearn.decomposition._nmf import _initialize_nmf

    out = []
    for name, k in datasets:
        y = load(name, TARGET_TEXT_SHAPE)
        W, H = sklearn_random_init(y, k, 0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nmf(y, k, solver="msm", init="custom", W=W, H=H, max_iter=2)  # compiled
        for init in ("random", "nndsvda"):
            ratios = []
            for seed in seeds:
                W0, H0 = _initialize_nmf(y, k, init=init, random_state=seed)
                t_cd, f_cd = min(run_sklearn_cd(y, W0, H0) for _ in range(repeats))
                best = min(
                    time_to_reach(run_ours("msm", y, W0, H0, 1.5 * t_cd), f_cd)
                    for _ in range(repeats)
                )
                ratios.append(best / t_cd)
            row = {"data": name, "k": k, "init": init, "ratios": ratios}
            out.append({**row, "median": float(np.median(ratios))})
    return out


def regularised_ratios(name="digits", k=20, seeds=(0, 1, 2), alpha=1e-3, l1_ratio=0.5):
    """Regularised Frobenius NMF (scikit-learn's alpha_W = alpha_H = ``alpha``, ``l1_ratio``)
    beside scikit-learn cd, from its random inits: the time ``mg.NMF`` (defaults, tol=0, up
    to 1.5x cd's time) takes to reach cd's 200-iteration penalised objective, over cd's
    time.  Returns a dict with the per-seed ratios and their median."""
    from sklearn.decomposition import NMF as SkNMF

    y = load(name, TARGET_TEXT_SHAPE)
    m, d = y.shape
    pen = {"alpha_W": alpha, "alpha_H": "same", "l1_ratio": l1_ratio}

    def objective(W, H):
        value = objective_of(y, W, H)
        for x, n in ((W, d), (H, m)):
            value += n * alpha * (l1_ratio * x.sum() + 0.5 * (1 - l1_ratio) * np.sum(x * x))
        return value

    ratios = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for seed in seeds:
            W0, H0 = sklearn_random_init(y, k, seed)
            sk = SkNMF(k, solver="cd", init="custom", max_iter=200, tol=1e-12, **pen)
            started = time.perf_counter()
            W = sk.fit_transform(y, W=W0.copy(), H=H0.copy())
            t_cd = time.perf_counter() - started
            f_cd = objective(W, sk.components_)
            hist = run_ours("msm", y, W0, H0, 1.5 * t_cd, **pen)
            ratios.append(time_to_reach(hist, f_cd) / t_cd)
    return {"data": name, "k": k, **pen, "ratios": ratios, "median": float(np.median(ratios))}


# -- main ------------------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small settings (a few minutes)")
    ap.add_argument("--datasets", nargs="+", default=["digits", "faces", "images", "text"])
    ap.add_argument("--ranks", nargs="+", type=int, default=None)
    ap.add_argument("--times", nargs="+", type=float, default=None, help="time limits (s)")
    ap.add_argument("--inits", type=int, default=None, help="random initialisations")
    ap.add_argument("--solvers", nargs="+", default=list(OURS + PEERS))
    ap.add_argument(
        "--text-shape", nargs=3, type=float, default=None, metavar=("DOCS", "TERMS", "DENSITY")
    )
    ap.add_argument("--out", default="benchmarks/results", help="folder for the PNG plots")
    ap.add_argument("--target", action="store_true", help="MSM vs sklearn cd target only")
    args = ap.parse_args(argv)
    from _common import settle_allocator

    settle_allocator()  # peers timed in one allocator state (_common's docstring)

    quick = args.quick
    ranks = args.ranks or ([10, 20] if quick else [10, 20, 50, 100])
    times = sorted(args.times or ([0.25, 0.5, 1.0] if quick else [2.0, 5.0, 10.0]))
    n_inits = args.inits or (2 if quick else 5)
    ts = args.text_shape or ((2000, 10000, 0.01) if quick else (10000, 50000, 0.01))
    text_shape = (int(ts[0]), int(ts[1]), float(ts[2]))

    print(describe())
    if args.target:
        target(datasets=args.datasets if "--datasets" in (argv or sys.argv) else None)
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"ranks {ranks}, time limits {times} s, {n_inits} inits, solvers {args.solvers}\n"
        "entries: mean of 1/2 ||Y - WH||_F^2 after t seconds; * = best in the row\n"
    )
    rows = []
    for name in args.datasets:
        y = load(name, text_shape)
        print(f"{name}: {shape_text(y)}", flush=True)
        curves = {}
        for k in ranks:
            for s in args.solvers:
                curves[(k, s)] = []
            for seed in range(n_inits):
                W0, H0 = init_factors(y, k, seed)
                if seed == 0:
                    for s in args.solvers:  # JIT / cache warm-up, not timed
                        if s in OURS:
                            nmf(y, k, solver=s, init="custom", W=W0, H=H0, max_iter=1)
                for s in args.solvers:
                    if s in OURS:
                        h = run_ours(s, y, W0, H0, times[-1])
                    else:
                        h = run_sklearn(s[3:], y, W0, H0, times[-1])
                    curves[(k, s)].append(h)
            for t in times:
                values = {
                    s: float(np.mean([value_at(h, t) for h in curves[(k, s)]]))
                    for s in args.solvers
                }
                rows.append(((name, k, t), values))
        path = plot(name, curves, ranks, args.solvers, times[-1], out)
        print(f"  plot: {path}", flush=True)
    print()
    print_table(rows, args.solvers)


if __name__ == "__main__":
    main()
