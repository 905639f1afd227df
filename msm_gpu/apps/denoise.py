"""Patch-based image denoising with l0 dictionary learning (paper, section 5.2).

:func:`denoise` follows the paper (and Bao et al. 2016): learn a dictionary from
``n_train`` random noisy patches (means removed), alternating l0 coding (MSM, or PGM for
``method="pgm"``) with projected-gradient dictionary steps, then code every overlapping
patch and average the overlaps back into an image.  ``method="ksvd"`` is the classical
K-SVD comparator (Aharon and Elad 2006): error-constrained OMP coding and SVD atom updates.

Units: ``sigma`` is the noise standard deviation in the units of the image (for a uint8
image or any image on [0, 255], the paper's scale; for a float image on [0, 1] pass
``sigma = 20 / 255`` for the paper's sigma = 20).  ``lam`` is in the image's units squared;
the default is :func:`default_lam`.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from .._input import validation as v
from .._input.foreign import accepts_foreign_arrays, restore_denoised
from ..arrays import is_cupy, to_host
from ..backends.cpu.threads import serial_blas
from ._images import clip_bounds, merge_channels, per_channel, split_channels, to_input_dtype
from .dictionaries import (
    extract_patches,
    overcomplete_dct,
    reconstruct_from_patches,
    sample_patches,
)
from .dictionary_learning import L0DictionaryLearning
from .sparse_coding import (
    LAM_PER_SIGMA2,
    OMP_NOISE_GAIN,
    _initial_codes,
    l0_sweeps,
    omp,
    sparse_code,
)

__all__ = ["default_lam", "denoise", "ksvd", "psnr"]

DENOISE_METHODS = ("msm", "pgm", "ksvd")

#: The paper's settings, kept by PGM and K-SVD (see below).
_PAPER_DEFAULTS = {
    "n_iter": 10,
    "h_iter": 5,
    "d_iter": 1,
    "code_iter": 20,
    "init": "omp",
    "train_lam_factor": 1.0,
}

#: Per-method defaults of n_iter, h_iter, d_iter, code_iter, init and train_lam (as a multiple
#: of lam), used where :func:`denoise` gets None.
#: MSM: 10 training iterations of 3 sweeps and 20 dictionary steps, then 10 sweeps from
#: zero codes for every patch.  The 20 projected-gradient steps (one before) brought coins
#: to K-SVD's PSNR (sigma 20: 27.87 -> 28.07 dB, K-SVD 28.08; camera/coins/moon x sigma
#: 20/30 in README, "Speed against K-SVD"); the sweeps are cheap since they run on the
#: sparse codes (:func:`l0_sweeps`).  Zero codes, not OMP: the OMP start alone costs as
#: much as K-SVD's own coding.  The training codes are twice as sparse as the final ones
#: (``train_lam = 2 lam``): atoms fitted to fewer, larger coefficients follow the image
#: rather than the noise.  Measured on 128 x 128 crops (one noise draw each): camera,
#: coins, moon x sigma 20/30 +0.03 to +0.26 dB (coins sigma 20: 28.07 -> 28.10); on
#: astronaut, brick, page, grass, chelsea x sigma 10/20/40, which did not choose it,
#: +0.03 dB on average (9 of 15 cells up, one equal; grass sigma 40 -0.17).  PGM and
#: K-SVD keep the paper's 10 iterations, one dictionary step, OMP starts and one lam.
METHOD_DEFAULTS = {
    "msm": {
        "n_iter": 10,
        "h_iter": 3,
        "d_iter": 20,
        "code_iter": 10,
        "init": "zeros",
        "train_lam_factor": 2.0,
    },
    "pgm": _PAPER_DEFAULTS,
    "ksvd": _PAPER_DEFAULTS,
}


def default_lam(sigma):
    """Default l0 weight for noise level sigma: ``lam = LAM_PER_SIGMA2 * sigma**2``.

    ``LAM_PER_SIGMA2 = 5``, so sigma = 5, 10, 20, 30, 40 on the [0, 255] scale give
    lam = 125, 500, 2000, 4500, 8000 (inside the paper's sweep 1 ... 90000).  With an
    orthonormal dictionary the l0 coding is hard thresholding at ``sqrt(2 lam)`` = 3.16
    sigma; the factor was tuned on crops of camera, coins and moon (``lam-sweep`` in
    ``benchmarks/bench_sparse_coding.py``).  The rule is scale-consistent: sigma and lam
    in any units (lam in units squared).
    """
    sigma = float(sigma)
    return LAM_PER_SIGMA2 * sigma * sigma


def psnr(reference, estimate, data_range=255.0):
    """Peak signal-to-noise ratio ``10 log10(data_range^2 / MSE)`` in dB."""
    ref = np.asarray(reference, dtype=np.float64)
    est = np.asarray(estimate, dtype=np.float64)
    if ref.shape != est.shape:
        raise ValueError(f"shapes differ: {ref.shape} vs {est.shape}")
    mse = float(np.mean((ref - est) ** 2))
    if mse == 0:
        return float("inf")
    return 10.0 * np.log10(float(data_range) ** 2 / mse)


def ksvd(Y, D0, n_iter=10, *, omp_tol=None, n_nonzero_coefs=None, verbose=False, rng=None):
    """K-SVD dictionary learning (Aharon, Elad and Bruckstein 2006).

    Alternates OMP coding of all signals (scikit-learn's OMP) with a sequential update of
    every atom and its coefficients by the leading singular pair of the residual restricted
    to the signals that use the atom.  An unused atom is replaced by the (normalised)
    worst-represented signal.

    Parameters
    ----------
    Y : (m, N) array
        Training signals as columns.
    D0 : (m, k) array
        Initial dictionary (unit-norm columns).
    n_iter : int
    omp_tol, n_nonzero_coefs : optional
        OMP stopping rule (squared residual per signal, or atoms per signal).
    verbose : bool
    rng : Generator, optional
        Unused; kept for signature symmetry.

    Returns
    -------
    D : ndarray (m, k)
    H : ndarray (k, N)
        Codes of Y for the returned D (one last OMP).
    """
    y = np.asarray(Y, dtype=np.float64)
    d = np.array(D0, dtype=np.float64)
    iterator = range(int(n_iter))
    if verbose:
        from tqdm.auto import tqdm

        iterator = tqdm(iterator, desc="K-SVD", unit="it")
    for _ in iterator:
        h = omp(d, y, n_nonzero_coefs=n_nonzero_coefs, tol=omp_tol)
        resid = y - d @ h
        for j in range(d.shape[1]):
            users = np.flatnonzero(h[j])
            if users.size == 0:
                err = np.einsum("ij,ij->j", resid, resid)
                worst = int(np.argmax(err))
                atom = y[:, worst] - y[:, worst].mean()
                norm = np.linalg.norm(atom)
                if norm > 1e-12:
                    d[:, j] = atom / norm
                continue
            e = resid[:, users] + np.outer(d[:, j], h[j, users])
            u, s, vt = np.linalg.svd(e, full_matrices=False)
            d[:, j] = u[:, 0]
            h[j, users] = s[0] * vt[0]
            resid[:, users] = e - np.outer(d[:, j], h[j, users])
    h = omp(d, y, n_nonzero_coefs=n_nonzero_coefs, tol=omp_tol)
    return d, h


#: Column blocks of the final MSM coding when ``verbose`` shows its progress.
PROGRESS_BLOCKS = 20
#: Fewest patches in one such block (smaller ones would leave the sweep's threads idle).
PROGRESS_MIN_BLOCK = 512


def _progress_bar(verbose, total, desc, unit):
    """A tqdm bar when ``verbose``, else None."""
    if not verbose:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit)


def _coded_sweeps(gram, r, h0, lam, n_sweeps, backend, verbose):
    """:func:`l0_sweeps` on all patches; with ``verbose``, block of columns by block under
    a progress bar.  Every column is swept on its own, so the blocks change no result."""
    n = r.shape[1]
    bar = _progress_bar(verbose, n, "coding patches (msm)", "patch")
    if bar is None:
        return l0_sweeps(gram, r, h0, lam, n_sweeps, backend=backend)
    size = max(PROGRESS_MIN_BLOCK, -(-n // PROGRESS_BLOCKS))
    parts = []
    for c0 in range(0, n, size):
        cols = slice(c0, min(c0 + size, n))
        parts.append(l0_sweeps(gram, r[:, cols], h0[:, cols], lam, n_sweeps, backend=backend))
        bar.update(cols.stop - cols.start)
    bar.close()
    return np.concatenate(parts, axis=1)


@accepts_foreign_arrays("noisy", host=True, restore=restore_denoised, callback=None)
def denoise(
    noisy,
    sigma,
    *,
    method="msm",
    lam=None,
    train_lam=None,
    patch_size=8,
    n_atoms=256,
    n_train=1000,
    n_iter=None,
    init=None,
    h_iter=None,
    d_iter=None,
    code_iter=None,
    step=1,
    clip=None,
    channel_axis=None,
    random_state=0,
    backend="auto",
    verbose=False,
    return_info=False,
):
    """Denoise an image by l0 sparse coding of its patches over a learned dictionary.

    1. ``n_train`` random ``patch_size x patch_size`` patches of the noisy image, means
       removed, train a dictionary that starts from the overcomplete DCT: ``n_iter``
       alternating iterations of l0 coding (``h_iter`` MSM/PGM iterations) and a projected
       gradient dictionary step (Bao et al. 2016); K-SVD iterations for ``"ksvd"``.
    2. Every overlapping patch (``step`` apart) is coded (``code_iter`` MSM/PGM iterations
       from ``init``; OMP for ``"ksvd"``), rebuilt, its mean added back, and the overlaps
       are averaged into the image.

    Colour images (``channel_axis``) are denoised channel by channel, each as a grey
    image.  The result has the input's dtype and value range (module
    :mod:`~msm_gpu.apps._images`): computed in float64, then clipped (``clip``) and, for
    integer images, rounded.

    Parameters
    ----------
    noisy : (H, W) array, or (H, W, C) (any axis of channels) with ``channel_axis``
        Any integer or float dtype (uint8, uint16, int16, float32, ...); both sides >=
        ``patch_size``.
    sigma : float > 0, or one per channel
        Noise standard deviation in the image's units (20 for the paper's sigma = 20 on a
        [0, 255] image; 20/255 for a float image on [0, 1]; 20 * 257 for the same noise on
        a uint16 image).
    method : {"msm", "pgm", "ksvd"}
    lam : float, optional
        l0 weight in the image's units squared; default :func:`default_lam` (5 sigma^2).
        An explicit value overrides the rule (for every channel).  Not used by "ksvd",
        which stops OMP at the squared residual ``patch_size**2 (1.15 sigma)^2`` (Elad and
        Aharon 2006).
    train_lam : float, optional
        l0 weight of the training codes (dictionary learning); default
        ``train_lam_factor * lam`` from :data:`METHOD_DEFAULTS` (2 lam for "msm", lam for
        "pgm").  Not used by "ksvd".
    patch_size : int >= 2
        Side of the square patches (a 1 x 1 patch minus its mean is 0: nothing to code).
    n_atoms : int
        Dictionary size; a perfect square (the DCT start needs it).
    n_train : int
        Training patches (per channel).
    n_iter : int, optional
        Dictionary learning iterations (0: use the overcomplete DCT as is).  Default per
        method (:data:`METHOD_DEFAULTS`, also for ``init``, ``h_iter``, ``d_iter``,
        ``code_iter``): 10 for every method.
    init : {"omp", "random", "zeros"}, optional
        Initial codes for the l0 solver, in training and in the final coding ("random":
        standard normal entries, as the paper's random initialisation).  Ignored by "ksvd".
    h_iter, code_iter : int, optional
        Solver iterations per training H-step, and for the final coding of all patches.
    d_iter : int, optional
        Projected-gradient dictionary steps per training iteration (Bao et al.; not used
        by "ksvd").
    step : int >= 1
        Stride between coded patches (1: all overlapping patches, as in the paper).  The
        last row and column of patches are always coded, and where ``step`` exceeds
        ``patch_size`` the patches that fill the gaps too, so every pixel is covered
        (:func:`~msm_gpu.apps.dictionaries.patch_grid`).
    clip : None, bool or (low, high)
        Range of the result.  None (default): an integer image's dtype range (uint8
        [0, 255], uint16 [0, 65535], int16 [-32768, 32767], ...), floats unclipped.
        True: the same for integers, the input's [min, max] for floats.  False: no
        clipping (integers still kept in their dtype's range).
    channel_axis : int or None
        The axis of the colour channels (scikit-image's convention); None: a grey image.
    random_state : int, Generator or None
        Seed of the training patches; with an int every channel gets the same positions.
    backend : {"auto", "cpu", "cuda"}
    verbose : bool
        Print the stages and show progress bars: dictionary learning (or K-SVD) and the
        final coding of every patch ("msm", "pgm"; the final OMP of "ksvd" has none).
    return_info : bool
        Also return a dict with lam, train_lam, the dictionary, timings (seconds per stage
        and total), the training objective and the mean number of atoms per patch; for a
        colour image ``info["channels"]`` holds one such dict per channel and
        ``info["dictionary"]`` their dictionaries stacked (C, m, k).

    Returns
    -------
    clean : ndarray, the shape and dtype of ``noisy``
        In the units of the input (a boolean image gives float64).
    info : dict
        Only with ``return_info=True``.
    """
    started = time.perf_counter()
    settings = _settings(
        method=method,
        patch_size=patch_size,
        n_atoms=n_atoms,
        n_train=n_train,
        n_iter=n_iter,
        init=init,
        h_iter=h_iter,
        d_iter=d_iter,
        code_iter=code_iter,
        step=step,
        backend=backend,
        verbose=verbose,
    )
    on_device = is_cupy(noisy)
    if on_device:  # a CuPy image: patches on the host, the sweeps on the device
        settings["backend"] = "cuda" if backend == "auto" else backend
        noisy = to_host(noisy)
    raw = np.asarray(noisy)
    channels, axis = split_channels(raw, channel_axis, settings["patch_size"], "noisy")
    sigmas = [
        v.check_real(s, "sigma", low=0.0, low_open=True)
        for s in per_channel(sigma, len(channels), "sigma")
    ]
    bounds = clip_bounds(clip, raw)
    if raw.dtype.kind == "f" and max(sigmas) > 1.0 and np.abs(raw).max() <= 2.0:
        warnings.warn(
            f"sigma = {max(sigmas):g} but the image lies in [{raw.min():.3g}, "
            f"{raw.max():.3g}]: sigma is in the image's units (use sigma / 255 for images "
            "on [0, 1])",
            stacklevel=2,
        )
    shared = random_state if isinstance(random_state, np.random.Generator) else None
    results = [
        _denoise_grey(
            img,
            s,
            lam,
            train_lam,
            settings,
            shared if shared is not None else np.random.default_rng(random_state),
        )
        for img, s in zip(channels, sigmas, strict=True)
    ]
    clean = to_input_dtype(merge_channels([r[0] for r in results], axis), raw.dtype, bounds)
    total = time.perf_counter() - started
    if settings["verbose"]:
        print(f"[denoise {settings['method']}] done in {total:.2f} s", flush=True)
    infos = [r[1] for r in results]
    if axis is None:
        info = infos[0]
        info["timings"]["total"] = total
    else:
        info = {
            "method": settings["method"],
            "channel_axis": axis,
            "channels": infos,
            "dictionary": np.stack([i["dictionary"] for i in infos]),
            "timings": {"total": total},
        }
    if on_device:  # CuPy in, CuPy out
        import cupy

        clean, info["dictionary"] = cupy.asarray(clean), cupy.asarray(info["dictionary"])
    return (clean, info) if return_info else clean


def _settings(
    *,
    method,
    patch_size,
    n_atoms,
    n_train,
    n_iter,
    init,
    h_iter,
    d_iter,
    code_iter,
    step,
    backend,
    verbose,
):
    """Every parameter of :func:`denoise` that is not about the image, checked before any
    work (a refused value is named before a run, not after it)."""
    if not isinstance(method, str) or method.lower() not in DENOISE_METHODS:
        raise ValueError(f"method must be one of {DENOISE_METHODS}, got {method!r}")
    method = method.lower()
    patch_size = v.check_int(patch_size, "patch_size", low=1)
    if patch_size < 2:
        raise ValueError(
            "patch_size must be >= 2: a 1 x 1 patch minus its mean is 0, so there is "
            f"nothing to denoise; got patch_size={patch_size}"
        )
    n_atoms = v.check_int(n_atoms, "n_atoms", low=1)
    d0 = overcomplete_dct(patch_size, n_atoms)  # validates n_atoms (a perfect square)
    defaults = METHOD_DEFAULTS[method]
    init = defaults["init"] if init is None else init
    if not isinstance(init, str) or init.lower() not in ("omp", "random", "zeros"):
        raise ValueError(f"init must be 'omp', 'random' or 'zeros', got {init!r}")
    return {
        "method": method,
        "patch_size": patch_size,
        "n_atoms": n_atoms,
        "d0": d0,
        "n_train": v.check_int(n_train, "n_train", low=1),
        "n_iter": v.check_int(defaults["n_iter"] if n_iter is None else n_iter, "n_iter", low=0),
        "h_iter": v.check_int(defaults["h_iter"] if h_iter is None else h_iter, "h_iter", low=1),
        "d_iter": v.check_int(defaults["d_iter"] if d_iter is None else d_iter, "d_iter", low=1),
        "code_iter": v.check_int(
            defaults["code_iter"] if code_iter is None else code_iter, "code_iter", low=1
        ),
        "init": init.lower(),
        "step": v.check_int(step, "step", low=1),
        "train_lam_factor": defaults["train_lam_factor"],
        "backend": backend,
        "verbose": bool(verbose),
    }


def _denoise_grey(img, sigma, lam, train_lam, settings, rng):
    """One 2-D float64 channel: (clean float64, info)."""
    started = time.perf_counter()
    method, patch_size, n_atoms = settings["method"], settings["patch_size"], settings["n_atoms"]
    init, backend, verbose = settings["init"], settings["backend"], settings["verbose"]
    lam = default_lam(sigma) if lam is None else v.check_real(lam, "lam", low=0.0)
    train_lam = settings["train_lam_factor"] * lam if train_lam is None else train_lam
    train_lam = v.check_real(train_lam, "train_lam", low=0.0)
    m = patch_size * patch_size
    omp_tol = m * (OMP_NOISE_GAIN * sigma) ** 2
    d0, n_iter, step = settings["d0"], settings["n_iter"], settings["step"]

    def say(msg):
        if verbose:
            print(f"[denoise {method}] {msg}", flush=True)

    # One BLAS thread for every method: the sweep's threads (MSM) and OpenBLAS's must
    # not run at once (docs/design.md, "CPU sweep"), and small LAPACK calls (the
    # eigen-decompositions of the dictionary step) were measured at 0.7 s each with
    # threaded BLAS on a loaded 2-core machine.  K-SVD runs under the same limit.
    with serial_blas():
        # 1. dictionary learning on random noisy patches, means removed
        t0 = time.perf_counter()
        train = sample_patches(img, settings["n_train"], patch_size, rng)
        train = train - train.mean(axis=0, keepdims=True)
        say(
            f"learning a {m} x {n_atoms} dictionary from {train.shape[1]} patches, "
            f"lam = {train_lam:g}"
        )
        objective = np.zeros(0)
        if method == "ksvd":
            d, _ = ksvd(train, d0, n_iter, omp_tol=omp_tol, verbose=verbose)
        elif n_iter == 0:
            d = d0
        else:
            model = L0DictionaryLearning(
                n_components=n_atoms,
                lam=train_lam,
                n_iter=n_iter,
                init=init,
                method=method,
                dict_init=d0.T,
                h_iter=settings["h_iter"],
                d_iter=settings["d_iter"],
                tol=0.0 if method == "msm" else 1e-4,  # MSM: h_iter sweeps, lean path
                omp_tol=omp_tol,
                random_state=rng,
                backend=backend,
                verbose=verbose,
            ).fit(train.T)
            d = model.dictionary_
            objective = model.objective_
        t1 = time.perf_counter()

        # 2. code every overlapping patch and average the overlaps
        patches = extract_patches(img, patch_size, step)
        means = patches.mean(axis=0, keepdims=True)
        centred = patches - means
        say(f"coding {patches.shape[1]} patches")
        code_iter = settings["code_iter"]
        if method == "ksvd":
            h = omp(d, centred, tol=omp_tol)
        elif method == "msm":  # the lean path: sweeps only, no objective or retirement
            gram = d.T @ d
            gram = 0.5 * (gram + gram.T)
            h0 = _initial_codes(init, d, centred, lam, gram, omp_tol, None, rng)
            h = _coded_sweeps(gram, -(d.T @ centred), h0, lam, code_iter, backend, verbose)
        else:
            bar = _progress_bar(verbose, code_iter, f"coding patches ({method})", "it")

            def tick(_info):
                bar.update(1)  # returns None: a true return value would stop the solver

            res = sparse_code(
                d,
                centred,
                lam,
                method=method,
                init=init,
                max_iter=code_iter,
                omp_tol=omp_tol,
                random_state=rng,
                backend=backend,
                record_objective=False,
                callback=None if bar is None else tick,
            )
            if bar is not None:
                bar.close()
            h = np.asarray(res.x)
        t2 = time.perf_counter()
    rebuilt = d @ h + means
    clean = reconstruct_from_patches(rebuilt, img.shape, patch_size, step)
    t3 = time.perf_counter()
    info = {
        "method": method,
        "lam": lam,
        "train_lam": train_lam,
        "sigma": sigma,
        "dictionary": d,
        "objective": objective,
        "mean_atoms_per_patch": float(np.count_nonzero(to_host(h)) / h.shape[1]),
        "n_patches": int(patches.shape[1]),
        "timings": {
            "train": t1 - t0,
            "code": t2 - t1,
            "reassemble": t3 - t2,
            "total": t3 - started,
        },
    }
    return clean, info
