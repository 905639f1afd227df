"""The paper's convergence study (Figure 1) and the batched-NNLS demo, as functions.

Figure 1: C in R^{m x n}, d in R^m with entries uniform on (0, 1); minimise
1/2 ||C x - d||^2 + h(x) for (a) h = indicator(x >= 0) (NNLS) and (b) h = lam ||x||_0,
with MSM (omega = 1, theta = 0.01, the paper's choice), PGM, PGM + line search, APG and
APG + line search, all from x_0 = 0, all for the same number of iterations (``tol=0``).

How time is measured: wall clock (``time.perf_counter``) from just before the call to
``solve`` to each iteration's callback, so it includes each method's setup (validation,
the Lanczos estimate of L for the baselines, the splitting for MSM) and the small
per-iteration cost of building the callback's view of X (the same for every method).
The time of F(x_0) is the method's reported setup time.  Before the timed runs every
method is run once for two iterations (Numba compilation, imports, BLAS warm-up).
"""

from __future__ import annotations

import os
import time

import numpy as np

from .options import METHODS  # in the order of the paper's legend

LABELS = {
    "msm": "MSM",
    "pgm": "PGM",
    "pgm_ls": "PGM+LS",
    "apg": "APG",
    "apg_ls": "APG+LS",
}
#: Iteration counts shown in the table.
CHECKPOINTS = (1, 5, 10, 20, 50, 100)
#: "Within tolerance of the best": F_k - F_best <= REL_TOL * max(1, |F_best|).
REL_TOL = 1e-6
PROBLEMS = ("nnls", "l0")
TITLES = {"nnls": "(a) nonnegative least squares", "l0": "(b) l0-regularised least squares"}


def figure1_data(size=(200, 1000), seed=0):
    """C (m x n) and d (m,) with entries uniform on (0, 1), from ``default_rng(seed)``."""
    m, n = size
    rng = np.random.default_rng(seed)
    return rng.uniform(size=(m, n)), rng.uniform(size=m)


def solve_with(method, A, R, penalty, **options):
    """``msm_gpu.solve(A, R, penalty, method=method, **options)``."""
    import msm_gpu as mg

    if method == "msm":
        options.setdefault("finish", None)  # the paper's MSM, without the exact finish
    return mg.solve(A, R, penalty, method=method, **options)


def run_method(method, A, R, penalty, *, iters, backend="cpu", constant=0.0):
    """Run ``method`` for exactly ``iters`` iterations from 0; objective and time per iteration.

    Returns a dict: ``objective`` (F(x_0), ..., F(x_iters), constant added), ``time``
    (seconds, see the module docstring), ``result`` (the SolveResult).
    """
    stamps = []

    def clock(_info):
        if backend == "cuda":  # time finished work, not queued kernels
            import cupy

            cupy.cuda.Device().synchronize()
        stamps.append(time.perf_counter())

    started = time.perf_counter()
    res = solve_with(
        method,
        A,
        R,
        penalty,
        tol=0.0,
        max_iter=iters,
        backend=backend,
        record_objective=True,
        callback=clock,
    )
    times = np.concatenate([[res.timings.get("setup", 0.0)], np.asarray(stamps) - started])
    return {"objective": np.asarray(res.objective) + constant, "time": times, "result": res}


def first_within(history, best, rel_tol=REL_TOL):
    """First index k with history[k] - best <= rel_tol * max(1, |best|), or None."""
    hit = np.flatnonzero(history - best <= rel_tol * max(1.0, abs(best)))
    return int(hit[0]) if hit.size else None


#: The l0 weight of the Figure 1 demo (larger ones, lam >= 0.1, leave PGM/APG at x = 0).
FIGURE1_LAM = 0.01


def run_figure1(
    size=(200, 1000),
    lam=FIGURE1_LAM,
    seed=0,
    backend="cpu",
    iters=300,
    methods=METHODS,
    problems=PROBLEMS,
    warmup=True,
):
    """Run the Figure 1 study.

    Returns
    -------
    dict
        ``settings`` and ``problems``: for each problem name, ``best`` (lowest F any
        method reached), ``histories`` ({method: {"objective", "time"}}) and ``rows``
        (one dict per method: ``method``, ``objective_at`` {k: F_k}, ``iters_to_best``,
        ``seconds_to_best`` (None when never within REL_TOL), ``final``,
        ``seconds_total``, ``L``).
    """
    import msm_gpu as mg

    C, d = figure1_data(size, seed)
    A = C.T @ C
    R = -(C.T @ d)
    constant = 0.5 * float(d @ d)
    penalties = {"nnls": mg.NonNeg(), "l0": mg.L0(lam)}
    out = {
        "settings": {
            "size": tuple(size),
            "lam": lam,
            "seed": seed,
            "backend": backend,
            "iters": iters,
            "rel_tol": REL_TOL,
        },
        "problems": {},
    }
    for name in problems:
        penalty = penalties[name]
        if warmup:
            for method in methods:
                run_method(method, A, R, penalty, iters=2, backend=backend)
        histories = {}
        for method in methods:
            run = run_method(method, A, R, penalty, iters=iters, backend=backend, constant=constant)
            histories[method] = run
        best = min(float(np.min(h["objective"])) for h in histories.values())
        rows = []
        for method in methods:
            hist = histories[method]["objective"]
            k = first_within(hist, best)
            rows.append(
                {
                    "method": method,
                    "objective_at": {c: float(hist[c]) for c in CHECKPOINTS if c < len(hist)},
                    "iters_to_best": k,
                    "seconds_to_best": None if k is None else float(histories[method]["time"][k]),
                    "final": float(hist[-1]),
                    "seconds_total": float(histories[method]["time"][-1]),
                    "L": histories[method]["result"].info.get("L"),
                }
            )
        out["problems"][name] = {
            "best": best,
            "rows": rows,
            "histories": {
                m: {"objective": h["objective"], "time": h["time"]} for m, h in histories.items()
            },
        }
    return out


def format_table(study):
    """The study's table as text: F after CHECKPOINTS iterations, iterations/seconds to best."""
    lines = []
    s = study["settings"]
    m, n = s["size"]
    for name, prob in study["problems"].items():
        cps = [c for c in CHECKPOINTS if c <= s["iters"]]
        title = TITLES.get(name, name)
        extra = f", lam = {s['lam']:g}" if name == "l0" else ""
        lines.append(
            f"{title}: C {m}x{n}{extra}, seed {s['seed']}, backend {s['backend']}; "
            f"F_best = {prob['best']:.10g}"
        )
        head = f"{'method':<8}" + "".join(f"{'F_' + str(c):>12}" for c in cps)
        head += f"{'iters':>8}{'seconds':>10}{'total s':>10}"
        lines.append(head)
        for row in prob["rows"]:
            line = f"{LABELS.get(row['method'], row['method']):<8}"
            line += "".join(f"{row['objective_at'][c]:>12.6g}" for c in cps)
            k, sec = row["iters_to_best"], row["seconds_to_best"]
            line += f"{'-' if k is None else k:>8}"
            line += f"{'-' if sec is None else format(sec, '.4f'):>10}"
            line += f"{row['seconds_total']:>10.4f}"
            lines.append(line)
        lines.append(
            f"iters/seconds: first iteration with F_k - F_best <= {s['rel_tol']:g} max(1, |F_best|)"
            f" ('-': not within {s['iters']} iterations); seconds: wall clock from the call,"
            " setup (L for the baselines) included; total s: all iterations"
        )
        lines.append("")
    return "\n".join(lines)


def plot(study, path):
    """Write a PNG: F(x_k) - F_best (log scale) vs iteration and vs time, one row per problem.

    Points where F(x_k) = F_best (gap 0) cannot be drawn on the log scale and are left out.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    names = list(study["problems"])
    fig, axes = plt.subplots(len(names), 2, figsize=(11, 4 * len(names)), squeeze=False)
    for i, name in enumerate(names):
        prob = study["problems"][name]
        best = prob["best"]
        for method, hist in prob["histories"].items():
            gap = hist["objective"] - best
            gap = np.where(gap > 0, gap, np.nan)  # F_best itself: off the log scale
            label = LABELS.get(method, method)
            axes[i, 0].semilogy(np.arange(len(gap)), gap, label=label)
            axes[i, 1].semilogy(hist["time"], gap, label=label)
        axes[i, 0].set_xlabel("iteration")
        axes[i, 1].set_xlabel("seconds")
        for ax in axes[i]:
            ax.set_ylabel("F(x_k) - F_best")
            ax.set_title(TITLES.get(name, name))
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def run_batched_nnls(size=(200, 100), n_rhs=50, seed=0, backend="cpu", tol=1e-10, max_iter=5000):
    """Batched NNLS: MSM on all columns of D at once vs scipy.optimize.nnls per column.

    Returns a dict with ``msm_seconds``, ``scipy_seconds``, ``max_abs_diff``
    (max |x_msm - x_scipy|), ``msm_objective`` / ``scipy_objective`` (sum over columns
    of 1/2 ||C x - d||^2), ``n_iter`` and the MSM ``objective`` history.
    """
    import scipy.optimize

    import msm_gpu as mg

    m, n = size
    rng = np.random.default_rng(seed)
    C = rng.uniform(size=(m, n))
    D = rng.uniform(size=(m, n_rhs))
    mg.nnls(C, D[:, :2], tol=0.0, max_iter=2, backend=backend)  # warm-up (Numba, imports)
    t0 = time.perf_counter()
    res = mg.nnls(C, D, tol=tol, max_iter=max_iter, backend=backend)
    msm_seconds = time.perf_counter() - t0
    x_msm = np.asarray(res.x.get() if hasattr(res.x, "get") else res.x)
    t0 = time.perf_counter()
    x_ref = np.column_stack([scipy.optimize.nnls(C, D[:, j])[0] for j in range(n_rhs)])
    scipy_seconds = time.perf_counter() - t0

    def obj(x):
        return 0.5 * float(np.sum((C @ x - D) ** 2))

    return {
        "size": (m, n),
        "n_rhs": n_rhs,
        "msm_seconds": msm_seconds,
        "scipy_seconds": scipy_seconds,
        "max_abs_diff": float(np.max(np.abs(x_msm - x_ref))),
        "msm_objective": obj(x_msm),
        "scipy_objective": obj(x_ref),
        "n_iter": res.n_iter,
        "converged": res.converged,
        "objective": np.asarray(res.objective),
        "backend": res.backend,
    }


def format_batched_nnls(out, show=(0, 1, 2, 5, 10, 20, 50, 100)):
    """Text report of :func:`run_batched_nnls`."""
    m, n = out["size"]
    hist = out["objective"]
    lines = [
        f"Batched NNLS: C {m}x{n}, D with {out['n_rhs']} columns (backend {out['backend']})",
        "MSM objective (sum over columns) per iteration:",
    ]
    lines += [f"  iter {k:>5}: {hist[k]:.10g}" for k in show if k < len(hist)]
    if len(hist) - 1 not in show:
        lines.append(f"  iter {len(hist) - 1:>5}: {hist[-1]:.10g}")
    lines += [
        f"MSM:   {out['msm_seconds']:.4f} s, {out['n_iter']} iterations, "
        f"converged={out['converged']}, objective {out['msm_objective']:.10g}",
        f"scipy.optimize.nnls (per column): {out['scipy_seconds']:.4f} s, "
        f"objective {out['scipy_objective']:.10g}",
        f"max |x_msm - x_scipy| = {out['max_abs_diff']:.3g}",
    ]
    return "\n".join(lines)
