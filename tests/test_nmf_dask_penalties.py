"""NMF of a dask array with scikit-learn's penalties and the issue-49 loop (no cluster:
dask's synchronous scheduler; tests/test_dask.py runs the road on a cluster)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

import msm_gpu as mg

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")


@pytest.fixture(autouse=True)
def _synchronous():
    with dask.config.set(scheduler="synchronous"), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        yield


def test_penalised_fit_follows_the_in_memory_fit():
    from sklearn.datasets import load_digits

    Y = load_digits().data[:300]
    rng = np.random.default_rng(3)
    W0, H0 = rng.uniform(size=(300, 5)), rng.uniform(size=(5, 64))
    kw = {"max_iter": 6, "tol": 0, "init": "custom", "alpha_W": 0.01, "l1_ratio": 0.5}
    ref = mg.NMF(5, **kw)
    W = ref.fit_transform(Y, W=W0, H=H0)
    model = mg.NMF(5, **kw)
    Wd = model.fit_transform(da.from_array(Y, chunks=(100, 64)), W=W0, H=H0)
    np.testing.assert_allclose(model.history_[:, 1], ref.history_[:, 1], rtol=1e-10)
    np.testing.assert_allclose(Wd.compute(), W, rtol=1e-8, atol=1e-10)
    assert model.reconstruction_err_ == pytest.approx(ref.reconstruction_err_, rel=1e-10)
    # the last W-step is exact: the dask transform gives the same W
    np.testing.assert_allclose(
        model.transform(da.from_array(Y, chunks=(100, 64))).compute(), W, rtol=1e-8, atol=1e-10
    )


def test_other_losses_are_refused_for_a_dask_array():
    Y = da.from_array(np.ones((20, 10)), chunks=(10, 10))
    with pytest.raises(ValueError, match="not available for a dask Y"):
        mg.NMF(3, beta_loss="kullback-leibler").fit(Y)
