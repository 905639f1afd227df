"""The lean l0 coding path of denoising (sparse_coding.l0_sweeps) and the per-method defaults."""

from __future__ import annotations

import numpy as np

from msm_gpu.apps.denoise import METHOD_DEFAULTS, denoise, psnr
from msm_gpu.apps.dictionaries import overcomplete_dct
from msm_gpu.apps.sparse_coding import l0_objective, l0_sweeps, sparse_code


def _problem(seed=0, n=300):
    rng = np.random.default_rng(seed)
    d = overcomplete_dct(4, 36)
    h = np.zeros((36, n))
    idx = rng.integers(0, 36, (3, n))
    for j in range(3):
        h[idx[j], np.arange(n)] = rng.normal(0, 5, n)
    y = d @ h + 0.3 * rng.standard_normal((16, n))
    g = d.T @ d
    return d, y, 0.5 * (g + g.T)


def test_l0_sweeps_equal_the_solver_without_retirement():
    d, y, g = _problem()
    h0 = np.zeros((36, y.shape[1]))
    got = l0_sweeps(g, -(d.T @ y), h0, 0.5, 7)
    ref = sparse_code(d, y, 0.5, init="zeros", max_iter=7, tol=0).x
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    assert np.all(h0 == 0)  # input not modified


def test_l0_sweeps_decrease_the_objective_every_sweep():
    d, y, g = _problem(1)
    lam = 0.8
    h = np.random.default_rng(2).standard_normal((36, y.shape[1]))
    values = [l0_objective(d, y, h, lam)]
    for _ in range(6):
        h = l0_sweeps(g, -(d.T @ y), h, lam, 1)
        values.append(l0_objective(d, y, h, lam))
    assert np.all(np.diff(values) <= 1e-9 * values[0])


def test_msm_defaults_denoise_and_explicit_values_still_win():
    assert METHOD_DEFAULTS["msm"]["init"] == "zeros"
    rng = np.random.default_rng(3)
    clean = np.kron(rng.integers(0, 255, (6, 6)), np.ones((6, 6))).astype(float)
    noisy = clean + 20 * rng.standard_normal(clean.shape)
    out, info = denoise(noisy, 20, n_train=200, n_atoms=64, return_info=True)
    assert psnr(clean, out) > psnr(clean, noisy) + 3
    out2 = denoise(noisy, 20, n_train=200, n_atoms=64, n_iter=0, code_iter=2, init="omp")
    assert out2.shape == clean.shape and not np.allclose(out, out2)
