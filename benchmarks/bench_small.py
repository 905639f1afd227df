"""One small problem a call: msm_gpu's small roads against scikit-learn and SciPy.

``least_squares(C, d, penalty)`` / ``nnls(C, d)`` with a float64 NumPy C of at most 128
columns, one right-hand side and no keyword skip the batch's layers
(``msm_gpu/finish/small_pwl.py``, ``small_nnls.py``).  Per shape and penalty, side by side
in one process (the calls in turn, best of ``--repeat`` rounds): msm_gpu at default options,
the general road (a keyword given), and the peer a user would try: scikit-learn's ``Lasso``
(default tolerance, its objective over m; ``positive=True`` for NonNegL1) for l1, SciPy's
``lsq_linear`` (BVLS) for a box, SciPy's ``nnls``.  Each row also gives F of every answer
above the best of them, over F at 0 (1/2 ||d||^2; the peers' default tolerances stop
early).

    python benchmarks/bench_small.py            # ~30 s
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import scipy.optimize as so
from sklearn.linear_model import Lasso

import msm_gpu as mg

SHAPES = [(20, 30), (100, 50), (60, 120), (500, 100)]


def _problem(m, n, seed):
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((m, n))
    x = np.zeros(n)
    x[rng.choice(n, max(1, n // 10), replace=False)] = rng.standard_normal(max(1, n // 10))
    return c, c @ x + 0.1 * rng.standard_normal(m)


def _calls(c, d, kind):
    m = c.shape[0]
    lam = 0.1 * float(np.max(np.abs(c.T @ d)))
    if kind == "l1" or kind == "nonneg l1":
        positive = kind == "nonneg l1"
        penalty = mg.NonNegL1(lam) if positive else mg.L1(lam)
        lasso = Lasso(alpha=lam / m, fit_intercept=False, positive=positive)
        peer = ("sklearn Lasso", lambda: lasso.fit(c, d).coef_.copy())
    elif kind == "box":
        penalty = mg.Box(-0.3, 0.3)
        peer = ("scipy bvls", lambda: so.lsq_linear(c, d, bounds=(-0.3, 0.3), method="bvls").x)
    else:
        penalty = mg.NonNeg()
        peer = ("scipy nnls", lambda: so.nnls(c, d)[0])
    calls = {
        "msm_gpu": lambda: mg.least_squares(c, d, penalty).x,
        "general road": lambda: mg.least_squares(c, d, penalty, finish="auto").x,
        peer[0]: peer[1],
    }
    return calls, penalty


def _f(c, d, x, penalty):
    return 0.5 * float(np.sum((c @ x - d) ** 2)) + float(np.sum(penalty.value(x)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    head = "times [us]: msm_gpu / general road / peer | (F - best F) / F(0)"
    print(f"{'shape':>9} {'penalty':>10} | {head}")
    for m, n in SHAPES:
        c, d = _problem(m, n, m + n)
        for kind in ("l1", "nonneg l1", "box", "nonneg"):
            calls, penalty = _calls(c, d, kind)
            best = dict.fromkeys(calls, np.inf)
            answers = {name: fn() for name, fn in calls.items()}  # warm-up (compilation)
            for _ in range(args.repeat):
                for name, fn in calls.items():
                    t0 = time.perf_counter()
                    fn()
                    best[name] = min(best[name], time.perf_counter() - t0)
            fs = {name: _f(c, d, x, penalty) for name, x in answers.items()}
            low, f0 = min(fs.values()), 0.5 * float(d @ d)
            rel = " ".join(f"{(f - low) / f0:.1e}" for f in fs.values())
            times = " / ".join(f"{1e6 * t:.0f}" for t in best.values())
            peer = list(calls)[2]
            ratio = best["msm_gpu"] / best[peer]
            print(f"{m:>4}x{n:<4} {kind:>10} | {times} ({peer}; {ratio:.2f}x) | {rel}")


if __name__ == "__main__":
    main()
