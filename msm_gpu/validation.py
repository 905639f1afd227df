"""Every check of user input, in one place, with messages that name the argument."""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from .arrays import is_cupy, module_of
from .penalties import Penalty


def working_dtype(*arrays):
    """float32 if every array is float32 (or smaller float), else float64.

    Integer and boolean inputs become float64; complex and object inputs are refused
    by :func:`check_array` before this is called.
    """
    kinds = [np.dtype(a.dtype) for a in arrays if a is not None]
    if kinds and all(k.kind == "f" and k.itemsize <= 4 for k in kinds):
        return np.dtype(np.float32)
    return np.dtype(np.float64)


def check_array(x, name, *, ndims=(1, 2)):
    """Refuse non-numeric, empty, wrongly shaped or non-finite arrays.

    Returns the input unchanged (never a modified copy): conversion happens later, on
    the backend, into a fresh array.
    """
    if x is None:
        raise TypeError(f"{name} must be an array, got None")
    if not hasattr(x, "dtype") or not hasattr(x, "shape"):
        try:
            x = np.asarray(x)
        except Exception as exc:  # ragged lists etc.
            raise TypeError(f"{name} must be an array of real numbers") from exc
    kind = np.dtype(x.dtype).kind
    if kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {x.dtype}")
    if x.ndim not in ndims:
        allowed = " or ".join(f"{d}-D" for d in ndims)
        raise ValueError(f"{name} must be {allowed}, got an array of shape {x.shape}")
    if x.size == 0:
        raise ValueError(f"{name} must not be empty (shape {x.shape})")
    if kind == "f":
        host = np.asarray(x) if not is_cupy(x) else None
        finite = bool(np.isfinite(host).all()) if host is not None else bool(_cupy_finite(x))
        if not finite:
            raise ValueError(f"{name} contains NaN or Inf")
    return x


def _cupy_finite(x):
    import cupy

    return cupy.isfinite(x).all().item()


def check_square_symmetric(a, name="A"):
    """A must be square, symmetric (to rounding) and have a nonnegative diagonal."""
    check_array(a, name, ndims=(2,))
    n, m = a.shape
    if n != m:
        raise ValueError(f"{name} must be square, got shape {a.shape}")
    xp_mod = module_of(a)
    af = a.astype(np.float64) if np.dtype(a.dtype).kind != "f" else a
    scale = float(xp_mod.abs(af).max())
    eps = np.finfo(np.float32 if np.dtype(a.dtype) == np.float32 else np.float64).eps
    asym = float(xp_mod.abs(af - af.T).max())
    if asym > 100 * eps * max(scale, 1e-300) * max(1.0, math.sqrt(n)):
        raise ValueError(
            f"{name} must be symmetric: max |{name} - {name}.T| = {asym:.3g} "
            f"(max |{name}| = {scale:.3g})"
        )
    diag = xp_mod.diagonal(af)
    if bool((diag < 0).any()):
        j = int(xp_mod.argmin(diag))
        raise ValueError(
            f"{name} must be positive semidefinite, but {name}[{j}, {j}] = {float(diag[j]):g} < 0"
        )
    return a


def check_rhs(r, n, name="R"):
    """R (or x0) is (n,) for one problem or (n, r) for r problems."""
    check_array(r, name)
    if r.shape[0] != n:
        raise ValueError(f"{name} must have {n} rows to match A ({n} x {n}), got shape {r.shape}")
    return r


def check_x0(x0, r_shape):
    if x0 is None:
        return None
    check_array(x0, "x0")
    if tuple(x0.shape) != tuple(r_shape):
        raise ValueError(f"x0 must have the shape of R {tuple(r_shape)}, got {tuple(x0.shape)}")
    return x0


def check_penalty(penalty):
    if isinstance(penalty, type) and issubclass(penalty, Penalty):
        raise TypeError(
            f"penalty must be a Penalty instance, e.g. {penalty.__name__}(...), not the class"
        )
    if not isinstance(penalty, Penalty):
        raise TypeError(
            "penalty must be a msm_gpu Penalty (Zero, NonNeg, Box, L1, NonNegL1, L0, Lp), "
            f"got {type(penalty).__name__}"
        )
    return penalty


def check_real(value, name, *, low=None, high=None, low_open=False, high_open=False):
    """A finite real scalar within the given (open or closed) bounds."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high:
        lo = "" if low is None else ("(" if low_open else "[") + f"{low:g}"
        hi = "" if high is None else f"{high:g}" + (")" if high_open else "]")
        interval = f"{lo or '(-inf'}, {hi or 'inf)'}"
        raise ValueError(f"{name} must be in {interval}, got {value:g}")
    return value


def check_int(value, name, *, low=0):
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return int(value)


def check_time_limit(time_limit):
    if time_limit is None:
        return None
    return check_real(time_limit, "time_limit", low=0.0, low_open=True)


def check_callback(callback):
    if callback is not None and not callable(callback):
        raise TypeError("callback must be callable or None")
    return callback
