"""A roofline model of one MSM iteration on a GPU, and the layout rule built on it.

For a shape (n rows, ncols active columns, itemsize) the model counts, per iteration,

* bytes moved to/from device memory (HBM) and through L2 only,
* FMAs (the n^2 multiply-adds per column that every layout does),
* issued warp-instructions, from the loops of ``kernels/msm_sweep.cu`` (one thread per
  column, so a warp issues the per-thread count once for 32 columns),
* kernel launches,

and predicts ``max(HBM bytes / bandwidth, L2 bytes / L2 bandwidth, FMAs / FMA rate,
instructions / issue rate, latency chain) + launches * launch latency`` for each feasible
layout:

``fused``     one kernel, the tile resident in shared memory, A staged in shared memory;
``resident``  the same kernel with A read through L1/L2 (when A does not fit in shared);
``panel``     per panel one cuBLAS GEMM ``W = afold[P, :] @ Y`` + the in-panel kernel.

The same model prices one GEMM ``A @ X`` (cuBLAS at its roofline: FP64 tensor cores for
float64, FP32 FMA for float32 since TF32 is never allowed).  :func:`choose_layout` picks
the layout with the smallest predicted time; the CUDA backend calls it, and
``benchmarks/gpu_model.py`` prints the tables.  The instruction counts are estimates read
off the kernel source (per inner step: one shared load of z_i, one or two vector loads of
A, ROW_BLOCK FMAs, half an instruction of loop overhead), not measurements.

The latency chain, fitted to measured sweeps, not read off the source.  One thread sweeps
one column, so a warp's inner steps form a dependent chain: the fused and resident sweeps
take ``waves x steps x c`` cycles, with resident blocks per SM counted from shared
memory, registers and warp slots (:func:`blocks_per_sm`) and c per step by where A is
read from (the ``Device.step_cycles_*`` parameters).  Without this term the model
ignores the chain and the rule can pick a layout far slower than the best; the fit and
how close the rule's picks came to the fastest configuration: docs/development.md, "The
GPU layout model".
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...penalties import CODE_BOX, CODE_L0, CODE_L1, CODE_LP
from .geometry import (
    DEFAULT_SMEM_BUDGET,
    ROW_BLOCK,
    ROWTAB,
    TILE_WIDTHS,
    fused_shared_bytes,
    max_panel_rows,
    padded,
    panel_shared_bytes,
)


@dataclass(frozen=True)
class Device:
    """Rates of a GPU (parameters of the model; defaults: H100 SXM)."""

    name: str = "H100"
    hbm_bytes_per_s: float = 3.35e12
    l2_bytes_per_s: float = 7.0e12
    fp64_flops: float = 33.5e12  # FMA pipes (an FMA is 2 flops)
    fp64_tensor_flops: float = 67e12  # DMMA, cuBLAS DGEMM only
    fp32_flops: float = 67e12
    sms: int = 132
    schedulers_per_sm: int = 4
    clock_hz: float = 1.755e9
    smem_per_sm: int = 228 * 1024
    l1_bytes: int = 128 * 1024  # what is left of L1 next to the shared memory we use
    launch_s: float = 4e-6
    latency_s: float = 700e-9  # DRAM latency under load (Little's law)
    registers_per_sm: int = 65536
    max_warps_per_sm: int = 64
    #: Cycles one warp spends on one inner step of the outer-term loop (a load of z_i/x_i,
    #: a vector load of A[i, J], ROW_BLOCK FMAs: a dependent chain), by where A is read
    #: from and the itemsize.  Fitted to the sweeps ``benchmarks/bench_gpu_layouts.py``
    #: timed on an H100 (docs/development.md, "The GPU layout model").
    step_cycles_smem: float = 90.0
    step_cycles_global: tuple = (140.0, 230.0)  # float32, float64

    @property
    def issue_per_s(self) -> float:
        return self.sms * self.schedulers_per_sm * self.clock_hz


H100 = Device()
H200 = replace(H100, name="H200", hbm_bytes_per_s=4.8e12)
DEVICES = {"H100": H100, "H200": H200}

#: Warp-instructions of one prox + statistics + row loads/stores, per row and column.
ROW_COST = {CODE_BOX: 30, CODE_L1: 36, CODE_L0: 40, CODE_LP: 140}

#: Registers per thread of the kernels (ptxas, sm_90, nvcc 13.0, the most over the
#: penalty codes): (layout kind, itemsize) -> registers.
REGISTERS = {("fused", 8): 76, ("fused", 4): 48, ("panel", 8): 72, ("panel", 4): 48}


def blocks_per_sm(dev, smem_per_block, tw, registers):
    """Blocks of tw threads resident on one SM (shared memory, registers, warp slots)."""
    by_smem = dev.smem_per_sm // max(int(smem_per_block), 1)
    by_regs = dev.registers_per_sm // max(int(registers) * tw, 1)
    by_warps = dev.max_warps_per_sm // max(tw // 32, 1)
    return max(1, min(by_smem, by_regs, by_warps, 32))


def _prox_steps(code):
    """A row's prox and statistics in inner-step units (about 3 instructions a step)."""
    return ROW_COST.get(code, ROW_COST[CODE_LP]) / 3.0


def latency_seconds(dev, ncols, tw, smem_per_block, registers, steps, step_cycles):
    """Time of a latency-bound sweep: waves of resident warps, each a chain of ``steps``
    inner steps of ``step_cycles`` cycles (one thread per column, no overlap inside a warp).
    """
    warps = -(-int(ncols) // tw) * (tw // 32)
    per_wave = dev.sms * blocks_per_sm(dev, smem_per_block, tw, registers) * (tw // 32)
    waves = -(-warps // per_wave)
    return waves * steps * step_cycles / dev.clock_hz


@dataclass(frozen=True)
class Cost:
    """Counts for one iteration and the predicted time (seconds)."""

    layout: str
    hbm_bytes: float
    l2_bytes: float
    fmas: float
    instructions: float  # warp-instructions
    launches: int
    seconds: float
    tw: int = 0
    a_in_smem: bool = False
    panel: int = 0


def _time(
    dev, itemsize, hbm, l2, fmas, instr, launches, *, bw_scale=1.0, tensor=False, latency=0.0
):
    flops = dev.fp32_flops if itemsize == 4 else dev.fp64_flops
    if tensor and itemsize == 8:
        flops = dev.fp64_tensor_flops
    return (
        max(
            hbm / (dev.hbm_bytes_per_s * bw_scale),
            l2 / dev.l2_bytes_per_s,
            fmas / (flops / 2),
            instr / dev.issue_per_s,
            latency,
        )
        + launches * dev.launch_s
    )


def _bw_scale(dev, smem_per_block, tw, loads_in_flight):
    """Fraction of the bandwidth reachable: bytes in flight per SM (resident blocks x tw
    threads x independent loads each) against what Little's law asks for."""
    blocks = min(dev.smem_per_sm // max(smem_per_block, 1), 2048 // tw, 32)
    inflight = blocks * tw * loads_in_flight * 8
    need = dev.hbm_bytes_per_s * dev.latency_s / dev.sms
    return min(1.0, inflight / need)


def gemm_cost(n, ncols, itemsize, dev=H100) -> Cost:
    """One cuBLAS GEMM A @ X (n x n times n x ncols), at its roofline."""
    hbm = (2.0 * n * ncols + n * n) * itemsize
    fmas = float(n) * n * ncols
    t = _time(dev, itemsize, hbm, 0.0, fmas, 0.0, 1, tensor=True)
    return Cost("gemm", hbm, 0.0, fmas, 0.0, 1, t)


def _sweep_instructions(n_rows, outer_rows, itemsize, code):
    """Per-thread instructions: outer-term passes + per-row work."""
    step = 1 + (ROW_BLOCK * itemsize) / 16 + ROW_BLOCK + 0.5
    return outer_rows * step + n_rows * ROW_COST.get(code, ROW_COST[CODE_LP])


def fused_cost(n, ncols, itemsize, code, tw, a_in_smem, dev=H100) -> Cost:
    """The fused layout (``resident`` when A is read through L1/L2)."""
    np_ = padded(n)
    smem = fused_shared_bytes(n, tw, itemsize, a_in_smem)
    blocks = -(-ncols // tw)
    # per thread: per row block, one pass over the np - ROW_BLOCK outer rows
    per_thread = _sweep_instructions(n, (np_ // ROW_BLOCK) * (np_ - ROW_BLOCK), itemsize, code)
    per_thread += 2 * (ROWTAB * np_ + (np_ * np_ if a_in_smem else 0)) / tw  # staging
    instr = blocks * (tw // 32) * per_thread
    hbm = 3.0 * n * ncols * itemsize + 40.0 * ncols  # X, R in; X out; stats, index
    a_bytes = np_ * np_ * itemsize
    if a_in_smem:
        l2 = blocks * (a_bytes + ROWTAB * np_ * itemsize)
    elif a_bytes <= dev.l1_bytes:
        l2 = dev.sms * a_bytes  # A stays in each SM's L1
    else:
        l2 = blocks * (tw // 32) * a_bytes  # every warp streams A from L2
    fmas = float(np_) * np_ * ncols
    steps = (np_ // ROW_BLOCK) * (np_ - ROW_BLOCK) + n * _prox_steps(code)
    cycles = dev.step_cycles_smem if a_in_smem else dev.step_cycles_global[itemsize == 8]
    latency = latency_seconds(dev, ncols, tw, smem, REGISTERS["fused", itemsize], steps, cycles)
    t = _time(
        dev,
        itemsize,
        hbm,
        l2,
        fmas,
        instr,
        1,
        bw_scale=_bw_scale(dev, smem, tw, min(n, 8)),
        latency=latency,
    )
    layout = "fused" if a_in_smem else "resident"
    return Cost(layout, hbm, l2, fmas, instr, 1, t, tw=tw, a_in_smem=a_in_smem)


def panel_cost(n, ncols, itemsize, code, tw, panel, dev=H100) -> Cost:
    """The panel layout: per panel one GEMM (read Y, write W) and one in-panel kernel."""
    total = Cost("panel", 0.0, 0.0, 0.0, 0.0, 0, 0.0, tw=tw, panel=panel)
    seconds = 0.0
    for p0 in range(0, n, panel):
        m = min(panel, n - p0)
        mp = padded(m)
        g_hbm = (n * ncols + m * ncols + m * n) * itemsize
        g_fma = float(m) * n * ncols
        seconds += _time(dev, itemsize, g_hbm, 0.0, g_fma, 0.0, 1, tensor=True)
        k_hbm = 4.0 * m * ncols * itemsize + (72.0 if p0 else 40.0) * ncols
        per_thread = _sweep_instructions(
            m, (mp // ROW_BLOCK) * (mp - ROW_BLOCK) / 2, itemsize, code
        )
        blocks = -(-ncols // tw)
        k_instr = blocks * (tw // 32) * per_thread
        k_fma = float(mp) * mp / 2 * ncols
        smem = panel_shared_bytes(m, tw, itemsize)
        steps = (mp // ROW_BLOCK) * (mp - ROW_BLOCK) / 2 + m * _prox_steps(code)
        latency = latency_seconds(
            dev, ncols, tw, smem, REGISTERS["panel", itemsize], steps, dev.step_cycles_smem
        )
        seconds += _time(
            dev,
            itemsize,
            k_hbm,
            0.0,
            k_fma,
            k_instr,
            1,
            bw_scale=_bw_scale(dev, smem, tw, 3),
            latency=latency,
        )
        total = replace(
            total,
            hbm_bytes=total.hbm_bytes + g_hbm + k_hbm,
            fmas=total.fmas + g_fma + k_fma,
            instructions=total.instructions + k_instr,
            launches=total.launches + 2,
        )
    return replace(total, seconds=seconds)


def candidates(n, ncols, itemsize, code, panel=None, dev=H100, smem_budget=DEFAULT_SMEM_BUDGET):
    """Every feasible (layout, tile width) with its cost."""
    out = []
    for tw in TILE_WIDTHS:
        for a_in_smem in (True, False):
            if fused_shared_bytes(n, tw, itemsize, a_in_smem) <= smem_budget:
                out.append(fused_cost(n, ncols, itemsize, code, tw, a_in_smem, dev))
        rows = max_panel_rows(itemsize, tw, smem_budget)
        m = min(n, rows if panel is None else min(int(panel), rows))
        if m >= 1 and panel_shared_bytes(m, tw, itemsize) <= smem_budget:
            out.append(panel_cost(n, ncols, itemsize, code, tw, m, dev))
    return out


def choose_layout(n, ncols, itemsize, code, panel=None, dev=H100, smem_budget=DEFAULT_SMEM_BUDGET):
    """The layout rule: the feasible candidate with the smallest predicted time.

    Parameters
    ----------
    n, ncols : int
        Rows and active columns.
    itemsize : int
        4 or 8.
    code : int
        Penalty code (prices the prox).
    panel : int, optional
        Rows per panel for the panel layout (default: the most that fit).
    dev : Device
        Rates of the GPU.
    smem_budget : int
        Shared memory per block.

    Returns
    -------
    Cost
        ``layout`` ("fused", "resident" or "panel"), ``tw``, ``a_in_smem``, ``panel``.
    """
    options = candidates(n, max(int(ncols), 1), itemsize, code, panel, dev, smem_budget)
    if not options:
        raise ValueError(f"no layout fits n = {n} in {smem_budget} bytes of shared memory")
    # ties (e.g. both at the bandwidth floor) go to the wider tile, then to the fused kernel
    order = {"fused": 0, "resident": 1, "panel": 2}
    return min(options, key=lambda c: (round(c.seconds, 12), order[c.layout], -c.tw))
