"""l1-logistic regression: time to 1e-6 relative objective accuracy, side by side.

Problem (every solver solves exactly this one, no intercept, so that liblinear, which
penalises its intercept, solves the same problem as the others):

    min_w  1/m sum_i log(1 + exp(-y_i x_i'w)) + alpha ||w||_1,
    alpha = ALPHA_RATIO * alpha_max,  alpha_max = ||X'y||_inf / (2m)

(scikit-learn's ``LogisticRegression(C=1/(alpha m))``).  Solvers: this library's
``minimize`` (proximal Newton with MSM inner solves; ``exact`` and ``bound`` Hessians),
scikit-learn's liblinear and saga, skglm's ``ProxNewton``.  Each solver runs with a
decreasing sequence of tolerances (no library exposes the same stopping rule); a run
counts as reaching the target when (F - F*) / |F*| <= 1e-6, where F* is the lower of this
library's and skglm's objective at tol 1e-12 (or any lower objective a run reached); a
sweep stops at the first run that reaches the target or after a run longer than 30 s.
The time reported is that run's (times include each call's set-up; every run once,
after one warm-up of the JIT-compiled solvers).  One-vs-rest
(digits, 10 classes) sums F over the classes; our solver fits all classes in one call
("batched") and, separately, class by class; the peers fit class by class.

Data: scikit-learn's breast_cancer (569 x 30, standardised), digits (1797 x 64,
standardised, 10 one-vs-rest problems), a synthetic dense 20000 x 500 (Gaussian X,
20-sparse true w, Bernoulli labels) and a sparse Zipf-like document-term matrix
(``bench_nmf.zipf_corpus``, binary, rows l2-normalised; labels from a 50-sparse model).

Examples
--------
    python benchmarks/bench_logistic.py            # all data sets, PNG into benchmarks/out/
    python benchmarks/bench_logistic.py --quick    # smaller synthetic and text matrices
    python benchmarks/bench_logistic.py --data breast_cancer digits
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
from bench_nmf import zipf_corpus  # noqa: E402

import msm_gpu as mg  # noqa: E402

ALPHA_RATIO = 0.05
TARGET = 1e-6
DATASETS = ("breast_cancer", "digits", "synthetic", "text")
TIME_CAP = 30.0  # a solver's tolerance sweep stops after a run this long


# -- data -------------------------------------------------------------------------------


def load(name, quick=False):
    """X, Y (m,) or (m, r) in {-1, +1}."""
    from sklearn.preprocessing import StandardScaler

    if name == "breast_cancer":
        from sklearn.datasets import load_breast_cancer

        x, y = load_breast_cancer(return_X_y=True)
        return StandardScaler().fit_transform(x), 2.0 * y - 1.0
    if name == "digits":
        from sklearn.datasets import load_digits

        x, y = load_digits(return_X_y=True)
        x = StandardScaler().fit_transform(x)
        return x, np.where(y[:, None] == np.arange(10)[None, :], 1.0, -1.0)
    rng = np.random.default_rng(0)
    if name == "synthetic":
        m, n = (5000, 200) if quick else (20000, 500)
        x = rng.standard_normal((m, n))
        w = np.zeros(n)
        w[rng.choice(n, 20, replace=False)] = rng.standard_normal(20)
        return x, np.where(rng.random(m) < 1 / (1 + np.exp(-x @ w)), 1.0, -1.0)
    if name == "text":
        m, n = (2000, 5000) if quick else (10000, 20000)
        x = zipf_corpus(m, n, density=0.005)
        x.data[:] = 1.0
        norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
        x = sp.diags(1.0 / np.maximum(norms, 1e-12)) @ x
        w = np.zeros(n)
        w[rng.choice(n, 50, replace=False)] = 10 * rng.standard_normal(50)
        z = x @ w
        return x.tocsr(), np.where(rng.random(m) < 1 / (1 + np.exp(-(z - np.median(z)))), 1.0, -1.0)
    raise ValueError(f"unknown data set {name!r}")


def alpha_for(x, y):
    y2 = y[:, None] if y.ndim == 1 else y
    return ALPHA_RATIO * float(np.abs(x.T @ y2).max()) / (2 * x.shape[0])


def objective(x, y, w, alpha):
    z = np.asarray(x @ w)
    return float(np.mean(np.logaddexp(0.0, -y * z), axis=0).sum() + alpha * np.abs(w).sum())


# -- solvers: each returns the coefficient matrix (n,) or (n, r) -----------------------


def ours(hessian, batched=True):
    def run(x, y, alpha, tol):
        if y.ndim == 1 or batched:
            loss = mg.Logistic(x, y, fit_intercept=False)
            return mg.minimize(loss, mg.L1(alpha), tol=tol, max_iter=500, hessian=hessian).x
        return np.stack([run(x, y[:, c], alpha, tol) for c in range(y.shape[1])], axis=1)

    return run


def sklearn_solver(solver):
    from sklearn.linear_model import LogisticRegression

    def run(x, y, alpha, tol):
        if y.ndim == 2:
            return np.stack([run(x, y[:, c], alpha, tol) for c in range(y.shape[1])], axis=1)
        est = LogisticRegression(
            penalty="l1",
            C=1.0 / (alpha * x.shape[0]),
            solver=solver,
            tol=tol,
            fit_intercept=False,
            max_iter=100000,
        )
        return est.fit(x, y).coef_.ravel()

    return run


def skglm_solver(x, y, alpha, tol):
    from skglm import GeneralizedLinearEstimator
    from skglm.datafits import Logistic
    from skglm.penalties import L1
    from skglm.solvers import ProxNewton

    if y.ndim == 2:
        return np.stack([skglm_solver(x, y[:, c], alpha, tol) for c in range(y.shape[1])], axis=1)
    est = GeneralizedLinearEstimator(
        Logistic(), L1(alpha), ProxNewton(fit_intercept=False, tol=tol, max_iter=200)
    )
    return est.fit(x, y).coef_.ravel()


SOLVERS = {
    "msm-newton (exact)": (ours("exact"), [1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-8, 1e-10]),
    "msm-newton (bound)": (ours("bound"), [1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-8]),
    "msm-newton (exact, class by class)": (
        ours("exact", batched=False),
        [1e-3, 1e-4, 1e-5, 1e-6, 1e-8],
    ),
    "sklearn liblinear": (sklearn_solver("liblinear"), [1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-8, 1e-10]),
    "sklearn saga": (sklearn_solver("saga"), [1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-8]),
    "skglm ProxNewton": (skglm_solver, [1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-8, 1e-10]),
}


def sweep(solver, tols, x, y, alpha, best):
    """(tol, seconds, F) per tolerance, stopping once the target is reached (gap to the
    reference ``best``) or after a run longer than TIME_CAP."""
    points = []
    for tol in tols:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            w = solver(x, y, alpha, tol)
            seconds = time.perf_counter() - t0
        f = objective(x, y, w, alpha)
        points.append((tol, seconds, f))
        if (f - best) / abs(best) <= TARGET or seconds > TIME_CAP:
            break
    return points


def reference(x, y, alpha):
    """F*: the lower of this library's and skglm's objective at tol 1e-12."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fs = [objective(x, y, s(x, y, alpha, 1e-12), alpha) for s in (ours("exact"), skglm_solver)]
    return min(fs)


# -- the estimator at its defaults beside liblinear ------------------------------------


def estimator_data(name):
    """(X, labels) for :func:`estimator_vs_liblinear`: data as users have them, columns in
    their own units (not standardised)."""
    from sklearn.datasets import load_breast_cancer, load_digits

    if name == "breast_cancer_raw":  # columns from 1e-3 to 4e3
        return load_breast_cancer(return_X_y=True)
    if name == "digits_raw":  # pixel counts 0..16, ten classes
        return load_digits(return_X_y=True)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5000, 50))
    y = (x[:, :5].sum(axis=1) + 0.5 * rng.standard_normal(5000) > 0).astype(int)
    if name == "synthetic_timestamps":  # one column of Unix times beside standardised ones
        x[:, 0] = 1.7e9 + 1e6 * x[:, 0]
    return x, y


ESTIMATOR_DATA = ("breast_cancer_raw", "digits_raw", "synthetic", "synthetic_timestamps")


def estimator_vs_liblinear(name, repeat=3):
    """``SparseLogisticRegression(alpha=1/m)`` (the default's value) beside scikit-learn's
    ``LogisticRegression(l1, C=1, solver="liblinear")`` on the same data, in turn
    ``repeat`` times in this process (least time of each), their training accuracies
    (one-vs-rest for more than two classes, liblinear through ``OneVsRestClassifier``).

    liblinear penalises its intercept, so the two problems differ by that term; the
    accuracies and times are what a user sees at the defaults.  Returns a dict.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier

    x, y = estimator_data(name)
    alpha = 1.0 / x.shape[0]
    best = {"ours": np.inf, "liblinear": np.inf}
    models = {}
    for _ in range(int(repeat)):
        for label in ("liblinear", "ours"):
            if label == "ours":
                model = mg.SparseLogisticRegression(alpha=alpha)
            else:
                model = OneVsRestClassifier(
                    LogisticRegression(l1_ratio=1.0, C=1.0, solver="liblinear", random_state=0)
                )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t0 = time.perf_counter()
                model.fit(x, y)
                best[label] = min(best[label], time.perf_counter() - t0)
            models[label] = model
    return {
        "data": name,
        "shape": x.shape,
        "ours_seconds": best["ours"],
        "liblinear_seconds": best["liblinear"],
        "ratio": best["ours"] / best["liblinear"],
        "ours_accuracy": models["ours"].score(x, y),
        "ours_objective": float(np.sum(models["ours"].result_.info["fun_columns"])),
        "ours_newton_iterations": int(np.max(models["ours"].n_iter_)),
        "liblinear_accuracy": models["liblinear"].score(x, y),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--solvers", nargs="+", default=list(SOLVERS), choices=list(SOLVERS))
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "out"))
    parser.add_argument(
        "--estimator",
        action="store_true",
        help="SparseLogisticRegression at its default alpha beside liblinear, raw data",
    )
    args = parser.parse_args(argv)
    from _common import settle_allocator

    settle_allocator()  # peers timed in one allocator state (_common's docstring)
    print(describe())
    if args.estimator:
        mg.SparseLogisticRegression().fit(*estimator_data("synthetic"))  # JIT warm-up
        for name in ESTIMATOR_DATA:
            r = estimator_vs_liblinear(name)
            print(
                f"{name:22s} {r['shape'][0]:>5d} x {r['shape'][1]:<3d} ours "
                f"{r['ours_seconds']:.4f} s acc {r['ours_accuracy']:.4f} | liblinear "
                f"{r['liblinear_seconds']:.4f} s acc {r['liblinear_accuracy']:.4f} | "
                f"ours / liblinear {r['ratio']:.2f} | ours F {r['ours_objective']:.8g} "
                f"in {r['ours_newton_iterations']} Newton iterations"
            )
        return
    print(f"target: (F - F*) / |F*| <= {TARGET:g};  alpha = {ALPHA_RATIO} alpha_max\n")
    results = {}
    for data in args.data:
        x, y = load(data, args.quick)
        alpha = alpha_for(x, y)
        kind = f"sparse, density {x.nnz / np.prod(x.shape):.2%}" if sp.issparse(x) else "dense"
        r = 1 if y.ndim == 1 else y.shape[1]
        print(f"== {data}: {x.shape[0]} x {x.shape[1]} {kind}, {r} problem(s), alpha = {alpha:.4g}")
        # warm-up of the JIT-compiled solvers on a small slice (not timed)
        for warm in (ours("exact"), ours("bound"), skglm_solver):
            warm(x[:200], y[:200], alpha, 1e-3)
        best = reference(x, y, alpha)
        curves = {}
        for sname in args.solvers:
            if "class by class" in sname and r == 1:
                continue
            solver, tols = SOLVERS[sname]
            curves[sname] = sweep(solver, tols, x, y, alpha, best)
        best = min([best] + [f for pts in curves.values() for _, _, f in pts])
        results[data] = (curves, best)
        print(f"   F* = {best:.12g}")
        print(f"   {'solver':36s} {'time to target':>15s}  {'fastest runs (tol: s, rel. gap)'}")
        reach = {}
        for sname, pts in curves.items():
            hits = [s for _, s, f in pts if (f - best) / abs(best) <= TARGET]
            reach[sname] = min(hits) if hits else None
            shown = ", ".join(f"{t:g}: {s:.3g}s {(f - best) / abs(best):.1e}" for t, s, f in pts)
            cell = f"{reach[sname]:.4g} s" if hits else "not reached"
            print(f"   {sname:36s} {cell:>15s}  {shown}")
        base = reach.get("msm-newton (exact)")
        if base:
            for sname, t in reach.items():
                if t and sname != "msm-newton (exact)":
                    print(f"   ratio  {sname} / msm-newton (exact) = {t / base:.2f}")
        print()
    plot(results, Path(args.out))


def plot(results, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, len(results), figsize=(4.5 * len(results), 3.8), squeeze=False)
    for ax, (data, (curves, best)) in zip(axes[0], results.items(), strict=True):
        for sname, pts in curves.items():
            ts = [s for _, s, _ in pts]
            gaps = [max((f - best) / abs(best), 1e-16) for _, _, f in pts]
            ax.loglog(ts, gaps, "o-", label=sname, ms=3)
        ax.axhline(TARGET, color="grey", lw=0.8, ls="--")
        ax.set_title(data)
        ax.set_xlabel("seconds")
        ax.set_ylabel("(F - F*) / |F*|")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    path = out / "logistic_objective_vs_time.png"
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
