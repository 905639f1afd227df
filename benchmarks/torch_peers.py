"""What a GPU user writes in PyTorch instead of msm_gpu: the peers of ``bench_gpu_peers.py``.

A few lines each, batched over all columns, nothing library-specific, on whatever device
the tensors live on (CUDA or CPU):

* :func:`fista_nnls` -- min_{X >= 0} 1/2 ||C X - D||_F^2 for every column of D at once by
  FISTA (Beck & Teboulle 2009), step 1/L with L = lambda_max(C'C), per-column adaptive
  restart (O'Donoghue & Candes 2015), stopped when the largest relative KKT residual is
  at most ``tol`` (checked every ``check_every`` iterations: one host synchronisation each);
* :func:`pgd_nnls` -- plain projected gradient, same step, for a fixed iteration count or
  until a deadline;
* :func:`hals_nmf` -- HALS for 1/2 ||Y - W H||_F^2 (Cichocki & Phan 2009; Gillis & Glineur
  2012's form): each outer iteration forms W'Y, W'W then updates the k rows of H one by
  one, then forms H Y', H H' and updates the k rows of W' one by one.  Dense or sparse
  (``torch.sparse_csr``) Y.

:func:`kkt_nnls` is msm_gpu's relative KKT residual (``msm_gpu.finish.objective.kkt_residual``
for ``NonNeg``) written in torch, so that FISTA's stopping test measures what the
benchmark reports.  Nothing here imports msm_gpu.
"""

from __future__ import annotations

import math
import time

try:
    import torch
except ImportError:  # bench_gpu_peers.py says so and skips the torch rows
    torch = None


def sync(device) -> None:
    """Wait for the device (a no-op on the CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def nnls_gram(C, D):
    """G = C'C (n x n) and B = C'D (n x r) in float64."""
    C = C.to(torch.float64)
    return C.T @ C, C.T @ D.to(torch.float64)


def kkt_nnls(G, B, X):
    """Relative KKT residual of every column of X for min 1/2 x'Gx - b'x, x >= 0.

    msm_gpu's definition (``msm_gpu/finish/objective.py``): with g = G x - b and d = diag(G),
    the move of an exact coordinate minimisation is d (x - max(x - g / d, 0)); after the
    Jacobi scaling by 1/sqrt(d) the residual of a column is
    ||move / sqrt(d)|| / (||G x / sqrt(d)|| + ||b / sqrt(d)||).
    """
    gx = G @ X
    d = torch.diagonal(G)
    floor = 1e-300 + torch.finfo(torch.float64).eps * float(d.abs().max())
    b = torch.where(d > 0, d, torch.full_like(d, floor))[:, None]
    w = 1.0 / torch.sqrt(b)
    move = X - torch.clamp_min(X - (gx - B) / b, 0.0)
    num = torch.linalg.vector_norm(w * b * move, dim=0)
    den = torch.linalg.vector_norm(w * gx, dim=0) + torch.linalg.vector_norm(w * B, dim=0)
    return torch.where(den > 0, num / torch.where(den > 0, den, torch.ones_like(den)), num)


def _step(G):
    return 1.0 / float(torch.linalg.eigvalsh(G)[-1])


def fista_nnls(G, B, X0=None, *, tol=1e-10, max_iter=20_000, check_every=25, deadline=None):
    """FISTA with per-column adaptive restart on min 1/2 x'Gx - b'x, x >= 0 (all columns).

    Parameters
    ----------
    G : (n, n) tensor, B : (n, r) tensor
        float64, on one device.
    X0 : (n, r) tensor, optional
        Start (zeros by default).
    tol : float
        Stop once max over columns of :func:`kkt_nnls` <= tol (checked every
        ``check_every`` iterations).
    max_iter : int
    deadline : float, optional
        ``time.perf_counter()`` value after which the loop stops at the next check.

    Returns
    -------
    X : (n, r) tensor
    n_iter : int
    kkt_max : float
        The largest relative KKT residual at the last check.
    """
    step = _step(G)
    x = torch.zeros_like(B) if X0 is None else X0.clone()
    y = x.clone()
    t = torch.ones(B.shape[1], dtype=B.dtype, device=B.device)
    kkt = math.inf
    n_iter = 0
    while n_iter < max_iter:
        x_new = torch.clamp_min(y - step * (G @ y - B), 0.0)
        # restart a column whose momentum points uphill: <y - x_new, x_new - x> > 0
        uphill = ((y - x_new) * (x_new - x)).sum(dim=0) > 0
        t = torch.where(uphill, torch.ones_like(t), t)
        t_new = 0.5 * (1.0 + torch.sqrt(1.0 + 4.0 * t * t))
        beta = torch.where(uphill, torch.zeros_like(t), (t - 1.0) / t_new)
        y = x_new + beta * (x_new - x)
        x, t = x_new, t_new
        n_iter += 1
        if n_iter % check_every == 0 or n_iter == max_iter:
            kkt = float(kkt_nnls(G, B, x).max())
            if kkt <= tol or (deadline is not None and time.perf_counter() >= deadline):
                break
    if n_iter % check_every != 0 and n_iter != max_iter:
        kkt = float(kkt_nnls(G, B, x).max())
    return x, n_iter, kkt


def pgd_nnls(G, B, X0=None, *, max_iter=1000, deadline=None, check_every=25):
    """Projected gradient x <- max(x - (G x - b) / L, 0) on all columns.

    Runs ``max_iter`` iterations, or until ``deadline`` (``time.perf_counter()``, looked at
    every ``check_every`` iterations after a synchronisation).  Returns (X, n_iter).
    """
    step = _step(G)
    x = torch.zeros_like(B) if X0 is None else X0.clone()
    n_iter = 0
    while n_iter < max_iter:
        x = torch.clamp_min(x - step * (G @ x - B), 0.0)
        n_iter += 1
        if deadline is not None and n_iter % check_every == 0:
            sync(x.device)
            if time.perf_counter() >= deadline:
                break
    return x, n_iter


class _Clock:
    """Seconds since the start at chosen points, without a host synchronisation per point
    on CUDA (events, read at the end); ``perf_counter`` on the CPU."""

    def __init__(self, device):
        self.cuda = torch.device(device).type == "cuda"
        self.marks = []
        if self.cuda:
            self.start = torch.cuda.Event(enable_timing=True)
            self.start.record()
        else:
            self.start = time.perf_counter()

    def mark(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.marks.append(ev)
        else:
            self.marks.append(time.perf_counter())

    def seconds(self):
        if self.cuda:
            torch.cuda.synchronize()
            return [self.start.elapsed_time(ev) / 1e3 for ev in self.marks]
        return [m - self.start for m in self.marks]


def _is_sparse(Y) -> bool:
    return Y.layout != torch.strided


def hals_nmf(Y, W, H, *, max_iter=100, Yt=None, deadline=None, min_seconds=0.0, eps=1e-16):
    """HALS for min_{W, H >= 0} 1/2 ||Y - W H||_F^2 from (W, H) (copied, not modified).

    Parameters
    ----------
    Y : (m, d) tensor, dense or ``torch.sparse_csr``
    W : (m, k) tensor, H : (k, d) tensor
        Starting factors (Y's dtype and device).
    max_iter : int
        Outer iterations (an H-step then a W-step).
    Yt : (d, m) sparse CSR tensor, optional
        Y' for a sparse Y (built here when not given).
    deadline : float, optional
        ``time.perf_counter()`` value: stop at the first outer iteration that ends after it
        (looked at after a synchronisation every 10 iterations).
    min_seconds : float
        Keep iterating past ``max_iter`` until this many seconds have passed (so that the
        objective can be read "after the same time" as another solver); ``deadline``
        still wins.
    eps : float
        Floor of the diagonal of W'W and H H' (an all-zero factor column).

    Returns
    -------
    W : (m, k) tensor, H : (k, d) tensor
    history : list of (seconds, objective)
        After 0, 1, ... outer iterations; objective 1/2 ||Y - WH||^2 from the Gram
        identity in float64 (no extra product with Y); seconds from CUDA events.
    """
    sparse = _is_sparse(Y)
    if sparse and Yt is None:
        Yt = Y.t().to_sparse_csr()
    W = W.clone()
    H = H.clone()
    Wt = W.T.contiguous()
    k = H.shape[0]
    vals = Y.values() if sparse else Y
    norm2 = (vals.to(torch.float64) ** 2).sum()

    def objective(Wt, HYt, HHt):  # 1/2 (||Y||^2 - 2 <W', H Y'> + <W'W, H H'>)
        Wt64 = Wt.to(torch.float64)
        val = norm2 - 2.0 * (Wt64 * HYt.to(torch.float64)).sum()
        val = val + ((Wt64 @ Wt64.T) * HHt.to(torch.float64)).sum()
        return 0.5 * torch.clamp_min(val, 0.0)

    sync(Y.device)
    clock = _Clock(Y.device)
    values = [objective(Wt, (Y @ H.T).T, H @ H.T)]
    clock.mark()
    started = time.perf_counter()
    it = 0
    while True:
        # H-step: rows of H, W fixed
        WtY = (Yt @ Wt.T).T if sparse else Wt @ Y  # k x d
        WtW = Wt @ Wt.T
        diag = torch.clamp_min(torch.diagonal(WtW), eps)
        for j in range(k):
            H[j] = torch.clamp_min(H[j] + (WtY[j] - WtW[j] @ H) / diag[j], 0.0)
        # W-step: rows of W', H fixed
        HYt = (Y @ H.T).T  # k x m
        HHt = H @ H.T
        diag = torch.clamp_min(torch.diagonal(HHt), eps)
        for j in range(k):
            Wt[j] = torch.clamp_min(Wt[j] + (HYt[j] - HHt[j] @ Wt) / diag[j], 0.0)
        values.append(objective(Wt, HYt, HHt))
        clock.mark()
        it += 1
        if it >= max_iter:
            if min_seconds <= 0:
                break
            sync(Y.device)
            if time.perf_counter() - started >= min_seconds:
                break
        if deadline is not None and it % 10 == 0:
            sync(Y.device)
            if time.perf_counter() >= deadline:
                break
    seconds = clock.seconds()
    history = [(s - seconds[0], float(v)) for s, v in zip(seconds, values, strict=True)]
    return Wt.T.contiguous(), H, history
