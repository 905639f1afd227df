"""Every shape side by side (issue 39): msm_gpu at default options against its peers.

Peers: SciPy's nnls, scikit-learn's Lasso, skglm, celer.

One run, per case: each solver's wall time (best of k), its objective gap to the best
objective any solver reached, its peak memory, and the representation msm_gpu chose.

Problems (C is m x n, D holds r right-hand sides; x_true sparse, d = C x_true + noise with
noise at 10% of the signal's RMS; seed 0):

    nnls pos     C |N(0,1)|, x_true >= 0 with 10 nonzeros per column
    nnls signed  C N(0,1), same x_true (n > m: the fit is often exact, F* ~ 0)
    nnls ar1     C N(0,1) rows with AR(1) correlation rho = 0.6 between neighbouring columns
    lasso ...    C N(0,1) (or AR(1)), x_true signed with 10 nonzeros; lam = f * ||C'd||_inf
    sparse       C scipy.sparse.random, density 1e-3, N(0,1) values (|.| for NNLS), CSC
    spectra      C: 60 Gaussian peaks (width 0.04) on 300 points, cond(C'C) ~ 9e16; D = C X
                 + 0.01 noise, X >= 0 with 30% nonzeros (as in bench_nnls.py, wider peaks)

Objectives, computed here in float64 from each solver's x with one formula:

    F(x) = 1/2 ||C x - d||^2 + lam ||x||_1        (lam = 0 for NNLS)

scikit-learn, skglm and celer minimise 1/(2m) ||C x - d||^2 + alpha ||x||_1, so they are
given alpha = lam / m.  NNLS for them is a positive Lasso with alpha = 1e-10 (as in issue
39), so their x is that problem's answer, scored by the NNLS objective.  The gap of a solver
is max over columns k of (F_k - F*_k) / max(F*_k, 1e-14 F_k(0)), F*_k the lowest objective
any solver reached on column k (the floor keeps exact fits, F* ~ 0, from dividing by
rounding noise).  A solver is "exact" where its gap is <= 1e-10 (NNLS) or <= 1e-8 (Lasso).

Solvers (peers with tolerances meant to reach the exact answer, see PEER_TOL):

    msm_gpu   mg.nnls(C, D) / mg.least_squares(C, D, mg.L1(lam)), default options, all r at once
    scipy     scipy.optimize.nnls, a loop over the columns (dense C only)
    sklearn   sklearn.linear_model.Lasso(positive=True for NNLS), a loop over the columns
              (C converted to Fortran order once, inside the timed call)
    skglm     skglm.Lasso, a loop over the columns
    celer     celer.Lasso, a loop over the columns (skipped, with a note, if not installed)

Each solver runs in its own long-lived worker process, warmed up on a tiny problem of the same
kind (same penalty, dense/sparse, wide/tall, one or many right-hand sides; for msm_gpu every
representation) before it is timed, so Numba compilation and imports are not in the times.
Time: best of ``--repeat`` runs, fewer where they would pass ``--limit`` seconds.  A run past
the limit is killed and shown as "> T s"; a column loop that passes the limit stops and
shows its time extrapolated to all r columns ("> T s (~X s)").  Peak memory: the largest
rise of resident memory during a run (Linux VmHWM, reset through /proc/self/clear_refs),
whatever allocated it (NumPy, Numba, Fortran, Cython), beyond what the worker held before.

    python benchmarks/bench_shapes.py --quick            # ~5 min on 2 quiet cores (8 busy)
    python benchmarks/bench_shapes.py --json out.json --png out.png     # ~25 min on 2 cores
    python benchmarks/bench_shapes.py --cases "lasso 0.1" --solvers msm_gpu skglm
    python benchmarks/bench_shapes.py --from-json out.json --markdown --compact   # re-print

Results and how to read them: docs/benchmarks/shapes.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import Worker, WorkerDied, WorkerTimeout, best_of, format_table, send, serve  # noqa: E402

SOLVERS = ("msm_gpu", "scipy", "sklearn", "skglm", "celer")

#: Peers' tolerances: for each, the setting of 1e-6, 1e-8, 1e-10, 1e-12 that reached the
#: exact objective fastest on the quick cases (their defaults, 1e-4, stop short of it; tighter
#: settings than these ran past 40 s on exact fits, F* ~ 0, without gaining digits).
#: Iteration caps are high enough not to stop them first.
PEER_TOL = {"sklearn": 1e-10, "skglm": 1e-8, "celer": 1e-10}
PEER_MAX_ITER = {"sklearn": 100_000, "skglm": 1000, "celer": 1000}
MAX_EPOCHS = 100_000

#: alpha of the positive Lasso that stands for NNLS (scikit-learn's scaling, 1/(2m)).
NNLS_ALPHA = 1e-10

#: Gap at or below which an answer counts as exact.
EXACT = {"nnls": 1e-10, "lasso": 1e-8}

#: Relative floor of F* in the gap's denominator (fraction of F(0) = 1/2 ||d||^2).
GAP_FLOOR = 1e-14


# --- cases ------------------------------------------------------------------------------


def case(kind, design, m, n, r=1, frac=None, density=None):
    name = f"{kind} {design} {m}x{n}"
    if frac is not None:
        name = f"{kind} {frac:g}lmax {design} {m}x{n}"
    if r > 1:
        name += f" r={r}"
    return {
        "name": name,
        "kind": kind,
        "design": design,
        "m": m,
        "n": n,
        "r": r,
        "frac": frac,
        "density": density,
    }


def cases(quick):
    """The issue's cases (``quick``: smaller sizes, the same kinds)."""
    out = []
    wide = (5000,) if quick else (5000, 10_000, 50_000)
    many = 20 if quick else 100
    for design in ("pos", "signed"):
        for n in wide:
            for r in (1, many):
                out.append(case("nnls", design, 100, n, r))
    n_ar = 5000 if quick else 10_000
    out.append(case("nnls", "ar1", 100, n_ar))
    out.append(case("lasso", "ar1", 100, n_ar, frac=0.1))
    shapes = [(100, n_ar), (500, 600), ((2000 if quick else 10_000), 100)]
    for frac in (0.1, 0.05):
        for m, n in shapes:
            out.append(case("lasso", "gauss", m, n, frac=frac))
    ms, ns = (2000, 20_000) if quick else (10_000, 100_000)
    out.append(case("nnls", "sparse", ms, ns, density=1e-3))
    if not quick:  # issue 51: about one entry a column, an answer with ~1e4 nonzeros
        out.append(case("nnls", "sparse", ms, ns, density=1e-4))
    out.append(case("lasso", "sparse", ms, ns, frac=0.1, density=1e-3))
    out.append(case("nnls", "spectra", 300, 60, r=(500 if quick else 5000)))
    return out


def tiny(c):
    """A small problem of the same kind as case c: what a worker compiles on."""
    m, n = c["m"], c["n"]
    if c["design"] == "sparse":
        m2, n2 = 300, 3000  # still past the sparse Gram limit (n > 2048)
    elif n > m:
        m2, n2 = 20, 200
    elif m > 2 * n:
        m2, n2 = 200, 20
    else:
        m2, n2 = 50, 60
    return {**c, "m": m2, "n": n2, "r": min(c["r"], 3), "density": 0.01 if c["density"] else None}


def make_problem(c, seed=0):
    """C, D (1-D when r = 1), lam (0 for NNLS) of case c, float64."""
    import scipy.sparse as sp
    from scipy.signal import lfilter

    rng = np.random.default_rng(seed)
    m, n, r, kind, design = c["m"], c["n"], c["r"], c["kind"], c["design"]
    if design == "spectra":
        t = np.linspace(0, 1, m)[:, None]
        C = np.exp(-0.5 * ((t - np.linspace(0.02, 0.98, n)) / 0.04) ** 2)
        X = np.abs(rng.normal(size=(n, r))) * (rng.uniform(size=(n, r)) < 0.3)
        D = C @ X + 0.01 * rng.normal(size=(m, r))
        return C, (D[:, 0] if r == 1 else D), 0.0
    if design == "sparse":
        C = sp.random(
            m, n, density=c["density"], format="csc", random_state=rng, data_rvs=rng.standard_normal
        )
        if kind == "nnls":
            C.data = np.abs(C.data)
    else:
        C = rng.standard_normal((m, n))
        if design == "pos":
            C = np.abs(C)
        elif design == "ar1":  # corr(c_j, c_k) = rho^|j - k|, stationary from column 0
            rho = 0.6
            C[:, 0] /= np.sqrt(1 - rho**2)
            C = np.ascontiguousarray(lfilter([np.sqrt(1 - rho**2)], [1.0, -rho], C, axis=1))
    if design == "gauss_dense":  # a Gaussian C and a random D: answers hold most variables
        D = rng.standard_normal((m, r))
        lam = c["frac"] * float(np.max(np.abs(C.T @ D))) if kind == "lasso" else 0.0
        return C, (D[:, 0] if r == 1 else D), lam
    s = min(10, n)
    X = np.zeros((n, r))
    for k in range(r):
        idx = rng.choice(n, size=s, replace=False)
        mag = rng.uniform(1.0, 2.0, size=s)
        X[idx, k] = mag if kind == "nnls" else mag * rng.choice([-1.0, 1.0], size=s)
    signal = np.asarray(C @ X)
    noise = rng.standard_normal((m, r))
    D = signal + 0.1 * np.sqrt(np.mean(signal**2, axis=0)) * noise
    lam = 0.0
    if kind == "lasso":
        lam = c["frac"] * float(np.max(np.abs(C.T @ D)))
    return C, (D[:, 0] if r == 1 else D), lam


def objectives(C, D, X, lam):
    """F_k(x_k) per column, float64: 1/2 ||C x_k - d_k||^2 + lam ||x_k||_1."""
    D2 = D.reshape(D.shape[0], -1)
    X2 = np.asarray(X, dtype=np.float64).reshape(X.shape[0], -1)
    res = np.asarray(C @ X2) - D2
    return 0.5 * np.sum(res * res, axis=0) + lam * np.sum(np.abs(X2), axis=0)


# --- solvers (worker side) --------------------------------------------------------------


class OverLimit(Exception):
    def __init__(self, done, seconds):
        super().__init__(f"{done} columns in {seconds:.1f} s")
        self.done, self.seconds = done, seconds


def column_loop(solve_one, D, limit):
    """x for every column of D, solved one by one; OverLimit past ``limit`` seconds."""
    if D.ndim == 1:
        return solve_one(D)
    t0 = time.perf_counter()
    cols = []
    for k in range(D.shape[1]):
        cols.append(solve_one(np.ascontiguousarray(D[:, k])))
        if time.perf_counter() - t0 > limit and k + 1 < D.shape[1]:
            raise OverLimit(k + 1, time.perf_counter() - t0)
    return np.stack(cols, axis=1)


def solver_call(name, c, C, D, lam, limit, warmup=False):
    """A zero-argument function: one timed solve, returning (x, info).  ``warmup``: a loose
    tolerance and few iterations for the peers (compiling and importing is the point)."""
    import warnings

    m = C.shape[0]
    nnls = c["kind"] == "nnls"
    alpha = NNLS_ALPHA if nnls else lam / m
    warnings.filterwarnings("ignore")  # convergence warnings of the peers: the gap tells

    if name == "msm_gpu":
        import msm_gpu as mg

        def call():
            res = mg.nnls(C, D) if nnls else mg.least_squares(C, D, mg.L1(lam))
            info = {
                "representation": res.info.get("representation"),
                "converged": bool(np.all(res.converged)),
            }
            return res.x, info

        return call
    if name == "scipy":
        if not nnls:
            return None
        if not isinstance(C, np.ndarray):
            raise NotImplementedError("scipy.optimize.nnls takes a dense C only")
        from scipy.optimize import nnls as scipy_nnls

        return lambda: (column_loop(lambda d: scipy_nnls(C, d)[0], D, limit), {})
    if name == "sklearn":
        from sklearn.linear_model import Lasso

        model = Lasso(
            alpha=alpha,
            positive=nnls,
            fit_intercept=False,
            tol=1e-3 if warmup else PEER_TOL[name],
            max_iter=100 if warmup else PEER_MAX_ITER[name],
        )

        def call():
            Cf = np.asfortranarray(C) if isinstance(C, np.ndarray) else C  # once, as multi-target

            def one(d):
                return model.fit(Cf, d).coef_.copy()

            return column_loop(one, D, limit), {}

        return call
    if name in ("skglm", "celer"):
        if name == "skglm":
            from skglm import Lasso
        else:
            from celer import Lasso
        model = Lasso(
            alpha=alpha,
            positive=nnls,
            fit_intercept=False,
            tol=1e-3 if warmup else PEER_TOL[name],
            max_iter=5 if warmup else PEER_MAX_ITER[name],
            max_epochs=100 if warmup else MAX_EPOCHS,
        )

        def one(d):
            return np.asarray(model.fit(C, d).coef_, dtype=np.float64).copy()

        return lambda: (column_loop(one, D, limit), {})
    raise ValueError(name)


#: Worker side: the kinds of problem this worker has compiled and imported for.
_WARM = set()


def handle(job):
    """Worker side: one (case, solver) job."""
    name, c, limit, k = job["solver"], job["case"], job["limit"], job["repeat"]
    key = (name, c["kind"], c["design"] == "sparse", tiny(c)["m"], tiny(c)["r"] > 1)
    if key not in _WARM:  # compile and import on a tiny problem of the same kind
        t = tiny(c)
        Ct, Dt, lamt = make_problem(t, seed=1)
        if name == "msm_gpu":
            import msm_gpu as mg

            # the road "auto" takes on this kind of problem, then each forced form on a
            # smaller one (a forced Gram form of a 3000-column sparse C is slow to run)
            mini = {**t, "m": min(t["m"], 100), "n": min(t["n"], 200)}
            if mini["density"]:
                mini["density"] = 0.05
            Cm, Dm, lamm = make_problem(mini, seed=2)
            for rep, (Cw, Dw, lw) in (
                ("auto", (Ct, Dt, lamt)),
                ("gram", (Cm, Dm, lamm)),
                ("design", (Cm, Dm, lamm)),
            ):
                try:
                    if c["kind"] == "nnls":
                        mg.nnls(Cw, Dw, representation=rep)
                    else:
                        mg.least_squares(Cw, Dw, mg.L1(lw), representation=rep)
                except Exception:  # a form that does not apply here
                    pass
        call = solver_call(name, t, Ct, Dt, lamt, 1e9, warmup=True)
        if call is not None:
            call()
        _WARM.add(key)
    C, D, lam = make_problem(c)
    call = solver_call(name, c, C, D, lam, limit)
    if call is None:
        return {"skipped": "not this kind of problem"}
    send({"event": "ready"})
    try:
        out = best_of(call, k=k, budget=limit)
    except OverLimit as exc:
        return {"over": True, "estimate": exc.seconds * c["r"] / exc.done, "done": exc.done}
    x, info = out["value"]
    np.save(job["xpath"], np.asarray(x, dtype=np.float64))
    return {
        "seconds": out["seconds"],
        "times": out["times"],
        "cpu_seconds": out["cpu_seconds"],
        "peak_bytes": out["peak_bytes"],
        "memory_method": out["memory_method"],
        **info,
    }


# --- the run (parent side) --------------------------------------------------------------


def available(name):
    mod = {"msm_gpu": "msm_gpu", "scipy": "scipy", "sklearn": "sklearn"}.get(name, name)
    try:
        __import__(mod)
        return True
    except ImportError:
        return False


def applies(name, c):
    if name == "scipy":
        return c["kind"] == "nnls" and c["design"] != "sparse"
    return True


def run_case(c, solvers, workers, limit, repeat, tmp):
    C, D, lam = make_problem(c)
    f0 = objectives(C, D, np.zeros((c["n"],) + D.shape[1:]), 0.0)
    rows = {}
    for name in solvers:
        if not applies(name, c):
            rows[name] = {"status": "n/a"}
            continue
        if name not in workers:
            rows[name] = {"status": "not installed"}
            continue
        xpath = os.path.join(tmp, f"{name}.npy")
        if os.path.exists(xpath):
            os.remove(xpath)
        job = {"solver": name, "case": c, "limit": limit, "repeat": repeat, "xpath": xpath}
        try:
            out = workers[name].call(job, limit=limit + max(10.0, 0.25 * limit))
        except WorkerTimeout:
            rows[name] = {"status": "killed", "over": True}
            continue
        except WorkerDied as exc:
            rows[name] = {"status": "error", "error": str(exc) + ": " + exc.stderr[-300:]}
            continue
        out.pop("event", None)
        if "error" in out:
            rows[name] = {"status": "error", **out}
        elif "skipped" in out:
            rows[name] = {"status": "n/a"}
        elif out.get("over"):
            rows[name] = {"status": "over", **out}
        else:
            x = np.load(xpath)
            F = objectives(C, D, x, lam)
            rows[name] = {"status": "ok", "F": F, "min_x": float(np.min(x)), **out}
    done = [row["F"] for row in rows.values() if row["status"] == "ok"]
    if done:
        fbest = np.min(np.stack(done), axis=0)
        denom = np.maximum(fbest, GAP_FLOOR * f0)
        for row in rows.values():
            if row["status"] == "ok":
                row["gap"] = float(np.max((row.pop("F") - fbest) / denom))
                row["exact"] = row["gap"] <= EXACT[c["kind"]]
    return {**c, "lam": lam, "limit": limit, "rows": rows}


def fmt_time(row, limit):
    if row["status"] == "ok":
        return f"{row['seconds']:.3g} s"
    if row["status"] == "over":
        return f"> {limit:g} s (~{row['estimate']:.3g} s)"
    if row["status"] == "killed":
        return f"> {limit:g} s"
    return row["status"]


def finished(res):
    """Solvers of a case that returned an answer."""
    return [s for s, r in res["rows"].items() if r["status"] == "ok"]


def is_exact(res, name):
    """True / False, or None where no other solver finished to compare with."""
    if len(finished(res)) < 2:
        return None
    return bool(res["rows"][name].get("exact"))


def table_rows(results):
    rows = []
    for res in results:
        peers = [
            r["seconds"]
            for s, r in res["rows"].items()
            if s != "msm_gpu" and r["status"] == "ok" and is_exact(res, s)
        ]
        best_peer = min(peers) if peers else None
        for name, row in res["rows"].items():
            if row["status"] in ("n/a",):
                continue
            gap, exact = row.get("gap"), None
            if row["status"] == "ok":
                exact = is_exact(res, name)
            if gap is None:
                gap_s = ""
            elif exact is None:
                gap_s = "(alone)"
            else:
                gap_s = f"{gap:.1e}" + ("" if exact else " !")
            if row["status"] == "ok" and row.get("min_x", 0.0) < 0 and res["kind"] == "nnls":
                gap_s += " (x<0)"
            peak = row.get("peak_bytes")
            vs = ""
            if name == "msm_gpu" and row["status"] == "ok" and best_peer:
                vs = f"{row['seconds'] / best_peer:.2g}x"
            rows.append(
                [
                    res["name"],
                    name,
                    fmt_time(row, res["limit"]),
                    f"{row['cpu_seconds']:.3g}" if row.get("cpu_seconds") is not None else "",
                    gap_s,
                    "" if peak is None else f"{peak / 2**20:.1f}",
                    row.get("representation") or "",
                    vs,
                ]
            )
    return rows


HEADER = ["case", "solver", "time", "cpu s", "gap", "peak MB", "repr", "/ best exact peer"]
ALIGN = ["<", "<", ">", ">", ">", ">", "<", ">"]


def compact_rows(results):
    """One row per case: each solver's time (and peak MB), "(inexact)" where its gap is
    above the tolerance; msm_gpu's representation and its time over the best exact peer."""
    rows = []
    for res, full in zip(results, table_rows_by_case(results), strict=True):
        cells = [res["name"]]
        for name in SOLVERS:
            row = res["rows"].get(name)
            if row is None or row["status"] == "n/a":
                cells.append("-")
                continue
            cell = fmt_time(row, res["limit"])
            if row["status"] == "ok":
                cell += f", {row['peak_bytes'] / 2**20:.0f} MB"
                exact = is_exact(res, name)
                if exact is False:
                    cell += f" (gap {row['gap']:.0e})"
                elif exact is None:
                    cell += " (alone)"
            cells.append(cell)
        msm = full.get("msm_gpu")
        cells += [msm[6] if msm else "", msm[7] if msm else ""]
        rows.append(cells)
    return rows


def table_rows_by_case(results):
    out = []
    for res in results:
        out.append({row[1]: row for row in table_rows([res])})
    return out


COMPACT_HEADER = ["case", *SOLVERS, "msm repr", "msm / best exact peer"]


def plot(results, solvers, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    pos = np.arange(len(results))
    width = 0.8 / len(solvers)
    fig, ax = plt.subplots(figsize=(max(8, 0.75 * len(results) + 2), 5.5))
    handles = []
    for i, name in enumerate(solvers):
        color = f"C{i}"
        shift = (i - (len(solvers) - 1) / 2) * width
        for j, res in enumerate(results):
            row = res["rows"].get(name, {})
            if row.get("status") == "ok":
                exact = is_exact(res, name) is not False
                ax.bar(j + shift, row["seconds"], width, color=color, alpha=1.0 if exact else 0.45)
                if not exact:
                    ax.plot(j + shift, row["seconds"], "kx", markersize=4)
            elif row.get("status") in ("over", "killed"):
                ax.bar(j + shift, res["limit"], width, color=color, hatch="//", alpha=0.3)
        handles.append(Patch(color=color, label=name))
    ax.set_yscale("log")
    ax.set_xticks(pos, [r["name"] for r in results], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("seconds (log)")
    ax.set_title(
        "time per case, best of k (faded with x: answer not exact; hatched: stopped at the limit)",
        fontsize=10,
    )
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


NOTE = (
    "gap: max over columns of (F - F*) / max(F*, 1e-14 F(0)), F* the lowest objective of any "
    f"solver; '!' = above {EXACT['nnls']:g} (NNLS) / {EXACT['lasso']:g} (Lasso); '(alone)': "
    "no other solver finished to compare with.  '/ best exact peer': msm_gpu's time over "
    "the fastest peer whose gap is within those."
)


def save(path, meta, results):
    with open(path, "w") as f:
        json.dump({**meta, "results": results}, f, indent=1, default=float)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (~3-5 min, 2 cores)")
    parser.add_argument("--json", help="write the results here (after every case)")
    parser.add_argument("--png", help="write the time plot here")
    parser.add_argument("--limit", type=float, help="seconds per solver and case (10 / 30)")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    parser.add_argument("--cases", nargs="+", help="only cases whose name contains one of these")
    parser.add_argument("--solvers", nargs="+", default=list(SOLVERS), choices=SOLVERS)
    parser.add_argument("--from-json", help="print (and plot) a saved run instead of running")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--compact", action="store_true", help="with --from-json: a row per case")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from _common import settle_allocator

    settle_allocator()  # peers timed in one allocator state (_common's docstring)
    if args.worker:
        serve(handle)
        return
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        results = saved["results"]
        print(saved["machine"])
        print(
            f"load average {saved['load_start']} -> {saved['load_end']}, "
            f"total {saved.get('total_seconds', 0):.0f} s\n"
        )
        if args.compact:
            print(format_table(COMPACT_HEADER, compact_rows(results), markdown=args.markdown))
        else:
            table = table_rows(results)
            print(format_table(HEADER, table, markdown=args.markdown, align=ALIGN))
        print("\n" + NOTE)
        if args.png:
            plot(results, SOLVERS, args.png)
            print(f"PNG: {args.png}")
        return
    limit = args.limit or (10.0 if args.quick else 30.0)
    from _machine import describe

    print(describe())
    load0 = os.getloadavg()
    print(f"load average at start: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
    todo = cases(args.quick)
    if args.cases:
        todo = [c for c in todo if any(s in c["name"] for s in args.cases)]
    workers = {}
    for name in args.solvers:
        if available(name):
            workers[name] = Worker([sys.executable, os.path.abspath(__file__), "--worker"])
        else:
            print(f"{name}: not installed, skipped (pip install {name})")
    print(
        f"limit {limit:g} s per solver and case, best of {args.repeat}; workers warmed up on a "
        "tiny problem of each kind first (compile time not counted)\n"
    )
    meta = {
        "machine": describe(),
        "load_start": load0,
        "quick": args.quick,
        "limit": limit,
        "repeat": args.repeat,
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    results = []
    t_start = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for c in todo:
                t0 = time.perf_counter()
                results.append(run_case(c, args.solvers, workers, limit, args.repeat, tmp))
                print(format_table(HEADER, table_rows(results[-1:]), align=ALIGN))
                print(f"({time.perf_counter() - t0:.0f} s)\n", flush=True)
                if args.json:
                    save(args.json, {**meta, "load_end": os.getloadavg()}, results)
    finally:
        for w in workers.values():
            w.close()
    load1 = os.getloadavg()
    total = time.perf_counter() - t_start
    print(f"load average at end: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}; total {total:.0f} s")
    print()
    print(format_table(HEADER, table_rows(results), markdown=args.markdown, align=ALIGN))
    print("\n" + NOTE)
    if args.json:
        save(args.json, {**meta, "load_end": load1, "total_seconds": total}, results)
        print(f"JSON: {args.json}")
    if args.png:
        plot(results, args.solvers, args.png)
        print(f"PNG: {args.png}")


if __name__ == "__main__":
    main()
