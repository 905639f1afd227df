"""msm_gpu on the GPU side by side with the same machine's CPU backend and with PyTorch peers.

Usage::

    python benchmarks/bench_gpu_peers.py                 # the sizes of issue 40 (a GPU)
    python benchmarks/bench_gpu_peers.py --quick         # about 5-10x smaller
    python benchmarks/bench_gpu_peers.py --dry-run       # tiny sizes, NumPy + torch-CPU
    python benchmarks/bench_gpu_peers.py --budget 180 --out $OUT/gpu_peers.json

One run, one device.  Every case has its own time budget (``--budget`` scales them all),
counted after its warm-up calls (compilation is not measured): what a method could not
finish inside its share is extrapolated from the part it did (marked ``*``), and a
variant or case that overruns its limit by far is stopped by a timer signal.
A case that fails (e.g. a road with no device path, ``NotImplementedError``) prints the
error and the next case runs.  The JSON (``--out``) is rewritten after every case.

Cases (full size; ``--quick`` and ``--dry-run`` scale them down):

``nnls``
    Batched NNLS, C 200 x 20 (uniform, as ``bench_nnls.py``'s "unmixing"), r = 10^6 and
    10^7 right-hand sides D = C X + noise (Dirichlet abundances), made on the device in
    chunks of 10^6 columns.  Rows: ``mg.nnls`` on device arrays (the default: MSM + exact
    finish), the CPU backend on host copies (all cores), torch FISTA to the same KKT
    (the largest of ``--kkt`` and msm_gpu's own residual on the chunk), torch projected
    gradient for msm_gpu's time.  Metric: the largest relative KKT residual over all
    columns (``msm_gpu.finish.objective.kkt_residual``, for every method).
``nmf_dense_k20``, ``nmf_dense_k50``
    NMF of a dense 10000 x 5000 Y (rank-k product plus uniform noise, float32), 100
    outer iterations from the same random (W0, H0): ``mg.nmf`` (solvers "msm" and
    "hals") on device arrays, the CPU backend, torch HALS.  Metric: 1/2 ||Y - WH||_F^2 of
    the returned factors; the device row also gives torch HALS's objective at the time
    msm_gpu took (``gap_vs_torch_same_time`` < 0: msm_gpu lower).
``nmf_sparse_k30``
    The same for a 30000 x 20000 sparse Y at 5 % density (cupyx CSR; torch sparse CSR).
``denoise``
    ``mg.denoise`` of a 512 x 512 grey image (scikit-learn's bundled china.jpg, centre
    crop, resized), Gaussian noise sigma 20: ``backend="cuda"`` on a NumPy image, a CuPy
    image, and ``backend="cpu"``.  Metric: PSNR against the clean image.
``small_call``
    ``mg.nnls`` on a 30 x 20 C with 100 columns: median wall time of one call (synchronised)
    over many calls after warm-up: the default on device arrays, one plain MSM sweep
    (``finish=None, max_iter=1, tol=0``: the call's fixed cost) and the host default.

Ratios, on the device-msm_gpu row of each case: ``x_host`` = host CPU backend seconds /
device seconds, ``x_torch`` = torch peer seconds / device seconds (> 1: msm_gpu faster).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
import warnings
from contextlib import contextmanager
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # this checkout's msm_gpu

#: Problem sizes per mode.
SIZES = {
    "full": {
        "nnls_m_n": (200, 20),
        "nnls_r": (1_000_000, 10_000_000),
        "nnls_chunk": 1_000_000,
        "host_block": 100_000,
        "nmf_dense": (10_000, 5_000),
        "nmf_sparse": (30_000, 20_000),
        "density": 0.05,
        "nmf_iters": 100,
        "denoise": 512,
        "small_calls": 1000,
    },
    "quick": {
        "nnls_m_n": (200, 20),
        "nnls_r": (100_000, 1_000_000),
        "nnls_chunk": 250_000,
        "host_block": 50_000,
        "nmf_dense": (2_000, 1_000),
        "nmf_sparse": (6_000, 4_000),
        "density": 0.05,
        "nmf_iters": 100,
        "denoise": 256,
        "small_calls": 300,
    },
    "dry": {
        "nnls_m_n": (200, 20),
        "nnls_r": (2_000, 5_000),
        "nnls_chunk": 2_500,
        "host_block": 1_000,
        "nmf_dense": (200, 100),
        "nmf_sparse": (300, 200),
        "density": 0.05,
        "nmf_iters": 10,
        "denoise": 48,
        "small_calls": 20,
    },
}

#: case -> seconds (before ``--budget`` scaling).  Dry runs get DRY_BUDGET each: on a
#: cold machine most of it is Numba's compilation.
BUDGETS = {
    "nnls": 70.0,
    "nmf_dense_k20": 25.0,
    "nmf_dense_k50": 30.0,
    "nmf_sparse_k30": 30.0,
    "denoise": 30.0,
    "small_call": 10.0,
}
DRY_BUDGET = 240.0

#: Shares of a case's budget per method (what is left after warm-ups caps them too).
NNLS_SHARES = {"lib_device": 0.3, "torch_fista": 0.3, "torch_pgd": 0.1, "lib_host": 0.3}
NMF_SHARES = {"lib_device": 0.3, "lib_device_hals": 0.15, "torch_hals": 0.25, "lib_host": 0.3}

#: Denoising settings of the dry run (the library's defaults otherwise).
DRY_DENOISE = {"n_atoms": 64, "n_train": 200, "n_iter": 2}


# -- the device: CuPy + torch-CUDA, or NumPy + torch-CPU ------------------------------------


class Env:
    """Arrays, sparse matrices, synchronisation and torch conversions for one device."""

    def __init__(self, device):
        self.device = device
        self.torch = None
        self.torch_reason = None
        if device == "cuda":
            import cupy
            import cupyx.scipy.sparse as csp

            self.xp, self.sp, self.cupy = cupy, csp, cupy
            self.lib_backend = "cuda"
        else:
            import scipy.sparse as sp

            self.xp, self.sp, self.cupy = np, sp, None
            self.lib_backend = "cpu"
        try:
            import torch

            if device == "cuda" and not torch.cuda.is_available():
                self.torch_reason = "torch is installed but sees no CUDA device"
            else:
                self.torch = torch
                self.tdev = torch.device(device)
        except Exception as exc:  # not installed, or a broken install
            self.torch_reason = f"torch cannot be imported ({type(exc).__name__}: {exc})"

    def sync(self):
        if self.cupy is not None:
            self.cupy.cuda.Device().synchronize()
        if self.torch is not None and self.device == "cuda":
            self.torch.cuda.synchronize()

    def rng(self, seed):
        return self.xp.random.default_rng(seed)

    def host(self, a):
        """NumPy array or scipy.sparse matrix with a's values."""
        if self.cupy is None:
            return a
        return a.get()

    def to_torch(self, a):
        t = self.torch
        if self.cupy is None:
            return t.from_numpy(np.ascontiguousarray(a))
        return t.from_dlpack(self.xp.ascontiguousarray(a))

    def from_torch(self, x):
        if self.cupy is None:
            return x.detach().cpu().numpy()
        return self.cupy.from_dlpack(x.detach().contiguous())

    def torch_csr(self, y):
        """torch sparse CSR from a (cupyx or scipy) CSR matrix (int64 indices)."""
        t = self.torch
        parts = [self.to_torch(a) for a in (y.indptr, y.indices, y.data)]
        crow, col = parts[0].to(t.int64), parts[1].to(t.int64)
        return t.sparse_csr_tensor(crow, col, parts[2], size=y.shape, check_invariants=False)

    def free(self):
        if self.cupy is not None:
            self.cupy.get_default_memory_pool().free_all_blocks()
            self.cupy.get_default_pinned_memory_pool().free_all_blocks()
        if self.torch is not None and self.device == "cuda":
            self.torch.cuda.empty_cache()


def machine_info(env):
    """Device name, host description and versions, for the table's head and the JSON."""
    import numba
    import scipy
    import sklearn

    import msm_gpu

    info = {
        "device_kind": env.device,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "numba_threads": numba.get_num_threads(),
        "scipy": scipy.__version__,
        "scikit-learn": sklearn.__version__,
        "msm_gpu": msm_gpu.__version__,
        "torch": None if env.torch is None else env.torch.__version__,
        "torch_note": env.torch_reason,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    try:
        from _machine import describe

        info["host"] = describe()
    except Exception as exc:  # the CPU description is a nicety
        info["host"] = f"(no CPU description: {exc})"
    try:
        info["git_commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=HERE,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except Exception:
        info["git_commit"] = None
    if env.cupy is not None:
        cupy = env.cupy
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = props["name"]
        info.update(
            device=name.decode() if isinstance(name, bytes) else str(name),
            sm_count=int(props["multiProcessorCount"]),
            memory_gib=round(props["totalGlobalMem"] / 2**30, 1),
            compute_capability=f"{props['major']}.{props['minor']}",
            cupy=cupy.__version__,
            cuda_runtime=cupy.cuda.runtime.runtimeGetVersion(),
            cuda_driver=cupy.cuda.runtime.driverGetVersion(),
        )
    else:
        info["device"] = f"CPU as the device (dry run): {platform.machine()}"
    return info


# -- time budgets -----------------------------------------------------------------------


class CaseTimeout(Exception):
    """A case or a variant ran past its hard time limit (args: the limit's token, text)."""

    def __str__(self):
        return str(self.args[-1])


class Budget:
    """Seconds for one case: a deadline and shares of it."""

    def __init__(self, seconds):
        self.seconds = float(seconds)
        self.start = time.perf_counter()
        self.deadline = self.start + self.seconds

    def restart(self):
        """Start the clock again (after the warm-ups: compilation is not measured)."""
        self.start = time.perf_counter()
        self.deadline = self.start + self.seconds

    def left(self):
        return self.deadline - time.perf_counter()

    def share(self, fraction):
        """``fraction`` of the case's budget, at most what is left of it."""
        return max(0.0, min(self.left(), fraction * self.seconds))


_LIMITS = []  # [deadline, token] of the hard limits in force, outermost first


def _arm():
    if _LIMITS:
        delay = max(1e-3, min(d for d, _ in _LIMITS) - time.perf_counter())
        signal.setitimer(signal.ITIMER_REAL, delay)
    else:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _on_alarm(signum, frame):
    deadline, token = min(_LIMITS, key=lambda e: e[0])
    # fired: again in 5 s only if nothing stopped it (an `except Exception` on the way)
    signal.setitimer(signal.ITIMER_REAL, 5.0)
    raise CaseTimeout(token, "hard time limit reached")


@contextmanager
def hard_limit(seconds):
    """Raise CaseTimeout in the main thread once ``seconds`` have passed (SIGALRM).

    Yields a token, the exception's ``args[0]``: limits nest, the earliest fires, and the
    one that fired is named by its token, so that an inner handler lets an outer limit's
    timeout through.  Code inside a compiled call is stopped when it returns to Python.
    A no-op (token None) where there is no SIGALRM or off the main thread."""
    if (
        not hasattr(signal, "setitimer")
        or threading.current_thread() is not threading.main_thread()
    ):
        yield None
        return
    if not _LIMITS:
        signal.signal(signal.SIGALRM, _on_alarm)
    token = object()
    _LIMITS.append((time.perf_counter() + max(seconds, 1e-3), token))
    _arm()
    try:
        yield token
    finally:
        _LIMITS.remove(next(e for e in _LIMITS if e[1] is token))
        _arm()


# -- rows and the table ---------------------------------------------------------------------


def make_row(case, variant, label, size, **fields):
    row = {
        "case": case,
        "variant": variant,
        "label": label,
        "size": size,
        "seconds": None,
        "extrapolated": False,
        "metric": None,
        "value": None,
        "x_host": None,
        "x_torch": None,
        "status": "ok",
        "note": "",
    }
    row.update(fields)
    return row


def attempt(rows, case, variant, label, size, seconds, fn):
    """Run ``fn()`` (returning a dict of row fields) under a hard limit of ``seconds``;
    append its row, or an error / skipped row.  Returns the row."""
    if seconds <= 0:
        row = make_row(case, variant, label, size, status="skipped", note="case budget spent")
        rows.append(row)
        print_row(row)
        return row
    try:
        with hard_limit(seconds) as token:
            fields = fn()
        row = make_row(case, variant, label, size, **fields)
    except Exception as exc:  # reported, not fatal
        if isinstance(exc, CaseTimeout) and exc.args[0] is not token:
            raise  # an outer limit (the case's): the case stops
        status = "timeout" if isinstance(exc, CaseTimeout) else "error"
        row = make_row(
            case, variant, label, size, status=status, note=f"{type(exc).__name__}: {exc}"[:300]
        )
        if status == "error":
            row["traceback"] = traceback.format_exc(limit=6)
    rows.append(row)
    print_row(row)
    return row


def set_ratios(rows, device_variant="lib_device", host="lib_host", torch_variants=()):
    """x_host and x_torch on the device row(s) of every (case, size) group."""
    groups = {}
    for row in rows:
        groups.setdefault((row["case"], row["size"]), {})[row["variant"]] = row
    for group in groups.values():
        dev = group.get(device_variant)
        if dev is None or dev["status"] != "ok" or not dev["seconds"]:
            continue
        h = group.get(host)
        if h is not None and h["status"] == "ok" and h["seconds"]:
            dev["x_host"] = h["seconds"] / dev["seconds"]
        for name in torch_variants:
            tv = group.get(name)
            if tv is not None and tv["status"] == "ok" and tv["seconds"]:
                dev["x_torch"] = tv["seconds"] / dev["seconds"]
                break


HEADER = (
    f"{'case':<15} {'variant':<28} {'size':<22} {'seconds':>10} {'metric':>24} "
    f"{'x host':>7} {'x torch':>7}  note"
)


def _fmt(v, spec):
    return format(v, spec) if v is not None else "-"


def print_row(row):
    secs = (
        "-"
        if row["seconds"] is None
        else f"{row['seconds']:.4g}" + ("*" if row["extrapolated"] else "")
    )
    if row["status"] != "ok":
        metric = row["status"]
    elif row["metric"] is None:
        metric = "-"
    else:
        metric = f"{row['metric']}={row['value']:.4g}"
    print(
        f"{row['case']:<15} {row['label'][:28]:<28} {row['size'][:22]:<22} {secs:>10} "
        f"{metric:>24} {_fmt(row['x_host'], '7.2f'):>7} {_fmt(row['x_torch'], '7.2f'):>7}  "
        f"{row['note']}",
        flush=True,
    )


# -- case: batched NNLS -------------------------------------------------------------------


def library_kkt():
    """msm_gpu's relative KKT residual per column, ``kkt_residual(A, R, X, penalty)``."""
    try:
        from msm_gpu.finish.objective import kkt_residual
    except ImportError:  # before the finish package was split
        from msm_gpu.finish.run import kkt_residual
    return kkt_residual


def warm(what, fn, *args, **kwargs):
    """A warm-up call (compilation); a failure is printed, and the timed run reports it."""
    try:
        fn(*args, **kwargs)
    except CaseTimeout:
        raise
    except Exception as exc:
        print(f"  (warm-up {what} failed: {type(exc).__name__}: {exc})", flush=True)


def nnls_chunk(env, c, cols, seed):
    """D = C X + 0.01 N for Dirichlet(0.3) abundances X (n x cols), on the device."""
    xp = env.xp
    rng = env.rng(seed)
    n = c.shape[1]
    try:
        g = rng.standard_gamma(0.3, size=(n, cols))
    except (AttributeError, NotImplementedError, TypeError):  # a generator without it
        g = rng.random((n, cols)) ** (1 / 0.3)
    x = g / xp.maximum(g.sum(axis=0, keepdims=True), 1e-300)
    d = c @ x
    d += 0.01 * rng.standard_normal(size=d.shape)
    return d


def case_nnls(env, sz, budget, args, rows):
    import msm_gpu as mg

    kkt_residual = library_kkt()

    torch_ok = env.torch is not None
    if torch_ok:
        import torch_peers as tp
    xp = env.xp
    m, n = sz["nnls_m_n"]
    c_host = np.random.default_rng(0).uniform(size=(m, n))
    c = xp.asarray(c_host)
    a = c.T @ c
    nonneg = mg.NonNeg()
    lab = f"msm_gpu {env.lib_backend}"

    # warm-ups (compilation: CuPy kernels, Numba, cuBLAS handles), not timed
    t_warm = time.perf_counter()
    d0 = nnls_chunk(env, c, 1000, 12345)
    d0h = env.host(d0)
    warm("msm_gpu device", mg.nnls, c, d0)
    warm("msm_gpu host", mg.nnls, c_host, d0h, backend="cpu")
    if torch_ok:

        def torch_warm():
            g0, b0 = tp.nnls_gram(env.to_torch(c), env.to_torch(d0))
            tp.fista_nnls(g0, b0, max_iter=50)
            tp.pgd_nnls(g0, b0, max_iter=10)

        warm("torch", torch_warm)
    kkt_residual(a, -(c.T @ d0), xp.zeros_like(d0[:n]), nonneg)
    kkt_residual(c_host.T @ c_host, -(c_host.T @ d0h), np.zeros_like(d0h[:n]), nonneg)
    env.sync()
    print(f"  (nnls warm-up {time.perf_counter() - t_warm:.1f} s)", flush=True)
    budget.restart()

    r_list = [int(r) for r in sz["nnls_r"]]
    labels = {
        "lib_device": f"{lab} (default)",
        "lib_host": "msm_gpu cpu (all cores)",
        "torch_fista": f"torch FISTA {env.device}",
        "torch_pgd": f"torch PGD {env.device}",
    }
    for i_r, r in enumerate(r_list):
        size = f"{m}x{n} r={r:.0e}".replace("e+0", "e")
        r_left = budget.left() / (len(r_list) - i_r)
        run = _NnlsRun(env, sz, args, c, c_host, r, seed=1000 * i_r)
        run.slots = {k: v * r_left for k, v in NNLS_SHARES.items()}
        run.active["torch_fista"] = run.active["torch_pgd"] = torch_ok
        timed_out = None
        try:
            run.chunks(r_left)
        except CaseTimeout as exc:  # the case's hard limit: report what was timed, then stop
            timed_out = exc
        group = []
        for k in ("lib_device", "torch_fista", "torch_pgd", "lib_host"):
            st = run.acc[k]
            if k.startswith("torch") and not torch_ok:
                row = make_row("nnls", k, labels[k], size, status="skipped", note=env.torch_reason)
            elif "error" in st and st["cols"] == 0:
                row = make_row("nnls", k, labels[k], size, status="error", note=st["error"])
            elif st["cols"] == 0:
                why = "hard time limit" if timed_out else "no time left in its share"
                row = make_row("nnls", k, labels[k], size, status="skipped", note=why)
            else:
                row = make_row("nnls", k, labels[k], size, **_nnls_fields(k, st, r))
                if "error" in st:
                    row["note"] += f"; then failed: {st['error']}"
            group.append(row)
        rows.extend(group)
        set_ratios(group, torch_variants=("torch_fista",))
        fista = group[1]
        if group[0]["x_torch"] is not None and fista.get("reached_target") is False:
            group[0]["note"] = "x torch is a lower bound: FISTA stopped above the target"
        for row in group:
            print_row(row)
        if timed_out is not None:
            raise timed_out


def _nnls_fields(k, st, r):
    """Row fields of one NNLS method from its accumulated chunks (extrapolated to r)."""
    extrap = st["cols"] < r
    note = f"{st['cols']} of {r} columns timed" if extrap else ""
    per_chunk = st["iters"] / max(1, st["chunks"])
    if k == "torch_fista":
        missed = "; MISSED target (stopped by its share)" if st["kkt"] > st["target"] else ""
        note = f"target kkt {st['target']:.1e}, {per_chunk:.0f} it/chunk{missed}" + (
            f"; {note}" if note else ""
        )
    elif k == "torch_pgd":
        note = f"msm_gpu's time per chunk, {per_chunk:.0f} it/chunk" + (f"; {note}" if note else "")
    return {
        "seconds": st["seconds"] * r / st["cols"],
        "extrapolated": extrap,
        "metric": "kkt_max",
        "value": st["kkt"],
        "reached_target": bool(st["kkt"] <= st["target"]) if k == "torch_fista" else None,
        "columns_timed": st["cols"],
        "seconds_timed": st["seconds"],
        "note": note,
    }


class _NnlsRun:
    """The chunks of one r: every method on the same chunk, each while its share lasts."""

    def __init__(self, env, sz, args, c, c_host, r, seed):
        self.env, self.sz, self.args = env, sz, args
        self.c, self.c_host, self.r, self.seed = c, c_host, r, seed
        self.a = c.T @ c
        self.a_host = c_host.T @ c_host
        self.chunk = min(int(sz["nnls_chunk"]), r)
        self.slots = {}
        self.acc = {
            k: {"seconds": 0.0, "cols": 0, "kkt": 0.0, "iters": 0, "chunks": 0, "target": 0.0}
            for k in NNLS_SHARES
        }
        self.active = {k: True for k in NNLS_SHARES}

    def chunks(self, seconds):
        start = time.perf_counter()
        for i0 in range(0, self.r, self.chunk):
            if not any(self.active.values()) or time.perf_counter() - start >= seconds:
                break
            cols = min(self.chunk, self.r - i0)
            d = nnls_chunk(self.env, self.c, cols, seed=self.seed + i0 // self.chunk)
            self.one_chunk(d, cols)
            del d
            self.env.free()
            for k, on in self.active.items():
                if on and self.acc[k]["seconds"] >= self.slots[k]:
                    self.active[k] = False

    def one_chunk(self, d, cols):
        """Every active method on this chunk; a method that raises is reported and dropped."""
        import msm_gpu as mg

        self.nonneg = mg.NonNeg()
        self.rr = -(self.c.T @ d)
        self.env.sync()
        self.lib_kkt = self.lib_seconds = None
        self.ct = self.dt = None
        for k in ("lib_device", "torch_fista", "torch_pgd", "lib_host"):
            if not self.active[k]:
                continue
            try:
                getattr(self, "_" + k)(d, cols)
            except CaseTimeout:
                raise
            except Exception as exc:  # reported in its row, the others go on
                self.active[k] = False
                self.acc[k]["error"] = f"{type(exc).__name__}: {exc}"[:300]
                print(f"  nnls {k} failed: {self.acc[k]['error']}", flush=True)
        self.rr = self.ct = self.dt = None

    def _kkt(self, x):
        kkt_residual = library_kkt()

        return float(kkt_residual(self.a, self.rr, x, self.nonneg).max())

    def _lib_device(self, d, cols):
        import msm_gpu as mg

        t0 = time.perf_counter()
        res = mg.nnls(self.c, d)
        self.env.sync()
        self.lib_seconds = time.perf_counter() - t0
        self.lib_kkt = self._kkt(res.x)
        _add(self.acc["lib_device"], self.lib_seconds, cols, self.lib_kkt)

    def _torch_inputs(self, d):
        if self.ct is None:
            self.ct, self.dt = self.env.to_torch(self.c), self.env.to_torch(d)
        self.env.sync()
        return self.ct, self.dt

    def _torch_fista(self, d, cols):
        import torch_peers as tp

        acc = self.acc["torch_fista"]
        target = max(self.args.kkt, self.lib_kkt or 0.0)
        left = max(0.0, self.slots["torch_fista"] - acc["seconds"])
        ct, dt = self._torch_inputs(d)
        t0 = time.perf_counter()
        g, b = tp.nnls_gram(ct, dt)
        xt, it, _ = tp.fista_nnls(g, b, tol=target, deadline=t0 + left)
        self.env.sync()
        secs = time.perf_counter() - t0
        _add(acc, secs, cols, self._kkt(self.env.from_torch(xt)), it)
        acc["target"] = max(acc["target"], target)

    def _torch_pgd(self, d, cols):
        import torch_peers as tp

        ct, dt = self._torch_inputs(d)
        t0 = time.perf_counter()
        g, b = tp.nnls_gram(ct, dt)
        if self.lib_seconds is not None:  # for msm_gpu's time on this chunk
            xt, it = tp.pgd_nnls(g, b, max_iter=10**9, deadline=t0 + self.lib_seconds)
        else:
            xt, it = tp.pgd_nnls(g, b, max_iter=500)
        self.env.sync()
        secs = time.perf_counter() - t0
        _add(self.acc["torch_pgd"], secs, cols, self._kkt(self.env.from_torch(xt)), it)

    def _lib_host(self, d, cols):  # host blocks, while its share lasts
        import msm_gpu as mg

        kkt_residual = library_kkt()

        acc = self.acc["lib_host"]
        block = int(self.sz["host_block"])
        for j0 in range(0, cols, block):
            if acc["seconds"] >= self.slots["lib_host"]:
                break
            d_host = np.ascontiguousarray(self.env.host(d[:, j0 : j0 + block]))
            t0 = time.perf_counter()
            res = mg.nnls(self.c_host, d_host, backend="cpu")
            secs = time.perf_counter() - t0
            r_host = -(self.c_host.T @ d_host)
            kkt = float(kkt_residual(self.a_host, r_host, res.x, self.nonneg).max())
            _add(acc, secs, d_host.shape[1], kkt)


def _add(st, seconds, cols, kkt, iters=0):
    st["seconds"] += seconds
    st["cols"] += cols
    st["kkt"] = max(st["kkt"], kkt)
    st["iters"] += iters
    st["chunks"] += 1


# -- cases: NMF ------------------------------------------------------------------------------


def nmf_data(env, shape, k, sparse, density, dtype, seed=0):
    """Y >= 0 (dense: a rank-k product plus uniform noise; sparse: uniform values at random
    positions) and a random start (W0, H0) scaled as scikit-learn's, on the device."""
    xp = env.xp
    rng = env.rng(seed)
    m, d = shape
    if sparse:
        nnz = int(density * m * d)
        rows = (rng.random(nnz) * m).astype(xp.int32)
        cols = (rng.random(nnz) * d).astype(xp.int32)
        vals = rng.random(nnz).astype(dtype)
        y = env.sp.coo_matrix((vals, (rows, cols)), shape=(m, d)).tocsr()
        y.sum_duplicates()
        mean = float(y.data.astype(np.float64).sum()) / (m * d)
    else:
        y = (rng.random((m, k)) @ rng.random((k, d)) + 0.1 * rng.random((m, d))).astype(dtype)
        mean = float(y.astype(np.float64).mean())
    scale = math.sqrt(mean / k)
    w0 = (scale * rng.random((m, k))).astype(dtype)
    h0 = (scale * rng.random((k, d))).astype(dtype)
    return y, w0, h0


def nmf_objective(env, y, w, h, sparse):
    """1/2 ||Y - W H||_F^2 in float64 by the Gram identity (dense or sparse Y)."""
    xp = env.xp
    w = w.astype(np.float64)
    h = h.astype(np.float64)
    if sparse:
        y64 = y.astype(np.float64)
        norm2 = float((y64.data * y64.data).sum())
    else:
        y64 = y.astype(np.float64)
        norm2 = float(xp.sum(y64 * y64))
    yht = y64 @ h.T
    val = norm2 - 2.0 * float(xp.sum(w * yht)) + float(xp.sum((w.T @ w) * (h @ h.T)))
    return 0.5 * max(val, 0.0)


def _history_at(history, seconds):
    """Objective of the last history entry at or before ``seconds``."""
    best = None
    for t, f in history:
        if t <= seconds:
            best = f
    return best


def case_nmf(env, sz, budget, args, rows, *, case, k, sparse):
    import msm_gpu as mg

    torch_ok = env.torch is not None
    if torch_ok:
        import torch_peers as tp
    dtype = np.dtype(args.nmf_dtype)
    shape = sz["nmf_sparse"] if sparse else sz["nmf_dense"]
    iters = int(sz["nmf_iters"])
    size = f"{shape[0]}x{shape[1]} k={k}" + (f" {sz['density']:.0%}" if sparse else "")
    y, w0, h0 = nmf_data(env, shape, k, sparse, sz["density"], dtype)
    y_host = env.host(y)
    w0_host, h0_host = env.host(w0), env.host(h0)
    env.sync()

    # warm-ups on a small Y of the same k and dtype (compilation), not timed
    t_warm = time.perf_counter()
    small = (max(4 * k, 60), max(3 * k, 50))
    ys, ws, hs = nmf_data(env, small, k, sparse, 0.2, dtype, seed=1)
    small_kw = {"init": "custom", "max_iter": 2, "tol": 0}
    warm("msm_gpu device msm", mg.nmf, ys, k, W=ws, H=hs, **small_kw)
    warm("msm_gpu device hals", mg.nmf, ys, k, W=ws, H=hs, solver="hals", **small_kw)
    hw, hh = env.host(ws), env.host(hs)
    warm("msm_gpu host", mg.nmf, env.host(ys), k, W=hw, H=hh, backend="cpu", **small_kw)
    if torch_ok:
        yt = env.torch_csr(ys) if sparse else env.to_torch(ys)
        warm("torch", tp.hals_nmf, yt, env.to_torch(ws), env.to_torch(hs), max_iter=2)
    env.sync()
    print(f"  ({case} warm-up {time.perf_counter() - t_warm:.1f} s)", flush=True)
    budget.restart()

    def run_lib(yy, ww, hh, solver, slot, **kw):
        ww, hh = ww.copy(), hh.copy()  # the same start for every method
        env.sync()
        t0 = time.perf_counter()
        w, h, info = mg.nmf(
            yy,
            k,
            init="custom",
            W=ww,
            H=hh,
            max_iter=iters,
            tol=0,
            time_limit=max(slot, 1e-3),
            solver=solver,
            **kw,
        )
        env.sync()
        wall = time.perf_counter() - t0
        done = int(info["n_iter"])
        setup = max(0.0, wall - float(info["time"]))
        seconds = setup + float(info["time"]) * iters / max(done, 1)
        is_host = kw.get("backend") == "cpu"
        obj = nmf_objective(env, y, _dev(env, w, is_host), _dev(env, h, is_host), sparse)
        return {
            "seconds": seconds,
            "extrapolated": done < iters,
            "metric": "objective",
            "value": obj,
            "iterations": done,
            "wall": wall,
            "history": np.asarray(info["history"]).tolist(),
            "note": (f"{done} of {iters} iterations timed" if done < iters else ""),
        }

    lib = attempt(
        rows,
        case,
        "lib_device",
        f"msm_gpu {env.lib_backend} msm",
        size,
        budget.share(NMF_SHARES["lib_device"]) + 30.0,
        lambda: run_lib(y, w0, h0, "msm", budget.share(NMF_SHARES["lib_device"])),
    )
    attempt(
        rows,
        case,
        "lib_device_hals",
        f"msm_gpu {env.lib_backend} hals",
        size,
        budget.share(NMF_SHARES["lib_device_hals"]) + 30.0,
        lambda: run_lib(y, w0, h0, "hals", budget.share(NMF_SHARES["lib_device_hals"])),
    )
    lib_time = lib["seconds"] if lib["status"] == "ok" and not lib["extrapolated"] else 0.0

    if torch_ok:

        def run_torch():
            slot = budget.share(NMF_SHARES["torch_hals"])
            yt = env.torch_csr(y) if sparse else env.to_torch(y)
            ytt = env.torch_csr(y.T.tocsr()) if sparse else None
            wt, ht = env.to_torch(w0), env.to_torch(h0)
            env.sync()
            t0 = time.perf_counter()
            _, _, hist = tp.hals_nmf(
                yt,
                wt,
                ht,
                max_iter=iters,
                Yt=ytt,
                deadline=t0 + slot,
                min_seconds=min(lib_time, slot),
            )
            done = len(hist) - 1
            upto = hist[min(done, iters)]
            seconds = upto[0] if done >= iters else upto[0] * iters / max(done, 1)
            fields = {
                "seconds": seconds,
                "extrapolated": done < iters,
                "metric": "objective",
                "value": upto[1],
                "iterations": min(done, iters),
                "history": hist,
                "note": (f"{done} of {iters} iterations timed" if done < iters else ""),
            }
            return fields

        th = attempt(
            rows,
            case,
            "torch_hals",
            f"torch HALS {env.device}",
            size,
            budget.share(NMF_SHARES["torch_hals"]) + 30.0,
            run_torch,
        )
        if lib["status"] == "ok" and th["status"] == "ok" and lib_time > 0:
            f_t = _history_at(th["history"], lib_time)
            if f_t is not None:
                lib["torch_objective_same_time"] = f_t
                lib["gap_vs_torch_same_time"] = (lib["value"] - f_t) / f_t
                lib["note"] = (lib["note"] + "; " if lib["note"] else "") + (
                    f"torch HALS at {lib_time:.3g} s: {f_t:.6g} "
                    f"(gap {lib['gap_vs_torch_same_time']:+.1e})"
                )
    else:
        rows.append(
            make_row(
                case, "torch_hals", "torch HALS", size, status="skipped", note=env.torch_reason
            )
        )
        print_row(rows[-1])

    attempt(
        rows,
        case,
        "lib_host",
        "msm_gpu cpu (all cores)",
        size,
        budget.share(NMF_SHARES["lib_host"]) + 30.0,
        lambda: run_lib(
            y_host,
            w0_host,
            h0_host,
            "msm",
            budget.share(NMF_SHARES["lib_host"]),
            backend="cpu",
        ),
    )
    set_ratios([r for r in rows if r["case"] == case], torch_variants=("torch_hals",))
    dev = next((r for r in rows if r["case"] == case and r["variant"] == "lib_device"), None)
    if dev is not None and dev["status"] == "ok":
        print(
            f"  {case}: device msm {dev['seconds']:.3g} s, x host {_fmt(dev['x_host'], '.2f')}, "
            f"x torch {_fmt(dev['x_torch'], '.2f')}",
            flush=True,
        )


def _dev(env, a, is_host):
    """A result array on the device's array module (host results moved there)."""
    if is_host and env.cupy is not None:
        return env.xp.asarray(a)
    return a


# -- case: denoising ---------------------------------------------------------------------------


def sample_image(size):
    """A grey size x size image on [0, 255] (float64) and where it came from."""
    try:
        from scipy.ndimage import zoom
        from sklearn.datasets import load_sample_image

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rgb = load_sample_image("china.jpg").astype(np.float64)
        grey = rgb @ np.array([0.299, 0.587, 0.114])
        h, w = grey.shape
        s = min(h, w)
        crop = grey[(h - s) // 2 : (h - s) // 2 + s, (w - s) // 2 : (w - s) // 2 + s]
        img = zoom(crop, size / s, order=1)[:size, :size]
        return np.clip(img, 0, 255), f"china.jpg (scikit-learn) grey, {s}x{s} crop resized"
    except Exception as exc:
        yy, xx = np.mgrid[0:size, 0:size] / size
        img = (
            128
            + 60 * np.sin(6 * xx) * np.cos(4 * yy)
            + 50 * ((xx - 0.5) ** 2 + (yy - 0.5) ** 2 < 0.1)
        )
        return np.clip(img, 0, 255), f"synthetic (china.jpg unavailable: {exc})"


def case_denoise(env, sz, budget, args, rows):
    import msm_gpu as mg

    n = int(sz["denoise"])
    clean, source = sample_image(n)
    noisy = clean + 20.0 * np.random.default_rng(0).standard_normal(clean.shape)
    size = f"{n}x{n} sigma=20"
    kw = dict(DRY_DENOISE) if args.mode == "dry" else {}
    kw.update(clip=(0.0, 255.0), random_state=0, return_info=True)
    print(f"  image: {source}; noisy PSNR {mg.psnr(clean, noisy):.2f} dB", flush=True)

    def run(image, **extra):
        env.sync()
        t0 = time.perf_counter()
        out, info = mg.denoise(image, 20.0, **kw, **extra)
        env.sync()
        secs = time.perf_counter() - t0
        out = env.host(out) if not isinstance(out, np.ndarray) else out
        return {
            "seconds": secs,
            "metric": "psnr_db",
            "value": float(mg.psnr(clean, out)),
            "timings": {k: float(v) for k, v in info["timings"].items()},
            "note": "train {train:.2f} s, code {code:.2f} s".format(**info["timings"]),
        }

    # warm-up (compilation) on a small crop, not timed
    t_warm = time.perf_counter()
    crop = noisy[:32, :32]
    small = {"n_atoms": 64, "n_train": 100, "n_iter": 1}
    for backend in {env.lib_backend, "cpu"}:
        warm(f"denoise {backend}", mg.denoise, crop, 20.0, backend=backend, **small)
    print(f"  (denoise warm-up {time.perf_counter() - t_warm:.1f} s)", flush=True)
    budget.restart()

    # no time_limit in denoise: each run has a hard limit only (its share plus a grace)
    share = 0.5 * budget.seconds + 10.0
    dev = attempt(
        rows,
        "denoise",
        "lib_device",
        f"msm_gpu backend={env.lib_backend}",
        size,
        share,
        lambda: run(noisy, backend=env.lib_backend),
    )
    if dev["status"] == "ok" and env.cupy is not None:
        dev["note"] += "; NumPy image: sweeps on the device, patches/dictionary on host"
    if env.cupy is not None:
        attempt(
            rows,
            "denoise",
            "lib_device_input",
            "msm_gpu on a CuPy image",
            size,
            max(budget.left(), 0.0) / 2 + 10.0,
            lambda: run(env.xp.asarray(noisy)),
        )
    host = attempt(
        rows,
        "denoise",
        "lib_host",
        "msm_gpu cpu (all cores)",
        size,
        max(budget.left(), 0.0) + 15.0,
        lambda: run(noisy, backend="cpu"),
    )
    set_ratios([r for r in rows if r["case"] == "denoise"])
    if dev["status"] == "ok" and host["status"] == "ok":
        dev["psnr_vs_host_db"] = dev["value"] - host["value"]
        print(
            f"  denoise: x host {_fmt(dev['x_host'], '.2f')}, PSNR device - host "
            f"{dev['psnr_vs_host_db']:+.3f} dB",
            flush=True,
        )


# -- case: the fixed cost of a small call ------------------------------------------------


def case_small_call(env, sz, budget, args, rows):
    import msm_gpu as mg

    rng = np.random.default_rng(0)
    c_host, d_host = rng.uniform(size=(30, 20)), rng.uniform(size=(30, 100))
    c, d = env.xp.asarray(c_host), env.xp.asarray(d_host)
    size = "30x20 r=100"
    n_calls = int(sz["small_calls"])
    variants = [
        ("lib_device", f"msm_gpu {env.lib_backend} (default)", c, d, {}),
        (
            "lib_device_1sweep",
            f"msm_gpu {env.lib_backend} 1 sweep",
            c,
            d,
            {"finish": None, "max_iter": 1, "tol": 0.0},
        ),
        ("lib_host", "msm_gpu cpu", c_host, d_host, {"backend": "cpu"}),
    ]
    for i, (variant, label, cc, dd, kw) in enumerate(variants):
        share = budget.left() / (len(variants) - i)

        def run(cc=cc, dd=dd, kw=kw, share=share):
            deadline = time.perf_counter() + 0.8 * share
            for _ in range(5):  # warm-up
                mg.nnls(cc, dd, **kw)
            env.sync()
            times = []
            while len(times) < n_calls and time.perf_counter() < deadline:
                t0 = time.perf_counter()
                mg.nnls(cc, dd, **kw)
                env.sync()
                times.append(time.perf_counter() - t0)
            q = np.quantile(times, [0.1, 0.9])
            return {
                "seconds": statistics.median(times),
                "metric": "calls",
                "value": float(len(times)),
                "p10_ms": 1e3 * q[0],
                "p90_ms": 1e3 * q[1],
                "note": f"median of {len(times)} calls: {1e3 * statistics.median(times):.3f} ms "
                f"(p10 {1e3 * q[0]:.3f}, p90 {1e3 * q[1]:.3f})",
            }

        attempt(rows, "small_call", variant, label, size, share, run)
    set_ratios([r for r in rows if r["case"] == "small_call"])


# -- main ----------------------------------------------------------------------------------


CASES = {
    "nnls": case_nnls,
    "nmf_dense_k20": lambda *a: case_nmf(*a, case="nmf_dense_k20", k=20, sparse=False),
    "nmf_dense_k50": lambda *a: case_nmf(*a, case="nmf_dense_k50", k=50, sparse=False),
    "nmf_sparse_k30": lambda *a: case_nmf(*a, case="nmf_sparse_k30", k=30, sparse=True),
    "denoise": case_denoise,
    "small_call": case_small_call,
}


def write_json(path, payload):
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1, default=_json_default))
    tmp.replace(path)


def _json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller sizes (about 5-10x)")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="tiny sizes; NumPy + torch-CPU unless --device cuda is given",
    )
    p.add_argument(
        "--device",
        choices=["cuda", "cpu"],
        default=None,
        help="cuda (CuPy + torch-CUDA, default) or cpu (NumPy + torch-CPU)",
    )
    p.add_argument(
        "--cases", default=",".join(CASES), help=f"comma-separated subset of {', '.join(CASES)}"
    )
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        help="total seconds for all cases (scales each case's budget)",
    )
    p.add_argument(
        "--kkt",
        type=float,
        default=1e-10,
        help="relative KKT residual torch FISTA must reach (or msm_gpu's, if larger)",
    )
    p.add_argument("--nmf-dtype", choices=["float32", "float64"], default="float32")
    p.add_argument(
        "--torch-threads",
        type=int,
        default=None,
        help="torch's CPU threads (default: 1 with --dry-run, torch's own choice otherwise)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=HERE / "out" / "gpu_peers.json",
        help="JSON file (rewritten after every case)",
    )
    args = p.parse_args(argv)
    args.mode = "dry" if args.dry_run else ("quick" if args.quick else "full")
    if args.device is None:
        args.device = "cpu" if args.dry_run else "cuda"
    return args


def main(argv=None):
    args = parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        print(f"unknown case(s) {unknown}; choose from {list(CASES)}")
        return 2
    payload = {"args": {k: str(v) for k, v in vars(args).items()}, "cases": []}
    if args.device == "cuda":
        from msm_gpu.backends.cuda.backend import cuda_unavailable_reason

        reason = cuda_unavailable_reason()
        if reason is not None:
            print(f"GPU benchmark skipped: {reason}  (--dry-run runs it on the CPU)")
            payload["skipped"] = reason
            write_json(args.out, payload)
            return 0
    warnings.filterwarnings("ignore", message=".*[Ss]parse.*")
    env = Env(args.device)
    threads = args.torch_threads or (1 if args.dry_run else None)
    if env.torch is not None and threads:
        # torch's OpenMP threads beside Numba's oversubscribe a small host (measured 10x
        # slower FISTA on 2 cores with 2 torch threads)
        env.torch.set_num_threads(threads)
    info = machine_info(env)
    payload["machine"] = info
    print(f"device: {info['device']}")
    for key in ("cupy", "cuda_runtime", "cuda_driver", "torch", "numpy", "numba", "msm_gpu"):
        if info.get(key) is not None:
            print(f"  {key} {info[key]}")
    print(info["host"])
    if env.torch is None:
        print(f"torch peers skipped: {env.torch_reason}")
    sz = SIZES[args.mode]
    if args.mode == "dry":
        budgets = {c: DRY_BUDGET for c in cases}
    else:
        budgets = {c: BUDGETS[c] for c in cases}
    if args.budget is not None:
        scale = args.budget / sum(budgets.values())
        budgets = {c: b * scale for c, b in budgets.items()}
    print(
        f"mode {args.mode}; budgets (s): " + ", ".join(f"{c} {b:.0f}" for c, b in budgets.items())
    )
    all_rows = []
    for name in cases:
        print(f"\n== {name} (budget {budgets[name]:.0f} s)", flush=True)
        print(HEADER)
        rows = []
        record = {"case": name, "budget_s": budgets[name], "status": "ok", "rows": rows}
        payload["cases"].append(record)
        budget = Budget(budgets[name])
        t0 = time.perf_counter()
        try:
            with hard_limit(1.5 * budgets[name] + 30.0):  # warm-ups come on top
                CASES[name](env, sz, budget, args, rows)
        except Exception as exc:  # one case's failure does not stop the others
            record["status"] = "timeout" if isinstance(exc, CaseTimeout) else "error"
            record["error"] = f"{type(exc).__name__}: {exc}"
            record["traceback"] = traceback.format_exc(limit=8)
            print(f"  {name} {record['status']}: {record['error']}")
            if record["status"] == "error":
                print(record["traceback"])
        record["seconds"] = time.perf_counter() - t0
        all_rows.extend(rows)
        try:
            env.free()
        except Exception:
            pass
        write_json(args.out, payload)
    print(f"\n== summary ({info['device']})")
    print(HEADER)
    for row in all_rows:
        print_row(row)
    for rec in payload["cases"]:
        if rec["status"] != "ok":
            print(f"  case {rec['case']}: {rec['status']}: {rec.get('error')}")
    if args.out is not None:
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
