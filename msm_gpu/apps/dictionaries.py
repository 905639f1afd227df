"""Overcomplete DCT dictionary and image patch extraction / reassembly.

Conventions (as in the paper and in :func:`msm_gpu.least_squares`): a dictionary ``D`` is
an ``(m, k)`` array whose *columns* are the atoms; patches are stored as the *columns* of
an ``(m, N)`` array, each column a ``patch_size x patch_size`` patch flattened in row-major
(C) order, ``m = patch_size**2``.
"""

from __future__ import annotations

import math

import numpy as np

from .._input.validation import check_int

__all__ = [
    "check_image",
    "extract_patches",
    "overcomplete_dct",
    "patch_grid",
    "reconstruct_from_patches",
    "sample_patches",
]


def overcomplete_dct(patch_size=8, n_atoms=256):
    """Separable (overcomplete) 2-D DCT dictionary with unit-norm atoms.

    The 1-D dictionary has ``k = sqrt(n_atoms)`` atoms of length ``p = patch_size``,
    ``V[i, j] = cos(pi j (2 i + 1) / (2 k))``; every atom but the constant one (j = 0) has
    its mean removed, then every atom is scaled to unit norm.  The 2-D dictionary is
    ``kron(V, V)`` (Aharon and Elad 2006), so its atoms are unit-norm too.

    * ``n_atoms == patch_size**2`` (k = p) gives exactly the orthonormal 2-D DCT-II basis.
    * For k > p the dictionary is overcomplete; the constant (DC) atom, column 0, is
      orthogonal to every other atom, which all have zero mean.

    Parameters
    ----------
    patch_size : int
        Side p of the square patches; atoms have length ``p**2``.
    n_atoms : int
        Number of atoms; must be a perfect square ``k**2``.

    Returns
    -------
    D : ndarray of shape (patch_size**2, n_atoms)
        Atoms as columns, float64.

    Examples
    --------
    >>> import numpy as np
    >>> D = overcomplete_dct(8, 256)
    >>> D.shape, bool(np.allclose(np.linalg.norm(D, axis=0), 1.0))
    ((64, 256), True)
    """
    p = check_int(patch_size, "patch_size", low=1)
    if isinstance(n_atoms, bool) or not isinstance(n_atoms, (int, np.integer)):
        raise TypeError(f"n_atoms must be an int, got {type(n_atoms).__name__}")
    k = math.isqrt(int(n_atoms)) if n_atoms >= 0 else -1
    if n_atoms < 1 or k * k != n_atoms:
        raise ValueError(f"n_atoms must be a positive perfect square (k**2), got {n_atoms}")
    i = np.arange(p)[:, None]
    j = np.arange(k)[None, :]
    v = np.cos(np.pi * j * (2 * i + 1) / (2 * k))
    v[:, 1:] -= v[:, 1:].mean(axis=0, keepdims=True)
    norms = np.linalg.norm(v, axis=0)
    # with p == 1 every non-constant atom vanishes after mean removal: keep it zero-safe
    v = v / np.where(norms > 0, norms, 1.0)
    return np.kron(v, v)


def check_image(image, patch_size, name="image"):
    """A 2-D float64 copy of a grayscale image at least ``patch_size`` on each side.

    Raises
    ------
    TypeError, ValueError
        For non-numeric, non-2-D, too small or non-finite images.
    """
    p = check_int(patch_size, "patch_size", low=1)
    arr = np.asarray(image)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.bool_)
    ):
        raise TypeError(f"{name} must be a numeric array, got dtype {arr.dtype}")
    if np.iscomplexobj(arr):
        raise TypeError(f"{name} must be real, got dtype {arr.dtype}")
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be a 2-D grayscale image (H, W), got shape {arr.shape}; "
            "convert colour images first, e.g. skimage.color.rgb2gray"
        )
    if min(arr.shape) < p:
        raise ValueError(
            f"{name} of shape {arr.shape} is smaller than the {p} x {p} patches; "
            f"both sides must be >= patch_size = {p}"
        )
    out = arr.astype(np.float64)
    if not np.all(np.isfinite(out)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return out


def patch_grid(length, patch_size, step=1):
    """Start offsets of the patches along one axis of ``length`` pixels.

    ``0, step, 2 step, ...`` and always the last offset ``length - patch_size``; where
    ``step > patch_size`` leaves pixels between two patches, the offsets ``patch_size``
    apart that cover them are added.  So the patches cover every pixel for any step.
    """
    p = check_int(patch_size, "patch_size", low=1)
    s = check_int(step, "step", low=1)
    if length < p:
        raise ValueError(f"length {length} is smaller than patch_size {p}")
    starts = np.arange(0, length - p + 1, s)
    if starts[-1] != length - p:
        starts = np.append(starts, length - p)
    gaps = np.flatnonzero(np.diff(starts) > p)
    if gaps.size:  # fill each gap (a, b) with a + p, a + 2p, ... < b
        fill = [np.arange(starts[g] + p, starts[g + 1], p) for g in gaps]
        starts = np.unique(np.concatenate([starts, *fill]))
    return starts


def extract_patches(image, patch_size=8, step=1):
    """All (overlapping) ``patch_size x patch_size`` patches of a 2-D image, as columns.

    Parameters
    ----------
    image : (H, W) array
        Grayscale image (any real dtype); both sides >= ``patch_size``.
    patch_size : int
    step : int
        Distance between neighbouring patches; the last row/column of patches is always
        included (see :func:`patch_grid`).  ``step=1`` gives all
        ``(H - p + 1) (W - p + 1)`` patches.

    Returns
    -------
    patches : ndarray of shape (patch_size**2, n_patches)
        float64; patch ``(a, b)`` of the grid is column ``a * n_cols + b``, flattened in
        row-major order.
    """
    img = check_image(image, patch_size)
    p = int(patch_size)
    rows = patch_grid(img.shape[0], p, step)
    cols = patch_grid(img.shape[1], p, step)
    windows = np.lib.stride_tricks.sliding_window_view(img, (p, p))
    sel = windows[rows[:, None], cols[None, :]]  # (nr, nc, p, p)
    return np.ascontiguousarray(sel.reshape(len(rows) * len(cols), p * p).T)


def reconstruct_from_patches(patches, image_shape, patch_size=8, step=1):
    """Average overlapping patches back into an image (inverse of :func:`extract_patches`).

    Every pixel becomes the mean of the values that the patches covering it hold, so for
    patches of a noise-free image the image is recovered exactly (up to rounding).

    Parameters
    ----------
    patches : (patch_size**2, n_patches) array
        Columns in the order of :func:`extract_patches` with the same ``step``.
    image_shape : (H, W)
    patch_size, step : int

    Returns
    -------
    image : ndarray of shape image_shape, float64
    """
    p = check_int(patch_size, "patch_size", low=1)
    if len(image_shape) != 2:
        raise ValueError(f"image_shape must be (H, W), got {image_shape}")
    h, w = (int(s) for s in image_shape)
    if min(h, w) < p:
        raise ValueError(f"image_shape {image_shape} is smaller than patch_size {p}")
    rows = patch_grid(h, p, step)
    cols = patch_grid(w, p, step)
    patches = np.asarray(patches, dtype=np.float64)
    expected = (p * p, len(rows) * len(cols))
    if patches.shape != expected:
        raise ValueError(
            f"patches must have shape {expected} for image_shape {tuple(image_shape)}, "
            f"patch_size {p}, step {step}; got {patches.shape}"
        )
    blocks = patches.T.reshape(len(rows), len(cols), p, p)
    total = np.zeros((h, w))
    count = np.zeros((h, w))
    # for a fixed offset (di, dj) the target pixels of all patches are distinct
    for di in range(p):
        for dj in range(p):
            idx = np.ix_(rows + di, cols + dj)
            total[idx] += blocks[:, :, di, dj]
            count[idx] += 1.0
    return total / count


def sample_patches(image, n_patches, patch_size=8, random_state=None):
    """``n_patches`` patches at distinct random positions (uniform, without replacement).

    Returns
    -------
    patches : ndarray of shape (patch_size**2, n) with n = min(n_patches, number of
        positions), float64.
    """
    img = check_image(image, patch_size)
    p = int(patch_size)
    if isinstance(n_patches, bool) or not isinstance(n_patches, (int, np.integer)):
        raise TypeError(f"n_patches must be an int, got {type(n_patches).__name__}")
    if n_patches < 1:
        raise ValueError(f"n_patches must be >= 1, got {n_patches}")
    rng = np.random.default_rng(random_state)
    nr, nc = img.shape[0] - p + 1, img.shape[1] - p + 1
    n = min(int(n_patches), nr * nc)
    flat = rng.choice(nr * nc, size=n, replace=False)
    windows = np.lib.stride_tricks.sliding_window_view(img, (p, p))
    sel = windows[flat // nc, flat % nc]  # (n, p, p)
    return np.ascontiguousarray(sel.reshape(n, p * p).T)
