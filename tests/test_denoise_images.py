"""denoise on the images scikit-image users have (issue 50): any integer or float dtype in,
the same dtype and value range out; colour images with channel_axis; any step; clip; the
messages of refused values.  The reference is the float64 grey result of the same image
(denoising is equivariant: an image scaled by c with sigma scaled by c gives the result
scaled by c, and an offset passes through the patch means)."""

from __future__ import annotations

import numpy as np
import pytest
from skimage.metrics import peak_signal_noise_ratio
from test_denoise import piecewise_constant

from msm_gpu.apps.denoise import denoise

FAST = {"n_atoms": 64, "n_train": 300, "n_iter": 3, "h_iter": 3, "code_iter": 10}
SIGMA = 20.0


@pytest.fixture(scope="module")
def images():
    clean = piecewise_constant((48, 48))
    noise = SIGMA * np.random.default_rng(1).standard_normal(clean.shape)
    return clean, noise


def db(clean, out, data_range):
    """scikit-image's PSNR of the result against the clean image, in the result's units."""
    return peak_signal_noise_ratio(clean, out.astype(np.float64), data_range=data_range)


@pytest.fixture(scope="module")
def grey_float64(images):
    clean, noise = images
    return db(clean, denoise(clean + noise, SIGMA, **FAST), 255.0)


@pytest.mark.parametrize(
    ("dtype", "scale", "offset"),
    [
        (np.uint8, 1.0, 0.0),
        (np.uint16, 257.0, 0.0),  # uint16 came back capped at 255 (12 dB)
        (np.int16, 100.0, -12800.0),  # negative values, a range of 25500
        (np.float32, 1.0, 0.0),  # came back float64
        (np.float32, 1 / 255, 0.0),  # [0, 1] floats, sigma in those units
    ],
)
def test_dtype_and_range_preserved_within_0_2_db(images, grey_float64, dtype, scale, offset):
    clean, noise = images
    noisy = clean * scale + offset + noise * scale
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        noisy = np.clip(np.rint(noisy), info.min, info.max)
    out = denoise(noisy.astype(dtype), SIGMA * scale, **FAST)
    assert out.dtype == dtype and out.shape == clean.shape
    got = db(clean * scale + offset, out, 255.0 * scale)
    assert abs(got - grey_float64) <= 0.2, (got, grey_float64)
    if np.dtype(dtype).kind in "iu":  # the dtype's range, not [0, 255]
        assert out.max() > 200 * scale + offset  # the clean image reaches ~ 230


@pytest.mark.parametrize("channel_axis", [-1, 0])
def test_colour_channels_are_each_the_grey_result(images, channel_axis):
    """(H, W, 3) was refused; each channel is denoised as the grey image it is."""
    clean, noise = images
    planes = [clean + noise, (clean + noise)[::-1], 255.0 - (clean + noise)]
    planes = [np.clip(np.rint(p), 0, 255).astype(np.uint8) for p in planes]
    colour = np.stack(planes, axis=channel_axis)
    out = denoise(colour, SIGMA, channel_axis=channel_axis, **FAST)
    assert out.shape == colour.shape and out.dtype == np.uint8
    for c, plane in enumerate(planes):
        grey = denoise(plane, SIGMA, **FAST)
        np.testing.assert_array_equal(np.take(out, c, axis=channel_axis), grey)
    # a sigma per channel, and the info per channel
    _, info = denoise(
        colour, [SIGMA, SIGMA, 2 * SIGMA], channel_axis=channel_axis, return_info=True, **FAST
    )
    assert [i["sigma"] for i in info["channels"]] == [SIGMA, SIGMA, 2 * SIGMA]
    assert info["dictionary"].shape == (3, 64, 64)


@pytest.mark.parametrize("step", [9, 100])
def test_any_step_covers_every_pixel(images, step):
    """step > patch_size left pixels no patch covered: NaN in the result."""
    clean, noise = images
    out = denoise(clean + noise, SIGMA, step=step, **FAST)
    assert np.all(np.isfinite(out))
    # step 100: patches 8 apart with no overlap, a weaker denoiser but a denoiser
    assert db(clean, out, 255.0) > db(clean, clean + noise, 255.0) + 1.0


def test_clip_true_and_bounds(images):
    """clip=True raised "'bool' object is not subscriptable" after the whole run."""
    clean, noise = images
    noisy = clean + noise
    out = denoise(noisy, SIGMA, clip=True, **FAST)
    assert noisy.min() <= out.min() and out.max() <= noisy.max()
    low = denoise(noisy, SIGMA, clip=(50.0, 100.0), **FAST)
    assert low.min() >= 50.0 and low.max() <= 100.0
    free = denoise(noisy.astype(np.float32), SIGMA, clip=False, **FAST)
    np.testing.assert_allclose(np.clip(free, 50, 100), low, atol=1e-4)


def test_refused_values_name_the_argument_before_any_work():
    img = np.zeros((16, 16))
    with pytest.raises(ValueError, match="patch_size must be >= 2"):
        denoise(img, 10, patch_size=1)  # was a message about dict_init atoms
    with pytest.raises(TypeError, match="clip must be None, True, False or a pair"):
        denoise(img, 10, clip="yes")
    with pytest.raises(ValueError, match="clip must be .* low <= high"):
        denoise(img, 10, clip=(1.0, 0.0))
    with pytest.raises(ValueError, match="channel_axis=-1 needs a 3-D noisy"):
        denoise(img, 10, channel_axis=-1)
    with pytest.raises(ValueError, match="sigma must be a number or one value per channel"):
        denoise(np.zeros((16, 16, 3)), [10, 10], channel_axis=-1)
    with pytest.raises(ValueError, match="noisy channel 1 contains NaN"):
        colour = np.zeros((16, 16, 3))
        colour[0, 0, 1] = np.nan
        denoise(colour, 10, channel_axis=-1)
    with pytest.raises(ValueError, match="step"):
        denoise(img, 10, step=0)


@pytest.fixture(scope="module")
def at_defaults():
    clean = piecewise_constant((64, 64), seed=2)
    noise = SIGMA * np.random.default_rng(3).standard_normal(clean.shape)
    return clean, noise, db(clean, denoise(clean + noise, SIGMA), 255.0)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int16, np.float32])
def test_defaults_dtype_within_0_2_db_of_float64(at_defaults, dtype):
    """The acceptance check at denoise's defaults (256 atoms, 1000 training patches)."""
    clean, noise, ref = at_defaults
    scale = 257.0 if dtype == np.uint16 else 1.0
    noisy = (clean + noise) * scale
    if np.dtype(dtype).kind in "iu":
        noisy = np.clip(np.rint(noisy), np.iinfo(dtype).min, np.iinfo(dtype).max)
    out = denoise(noisy.astype(dtype), SIGMA * scale)
    assert out.dtype == dtype
    assert abs(db(clean * scale, out, 255.0 * scale) - ref) <= 0.2
