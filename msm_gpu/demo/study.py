"""The paper's convergence study (Figure 1) and the batched-NNLS demo, as functions.

Figure 1: C in R^{m x n}, d in R^m with entries uniform on (0, 1); minimise
1/2 ||C x - d||^2 + h(x) for (a) h = indicator(x >= 0) (NNLS) and (b) h = lam ||x||_0,
with MSM (omega = 1, theta = 0.01, the paper's choice; ``finish=None``), PGM, PGM + line
search, APG and APG + line search, all from x_0 = 0, all for the same number of iterations
(``tol=0``).  Each method is judged against a reference F* found apart from its run
(:mod:`.reference`): the optimum for NNLS (``mg.nnls``, checked against SciPy), for l0 the
optimum where every support can be enumerated, else the best local minimum found (named so).
The table gives F_k - F* at a few iterations and the first iteration (and the seconds to
it) with F_k - F* <= tol max(1, |F*|); a method that never gets there within the run
shows "-".

How time is measured: wall clock (``time.perf_counter``) from just before the call to
``solve`` to each iteration's callback, so it includes each method's setup (validation,
the Lanczos estimate of L for the baselines, the splitting for MSM) and the small
per-iteration cost of building the callback's view of X (the same for every method).
The time of F(x_0) is the method's reported setup time.  Before the timed runs every
method is run once for two iterations (Numba compilation, imports, BLAS warm-up).

Batched NNLS (the demo's headline): ``mg.nnls(C, D)`` on all r columns of D in one call
against ``scipy.optimize.nnls`` looped over the columns; one tiny call first compiles the
kernels (timed and reported apart), then each side is timed as the best of
:data:`REPEATS` runs.
"""

from __future__ import annotations

import os
import time

import numpy as np

from ..options import METHODS
from . import reference

LABELS = {
    "msm": "MSM",
    "pgm": "PGM",
    "pgm_ls": "PGM+LS",
    "apg": "APG",
    "apg_ls": "APG+LS",
}
#: Iteration counts at which the table shows F_k - F* (those within the run).
CHECKPOINTS = (10, 50, 100, 200, 500, 1000, 2000, 5000)
#: Default tolerance: "there" means F_k - F* <= REL_TOL * max(1, |F*|).
REL_TOL = 1e-6
#: Threads of every method in the Figure 1 study: one problem (r = 1), so an iteration's
#: product with A is a matrix-vector product; on one thread each, every method's iteration
#: costs about the same (the paper's premise) and a busy machine's threads do not decide.
FIGURE1_THREADS = 1
#: Default iterations of each method in the Figure 1 study.
FIGURE1_ITERS = 1000
#: The paper's instance: C is 200 x 1000.
FIGURE1_SIZE = (200, 1000)
PROBLEMS = ("nnls", "l0")
TITLES = {"nnls": "(a) nonnegative least squares", "l0": "(b) l0-regularised least squares"}


def figure1_data(size=FIGURE1_SIZE, seed=0):
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


def run_method(method, A, R, penalty, *, iters, backend="cpu", constant=0.0, threads=None):
    """Run ``method`` for exactly ``iters`` iterations from 0; objective and time per iteration.

    ``threads``: the ``threads`` option of ``solve`` (MSM's sweep; None: its default).
    Returns a dict: ``objective`` (F(x_0), ..., F(x_iters), constant added), ``time``
    (seconds, see the module docstring), ``result`` (the SolveResult).
    """
    options = {} if threads is None else {"threads": threads}
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
        **options,
    )
    times = np.concatenate([[res.timings.get("setup", 0.0)], np.asarray(stamps) - started])
    return {"objective": np.asarray(res.objective) + constant, "time": times, "result": res}


def threshold(f_star, rel_tol=REL_TOL):
    """The largest F - F* counted as "there": rel_tol * max(1, |F*|)."""
    return rel_tol * max(1.0, abs(f_star))


def first_within(history, f_star, rel_tol=REL_TOL):
    """First index k with history[k] - f_star <= rel_tol * max(1, |f_star|), or None."""
    hit = np.flatnonzero(np.asarray(history) - f_star <= threshold(f_star, rel_tol))
    return int(hit[0]) if hit.size else None


#: The l0 weight of the Figure 1 demo.  The paper's panel (b) has weight 1 (PAPER_LAM);
#: from x0 = 0, PGM and APG (step 1/L) then never leave x = 0 on the paper's instance.
FIGURE1_LAM = 0.01
PAPER_LAM = 1.0


def _host(x):
    return reference.host(x)


def run_figure1(
    size=FIGURE1_SIZE,
    lam=FIGURE1_LAM,
    seed=0,
    backend="cpu",
    iters=FIGURE1_ITERS,
    methods=METHODS,
    problems=PROBLEMS,
    warmup=True,
    tol=REL_TOL,
    threads=FIGURE1_THREADS,
    stream=None,
):
    """Run the Figure 1 study against a reference F* found apart from the runs.

    ``threads``: threads of every method (MSM's sweep: ``solve(..., threads=)``; the
    baselines' products: the BLAS, through threadpoolctl); None leaves the defaults.
    ``stream`` (a text file such as ``sys.stdout``): each problem's table
    (:func:`format_problem`) is written there as soon as it is measured.

    Returns
    -------
    dict
        ``settings`` (size, lam, seed, backend, iters, rel_tol, threads,
        ``warmup_seconds``: the untimed first calls, None without ``warmup``) and
        ``problems``: for each problem name, ``reference`` (see :mod:`.reference`:
        ``value``, ``kind``, ``source``, ...), ``histories`` ({method: {"objective",
        "time"}}), ``warmup_seconds`` and ``rows`` (one dict per method: ``method``,
        ``gap_at`` {k: F_k - F*}, ``iters_to_tol`` and ``seconds_to_tol`` (None when
        never within tol in the run), ``final_gap``, ``seconds_total``, ``L``).
    """
    import msm_gpu as mg

    C, d = figure1_data(size, seed)
    A = C.T @ C
    R = -(C.T @ d)
    penalties = {"nnls": mg.NonNeg(), "l0": mg.L0(lam)}
    out = {
        "settings": {
            "size": tuple(size),
            "lam": lam,
            "seed": seed,
            "backend": backend,
            "iters": iters,
            "rel_tol": tol,
            "threads": threads,
        },
        "problems": {},
    }
    data = (C, d, A, R, 0.5 * float(d @ d))
    warmup_seconds = 0.0
    with _blas_threads(threads):
        for name in problems:
            prob = _run_problem(name, data, penalties[name], out["settings"], methods, warmup)
            out["problems"][name] = prob
            warmup_seconds += prob["warmup_seconds"] or 0.0
            if stream is not None:
                stream.write(format_problem(out["settings"], name, prob) + "\n\n")
                stream.flush()
    out["settings"]["warmup_seconds"] = warmup_seconds if warmup else None
    return out


def _blas_threads(threads):
    """A context capping the BLAS at ``threads`` threads (None: no cap)."""
    import contextlib

    if threads is None:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=threads, user_api="blas")


def _run_problem(name, data, penalty, settings, methods, warmup):
    """One problem of :func:`run_figure1`: its entry of ``problems``."""
    C, d, A, R, constant = data
    options = {"backend": settings["backend"], "threads": settings["threads"]}
    t0 = time.perf_counter()
    if warmup:
        for method in methods:
            run_method(method, A, R, penalty, iters=2, **options)
    warmup_seconds = time.perf_counter() - t0
    # NNLS: the optimum before any run; l0: from the runs' last iterates, polished
    ref = reference.nnls_reference(C, d, settings["backend"]) if name == "nnls" else None
    runs = {
        method: run_method(
            method, A, R, penalty, iters=settings["iters"], constant=constant, **options
        )
        for method in methods
    }
    if ref is None:
        finals = {method: _host(run["result"].x) for method, run in runs.items()}
        ref = reference.l0_reference(C, d, settings["lam"], finals)
    f_star, tol = ref["value"], settings["rel_tol"]
    rows = []
    for method, run in runs.items():
        hist = run["objective"]
        k = first_within(hist, f_star, tol)
        rows.append(
            {
                "method": method,
                "gap_at": {c: float(hist[c] - f_star) for c in CHECKPOINTS if c < len(hist)},
                "iters_to_tol": k,
                "seconds_to_tol": None if k is None else float(run["time"][k]),
                "final_gap": float(hist[-1] - f_star),
                "seconds_total": float(run["time"][-1]),
                "L": run["result"].info.get("L"),
            }
        )
    histories = {m: {"objective": r["objective"], "time": r["time"]} for m, r in runs.items()}
    return {
        "reference": ref,
        "rows": rows,
        "histories": histories,
        "warmup_seconds": warmup_seconds if warmup else None,
    }


def _reference_text(ref):
    """One line: F*, what it is and how it was found (and checked)."""
    text = f"F* = {ref['value']:.10g}"
    if ref["kind"] != "optimum":
        best = LABELS.get(ref["best_method"], ref["best_method"])
        return f"{text} (best found, not the optimum; from {best}): {ref['source']}"
    text += f" (the optimum): {ref['source']}"
    if "scipy" in ref:
        agree = "agree" if ref["agrees"] else "DISAGREE"
        text += (
            f"; SciPy's nnls {ref['scipy']:.10g}, relative difference "
            f"{ref['rel_diff']:.1e} ({agree} to {reference.SCIPY_RTOL:g})"
        )
    return text


def format_problem(settings, name, prob):
    """One problem of the study as text: what F* is, F_k - F* at CHECKPOINTS and the
    iterations/seconds to tol."""
    s = settings
    m, n = s["size"]
    cps = [c for c in CHECKPOINTS if c <= s["iters"]]
    extra = f", lam = {s['lam']:g}" if name == "l0" else ""
    lines = [f"{TITLES.get(name, name)}: C {m} x {n}{extra}, seed {s['seed']}"]
    if name == "l0" and s["lam"] != PAPER_LAM:
        lines[0] += (
            f" (the paper's panel (b) has lam = {PAPER_LAM:g}: --lam {PAPER_LAM:g}, where "
            "PGM, APG and APG+LS stay at x0 = 0 on the paper's instance)"
        )
    if prob.get("warmup_seconds") is not None:
        lines.append(
            "first calls, every method for 2 iterations (compile kernels, cached for later "
            f"runs): {prob['warmup_seconds']:.1f} s"
        )
    lines.append(_reference_text(prob["reference"]))
    lines.append(f"{'':<8}F_k - F* after k iterations")
    head = f"{'method':<8}" + "".join(f"{'k=' + str(c):>10}" for c in cps)
    lines.append(head + f"{'iters':>7}{'seconds':>9}{'total s':>9}")
    for row in prob["rows"]:
        line = f"{LABELS.get(row['method'], row['method']):<8}"
        line += "".join(f"{row['gap_at'][c]:>10.2e}" for c in cps)
        k, sec = row["iters_to_tol"], row["seconds_to_tol"]
        line += f"{'-' if k is None else k:>7}"
        line += f"{'-' if sec is None else format(sec, '.3f'):>9}"
        lines.append(line + f"{row['seconds_total']:>9.3f}")
    lines.append(
        f"iters, seconds: first iteration with F_k - F* <= {s['rel_tol']:g} max(1, |F*|), "
        "wall clock from the call (setup, L for the baselines, included); '-': not within "
        f"the {s['iters']} iterations run; total s: all of them"
    )
    return "\n".join(lines)


def format_table(study):
    """The study's tables as text, one per problem (:func:`format_problem`)."""
    s = study["settings"]
    return "\n\n".join(format_problem(s, name, p) for name, p in study["problems"].items())


def plot(study, path):
    """Write a PNG: F(x_k) - F* (log scale) vs iteration and vs time, one row per problem,
    the tolerance as a dotted line.

    Points with F(x_k) - F* <= 0 (F* itself, to rounding) cannot be drawn on the log
    scale and are left out.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import LogLocator, NullLocator

    names = list(study["problems"])
    s = study["settings"]
    fig, axes = plt.subplots(len(names), 2, figsize=(11, 0.6 + 4 * len(names)), squeeze=False)
    for i, name in enumerate(names):
        prob = study["problems"][name]
        ref = prob["reference"]
        f_star = ref["value"]
        for method, hist in prob["histories"].items():
            gap = hist["objective"] - f_star
            gap = np.where(gap > 0, gap, np.nan)  # F* itself: off the log scale
            label = LABELS.get(method, method)
            axes[i, 0].semilogy(np.arange(len(gap)), gap, label=label)
            axes[i, 1].semilogy(hist["time"], gap, label=label)
        axes[i, 0].set_xlabel("iteration")
        axes[i, 1].set_xlabel("seconds")
        ylabel = "F(x_k) - F*" + (" (F* best found)" if ref["kind"] != "optimum" else "")
        extra = f", lam = {s['lam']:g}" if name == "l0" else ""
        for ax in axes[i]:
            ax.axhline(threshold(f_star, s["rel_tol"]), color="k", ls=":", lw=1)
            ax.set_ylabel(ylabel)
            ax.set_title(f"{TITLES.get(name, name)}{extra}")
            # a few labelled decades: every decade's mathtext label costs a lot to lay out
            ax.yaxis.set_major_locator(LogLocator(numticks=6))
            ax.yaxis.set_minor_locator(NullLocator())
            ax.grid(True, alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    handles.append(Line2D([], [], color="k", ls=":", lw=1))
    labels.append(f"tol: F - F* = {s['rel_tol']:g} max(1, |F*|)")
    m, n = s["size"]
    fig.suptitle(f"Figure 1 of the paper: C {m} x {n}, d uniform on (0, 1), from x0 = 0")
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    fig.tight_layout(rect=(0, 0.5 / fig.get_figheight(), 1, 1))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


#: The demo's batched NNLS problems: (name, m, n, r, scipy columns), at the sizes of the
#: README's headline table (benchmarks/bench_nnls.py's shapes, the same data for the same
#: seed; its "large" 1200 x 1000, r = 2048, a few seconds a call, is left to the
#: benchmarks).  scipy's loop runs on the first ``scipy columns`` right-hand sides and its
#: time is scaled to r (it is linear in r), so the demo stays short; the objective gap is
#: measured on those columns.
BATCHED_PROBLEMS = (
    ("dense", 500, 100, 1000, 100),
    ("unmixing", 200, 20, 100_000, 1000),
    ("spectra", 300, 60, 5000, 300),
)
#: What each kind of batched data is (printed under the table).
BATCHED_KINDS = {
    "dense": "C, D with |N(0, 1)| entries",
    "unmixing": "C uniform (0, 1) (endmember spectra), D = C X + N(0, 0.01^2) noise, "
    "X Dirichlet(0.3) abundances",
    "spectra": "C: n Gaussian peaks (width 0.02, centres evenly spaced) on m points, "
    "D = C X + N(0, 0.01^2) noise, X |N(0, 1)| with 30% nonzeros",
    "uniform": "C, D uniform on (0, 1)",
}
#: Timed calls per measurement; the best is reported (a shared machine only slows calls).
REPEATS = 3


def batched_data(kind="uniform", size=(200, 100), n_rhs=50, seed=0):
    """C (m x n) and D (m x n_rhs), float64, for one of :data:`BATCHED_KINDS` (for
    dense, unmixing and spectra the data of ``benchmarks/bench_nnls.py``'s
    ``make_problem`` for the same shape and seed)."""
    m, n = size
    rng = np.random.default_rng(seed)
    if kind == "unmixing":
        c = rng.uniform(size=(m, n))
        x = rng.dirichlet(0.3 * np.ones(n), size=n_rhs).T
        return c, _plus_noise(c @ x, rng)
    if kind == "dense":
        return np.abs(rng.normal(size=(m, n))), np.abs(rng.normal(size=(m, n_rhs)))
    if kind == "spectra":
        t = np.linspace(0, 1, m)[:, None]
        c = np.exp(-0.5 * ((t - np.linspace(0.02, 0.98, n)) / 0.02) ** 2)
        x = np.abs(rng.normal(size=(n, n_rhs))) * (rng.uniform(size=(n, n_rhs)) < 0.3)
        return c, _plus_noise(c @ x, rng)
    if kind == "uniform":
        return rng.uniform(size=(m, n)), rng.uniform(size=(m, n_rhs))
    raise ValueError(f"kind must be one of {sorted(BATCHED_KINDS)}, got {kind!r}")


def _plus_noise(clean, rng):
    """``clean + 0.01 * rng.normal(size=clean.shape)``, the same values, without another
    array of that size (unmixing's D is 160 MB)."""
    noise = rng.normal(size=clean.shape)
    noise *= 0.01
    noise += clean
    return noise


def _best_of(fn, repeats):
    """``fn()``'s last value and the shortest of ``repeats`` wall-clock times."""
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return value, min(times)


def warm_up_batched_nnls(backend="cpu", seed=0):
    """One tiny ``mg.nnls`` call that compiles (or loads from the cache) the kernels of the
    default NNLS path; its wall-clock seconds.

    The timed calls of :func:`run_batched_nnls` then measure solving only.  A warm-up
    with ``tol=0`` would not do: it skips the exact finish and its kernels.
    """
    import msm_gpu as mg

    c, d = batched_data("uniform", (8, 4), 3, seed)
    t0 = time.perf_counter()
    _host(mg.nnls(c, d, backend=backend).x)
    return time.perf_counter() - t0


def run_batched_nnls(
    size=(200, 100),
    n_rhs=50,
    seed=0,
    backend="cpu",
    *,
    kind="uniform",
    scipy_columns=None,
    repeats=REPEATS,
    warmup=True,
    name=None,
):
    """Batched NNLS: ``mg.nnls(C, D)`` on all columns of D at once vs a loop of
    ``scipy.optimize.nnls`` over the columns.

    Parameters
    ----------
    size, n_rhs : tuple of int, int
        C is m x n, D has ``n_rhs`` columns.
    kind : str
        The data, one of :data:`BATCHED_KINDS`.
    scipy_columns : int, optional
        Run scipy's loop on the first this many columns only and scale its time to
        ``n_rhs`` (None: all columns).
    repeats : int
        Timed runs of each side; the shortest is reported.
    warmup : bool
        Call :func:`warm_up_batched_nnls` first (kernel compilation is then not timed).

    Returns
    -------
    dict
        ``msm_seconds`` (``mg.nnls`` on all columns), ``scipy_seconds`` (the loop over all
        columns, scaled up from ``scipy_columns`` when ``extrapolated``),
        ``scipy_measured_seconds``, ``speedup`` (scipy / mg.nnls), on the columns scipy
        solved: ``msm_objective`` / ``scipy_objective`` (sum over columns of
        1/2 ||C x - d||^2), ``gap`` ((msm - scipy) / scipy) and ``max_abs_diff``
        (max |x_msm - x_scipy|); ``n_iter`` (MSM sweeps), ``finish_method``,
        ``finish_rounds`` (most active-set iterations of a column, for ``"active_set"``),
        ``converged``, ``first_call_seconds`` (None without ``warmup``), ``backend``.
    """
    import scipy.optimize

    import msm_gpu as mg

    m, n = size
    first_call = warm_up_batched_nnls(backend, seed) if warmup else None
    C, D = batched_data(kind, size, n_rhs, seed)
    (res, x_msm), msm_seconds = _best_of(lambda: _solved(mg.nnls(C, D, backend=backend)), repeats)
    k = n_rhs if scipy_columns is None else max(1, min(int(scipy_columns), n_rhs))
    x_ref, scipy_measured = _best_of(
        lambda: np.column_stack([scipy.optimize.nnls(C, D[:, j])[0] for j in range(k)]),
        repeats,
    )

    def obj(x):
        return 0.5 * float(np.sum((C @ x - D[:, :k]) ** 2))

    f_msm, f_ref = obj(x_msm[:, :k]), obj(x_ref)
    scipy_seconds = scipy_measured * n_rhs / k
    return {
        "name": name or kind,
        "kind": kind,
        "size": (m, n),
        "n_rhs": n_rhs,
        "scipy_columns": k,
        "extrapolated": k < n_rhs,
        "msm_seconds": msm_seconds,
        "scipy_seconds": scipy_seconds,
        "scipy_measured_seconds": scipy_measured,
        "speedup": scipy_seconds / msm_seconds if msm_seconds > 0 else float("inf"),
        "msm_objective": f_msm,
        "scipy_objective": f_ref,
        "gap": (f_msm - f_ref) / f_ref if f_ref > 0 else f_msm - f_ref,
        "max_abs_diff": float(np.max(np.abs(x_msm[:, :k] - x_ref))),
        "n_iter": res.n_iter,
        "finish_method": res.info.get("finish_method"),
        "finish_rounds": res.info.get("finish_rounds"),
        "converged": res.converged,
        "first_call_seconds": first_call,
        "backend": res.backend,
        "repeats": repeats,
    }


def _solved(res):
    """``res`` and its x on the host: a GPU's queued work is then finished and timed."""
    return res, _host(res.x)


def run_batched_demo(
    problems=BATCHED_PROBLEMS, seed=0, backend="cpu", repeats=REPEATS, *, stream=None
):
    """The demo's headline: :func:`run_batched_nnls` on each of ``problems``
    ((name, m, n, r, scipy columns), ``name`` a kind of :data:`BATCHED_KINDS`), after one
    warm-up call.

    ``stream`` (a text file such as ``sys.stdout``): write the report there as it is
    measured, the text of :func:`format_batched_nnls` (a cold kernel cache makes the
    first call take a while: the reader sees what is running).

    Returns ``{"first_call_seconds": float, "rows": [dict per problem]}``.
    """

    def write(text, end="\n"):
        if stream is not None:
            stream.write(text + end)
            stream.flush()

    write(_batched_title(backend))
    write(FIRST_CALL, end="")
    out = {"first_call_seconds": warm_up_batched_nnls(backend, seed), "rows": []}
    write(f"{out['first_call_seconds']:.1f} s")
    write(_batched_head())
    for name, m, n, r, sub in problems:
        row = run_batched_nnls(
            (m, n), r, seed, backend, kind=name, scipy_columns=sub, repeats=repeats, warmup=False
        )
        out["rows"].append(row)
        write(_batched_row(row))
    if out["rows"]:
        write("\n".join(_batched_notes(out["rows"])))
    return out


#: How the warm-up's time is introduced.
FIRST_CALL = "first call (compiles kernels, cached for later runs): "


def _seconds(t):
    return f"{t:.3g} s" if t < 100 else f"{t:.0f} s"


def _batched_title(backend):
    return (
        "Batched NNLS: mg.nnls(C, D) solves all columns of D in one call; "
        f"scipy.optimize.nnls solves one column per call (backend {backend})"
    )


def _batched_head():
    head = f"{'problem':<10}{'C':>9}{'columns':>9}{'mg.nnls':>11}{'scipy loop':>12}"
    return head + f"{'speed-up':>10}{'objective gap':>15}{'max |dx|':>10}"


def _batched_row(row):
    m, n = row["size"]
    star = "*" if row["extrapolated"] else " "
    line = f"{row['name']:<10}{f'{m}x{n}':>9}{row['n_rhs']:>9}"
    line += f"{_seconds(row['msm_seconds']):>11}{_seconds(row['scipy_seconds']) + star:>12}"
    line += f"{format(row['speedup'], '.1f') + 'x':>10}"
    return line + f"{row['gap']:>15.1e}{row['max_abs_diff']:>10.1e}"


def _batched_notes(rows):
    lines = [
        f"times: best of {rows[0]['repeats']} calls, wall clock; speed-up = scipy loop / "
        "mg.nnls (below 1: mg.nnls is slower)"
    ]
    scaled = [r for r in rows if r["extrapolated"]]
    if scaled:
        parts = ", ".join(f"{r['scipy_columns']} of {r['n_rhs']} ({r['name']})" for r in scaled)
        lines.append(
            f"* scipy loop timed on the first {parts} columns and scaled up to all columns"
        )
    lines.append(
        "objective gap = (F_mg - F_scipy) / F_scipy, F = sum over the columns scipy solved "
        "of 1/2 ||C x - d||^2; max |dx| = max |x_msm - x_scipy| on them"
    )
    lines += [f"{r['name']}: {BATCHED_KINDS.get(r['kind'], r['kind'])}" for r in rows]
    return lines + [_method_line(rows)]


def format_batched_nnls(out):
    """Text report of :func:`run_batched_demo` (or of one :func:`run_batched_nnls`)."""
    rows = out["rows"] if "rows" in out else [out]
    first = out.get("first_call_seconds")
    lines = [_batched_title(rows[0]["backend"])]
    if first is not None:
        lines.append(f"{FIRST_CALL}{first:.1f} s")
    lines += [_batched_head(), *map(_batched_row, rows), *_batched_notes(rows)]
    return "\n".join(lines)


def _method_line(rows):
    """What mg.nnls did, from its results (``n_iter`` counts MSM sweeps only), and where
    MSM is the method."""
    sweeps = sorted({r["n_iter"] for r in rows})
    methods = sorted({str(r["finish_method"]) for r in rows})
    line = f"What ran: mg.nnls did {' or '.join(map(str, sweeps))} MSM sweeps (res.n_iter)"
    if methods == ["active_set"]:
        most = ", ".join(f"{r['finish_rounds']} ({r['name']})" for r in rows)
        line += (
            ", then Lawson-Hanson active set per column "
            f'(res.info["finish_method"] = "active_set"; most iterations of a column: {most})'
        )
    else:
        line += f', then the exact finish (res.info["finish_method"]: {", ".join(methods)})'
    converged = all(r["converged"] for r in rows)
    line += f"; converged: {converged}."
    if sweeps == [0] and methods == ["active_set"]:
        line += (
            "\nSo the speed-up above is the exact active set batched (one C'C and C'D for "
            "all columns, compiled, on all cores), not the Matrix Splitting Method: for "
            "exact NNLS at small n an active set beats a first-order method."
        )
    return line + "\n" + WHERE_MSM


#: Where the Matrix Splitting Method is what runs (the user guide's "Exact by default").
WHERE_MSM = (
    "MSM is the method where no exact finite method fits: the l0 and lp penalties "
    "(Figure 1 (b) below), n > 1024 on the CPU and any n on the GPU (MSM sweeps find the "
    "face, then an exact finish), and the design form for wide or sparse C (the sweeps "
    "find the support).  Figure 1 below runs the paper's plain MSM (finish=None)."
)
