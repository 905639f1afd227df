"""Patch-based l0 denoising: MSM, PGM and the K-SVD comparator."""

import numpy as np
import pytest

from msm_gpu import backends as mg_backends
from msm_gpu.apps.denoise import default_lam, denoise, ksvd, psnr
from msm_gpu.apps.dictionaries import overcomplete_dct
from msm_gpu.apps.sparse_coding import LAM_PER_SIGMA2


def piecewise_constant(shape=(48, 48), seed=0):
    """Rectangles and a disc of constant grey levels on [0, 255]."""
    rng = np.random.default_rng(seed)
    img = np.full(shape, 60.0)
    h, w = shape
    for _ in range(5):
        r0, c0 = rng.integers(0, h - 8), rng.integers(0, w - 8)
        img[r0 : r0 + rng.integers(6, h // 2), c0 : c0 + rng.integers(6, w // 2)] = rng.uniform(
            20, 235
        )
    yy, xx = np.mgrid[:h, :w]
    img[(yy - h / 2) ** 2 + (xx - w / 3) ** 2 < (h / 5) ** 2] = 200.0
    return img


@pytest.fixture(scope="module")
def noisy_pair():
    clean = piecewise_constant()
    noisy = clean + 20.0 * np.random.default_rng(1).standard_normal(clean.shape)
    return clean, noisy


FAST = {"n_atoms": 64, "n_train": 300, "n_iter": 3, "h_iter": 3, "code_iter": 10}


@pytest.mark.parametrize(
    ("method", "init"), [("msm", "omp"), ("msm", "random"), ("pgm", "omp"), ("ksvd", "omp")]
)
def test_denoise_piecewise_constant_raises_psnr(noisy_pair, method, init):
    clean, noisy = noisy_pair
    before = psnr(clean, noisy)
    out, info = denoise(noisy, 20, method=method, init=init, return_info=True, **FAST)
    after = psnr(clean, out)
    assert out.shape == clean.shape and out.dtype == np.float64
    assert after > before + 5.0, f"{method}: {before:.2f} -> {after:.2f} dB"
    assert info["lam"] == pytest.approx(LAM_PER_SIGMA2 * 400)
    assert info["dictionary"].shape == (64, 64)
    np.testing.assert_allclose(np.linalg.norm(info["dictionary"], axis=0), 1.0, atol=1e-10)
    assert set(info["timings"]) == {"train", "code", "reassemble", "total"}


def test_denoise_default_settings_full_dct(noisy_pair):
    clean, noisy = noisy_pair
    out = denoise(noisy, 20, n_train=200, n_iter=2)
    assert psnr(clean, out) > psnr(clean, noisy) + 5.0


def test_denoise_uint8_is_clipped_and_float_scale_consistent(noisy_pair):
    clean, noisy = noisy_pair
    u8 = np.clip(np.round(noisy), 0, 255).astype(np.uint8)
    out = denoise(u8, 20, n_iter=0, n_atoms=64)
    assert out.min() >= 0 and out.max() <= 255
    # the same image on [0, 1] with sigma / 255 gives the same result (lam scales)
    out01 = denoise(u8 / 255.0, 20 / 255.0, n_iter=0, n_atoms=64, clip=(0.0, 1.0))
    assert abs(psnr(clean, 255 * out01) - psnr(clean, out)) < 0.05


def test_denoise_explicit_lam_overrides_rule(noisy_pair):
    _, noisy = noisy_pair
    _, info = denoise(noisy, 20, lam=123.0, n_iter=0, n_atoms=64, return_info=True)
    assert info["lam"] == 123.0
    _, info0 = denoise(noisy, 20, n_iter=0, n_atoms=64, return_info=True)
    assert info0["lam"] == default_lam(20) == LAM_PER_SIGMA2 * 400
    # a tiny lam keeps (almost) all the noise
    weak = denoise(noisy, 20, lam=1e-3, n_iter=0, n_atoms=64, init="zeros")
    assert np.abs(weak - noisy).max() < 1.0


def test_denoise_stride_and_odd_sizes():
    clean = piecewise_constant((23, 37), seed=3)
    noisy = clean + 10 * np.random.default_rng(2).standard_normal(clean.shape)
    out = denoise(noisy, 10, step=3, n_iter=1, n_atoms=64, n_train=100)
    assert out.shape == (23, 37)
    assert psnr(clean, out) > psnr(clean, noisy)
    # the smallest accepted image: one patch
    tiny = denoise(noisy[:8, :8], 10, n_iter=0, n_atoms=64)
    assert tiny.shape == (8, 8)


def test_denoise_errors():
    img = np.full((16, 16), 100.0)
    with pytest.raises(ValueError, match="smaller than"):
        denoise(np.zeros((7, 30)), 10)
    with pytest.raises(ValueError, match="channel_axis=-1"):
        denoise(np.zeros((16, 16, 3)), 10)
    with pytest.raises(ValueError, match="sigma"):
        denoise(img, 0)
    with pytest.raises(TypeError, match="sigma"):
        denoise(img, "20")
    with pytest.raises(ValueError, match="method"):
        denoise(img, 10, method="bm3d")
    with pytest.raises(ValueError, match="init"):
        denoise(img, 10, init="dct")
    with pytest.raises(ValueError, match="perfect square"):
        denoise(img, 10, n_atoms=200)
    with pytest.raises(ValueError, match="lam"):
        denoise(img, 10, lam=-1.0)
    with pytest.raises(ValueError, match="n_train"):
        denoise(img, 10, n_train=0)


def test_denoise_warns_on_sigma_units():
    img = np.random.default_rng(0).uniform(0, 1, (16, 16))
    with pytest.warns(UserWarning, match="image's units"):
        denoise(img, 20, n_iter=0, n_atoms=64)


def test_denoise_verbose(noisy_pair, capsys):
    _, noisy = noisy_pair
    denoise(noisy, 20, verbose=True, **FAST)
    out = capsys.readouterr()
    assert "[denoise msm]" in out.out and "done in" in out.out


def test_psnr():
    a = np.zeros((4, 4))
    assert psnr(a, a) == float("inf")
    assert psnr(a, a + 255.0) == pytest.approx(0.0)
    assert psnr(a, a + 1.0, data_range=1.0) == pytest.approx(0.0)
    with pytest.raises(ValueError):
        psnr(a, np.zeros((3, 3)))


def test_ksvd_learns_planted_dictionary():
    rng = np.random.default_rng(4)
    true = rng.standard_normal((16, 20))
    true /= np.linalg.norm(true, axis=0)
    codes = np.zeros((20, 600))
    for j in range(600):
        codes[rng.choice(20, 2, replace=False), j] = rng.uniform(1, 2, 2) * rng.choice([-1, 1], 2)
    y = true @ codes
    d0 = rng.standard_normal((16, 20))
    d0 /= np.linalg.norm(d0, axis=0)
    d, h = ksvd(y, d0, n_iter=20, n_nonzero_coefs=2)
    np.testing.assert_allclose(np.linalg.norm(d, axis=0), 1.0, atol=1e-10)
    # most planted atoms are recovered (|cosine| > 0.99)
    match = np.abs(true.T @ d).max(axis=1)
    assert (match > 0.99).mean() >= 0.8
    assert np.linalg.norm(y - d @ h) < 0.2 * np.linalg.norm(y)


def test_dct_denoiser_beats_identity_on_smooth_image():
    yy, xx = np.mgrid[:32, :32]
    clean = 128 + 60 * np.sin(xx / 6.0) * np.cos(yy / 9.0)
    noisy = clean + 15 * np.random.default_rng(5).standard_normal(clean.shape)
    out = denoise(noisy, 15, n_iter=0, n_atoms=64)
    assert psnr(clean, out) > psnr(clean, noisy) + 4.0
    assert overcomplete_dct(8, 64).shape == (64, 64)


def test_denoise_d_iter_steps_the_dictionary_and_is_checked(noisy_pair):
    _, noisy = noisy_pair
    kw = {"n_atoms": 64, "n_train": 200, "n_iter": 2, "return_info": True}
    _, one = denoise(noisy, 20, d_iter=1, **kw)
    _, many = denoise(noisy, 20, d_iter=5, **kw)
    # more projected-gradient steps on the same codes fit the training patches better
    assert many["objective"][1] < one["objective"][1]
    for bad in (0, 1.5):
        with pytest.raises((ValueError, TypeError), match="d_iter"):
            denoise(noisy, 20, d_iter=bad, n_atoms=64)


def test_denoise_train_lam_default_explicit_and_checked(noisy_pair):
    _, noisy = noisy_pair
    kw = {"n_atoms": 64, "n_train": 200, "n_iter": 2, "return_info": True}
    out, info = denoise(noisy, 20, **kw)
    assert info["lam"] == default_lam(20)
    assert info["train_lam"] == 2.0 * info["lam"]  # MSM trains on sparser codes
    assert denoise(noisy, 20, method="pgm", **kw)[1]["train_lam"] == info["lam"]
    same, same_info = denoise(noisy, 20, train_lam=2.0 * default_lam(20), **kw)
    np.testing.assert_array_equal(same, out)
    _, one_lam = denoise(noisy, 20, train_lam=default_lam(20), **kw)
    assert not np.array_equal(one_lam["dictionary"], info["dictionary"])
    # a weight no code can pay: every training code stays 0, so no atom moves off the DCT
    _, frozen = denoise(noisy, 20, train_lam=1e12, **kw)
    np.testing.assert_allclose(frozen["dictionary"], overcomplete_dct(8, 64), rtol=0, atol=1e-14)
    assert frozen["train_lam"] == 1e12 and frozen["lam"] == default_lam(20)
    with pytest.raises(ValueError, match="train_lam"):
        denoise(noisy, 20, train_lam=-1.0, n_atoms=64)
    with pytest.raises(TypeError, match="train_lam"):
        denoise(noisy, 20, train_lam="2", n_atoms=64)


@pytest.mark.gpu
@pytest.mark.skipif(
    "cuda" not in mg_backends.available(),
    reason=f"needs a usable CUDA GPU and CuPy: {mg_backends.status().get('cuda')}",
)
def test_denoise_cupy_image_runs_on_the_device_and_returns_cupy(noisy_pair):
    """CuPy in, CuPy out: the patches on the host, the l0 sweeps on the device, the same
    image as the CPU backend up to the sweeps' rounding."""
    import cupy

    clean, noisy = noisy_pair
    kw = {"n_iter": 1, "n_atoms": 64, "n_train": 200, "random_state": 0}
    host, host_info = denoise(noisy, 20, backend="cpu", return_info=True, **kw)
    dev, dev_info = denoise(cupy.asarray(noisy), 20, return_info=True, **kw)
    assert isinstance(dev, cupy.ndarray) and isinstance(dev_info["dictionary"], cupy.ndarray)
    assert abs(psnr(clean, dev.get()) - psnr(clean, host)) < 0.05
