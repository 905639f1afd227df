"""Launch arithmetic, the cuBLAS call and the roofline layout rule, without a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from msm_gpu.backends.cuda.backend import CUBLAS_COMPUTE_32F_PEDANTIC, gemm_call
from msm_gpu.backends.cuda.geometry import (
    DEFAULT_SMEM_BUDGET,
    MAX_GRID_X,
    MAX_LAUNCH_COLS,
    effective_panel,
    fused_shared_bytes,
    kernel_name,
    launches,
    max_panel_rows,
    panel_shared_bytes,
)
from msm_gpu.backends.cuda.model import H100, H200, candidates, choose_layout, gemm_cost
from msm_gpu.penalties import PENALTY_CODES


def check_cover(plan, ncols, tw, max_cols):
    assert plan[0].col_offset == 0
    for g, nxt in zip(plan, plan[1:] + [None], strict=True):
        assert 1 <= g.ncols <= max_cols
        assert g.grid[0] * tw >= g.ncols > (g.grid[0] - 1) * tw
        assert g.grid[0] <= MAX_GRID_X and g.block == (tw, 1, 1)
        end = g.col_offset + g.ncols
        assert end == (nxt.col_offset if nxt is not None else ncols)


@pytest.mark.parametrize("ncols", [1, 31, 32, 33, 1000, 2**31 - 1, 2**31, 5 * 2**31 + 7])
@pytest.mark.parametrize("tw", [32, 256])
def test_launches_cover_every_column_within_32_bit_limits(ncols, tw):
    plan = launches("k", ncols, tw, 1024)  # arithmetic only: nothing is allocated
    check_cover(plan, ncols, tw, MAX_LAUNCH_COLS)
    assert len(plan) == -(-ncols // (MAX_LAUNCH_COLS // tw * tw))


def test_launches_split_at_max_cols():
    plan = launches("k", 1000, 64, 0, max_cols=300)  # 256 columns (whole tiles) a launch
    assert [g.ncols for g in plan] == [256, 256, 256, 232]
    check_cover(plan, 1000, 64, 300)
    plan = launches("k", 10, 64, 0, max_cols=3)  # fewer than a tile: partial tiles
    check_cover(plan, 10, 64, 3)


def test_launches_reject_bad_input():
    for bad in (dict(ncols=0, tw=32), dict(ncols=5, tw=48), dict(ncols=5, tw=512)):
        with pytest.raises(ValueError):
            launches("k", bad["ncols"], bad["tw"], 0)


def test_shared_bytes_and_panel_bound():
    assert fused_shared_bytes(5, 32, 8, True) == (8 * 8 + 8 * 8 + 8 * 32) * 8
    assert fused_shared_bytes(5, 32, 4, False) == (8 * 8 + 8 * 32) * 4
    assert panel_shared_bytes(6, 64, 8) == (64 + 64 + 8 * 64) * 8
    for itemsize in (4, 8):
        m = max_panel_rows(itemsize, 64)
        assert m % 4 == 0
        assert panel_shared_bytes(m, 64, itemsize) <= DEFAULT_SMEM_BUDGET
        assert panel_shared_bytes(m + 4, 64, itemsize) > DEFAULT_SMEM_BUDGET
    assert effective_panel(1, 64) == 1
    assert effective_panel(100, 64) == 64
    assert effective_panel(5000, 4096) == max_panel_rows(8, 64)
    with pytest.raises(ValueError):
        effective_panel(10, 0)


def test_kernel_names_come_from_the_codes():
    assert kernel_name("fused", PENALTY_CODES["L1"], 8) == "msm_fused_l1_f64"
    assert kernel_name("panel", PENALTY_CODES["LP"], 4) == "msm_panel_lp_f32"
    for bad in (dict(layout="x", code=0, s=8), dict(layout="fused", code=9, s=8)):
        with pytest.raises(ValueError):
            kernel_name(bad["layout"], bad["code"], bad["s"])
    with pytest.raises(ValueError, match="unknown penalty code"):
        kernel_name("fused", 4, 8)


def colmajor_gemm(args, buffers):
    """What cuBLAS computes for gemmEx(args): C = A @ B, column-major, no transposes."""
    ta, tb, m, n, k, _, a, _, lda, b, _, ldb, _, c, _, ldc, _, _ = args
    assert ta == tb == 0
    a_ = buffers[a][: lda * k].reshape(k, lda).T[:m]  # column j at a[j * lda]
    b_ = buffers[b][: ldb * n].reshape(n, ldb).T[:k]
    buffers[c][: ldc * n].reshape(n, ldc).T[:m] = a_ @ b_


@pytest.mark.parametrize("itemsize", [4, 8])
def test_gemm_call_is_the_row_major_product_with_pinned_compute(itemsize):
    rng = np.random.default_rng(0)
    m, n, ld = 3, 5, 7
    a = rng.standard_normal((m, n))
    y = rng.standard_normal((n, ld))
    w = np.zeros((m, ld))
    args = gemm_call(m, n, ld, itemsize, "A", "Y", "W", 0, 0)
    colmajor_gemm(args, {"A": a.reshape(-1), "Y": y.reshape(-1), "W": w.reshape(-1)})
    np.testing.assert_allclose(w, a @ y, rtol=1e-13)
    assert args[16] == (CUBLAS_COMPUTE_32F_PEDANTIC if itemsize == 4 else 71)  # never TF32
    with pytest.raises(ValueError):
        gemm_call(2, 2, 2**31, itemsize, 0, 0, 0, 0, 0)


# -- the model and the rule ---------------------------------------------------------------


def test_gemm_cost_is_a_roofline():
    g = gemm_cost(64, 10**6, 8)
    assert g.hbm_bytes == (2 * 64 * 10**6 + 64 * 64) * 8
    assert g.seconds == pytest.approx(g.hbm_bytes / H100.hbm_bytes_per_s + H100.launch_s)
    assert gemm_cost(64, 10**6, 8, H200).seconds < g.seconds


def test_fused_layout_reads_x_and_r_once():
    (c,) = [c for c in candidates(20, 10**6, 4, 0) if c.layout == "fused" and c.tw == 256]
    # the three-pass floor (read X and R, write X) plus stats and the index list
    assert c.hbm_bytes == 3 * 20 * 10**6 * 4 + 40 * 10**6
    assert c.launches == 1


def test_rule_picks_the_cheapest_feasible_layout():
    for n, r, s in [(8, 10**6, 8), (64, 10**5, 4), (256, 10**5, 8), (1000, 4096, 4)]:
        best = choose_layout(n, r, s, 0)
        options = candidates(n, r, s, 0)
        assert best.seconds == min(c.seconds for c in options)
    assert choose_layout(8, 10**6, 8, 0).layout == "fused"
    assert choose_layout(1500, 3, 8, 0, 128).layout == "panel"
    with pytest.raises(ValueError):
        choose_layout(4000, 10, 8, 0, smem_budget=1024)
