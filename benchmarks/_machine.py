"""Machine, library and BLAS facts printed at the top of every benchmark."""

from __future__ import annotations

import os
import platform


def describe() -> str:
    import numba
    import numpy as np
    from threadpoolctl import threadpool_info

    lines = [
        f"machine: {platform.machine()} {platform.processor() or ''}".rstrip()
        + f", {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}",
        f"python {platform.python_version()}, numpy {np.__version__}, numba {numba.__version__}"
        f" ({numba.get_num_threads()} threads, layer {numba.config.THREADING_LAYER})",
    ]
    for lib in threadpool_info():
        lines.append(
            f"  {lib['user_api']}: {lib['internal_api']} {lib.get('version')} "
            f"({lib.get('architecture', '?')}, {lib['num_threads']} threads) {lib['filepath']}"
        )
    env = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if k in os.environ}
    if env:
        lines.append(f"  environment: {env}")
    return "\n".join(lines)
