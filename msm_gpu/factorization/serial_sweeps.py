"""The sweeps of one small NMF half-step on one thread, in one compiled call.

A half-step of a small NMF (digits: k = 16, 64 or 1797 columns) sweeps for tens to
hundreds of microseconds; called one sweep at a time from Python, each call's dispatch,
its statistics' sum and the stopping rule cost a fifth of that again.  Here the loop of
sweeps and the inner stopping rule of :class:`msm_gpu.factorization.solvers.InnerRule`
run inside one compiled function around the CPU's BLAS-panel sweep of the box penalty
(``kernels.sweep_for(CODE_BOX)``, NNLS).
"""

from __future__ import annotations

from ..backends.base import STAT_DIFF2
from ..backends.cpu.jit import njit
from ..backends.cpu.kernels import sweep_for
from ..penalties import CODE_BOX

_BOX_SWEEP = sweep_for(CODE_BOX)


@njit(nogil=True)
def box_sweeps(afold, b_diag, table, r, y, panel, stats, max_inner, tol2):
    """Sweep (*) of ``solvers`` on every column of ``y`` in place until the inner rule
    stops (the squared step of a sweep at most ``tol2`` times the first's, at once if the
    first is zero) or ``max_inner`` sweeps; returns the sweeps done.  The arguments are
    those of the sweep (``kernels.sweep_for``); ``stats`` holds the last sweep's."""
    c = y.shape[1]
    first = 0.0
    done = 0
    while done < max_inner:
        _BOX_SWEEP(afold, b_diag, table, r, y, 0, c, panel, stats, stats, False)
        done += 1
        step2 = 0.0
        for col in range(c):
            step2 += stats[STAT_DIFF2, col]
        if done == 1:
            first = step2
            if step2 == 0.0:
                break
        elif step2 <= tol2 * first:
            break
    return done
