"""Shared helpers for the test suite: random problems with a known structure."""

from __future__ import annotations

import numpy as np
import pytest


def random_psd(rng, n, *, rank=None, dtype=np.float64):
    """A = C'C for a random C with ``rank`` rows (full rank when rank >= n)."""
    rows = n + 5 if rank is None else rank
    c = rng.normal(size=(rows, n))
    return (c.T @ c / rows).astype(dtype)


def objective(a, r, x, penalty):
    """F(X) = 1/2 tr(X'AX) + tr(X'R) + sum h(X), computed directly in float64."""
    a = np.asarray(a, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    r = np.asarray(r, dtype=np.float64)
    return float(0.5 * np.sum(x * (a @ x)) + np.sum(x * r) + np.sum(penalty.value(x)))


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(scope="session")
def emu(tmp_path_factory):
    """The emulated CUDA kernels of the repository (tests/cuda_emu), built once per test
    session, or a skip where no C++ compiler is found."""
    from cuda_emu.harness import build_emulator, compiler_unavailable_reason

    reason = compiler_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    return build_emulator(tmp_path_factory.mktemp("cuda_emu"))
