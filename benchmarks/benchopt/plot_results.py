"""Curves and tables from the saved benchopt results (docs/benchmarks/benchopt/*.parquet).

    python benchmarks/benchopt/plot_results.py                   # PNGs + markdown tables
    python benchmarks/benchopt/plot_results.py --no-png          # tables only
    python benchmarks/benchopt/plot_results.py benchmark_lasso   # one benchmark

For every benchmark, objective and dataset: the relative suboptimality
(f - f*) / (f0 - f*) against time, where f* is the best objective any solver reached on
that problem and repetition (the benchopt convention; for NMF, a nonconvex problem, the
best local minimum found) and f0 the objective at the shared start (the largest first
point of the solvers' curves: zeros for the convex benchmarks, the shared init for NMF).
Each curve is the median over repetitions, per stop value, of the time and of the
suboptimality (as benchopt draws them).

The table gives, per solver, the time to a relative suboptimality of 1e-6 and of 1e-10:
for each repetition the shortest run time among the runs that reached it, then the median
over the repetitions ("-" where a repetition never reached it; the best value reached is
then shown in brackets).  msm_gpu is set beside the fastest peer.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "benchmarks" / "benchopt"
BENCHMARKS = (
    "benchmark_nnls",
    "benchmark_lasso",
    "benchmark_lasso_path",
    "benchmark_logreg_l1",
    "benchmark_nmf",
)
THRESHOLDS = (1e-6, 1e-10)
FLOOR = 1e-16  # suboptimalities below (zeros included) are drawn at this floor
OURS = "msm_gpu"
KEYS = ["objective_name", "dataset_name", "idx_rep"]


def is_ours(solver_name: str) -> bool:
    """msm_gpu, with or without parameters (``msm_gpu[loss=frobenius]``)."""
    return solver_name.split("[")[0] == OURS


def _fits_kl(solver_name: str) -> bool:
    return "kullback-leibler" in solver_name


#: What is compared on each benchmark: (name suffix, objective column, solvers).  NMF's
#: value is the Frobenius loss; the solvers fitting the KL divergence are compared on it.
VIEWS = {
    "benchmark_nmf": [
        ("", "objective_value", lambda s: not _fits_kl(s)),
        ("_kl", "objective_kullback-leibler", _fits_kl),
    ]
}
DEFAULT_VIEWS = [("", "objective_value", lambda s: True)]


def load(benchmark: str, column: str = "objective_value", solvers=None) -> pd.DataFrame:
    """The result rows of one benchmark (the ``solvers`` kept, all by default), with the
    relative suboptimality of ``column`` added."""
    df = pd.read_parquet(RESULTS / f"{benchmark}.parquet")
    if solvers is not None:
        df = df[df["solver_name"].map(solvers)]
    df = df[np.isfinite(df[column])].copy()
    df["objective_value"] = df[column]
    best = df.groupby(KEYS)["objective_value"].transform("min")
    first = (
        df.sort_values("time")
        .groupby(KEYS + ["solver_name"])["objective_value"]
        .first()
        .groupby(level=KEYS)
        .max()
        .rename("f0")
    )
    df = df.join(first, on=KEYS)
    span = (df["f0"] - best).where(lambda s: s > 0, np.nan)
    df["subopt"] = ((df["objective_value"] - best) / span).clip(lower=0.0)
    return df


def time_to(df: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Median over repetitions of the time to ``subopt <= threshold`` per solver/problem."""
    rows = []
    for (obj, data, solver), g in df.groupby(["objective_name", "dataset_name", "solver_name"]):
        times, reached_all = [], True
        for _, rep in g.groupby("idx_rep"):
            hit = rep.loc[rep["subopt"] <= threshold, "time"]
            if hit.empty:
                reached_all = False
            else:
                times.append(hit.min())
        rows.append(
            dict(
                objective_name=obj,
                dataset_name=data,
                solver_name=solver,
                time=float(np.median(times)) if reached_all else math.nan,
                best=float(g["subopt"].min()),
            )
        )
    return pd.DataFrame(rows)


def _fmt_time(t: float, best: float) -> str:
    if math.isnan(t):
        return f"- ({best:.0e})"
    return f"{t * 1e3:.3g} ms" if t < 1 else f"{t:.3g} s"


def table(df: pd.DataFrame, benchmark: str) -> str:
    """Markdown table: msm_gpu and the fastest peer, time to 1e-6 and 1e-10."""
    t6, t10 = (time_to(df, thr) for thr in THRESHOLDS)
    on = ["objective_name", "dataset_name", "solver_name"]
    merged = t6.merge(t10, on=on, suffixes=("6", "10"))
    lines = [
        f"**{benchmark}**",
        "",
        "| objective | dataset | msm_gpu 1e-6 | msm_gpu 1e-10 | fastest peer | peer 1e-6 "
        "| peer 1e-10 | peer / msm_gpu at 1e-10 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (obj, data), g in merged.groupby(["objective_name", "dataset_name"], sort=False):
        mine = g["solver_name"].map(is_ours)
        ours, peers = g[mine], g[~mine]
        if ours.empty or peers.empty:
            continue
        ours = ours.iloc[0]
        # fastest peer: the quickest to 1e-10, else to 1e-6, else the lowest suboptimality
        order = peers.assign(
            k10=peers["time10"].fillna(np.inf), k6=peers["time6"].fillna(np.inf)
        ).sort_values(["k10", "k6", "best10"])
        peer = order.iloc[0]
        ratio = (
            f"{peer['time10'] / ours['time10']:.2g}x"
            if not (math.isnan(peer["time10"]) or math.isnan(ours["time10"]))
            else "-"
        )
        lines.append(
            f"| {_short(obj)} | {_short(data)} | {_fmt_time(ours['time6'], ours['best6'])} "
            f"| {_fmt_time(ours['time10'], ours['best10'])} | {peer['solver_name']} "
            f"| {_fmt_time(peer['time6'], peer['best6'])} "
            f"| {_fmt_time(peer['time10'], peer['best10'])} | {ratio} |"
        )
    return "\n".join(lines)


def _short(name: str) -> str:
    """'Simulated[n_features=5000,n_samples=100]' -> 'n_features=5000, n_samples=100'."""
    if "[" in name:
        name = name[name.index("[") + 1 : name.rindex("]")]
    return name.replace(",", ", ")


def plot(df: pd.DataFrame, benchmark: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    problems = list(df.groupby(["objective_name", "dataset_name"], sort=False).groups)
    ncols = min(3, len(problems))
    nrows = math.ceil(len(problems) / ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(5.2 * ncols, 3.5 * nrows), squeeze=False, constrained_layout=True
    )
    solvers = sorted(df["solver_name"].unique(), key=lambda s: (not is_ours(s), s))
    colors = {s: f"C{i}" for i, s in enumerate(solvers)}
    for ax, (obj, data) in zip(list(axes.flat)[: len(problems)], problems, strict=True):
        g = df[(df["objective_name"] == obj) & (df["dataset_name"] == data)]
        for solver, s in g.groupby("solver_name"):
            curve = s.groupby("stop_val")[["time", "subopt"]].median().sort_values("time")
            ax.loglog(
                curve["time"].clip(lower=1e-5),
                curve["subopt"].clip(lower=FLOOR),
                marker=".",
                drawstyle="steps-post",  # a run's value holds until the next run ends
                color=colors[solver],
                lw=2.2 if is_ours(solver) else 1.2,
                label=solver,
            )
        for thr in THRESHOLDS:
            ax.axhline(thr, color="0.6", lw=0.8, ls=":")
        ax.set_title(f"{_short(obj)}\n{_short(data)}", fontsize=8)
        ax.set_xlabel("time (s)", fontsize=8)
        ax.set_ylabel("(f - f*) / (f0 - f*)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_ylim(FLOOR / 3, 3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(problems) :]:
        ax.set_visible(False)
    fig.suptitle(f"{benchmark} (median of repetitions)", fontsize=10)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def machine(df: pd.DataFrame) -> str:
    row = df.iloc[0]
    fields = [
        "system-processor",
        "system-cpus",
        "system-ram (GB)",
        "platform-release",
        "version-numpy",
        "run_date",
    ]
    return ", ".join(f"{f}: {row[f]}" for f in fields if f in df.columns)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("benchmarks", nargs="*", default=BENCHMARKS)
    parser.add_argument("--no-png", action="store_true", help="print the tables only")
    args = parser.parse_args(argv)
    for benchmark in args.benchmarks:
        if not (RESULTS / f"{benchmark}.parquet").exists():
            print(f"{benchmark}: no result file in {RESULTS}")
            continue
        for suffix, column, solvers in VIEWS.get(benchmark, DEFAULT_VIEWS):
            df = load(benchmark, column, solvers)
            name = f"{benchmark}{suffix}"
            print(f"<!-- {name} ({column}): {machine(df)} -->")
            print(table(df, name))
            print()
            if not args.no_png:
                plot(df, name, RESULTS / f"{name}.png")


if __name__ == "__main__":
    main()
