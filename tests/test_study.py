"""The Figure 1 study and the ``msm-gpu demo`` command, end to end at a small size."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from msm_gpu.demo import cli, study


@pytest.fixture(scope="module")
def small_study():
    return study.run_figure1(size=(20, 60), lam=0.01, seed=3, iters=60)


def test_run_figure1_histories_and_table(small_study):
    assert set(small_study["problems"]) == {"nnls", "l0"}
    for name, prob in small_study["problems"].items():
        assert [row["method"] for row in prob["rows"]] == list(study.METHODS)
        lows = []
        for method, hist in prob["histories"].items():
            f, t = hist["objective"], hist["time"]
            assert f.shape == (61,) and t.shape == (61,)
            assert np.all(np.diff(t) >= 0) and t[0] >= 0
            # x0 = 0: F(x0) = 1/2 ||d||^2, the same for every method
            assert f[0] == pytest.approx(prob["histories"]["msm"]["objective"][0])
            if method in ("msm", "pgm", "pgm_ls"):
                assert np.all(np.diff(f) <= 1e-10 * abs(f[0])), (name, method)
            lows.append(f.min())
        assert prob["best"] == min(lows)
        winners = [r for r in prob["rows"] if r["iters_to_best"] is not None]
        assert winners  # whoever found F_best is within tolerance of it
        for row in winners:
            k = row["iters_to_best"]
            f = prob["histories"][row["method"]]["objective"]
            assert f[k] - prob["best"] <= study.REL_TOL * max(1, abs(prob["best"]))
            assert k == 0 or f[k - 1] - prob["best"] > study.REL_TOL * max(1, abs(prob["best"]))
            assert row["seconds_to_best"] == prob["histories"][row["method"]]["time"][k]
        for row in prob["rows"]:
            assert row["objective_at"][50] == prob["histories"][row["method"]]["objective"][50]
            assert 100 not in row["objective_at"]
    text = study.format_table(small_study)
    for label in study.LABELS.values():
        assert text.count(f"\n{label} ") == 2
    assert "F_50" in text and "F_100" not in text


def test_nnls_objective_is_least_squares(small_study):
    c, d = study.figure1_data((20, 60), seed=3)
    assert small_study["problems"]["nnls"]["histories"]["pgm"]["objective"][0] == pytest.approx(
        0.5 * d @ d
    )
    # no method beats the optimum, and the best one gets close to it in 60 iterations
    import scipy.optimize

    _, rnorm = scipy.optimize.nnls(c, d)
    best = small_study["problems"]["nnls"]["best"]
    assert 0.5 * rnorm**2 - 1e-9 <= best <= 0.5 * rnorm**2 * (1 + 1e-3)


def test_first_within():
    h = np.array([5.0, 3.0, 1.0 + 1e-3, 1.0 + 1e-7, 1.0])
    assert study.first_within(h, 1.0) == 3
    assert study.first_within(h, 0.5) is None


def test_plot_writes_png(small_study, tmp_path):
    path = study.plot(small_study, str(tmp_path / "sub" / "fig.png"))
    import matplotlib.image

    img = matplotlib.image.imread(path)
    assert img.shape[0] > 200 and img.shape[1] > 400
    assert np.ptp(img[..., :3]) > 0.5  # not a blank canvas


def test_batched_nnls_matches_scipy():
    out = study.run_batched_nnls(size=(40, 20), n_rhs=7, seed=1)
    assert out["converged"]
    assert out["max_abs_diff"] < 1e-6
    assert out["msm_objective"] == pytest.approx(out["scipy_objective"], rel=1e-9)
    text = study.format_batched_nnls(out)
    assert "scipy.optimize.nnls" in text and "max |x_msm - x_scipy|" in text


def test_demo_end_to_end(tmp_path, capsys):
    argv = ["demo", "--size", "15", "40", "--iters", "25", "--lam", "0.02", "--seed", "2"]
    argv += ["--out", str(tmp_path), "--nnls-size", "30", "10", "4"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    png = tmp_path / "figure1.png"
    assert png.exists() and png.stat().st_size > 20_000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "(a) nonnegative least squares" in out and "(b) l0-regularised" in out
    assert "APG+LS" in out and "scipy.optimize.nnls" in out and "F_20" in out


def test_demo_no_plot_and_bad_arguments(tmp_path, capsys):
    argv = ["demo", "--size", "10", "20", "--iters", "5", "--out", str(tmp_path), "--no-plot"]
    assert cli.main([*argv, "--nnls-size", "0", "0", "0"]) == 0
    assert not (tmp_path / "figure1.png").exists()
    assert "Batched NNLS" not in capsys.readouterr().out
    assert cli.main(["demo", "--iters", "0"]) == 2
    with pytest.raises(SystemExit):
        cli.main(["demo", "--backend", "tpu"])
    assert cli.main([]) == 1


def test_python_dash_m_entry_point():
    proc = subprocess.run(
        [sys.executable, "-m", "msm_gpu", "demo", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0
    assert "--lam" in proc.stdout and "--no-plot" in proc.stdout
