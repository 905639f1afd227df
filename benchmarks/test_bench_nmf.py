"""pytest-benchmark cases for NMF: one per solver on a mid-size problem.

Run: ``python -m pytest benchmarks/test_bench_nmf.py --benchmark-enable``
(the table of ``bench_nmf.py`` is the number to report; these keep history).
Each case times 10 outer iterations (tol=0) from the same start on a 1000 x 400 dense
matrix and on a 2000 x 10000 sparse (1%) document-term matrix, rank 20.
"""

from __future__ import annotations

import numpy as np
import pytest
from bench_nmf import init_factors, zipf_corpus

from msm_gpu.apps import nmf
from msm_gpu.factorization.solvers import SOLVERS

K = 20


def _dense():
    rng = np.random.default_rng(0)
    return rng.random((1000, K)) @ rng.random((K, 400)) + 0.1 * rng.random((1000, 400))


_DATA = {"dense": _dense, "sparse": lambda: zipf_corpus(2000, 10000, density=0.01)}


@pytest.mark.parametrize("kind", sorted(_DATA))
@pytest.mark.parametrize("solver", SOLVERS)
def test_nmf_10_iterations(benchmark, solver, kind):
    y = _DATA[kind]()
    W0, H0 = init_factors(y, K, 0)

    def run():
        return nmf(y, K, solver=solver, init="custom", W=W0, H=H0, max_iter=10, tol=0)

    run()  # JIT / cache warm-up
    W, H, info = benchmark(run)
    assert info["history"][-1, 1] < info["history"][0, 1]


# -- issue 49: other losses, penalties, mini-batches ----------------------------------------


@pytest.mark.parametrize("loss", ["kullback-leibler", "itakura-saito"])
def test_nmf_beta_10_iterations(benchmark, loss):
    from bench_nmf_beta import spectrogram, text_counts

    y = text_counts() if loss == "kullback-leibler" else spectrogram()
    W0, H0 = init_factors(y, 10, 0)

    def run():
        return nmf(y, 10, beta_loss=loss, init="custom", W=W0, H=H0, max_iter=10, tol=0)

    run()
    W, H, info = benchmark(run)
    assert info["history"][-1, 1] < info["history"][0, 1]


def test_nmf_regularised_10_iterations(benchmark):
    y = _dense()
    W0, H0 = init_factors(y, K, 0)

    def run():
        return nmf(y, K, init="custom", W=W0, H=H0, max_iter=10, tol=0, alpha_W=1e-3, l1_ratio=0.5)

    run()
    W, H, info = benchmark(run)
    assert info["history"][-1, 1] < info["history"][0, 1]


@pytest.mark.parametrize("loss", ["frobenius", "kullback-leibler"])
def test_minibatch_nmf_2_passes(benchmark, loss):
    import msm_gpu as mg

    y = zipf_corpus(2000, 10000, density=0.01)

    def run():
        return mg.MiniBatchNMF(
            K, beta_loss=loss, batch_size=500, max_iter=2, tol=0, random_state=0
        ).fit(y)

    run()
    model = benchmark(run)
    assert model.n_steps_ == 8
