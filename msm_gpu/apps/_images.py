"""What :func:`~msm_gpu.denoise` does with the user's image before and after denoising:
colour channels (scikit-image's ``channel_axis``), the value range it clips to, and the
input's dtype restored (any integer or float dtype in, the same dtype out).

The denoiser itself works on 2-D float64 grey images (``denoise.py``).
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np

from .dictionaries import check_image

__all__ = ["clip_bounds", "merge_channels", "per_channel", "split_channels", "to_input_dtype"]


def split_channels(raw, channel_axis, patch_size, name="noisy"):
    """The image as a list of 2-D float64 channels (one for a grey image).

    Parameters
    ----------
    raw : ndarray
        The user's image: (H, W), or with ``channel_axis`` one more axis of channels.
    channel_axis : int or None
        scikit-image's convention: the axis of the colour channels, None for grey.
    patch_size : int
    name : str
        The argument's name in messages.

    Returns
    -------
    channels : list of (H, W) float64 arrays
    axis : int or None
        ``channel_axis`` as a nonnegative axis of ``raw`` (None for grey).
    """
    if channel_axis is None:
        if raw.ndim == 3 and raw.shape[2] != 1:
            raise ValueError(
                f"{name} of shape {raw.shape} is not a 2-D grey image: for a colour image pass "
                "channel_axis=-1 (scikit-image's convention) to denoise its channels, "
                "or convert it to grey first (skimage.color.rgb2gray)"
            )
        return [check_image(raw, patch_size, name)], None
    if isinstance(channel_axis, bool) or not isinstance(channel_axis, Integral):
        raise TypeError(f"channel_axis must be an int or None, got {channel_axis!r}")
    if raw.ndim != 3:
        raise ValueError(
            f"channel_axis={channel_axis} needs a 3-D {name} (two image axes and one of "
            f"channels), got shape {raw.shape}"
        )
    if not -3 <= channel_axis < 3:
        raise ValueError(f"channel_axis={channel_axis} is out of range for {name}.ndim = 3")
    axis = int(channel_axis) % 3
    planes = np.moveaxis(raw, axis, 0)
    if planes.shape[0] == 0:
        raise ValueError(f"{name} has no channel along channel_axis={channel_axis}")
    channels = [
        check_image(plane, patch_size, f"{name} channel {c}") for c, plane in enumerate(planes)
    ]
    return channels, axis


def merge_channels(channels, axis):
    """Inverse of :func:`split_channels` on the denoised channels."""
    if axis is None:
        return channels[0]
    return np.moveaxis(np.stack(channels, axis=0), 0, axis)


def per_channel(value, n, name):
    """A scalar (the same for every channel) or one value per channel, as a list of n."""
    if np.ndim(value) == 0:
        return [value] * n
    values = list(np.asarray(value).ravel()) if not isinstance(value, (list, tuple)) else value
    if len(values) != n:
        raise ValueError(f"{name} must be a number or one value per channel ({n}), got {value!r}")
    return list(values)


def clip_bounds(clip, raw, name="noisy"):
    """(low, high) the result is clipped to, or None.

    ``None`` (default): the range of an integer dtype (uint8: [0, 255], uint16:
    [0, 65535], int16: [-32768, 32767], ...), no clipping for floats.  ``True``: the
    integer dtype's range, or for floats the range of the input's values.  ``False``: no
    clipping (an integer result is still held in its dtype's range to be stored in it).
    ``(low, high)``: those bounds.
    """
    kind = raw.dtype.kind
    dtype_range = (
        (float(np.iinfo(raw.dtype).min), float(np.iinfo(raw.dtype).max)) if kind in "iu" else None
    )
    if clip is None or clip is False:
        return dtype_range
    if clip is True:
        if dtype_range is not None:
            return dtype_range
        if kind == "b":
            return (0.0, 1.0)
        return (float(np.min(raw)), float(np.max(raw)))
    try:
        low, high = clip
    except (TypeError, ValueError):
        raise TypeError(
            f"clip must be None, True, False or a pair (low, high), got {clip!r}"
        ) from None
    for bound, which in ((low, "low"), (high, "high")):
        if isinstance(bound, bool) or not isinstance(bound, Real) or np.isnan(bound):
            raise TypeError(f"clip's {which} bound must be a real number, got {bound!r}")
    if low > high:
        raise ValueError(f"clip must be (low, high) with low <= high, got {clip!r}")
    if dtype_range is not None:  # the result must still fit the integer dtype
        low, high = max(low, dtype_range[0]), min(high, dtype_range[1])
    return (float(low), float(high))


def to_input_dtype(clean, dtype, bounds):
    """The float64 result clipped to ``bounds`` and stored in the input's ``dtype``:
    integers rounded to the nearest, floats cast (float32 in, float32 out); a boolean
    input gives float64 (a denoised image is not two-valued)."""
    if bounds is not None:
        clean = np.clip(clean, bounds[0], bounds[1])
    kind = np.dtype(dtype).kind
    if kind in "iu":
        return np.rint(clean).astype(dtype)
    if kind == "f":
        return clean.astype(dtype, copy=False)
    return clean
