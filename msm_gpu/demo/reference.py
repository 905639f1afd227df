"""The reference objective F* of the Figure 1 study, found apart from the runs it judges.

* NNLS: the optimum, from ``mg.nnls`` (exact), checked against ``scipy.optimize.nnls``.
* l0-regularised least squares (non-convex, NP-hard in general): the optimum where every
  support can be enumerated (n <= :data:`EXACT_L0_MAX_N`); otherwise the best *local
  minimum found*, never called the optimum: the lowest F among the study's runs' last
  iterates, each polished by least squares on its support (such a point is a local
  minimiser of the l0 objective: moving inside the support cannot lower the quadratic,
  leaving it costs a jump of lam).

Every F here is 1/2 ||C x - d||^2 + h(x) evaluated from the residual in float64.
"""

from __future__ import annotations

import itertools

import numpy as np

#: mg.nnls's F* and SciPy's must agree to this relative difference.
SCIPY_RTOL = 1e-10
#: Largest n whose 2^n supports are enumerated for the exact l0 optimum.
EXACT_L0_MAX_N = 14
#: Supports solved together by one batched pseudo-inverse (bounds the memory).
_CHUNK = 2048


def least_squares_value(C, d, x):
    """1/2 ||C x - d||^2 in float64."""
    res = np.asarray(C, dtype=np.float64) @ np.asarray(x, dtype=np.float64) - d
    return 0.5 * float(res @ res)


def l0_value(C, d, x, lam):
    """1/2 ||C x - d||^2 + lam ||x||_0."""
    return least_squares_value(C, d, x) + lam * int(np.count_nonzero(x))


def nnls_reference(C, d, backend="cpu"):
    """F* of min_{x >= 0} 1/2 ||C x - d||^2 by ``mg.nnls`` (the Gram form, the quadratic
    the study's methods run on), checked against ``scipy.optimize.nnls``.

    Returns
    -------
    dict
        ``value`` (F* from mg.nnls's x), ``kind`` ("optimum"), ``source`` (text),
        ``scipy`` (1/2 rnorm^2 of SciPy's answer), ``rel_diff`` (|F* - F_scipy| /
        max(|F_scipy|, tiny)), ``agrees`` (rel_diff <= :data:`SCIPY_RTOL`).
    """
    import scipy.optimize

    import msm_gpu as mg

    res = mg.nnls(C, d, representation="gram", backend=backend)
    x = host(res.x)
    value = least_squares_value(C, d, x)
    x_ref, _ = scipy.optimize.nnls(C, d)
    ref = least_squares_value(C, d, x_ref)
    rel = abs(value - ref) / max(abs(ref), np.finfo(float).tiny)
    return {
        "value": value,
        "kind": "optimum",
        "source": 'mg.nnls(C, d, representation="gram")',
        "scipy": ref,
        "rel_diff": rel,
        "agrees": bool(rel <= SCIPY_RTOL),
    }


def polish_l0(C, d, x, lam):
    """x replaced on its support by the least-squares solution there (minimum norm where
    the support has more columns than C has independent rows); returns (x, F)."""
    support = np.flatnonzero(x)
    out = np.zeros(C.shape[1])
    if support.size:
        out[support] = np.linalg.lstsq(C[:, support], d, rcond=None)[0]
    return out, l0_value(C, d, out, lam)


def l0_exact(C, d, lam):
    """The global minimum of 1/2 ||C x - d||^2 + lam ||x||_0 by enumerating all 2^n
    supports (least squares on each, batched); (x, F).  For n <= EXACT_L0_MAX_N."""
    C = np.asarray(C, dtype=np.float64)
    d = np.asarray(d, dtype=np.float64)
    m, n = C.shape
    if n > EXACT_L0_MAX_N:
        raise ValueError(f"l0_exact enumerates 2^n supports: n must be <= {EXACT_L0_MAX_N}")
    best_x, best_f = np.zeros(n), l0_value(C, d, np.zeros(n), lam)
    for k in range(1, n + 1):
        supports = np.array(list(itertools.combinations(range(n), k)))
        for start in range(0, len(supports), _CHUNK):
            s = supports[start : start + _CHUNK]
            cs = C[:, s].transpose(1, 0, 2)  # (N, m, k)
            xs = np.linalg.pinv(cs) @ d  # (N, k): least squares on each support
            res = np.einsum("nmk,nk->nm", cs, xs) - d
            f = 0.5 * np.einsum("nm,nm->n", res, res) + lam * np.count_nonzero(xs, axis=1)
            i = int(np.argmin(f))
            if f[i] < best_f:
                best_x = np.zeros(n)
                best_x[s[i]] = xs[i]
                best_f = l0_value(C, d, best_x, lam)
    return best_x, best_f


def l0_reference(C, d, lam, finals):
    """F_ref of the l0 problem: the exact optimum for n <= EXACT_L0_MAX_N, otherwise the
    best local minimum found from ``finals`` ({method: last iterate x}).

    Returns a dict: ``value``, ``kind`` ("optimum" or "best found"), ``source`` (text),
    ``polished`` ({method: F of its polished last iterate}) and ``best_method`` (whose
    polished iterate gave ``value``), both empty/None for "optimum".
    """
    n = C.shape[1]
    if n <= EXACT_L0_MAX_N:
        _, value = l0_exact(C, d, lam)
        return {
            "value": value,
            "kind": "optimum",
            "source": f"all 2^{n} supports enumerated (least squares on each)",
            "polished": {},
            "best_method": None,
        }
    polished = {m: polish_l0(C, d, x, lam)[1] for m, x in finals.items()}
    best = min(polished, key=polished.get)
    return {
        "value": polished[best],
        "kind": "best found",
        "source": (
            "the lowest F of the methods' last iterates, each polished by least squares on "
            f"its support (a local minimum); l0 least squares has no exact solver at n = {n}"
        ),
        "polished": polished,
        "best_method": best,
    }


def host(x):
    """A NumPy copy of a NumPy or CuPy array (the demo's one conversion to the host)."""
    return np.asarray(x.get() if hasattr(x, "get") else x)
