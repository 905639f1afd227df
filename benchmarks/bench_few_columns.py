"""NNLS with one or a few right-hand sides: ``mg.nnls`` against SciPy's ``nnls``.

The commonest call, ``mg.nnls(C, d)``, solves one column; below
``nnls_columns.SCHUR_MIN_COLUMNS`` columns the active set skips G^{-1} (n^3 flops), which
only the Schur phase of a batch repays, and a tall dense C takes the Gram form however
few its columns (``design_form.GRAM_TALL_ROWS``).  Each case: ``mg.nnls`` at default options and a
loop of ``scipy.optimize.nnls`` over the columns, best of ``--repeat`` calls each, in turn,
one process (``regress.interleaved_best``); the answers' objectives side by side.  Run
it in two trees in turn (``PYTHONPATH=<tree>``) to compare versions.

    python benchmarks/bench_few_columns.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def peaks(m, n, width):
    t = np.linspace(0, 1, m)[:, None]
    return np.exp(-0.5 * ((t - np.linspace(0.02, 0.98, n)) / width) ** 2)


def cases():
    """name -> (C, D)."""
    rng = np.random.default_rng(0)
    out = {}
    for m, n in ((500, 100), (200, 20), (1200, 1000), (2000, 300)):
        C = np.abs(rng.standard_normal((m, n)))
        for r in (1, 4):
            out[f"|gauss| {m}x{n}, {r} column(s)"] = (C, np.abs(rng.standard_normal((m, r))))
    for m, n in ((100_000, 50), (20_000, 200), (5000, 100), (3000, 300)):  # tall: regression
        C = rng.standard_normal((m, n))
        x = rng.standard_normal((n, 3)) * (rng.uniform(size=(n, 3)) < 0.3)
        D = C @ x + rng.standard_normal((m, 3))
        out[f"gauss {m}x{n} (tall), 1 column"] = (C, D[:, :1])
        out[f"gauss {m}x{n} (tall), 3 columns"] = (C, D)
    C = rng.standard_normal((300, 100))  # signed: most of the answer at 0
    out["gauss 300x100 signed, 1 column"] = (C, rng.standard_normal((300, 1)))
    for width in (0.01, 0.03):  # well and ill conditioned peak libraries
        C = peaks(300, 60, width)
        x = np.abs(rng.standard_normal((60, 2))) * (rng.uniform(size=(60, 2)) < 0.3)
        D = C @ x + 1e-3 * rng.standard_normal((300, 2))
        out[f"peaks 300x60 width {width}, 1 column"] = (C, D[:, :1])
        out[f"peaks 300x60 width {width}, 2 columns"] = (C, D)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args(argv)
    import scipy.optimize
    from _common import settle_allocator
    from regress import interleaved_best

    import msm_gpu as mg

    settle_allocator()
    print(mg.__file__)
    for name, (C, D) in cases().items():
        mg.nnls(C, D)  # compiled, warm

        def ours(C=C, D=D):
            return mg.nnls(C, D).x

        def scipy_loop(C=C, D=D):
            return np.column_stack([scipy.optimize.nnls(C, D[:, k])[0] for k in range(D.shape[1])])

        (t_ours, t_scipy), (x, ref) = interleaved_best([ours, scipy_loop], k=args.repeat)

        def f(z, C=C, D=D):
            return float(np.sum(0.5 * np.sum((C @ z - D) ** 2, axis=0)))

        gap = (f(x) - f(ref)) / max(f(ref), 1e-300)
        print(
            f"{name:40s} msm {t_ours * 1e3:8.3f} ms  scipy {t_scipy * 1e3:8.3f} ms  "
            f"ratio {t_ours / t_scipy:5.2f}  F gap {gap:+.1e}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
