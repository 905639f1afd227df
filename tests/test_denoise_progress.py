"""``denoise(..., verbose=True)`` shows progress for the final coding of every patch too,
and showing it changes no result."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

# the module, not the function that msm_gpu.apps exports under the same name
dn = importlib.import_module("msm_gpu.apps.denoise")

FAST = {"n_atoms": 64, "n_train": 300, "n_iter": 2, "h_iter": 3, "code_iter": 10}


@pytest.fixture(scope="module")
def noisy():
    rng = np.random.default_rng(3)
    img = np.full((40, 40), 60.0)
    img[8:30, 5:25] = 200.0
    return img + 20.0 * rng.standard_normal(img.shape)


@pytest.mark.parametrize(("method", "unit"), [("msm", "patch"), ("pgm", "it")])
def test_final_coding_shows_progress(noisy, method, unit, capsys, monkeypatch):
    monkeypatch.setattr(dn, "PROGRESS_MIN_BLOCK", 100)  # several blocks on a small image
    blocks = []
    real_sweeps = dn.l0_sweeps

    def counted_sweeps(gram, r, *args, **kwargs):
        blocks.append(r.shape[1])
        return real_sweeps(gram, r, *args, **kwargs)

    monkeypatch.setattr(dn, "l0_sweeps", counted_sweeps)
    quiet = dn.denoise(noisy, 20, method=method, **FAST)
    capsys.readouterr()
    quiet_blocks, blocks[:] = list(blocks), []
    loud = dn.denoise(noisy, 20, method=method, verbose=True, **FAST)
    err = capsys.readouterr().err
    n_patches = (40 - 8 + 1) ** 2
    assert f"coding patches ({method})" in err and f"{unit}/s" in err
    if method == "msm":  # every patch counted, block by block
        assert f"{n_patches}/{n_patches} [" in err
        assert quiet_blocks == [n_patches]
        assert len(blocks) > 1 and sum(blocks) == n_patches
    else:  # one tick per solver iteration
        assert "/10 [" in err
    # the dictionary learning's bar is still there, before the coding's
    assert err.index("L0 dictionary learning") < err.index("coding patches")
    np.testing.assert_array_equal(loud, quiet)


def test_no_progress_bar_without_verbose(noisy, capsys):
    dn.denoise(noisy, 20, **FAST)
    captured = capsys.readouterr()
    assert "coding patches" not in captured.err + captured.out
