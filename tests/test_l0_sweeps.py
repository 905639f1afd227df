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


def _reference_sweeps(a, r, x, lam, n_sweeps, theta=0.01):
    """Algorithm 1 of the paper one row at a time (omega = 1): B = L + D + theta I,
    C = A - B, z_j = argmin_t 1/2 B_jj t^2 + w_j t + lam [t != 0]; plain NumPy."""
    x = x.copy()
    n = a.shape[0]
    b = np.diag(a) + theta
    for _ in range(n_sweeps):
        z = np.zeros_like(x)
        for j in range(n):
            w = r[j] + a[j, :j] @ z[:j] + a[j, j + 1 :] @ x[j + 1 :] - theta * x[j]
            t = -w / b[j]
            z[j] = np.where(0.5 * b[j] * t * t + w * t + lam < 0, t, 0.0)
        x = z
    return x


def test_l0_sweeps_cpu_match_the_paper_rows_from_a_dense_warm_start():
    d, y, g = _problem(4, n=40)
    lam = 0.6
    h0 = np.random.default_rng(5).standard_normal((36, 40))  # every entry nonzero
    r = -(d.T @ y)
    got = l0_sweeps(g, r, h0, lam, 4, backend="cpu")
    want = _reference_sweeps(g, r, h0, lam, 4)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    assert np.count_nonzero(got) < got.size // 4  # the threshold zeroed most entries


def test_l0_sparse_sweeps_touch_only_their_column_range():
    from msm_gpu.backends.cpu.kernels import l0_sparse_sweeps

    d, y, g = _problem(6, n=30)
    r = -(d.T @ y)
    b = np.diag(g) + 0.01
    x = np.zeros((36, 30))
    l0_sparse_sweeps(g, b, 0.5, r, x, 10, 20, 3)
    assert np.all(x[:, :10] == 0) and np.all(x[:, 20:] == 0)
    want = _reference_sweeps(g, r[:, 10:20], np.zeros((36, 10)), 0.5, 3)
    np.testing.assert_allclose(x[:, 10:20], want, rtol=1e-10, atol=1e-10)
    assert np.count_nonzero(want) > 0


def test_l0_sweeps_cpu_threaded_ranges_and_one_signal():
    # enough columns for the sweep to be split over ranges (and threads, where there are 2+)
    d, y, g = _problem(7, n=24000)
    r = -(d.T @ y)
    got = l0_sweeps(g, r, np.zeros_like(r), 0.5, 8, backend="cpu")
    want = _reference_sweeps(g, r, np.zeros_like(r), 0.5, 8)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    one = l0_sweeps(g, r[:, 3], np.zeros(36), 0.5, 8, backend="cpu")
    assert one.shape == (36,)
    np.testing.assert_allclose(one, want[:, 3], rtol=1e-10, atol=1e-10)
