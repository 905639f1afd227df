"""The order of the examples in the gallery (sphinx-gallery's ``within_subsection_order``)."""

from __future__ import annotations

from pathlib import Path

#: Solvers first, then the applications, then scale-out.
ORDER = (
    "plot_nnls_vs_scipy.py",
    "plot_nmf_digits.py",
    "plot_denoise.py",
    "plot_logistic_path.py",
    "plot_dask_nnls.py",
    "plot_gpu_backend.py",
)


class ExampleOrder:
    """Sort key: the position in :data:`ORDER`; examples not listed come last, by name."""

    def __init__(self, src_dir):
        self.src_dir = src_dir

    def __call__(self, filename) -> tuple[int, str]:
        name = Path(filename).name
        return (ORDER.index(name) if name in ORDER else len(ORDER), name)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"
