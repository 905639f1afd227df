"""Penalty codes from one source: every penalty through the three implementations, and
an unknown code rejected on every path (reference, Numba, CPU backend, CUDA)."""

from __future__ import annotations

import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cuda_emu.harness import build_emulator, compiler_unavailable_reason  # noqa: E402
from cuda_emu.reference import PENALTIES, make_problem, numba_sweep  # noqa: E402

from msm_gpu import penalties as pen
from msm_gpu.backends.cpu.backend import CpuBackend
from msm_gpu.backends.cpu.kernels import prox_scalar
from msm_gpu.backends.cuda.backend import penalty_prelude

UNKNOWN = max(pen.PENALTY_CODES.values()) + 1
needs_cxx = pytest.mark.skipif(
    compiler_unavailable_reason() is not None, reason=str(compiler_unavailable_reason())
)


def test_codes_are_the_penalty_classes_codes():
    assert pen.PENALTY_CODES == {"BOX": 0, "L1": 1, "L0": 2, "LP": 3}
    classes = [pen.Zero(), pen.Box(), pen.NonNeg(), pen.L1(1.0), pen.NonNegL1(1.0)]
    classes += [pen.L0(1.0), pen.Lp(1.0)]
    assert {p.code for p in classes} == set(pen.PENALTY_CODES.values())


def test_prelude_defines_every_code():
    text = penalty_prelude()
    for key, code in pen.PENALTY_CODES.items():
        assert f"#define MSM_CODE_{key} {code}\n" in text
        assert f"X({key.lower()}, MSM_CODE_{key})" in text


@needs_cxx
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", list(PENALTIES))
def test_every_penalty_through_three_implementations(emu, name, dtype):
    """Reference (penalties.py), Numba (prox_scalar) and device (msm_prox) agree."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))  # hash() varies per process
    penalty = PENALTIES[name](1, rng)
    w = (rng.standard_normal(400) * 3).astype(dtype)
    b = rng.uniform(0.1, 3.0, 400).astype(dtype)
    row = penalty.table(1, np.float64)[0]
    ref = penalty.prox(w.astype(np.float64), b.astype(np.float64))
    numba = np.array(
        [prox_scalar(penalty.code, float(wi), float(bi), *row) for wi, bi in zip(w, b, strict=True)]
    )
    z, hz = emu.prox(penalty.code, w, b, row.astype(dtype))
    tol = 1e-12 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(numba[:, 0], ref, rtol=1e-12, atol=1e-12)
    # the device prox multiplies by 1/b: one rounding apart, so a threshold may flip
    # only where the reference is within rounding of it (none of these draws)
    np.testing.assert_allclose(z, ref, rtol=tol, atol=tol)
    # h(z) with the bounds the device saw (rounded to dtype: a float32 z clipped to a
    # float32 bound may sit just outside the float64 one)
    lam, lb, ub, p = row.astype(dtype).astype(np.float64)
    h_ref = pen.penalty_value(z.astype(np.float64), penalty.code, lam, lb, ub, p)
    np.testing.assert_allclose(hz, h_ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("code", [UNKNOWN, UNKNOWN + 3, -1, -2])
def test_unknown_code_reference(code):
    # codes below and above the known ones: no fall-through to any formula
    x = np.ones(3)
    with pytest.raises(ValueError, match="unknown penalty code"):
        pen.penalty_prox(x, x, code, 0.5, -np.inf, np.inf, 0.5)
    with pytest.raises(ValueError, match="unknown penalty code"):
        pen.penalty_value(x, code, 0.5, -np.inf, np.inf, 0.5)


def test_unknown_code_numba():
    z, hz = prox_scalar(UNKNOWN, 1.0, 2.0, 0.5, -np.inf, np.inf, 0.5)
    assert np.isnan(z) and np.isnan(hz)  # flagged, not the Lp prox
    problem = make_problem(6, 3, np.float64, "lp_half")
    problem.penalty.code = UNKNOWN
    with pytest.raises(ValueError, match="unknown penalty code"):
        numba_sweep(problem, problem.x0.copy(), 4)


def test_unknown_code_cpu_backend():
    p = make_problem(6, 3, np.float64, "l1")
    with pytest.raises(ValueError, match=f"unknown penalty code {UNKNOWN}"):
        CpuBackend().start(p.a, p.r, p.x0, p.splitting, p.table, UNKNOWN, 4)


@needs_cxx
def test_unknown_code_emulated_device(emu):
    x = np.ones(3)
    with pytest.raises(ValueError, match="unknown penalty code"):
        emu.prox(UNKNOWN, x, x, np.zeros(4))


@needs_cxx
def test_missing_code_does_not_compile(tmp_path):
    codes = {k: v for k, v in pen.PENALTY_CODES.items() if k != "L0"}
    prelude = penalty_prelude(codes)
    with pytest.raises(RuntimeError, match="penalty codes missing"):
        build_emulator(tmp_path, prelude=prelude)
