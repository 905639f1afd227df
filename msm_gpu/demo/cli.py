"""The ``msm-gpu`` command (also ``python -m msm_gpu``).

``msm-gpu demo`` first shows what the library is for: batched NNLS, ``mg.nnls(C, D)`` on
thousands of right-hand sides at once against a loop of scipy's ``nnls`` over the columns
(time, speed-up, objective gap; the first call, which compiles the kernels, is timed apart),
and says which method ran.  Then it reproduces Figure 1 of the paper (MSM against PGM,
PGM + line search, APG and APG + line search on nonnegative and l0-regularised least
squares) against a reference F* found apart from the runs (the optimum for NNLS, checked
against SciPy), prints the table and writes ``figure1.png`` into ``--out`` (default: a new
folder ``msm-gpu-demo-*`` in the system's temporary directory, named in the output; never
the current folder).

Exit status: 0 done, 1 no command given, 2 bad arguments (argparse's usage errors
included), 3 the requested backend cannot run here (e.g. ``--backend cuda`` without a
usable GPU; the reason is printed, no traceback), 4 the NNLS optimum of mg.nnls and
SciPy's differ by more than 1e-10 (relative; the table is printed all the same).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from .reference import EXACT_L0_MAX_N, SCIPY_RTOL
from .study import (
    BATCHED_PROBLEMS,
    FIGURE1_ITERS,
    FIGURE1_LAM,
    FIGURE1_SIZE,
    FIGURE1_THREADS,
    REL_TOL,
)


def _problems_text():
    return ", ".join(
        f"{name} C {m} x {n} with {r} columns" for name, m, n, r, _ in BATCHED_PROBLEMS
    )


def _build_parser():
    parser = argparse.ArgumentParser(
        prog="msm-gpu",
        description="Batched composite quadratic problems by the Matrix Splitting Method.",
        epilog="exit status: 0 done, 1 no command, 2 bad arguments, 3 backend unavailable",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser(
        "demo",
        help="batched NNLS vs scipy, then the paper's convergence study (Figure 1)",
        description=(
            "First a batched NNLS: mg.nnls(C, D) on all columns of D at once vs "
            f"scipy.optimize.nnls looped over the columns ({_problems_text()}), after one "
            "first call, timed apart, that compiles the kernels; then which method ran. "
            "Then Figure 1 of the paper: C (m x n) and d (m) uniform on (0, 1); MSM, PGM, "
            "PGM+LS, APG and APG+LS on (a) NNLS and (b) l0-regularised least squares, from "
            "x0 = 0 for the same number of iterations, one thread each. Each is judged "
            "against F*: for NNLS the optimum (mg.nnls, checked against scipy), for l0 the "
            f"optimum where n <= {EXACT_L0_MAX_N} (every support enumerated), else the best "
            "local minimum found. Prints F_k - F* after some iterations and the "
            "iterations/seconds to F_k - F* <= tol max(1, |F*|) ('-': not within the run); "
            "writes figure1.png."
        ),
    )
    demo.add_argument(
        "--size",
        nargs=2,
        type=int,
        default=FIGURE1_SIZE,
        metavar=("M", "N"),
        help="Figure 1's C is M x N (default: the paper's %(default)s)",
    )
    demo.add_argument(
        "--lam", type=float, default=FIGURE1_LAM, help="l0 weight (default %(default)s)"
    )
    demo.add_argument(
        "--iters",
        type=int,
        default=FIGURE1_ITERS,
        help="iterations of each method in Figure 1 (default %(default)s)",
    )
    demo.add_argument(
        "--tol",
        type=float,
        default=REL_TOL,
        help="'there' means F_k - F* <= TOL max(1, |F*|) (default %(default)s)",
    )
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--backend", default="cpu", choices=("cpu", "cuda", "auto"))
    demo.add_argument(
        "--out",
        default=None,
        help="folder for figure1.png, created if missing (default: a new folder "
        "msm-gpu-demo-* in the temporary directory)",
    )
    demo.add_argument("--no-plot", action="store_true", help="do not write the PNG")
    demo.add_argument(
        "--nnls-size",
        nargs=3,
        type=int,
        default=None,
        metavar=("M", "N", "R"),
        help="batched NNLS on one problem instead of the default ones: C (M x N) and D "
        "(M x R) uniform on (0, 1) (0 0 0 skips the batched NNLS)",
    )
    return parser


#: Exit status when the requested backend cannot run on this machine.
EXIT_BACKEND_UNAVAILABLE = 3
#: Exit status when mg.nnls's NNLS optimum and SciPy's disagree (beyond SCIPY_RTOL).
EXIT_REFERENCE_MISMATCH = 4


def _demo(args) -> int:
    from ..backends import BackendUnavailableError, get_backend
    from . import study

    m, n = args.size
    if m < 1 or n < 1 or args.iters < 1 or args.lam < 0 or not 0 < args.tol < 1:
        print(
            "msm-gpu demo: --size and --iters must be positive, --lam >= 0, 0 < --tol < 1",
            file=sys.stderr,
        )
        return 2
    try:
        get_backend(args.backend)
    except BackendUnavailableError as exc:
        print(f"msm-gpu demo: {exc}", file=sys.stderr)
        return EXIT_BACKEND_UNAVAILABLE
    started = time.perf_counter()
    problems = _batched_problems(args.nnls_size)
    if problems:  # printed as measured: a cold kernel cache makes the first call slow
        study.run_batched_demo(problems, seed=args.seed, backend=args.backend, stream=sys.stdout)
        print()
    print(
        "Figure 1 of the paper (Yuan, Zheng & Ghanem, CVPR 2017): C (m x n) and d (m) "
        f"uniform on (0, 1), one problem (r = 1); MSM (the paper's, finish=None), PGM, "
        f"PGM+LS, APG and APG+LS from x0 = 0, {args.iters} iterations each, "
        f"{FIGURE1_THREADS} thread{'s' if FIGURE1_THREADS > 1 else ''} each\n",
        flush=True,
    )
    result = study.run_figure1(
        size=(m, n),
        lam=args.lam,
        seed=args.seed,
        backend=args.backend,
        iters=args.iters,
        tol=args.tol,
        stream=sys.stdout,
    )
    if not args.no_plot:
        folder = _output_folder(args.out)
        path = study.plot(result, os.path.join(folder, "figure1.png"))
        print(f"wrote {path}")
    print(f"\ndemo finished in {time.perf_counter() - started:.1f} s")
    nnls = result["problems"].get("nnls")
    if nnls is not None and not nnls["reference"]["agrees"]:
        print(
            f"msm-gpu demo: the NNLS optimum of mg.nnls and SciPy's differ by "
            f"{nnls['reference']['rel_diff']:.1e} (relative), more than {SCIPY_RTOL:g}",
            file=sys.stderr,
        )
        return EXIT_REFERENCE_MISMATCH
    return 0


def _batched_problems(size):
    """The batched-NNLS problems to run: the study's default set, one uniform problem of
    ``--nnls-size`` (scipy's loop timed on at most SCIPY_COLUMNS of its columns), or none."""
    from . import study

    if size is None:
        return study.BATCHED_PROBLEMS
    m, n, r = size
    if m > 0 and n > 0 and r > 0:
        return (("uniform", m, n, r, min(r, SCIPY_COLUMNS)),)
    return ()


#: With ``--nnls-size``, scipy's loop runs on at most this many columns (time scaled up).
SCIPY_COLUMNS = 1000


def _output_folder(out):
    """``out`` (created if missing), or a new ``msm-gpu-demo-*`` folder in the temp dir."""
    if out is None:
        return tempfile.mkdtemp(prefix="msm-gpu-demo-")
    os.makedirs(out, exist_ok=True)
    return out


def main(argv=None) -> int:
    """Entry point of the ``msm-gpu`` console script."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        return _demo(args)
    parser.print_help()
    return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
