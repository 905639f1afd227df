"""A batch solved as a sequence of column blocks, so that its workspace stays bounded.

Every column of X is an independent problem (paper, eq. (1) separates over columns), so
a batch of r right-hand sides can be solved ``w`` columns at a time with the same answer:
the workspace (rescaled right-hand sides, iterates, the finish's per-column arrays) is
then that of ``w`` columns, and only the answer is as large as the batch.  The block
width comes from :mod:`msm_gpu._input.memory`; a block that still does not fit
(``MemoryError``, which CuPy's ``OutOfMemoryError`` is) is split in two and tried again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ._input import memory
from .arrays import namespace
from .result import SolveResult
from .solvers.loop import STOPPED_BY_CALLBACK


@dataclass(frozen=True)
class BlockPlan:
    """How a batch of ``n_cols`` columns is cut: ``width`` columns per block."""

    n_cols: int
    width: int
    budget: int
    per_column: int

    @property
    def n_blocks(self) -> int:
        return -(-self.n_cols // self.width)


def plan(rhs, *, n, m, max_memory, on_device) -> BlockPlan | None:
    """The blocks for a right-hand side ``rhs`` (n x r or m x r), or None for one 1-D rhs.

    ``rhs`` is only looked at (shape, itemsize); anything without a 2-D shape (lists,
    a single right-hand side) or without columns is solved whole.
    """
    shape = getattr(rhs, "shape", None)
    if shape is None or len(shape) != 2 or shape[1] == 0:  # validation names an empty rhs
        return None
    n_cols = int(shape[1])
    itemsize = getattr(getattr(rhs, "dtype", None), "itemsize", 8)
    per_column = memory.column_bytes(n, m, itemsize)
    if max_memory is None and memory.fits_without_asking(n_cols, per_column):
        return BlockPlan(n_cols, n_cols, memory.SMALL_BATCH_BYTES, per_column)
    budget = memory.workspace_budget(max_memory, on_device)
    # a default split keeps GEMM-wide blocks; a budget the user set is obeyed to the column
    min_width = memory.MIN_BLOCK_COLUMNS if max_memory is None else 1
    width = memory.block_columns(n_cols, per_column, budget, min_width)
    return BlockPlan(n_cols, width, budget, per_column)


def solve_in_blocks(solve_block, rhs, x0, block_plan, *, options, method) -> SolveResult:
    """Solve ``rhs`` block by block: ``solve_block(rhs_cols, x0_cols, time_limit)``.

    ``solve_block`` returns the :class:`SolveResult` of its columns.  Blocks run in
    order; a ``time_limit`` counts for the whole batch (the first block always runs);
    once it has passed or a callback has stopped a block, the remaining columns are
    returned at their start (``x0`` or zero), not converged.  ``verbose`` prints one
    line per block.
    """
    started = time.perf_counter()
    n_cols, width = block_plan.n_cols, block_plan.width
    time_limit = options.get("time_limit")
    verbose = bool(options.get("verbose", False))
    if block_plan.n_blocks == 1:
        res = solve_block(rhs, x0, time_limit)
        res.info.update(n_blocks=1, block_columns=n_cols)
        return res

    results, x_out, stop_message = [], None, None
    converged = np.zeros(n_cols, dtype=bool)
    n_iter = np.zeros(n_cols, dtype=np.int64)
    start = 0
    while start < n_cols:
        remaining = None if time_limit is None else time_limit - (time.perf_counter() - started)
        if remaining is not None and not results:
            remaining = max(remaining, 1e-9)  # the first block always runs
        if remaining is not None and remaining <= 0 and results:
            stop_message = "time limit reached before every column block ran"
            break
        stop = min(start + width, n_cols)
        x0_cols = None if x0 is None else x0[:, start:stop]
        try:
            res = solve_block(rhs[:, start:stop], x0_cols, remaining)
        except MemoryError as exc:  # CuPy's OutOfMemoryError included: split the block
            if width == 1:
                raise MemoryError(
                    f"one column does not fit: {block_plan.per_column} bytes of workspace "
                    f"per column (budget {block_plan.budget} bytes); lower the problem "
                    "size or free memory"
                ) from exc
            width = max(1, width // 2)
            continue
        if x_out is None:
            xp = namespace(res.x)
            x_out = xp.empty((res.x.shape[0], n_cols), dtype=res.x.dtype)
        x_out[:, start:stop] = res.x
        converged[start:stop] = np.asarray(res.converged_columns, dtype=bool)
        n_iter[start:stop] = np.asarray(res.n_iter_columns)
        res.x = None  # the block's answer lives in x_out now
        results.append((start, stop, res))
        if verbose:
            print(f"msm_gpu: columns {stop} of {n_cols} done ({len(results)} blocks)")
        start = stop
        if res.message.startswith(STOPPED_BY_CALLBACK):
            stop_message = res.message
            break
    if start < n_cols:  # stopped early: the rest stays at its start, not converged
        xp = namespace(x_out)
        x_out[:, start:] = 0 if x0 is None else xp.asarray(x0[:, start:], dtype=x_out.dtype)
    out = SolveResult.from_blocks(
        [res for _, _, res in results],
        x_out,
        converged_columns=converged,
        n_iter_columns=n_iter,
        started=started,
        method=method,
    )
    out.info.update(combined_info(results, n_cols))
    out.info["block_columns"] = block_plan.width
    if stop_message is not None and stop_message not in out.message:
        out.message = f"{out.message}; {stop_message}"
    return out


def combined_info(results, n_cols):
    """Per-column arrays concatenated, integer counters summed, the rest from block one."""
    first = results[0][2].info
    info = {}
    for key, value in first.items():
        if isinstance(value, np.ndarray) and value.ndim >= 1:
            width = results[0][1] - results[0][0]
            if value.shape[-1] == width:
                full = np.zeros(value.shape[:-1] + (n_cols,), dtype=value.dtype)
                for start, stop, res in results:
                    full[..., start:stop] = res.info[key]
                info[key] = full
                continue
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            info[key] = int(sum(res.info.get(key, 0) for _, _, res in results))
            continue
        info[key] = value
    info["n_blocks"] = len(results)
    return info
