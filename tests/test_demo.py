"""``msm-gpu demo``'s headline: batched NNLS against scipy's loop, at tiny sizes."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest

import msm_gpu as mg
from msm_gpu.demo import cli, study

#: (name, m, n, r, scipy columns): the demo's two kinds of data, small enough for a test;
#: unmixing's scipy loop runs on a subset (its time scaled up), dense's on every column.
TINY = (("unmixing", 30, 5, 400, 100), ("dense", 40, 10, 60, 60))
ROW = re.compile(
    r"^(?P<name>\w+)\s+(?P<m>\d+)x(?P<n>\d+)\s+(?P<r>\d+)\s+(?P<mg>\S+) s\s+"
    r"(?P<scipy>\S+) s(?P<star>\*?)\s+(?P<speedup>\S+)x\s+(?P<gap>\S+)\s+(?P<dx>\S+)$",
    re.M,
)


def _rows(text):
    return {m["name"]: m for m in ROW.finditer(text)}


def test_demo_headline_table(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(study, "BATCHED_PROBLEMS", TINY)
    argv = ["demo", "--size", "10", "20", "--iters", "5", "--no-plot", "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    # the headline comes first, the paper's Figure 1 study after it
    assert out.index("Batched NNLS") < out.index("(a) nonnegative least squares")
    first = re.search(
        r"^first call \(compiles kernels, cached for later runs\): (\S+) s$", out, re.M
    )
    assert first and first.start() < out.index("mg.nnls  scipy loop")
    assert float(first.group(1)) >= 0
    rows = _rows(out)
    assert list(rows) == ["unmixing", "dense"]
    for name, m, n, r, sub in TINY:
        row = rows[name]
        assert (int(row["m"]), int(row["n"]), int(row["r"])) == (m, n, r)
        assert row["star"] == ("*" if sub < r else "")
        mg_s, scipy_s = float(row["mg"]), float(row["scipy"])
        assert mg_s > 0 and scipy_s > 0
        # the speed-up is the ratio of the printed times (to their 3 printed digits)
        assert float(row["speedup"]) == pytest.approx(scipy_s / mg_s, rel=0.02, abs=0.06)
        assert abs(float(row["gap"])) < 1e-10  # the same optimum as scipy
        assert float(row["dx"]) < 1e-8
    assert "* scipy loop timed on the first 100 of 400 (unmixing) columns" in out
    # what mg.nnls did, as its results say: no MSM sweeps, the active set per column
    assert re.search(r"^mg\.nnls: 0 MSM sweeps \(res\.n_iter\), then Lawson-Hanson", out, re.M)
    assert 'res.info["finish_method"] = "active_set"' in out and "converged: True" in out
    assert "iter 1" not in out and "0 iterations" not in out
    assert re.search(r"^first calls, every method for 2 iterations .*: \S+ s$", out, re.M)


def test_run_batched_nnls_reports_what_it_measured():
    out = study.run_batched_nnls(
        (30, 8), 50, seed=4, kind="dense", scipy_columns=20, repeats=2, name="d"
    )
    assert out["name"] == "d" and out["extrapolated"] and out["scipy_columns"] == 20
    assert out["scipy_seconds"] == pytest.approx(out["scipy_measured_seconds"] * 50 / 20)
    assert out["speedup"] == pytest.approx(out["scipy_seconds"] / out["msm_seconds"])
    assert out["gap"] == pytest.approx(
        (out["msm_objective"] - out["scipy_objective"]) / out["scipy_objective"]
    )
    assert abs(out["gap"]) < 1e-12 and out["max_abs_diff"] < 1e-9
    # the scipy side of the gap is scipy's optimum on the first 20 columns
    import scipy.optimize

    c, d = study.batched_data("dense", (30, 8), 50, seed=4)
    f = sum(0.5 * scipy.optimize.nnls(c, d[:, j])[1] ** 2 for j in range(20))
    assert out["scipy_objective"] == pytest.approx(f, rel=1e-12)
    assert out["first_call_seconds"] is not None and out["first_call_seconds"] >= 0
    res = mg.nnls(c, d)
    assert (out["n_iter"], out["finish_method"]) == (res.n_iter, res.info["finish_method"])
    assert out["finish_rounds"] == res.info["finish_rounds"]


def test_warm_up_takes_the_timed_path(monkeypatch):
    # the warm-up must run the kernels the timed calls run (a tol=0 call would skip the
    # exact finish and leave its compilation inside the first timed call)
    calls = []
    real = mg.nnls

    def spy(*args, **kwargs):
        res = real(*args, **kwargs)
        calls.append((kwargs, res.info.get("finish_method"), res.n_iter))
        return res

    monkeypatch.setattr(mg, "nnls", spy)
    out = study.run_batched_demo((("uniform", 20, 6, 30, 30),), repeats=1)
    assert len(calls) == 2 and out["first_call_seconds"] >= 0
    (warm_kwargs, warm_method, _), (timed_kwargs, timed_method, _) = calls
    assert warm_kwargs == timed_kwargs and warm_method == timed_method == "active_set"


def test_streamed_report_is_the_formatted_one():
    stream = io.StringIO()
    out = study.run_batched_demo((("dense", 20, 5, 12, 6),), repeats=1, stream=stream)
    assert stream.getvalue() == study.format_batched_nnls(out) + "\n"
    assert "most iterations of a column: " in stream.getvalue()


def test_format_says_when_the_library_is_slower():
    row = {
        "name": "tiny",
        "kind": "uniform",
        "size": (5, 3),
        "n_rhs": 2,
        "scipy_columns": 2,
        "extrapolated": False,
        "msm_seconds": 0.002,
        "scipy_seconds": 0.001,
        "speedup": 0.5,
        "gap": 0.0,
        "max_abs_diff": 0.0,
        "n_iter": 0,
        "finish_method": "active_set",
        "finish_rounds": 2,
        "converged": True,
        "backend": "cpu",
        "repeats": 3,
    }
    text = study.format_batched_nnls({"first_call_seconds": 1.25, "rows": [row]})
    assert _rows(text)["tiny"]["speedup"] == "0.5"
    assert "below 1: mg.nnls is slower" in text and "first call (compiles kernels" in text
    assert "*" not in text.split("\n")[3]  # every column solved by scipy: no extrapolation


def test_batched_data_kinds():
    c, d = study.batched_data("unmixing", (12, 4), 7, seed=0)
    assert c.shape == (12, 4) and d.shape == (12, 7) and np.all(c > 0)
    c, d = study.batched_data("dense", (6, 3), 5, seed=0)
    assert np.all(c >= 0) and np.all(d >= 0)
    with pytest.raises(ValueError, match="kind"):
        study.batched_data("nope")


def test_nnls_size_zero_skips_and_one_problem_replaces_the_default(capsys, monkeypatch):
    monkeypatch.setattr(study, "BATCHED_PROBLEMS", TINY)
    argv = ["demo", "--size", "8", "12", "--iters", "3", "--no-plot"]
    assert cli.main([*argv, "--nnls-size", "25", "6", "9"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert list(rows) == ["uniform"] and rows["uniform"]["r"] == "9"
    assert cli.main([*argv, "--nnls-size", "0", "0", "0"]) == 0
    assert "Batched NNLS" not in capsys.readouterr().out
