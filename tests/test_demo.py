"""``msm-gpu demo``: its headline (batched NNLS against scipy's loop), what it says ran,
its Figure 1 output and its exit codes, at tiny sizes."""

from __future__ import annotations

import io
import re
import subprocess
import sys

import numpy as np
import pytest
import scipy.optimize

import msm_gpu as mg
from msm_gpu.demo import cli, study

#: (name, m, n, r, scipy columns): the demo's kinds of data, small enough for a test;
#: unmixing's scipy loop runs on a subset (its time scaled up), the others on every column.
TINY = (("unmixing", 30, 5, 400, 100), ("dense", 40, 10, 60, 60), ("spectra", 50, 8, 20, 20))
ROW = re.compile(
    r"^(?P<name>\w+)\s+(?P<m>\d+)x(?P<n>\d+)\s+(?P<r>\d+)\s+(?P<mg>\S+) s\s+"
    r"(?P<scipy>\S+) s(?P<star>\*?)\s+(?P<speedup>\S+)x\s+(?P<gap>\S+)\s+(?P<dx>\S+)$",
    re.M,
)
#: A quick Figure 1: small C, few iterations, no PNG.
QUICK = ["demo", "--size", "10", "20", "--iters", "30", "--no-plot"]


def _rows(text):
    return {m["name"]: m for m in ROW.finditer(text)}


def _figure_rows(text, title):
    """{label: the row's fields} of the Figure 1 table under ``title``."""
    block = text[text.index(title) :].split("\n\n")[0]
    labels = set(study.LABELS.values())
    return {
        f[0]: f[1:]
        for f in (ln.split() for ln in block.splitlines())
        if f[:1] in [[x] for x in labels]
    }


def test_demo_prints_the_headline_first_then_figure1(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(study, "BATCHED_PROBLEMS", TINY)
    assert cli.main([*QUICK, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    # the headline, what ran, then the paper's Figure 1 study against F*
    order = ["Batched NNLS", "What ran:", "Figure 1 of the paper", "(a) nonnegative", "(b) l0"]
    assert [out.index(s) for s in order] == sorted(out.index(s) for s in order)
    first = re.search(
        r"^first call \(compiles kernels, cached for later runs\): (\S+) s$", out, re.M
    )
    assert first and first.start() < out.index("mg.nnls  scipy loop")
    rows = _rows(out)
    assert list(rows) == ["unmixing", "dense", "spectra"]
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
    # what mg.nnls did, as its results say, and where MSM is the method
    assert re.search(
        r"^What ran: mg\.nnls did 0 MSM sweeps \(res\.n_iter\), then Lawson", out, re.M
    )
    assert 'res.info["finish_method"] = "active_set"' in out and "converged: True" in out
    assert "not the Matrix Splitting Method" in out and study.WHERE_MSM in out
    # Figure 1: the reference of each problem, then one row per method
    assert "F* = " in out and "(the optimum): mg.nnls" in out and "(agree to 1e-10)" in out
    assert "(best found, not the optimum" in out and "F_best" not in out
    for title in ("(a) nonnegative", "(b) l0"):
        assert set(_figure_rows(out, title)) == set(study.LABELS.values())
    assert re.search(r"^first calls, every method for 2 iterations .*: \S+ s$", out, re.M)
    assert not (tmp_path / "figure1.png").exists()  # --no-plot


def test_demo_figure1_counts_are_against_f_star(capsys, monkeypatch):
    monkeypatch.setattr(study, "BATCHED_PROBLEMS", ())
    argv = ["demo", "--size", "20", "60", "--seed", "3", "--no-plot"]
    # 5 iterations: nobody gets within 1e-6 of the optimum, every count is "-"
    assert cli.main([*argv, "--iters", "5"]) == 0
    rows = _figure_rows(capsys.readouterr().out, "(a) nonnegative")
    assert all(fields[-3:-1] == ["-", "-"] for fields in rows.values())
    # 120 iterations: MSM is there at the iteration where its F first is, PGM is not
    assert cli.main([*argv, "--iters", "120"]) == 0
    out = capsys.readouterr().out
    rows = _figure_rows(out, "(a) nonnegative")
    c, d = study.figure1_data((20, 60), 3)
    f_star = 0.5 * scipy.optimize.nnls(c, d)[1] ** 2
    assert f"F* = {f_star:.10g} (the optimum)" in out
    msm = study.run_method("msm", c.T @ c, -(c.T @ d), mg.NonNeg(), iters=120)
    k = study.first_within(msm["objective"] + 0.5 * d @ d, f_star)
    assert 0 < k < 120 and rows["MSM"][-3] == str(k)
    assert rows["PGM"][-3:-1] == ["-", "-"]


def test_demo_writes_the_png(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(study, "BATCHED_PROBLEMS", ())
    argv = ["demo", "--size", "8", "12", "--iters", "10", "--out", str(tmp_path / "new")]
    assert cli.main(argv) == 0
    png = tmp_path / "new" / "figure1.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {png}" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args",
    [
        ["--iters", "0"],
        ["--size", "0", "5"],
        ["--lam", "-1"],
        ["--tol", "0"],
        ["--tol", "1"],
    ],
)
def test_bad_arguments_exit_2(args, capsys):
    assert cli.main(["demo", *args]) == 2
    assert "msm-gpu demo: --size and --iters must be positive" in capsys.readouterr().err


def test_exit_codes_of_the_parser(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["demo", "--backend", "tpu"])
    assert exc.value.code == 2
    assert cli.main([]) == 1  # no command: the help
    assert "usage: msm-gpu" in capsys.readouterr().out


def test_backend_unavailable_exits_3(capsys, monkeypatch):
    import msm_gpu.backends as backends

    def refuse(name):
        raise backends.BackendUnavailableError("no usable GPU here (test)")

    monkeypatch.setattr(backends, "get_backend", refuse)
    assert cli.main([*QUICK, "--backend", "cuda"]) == cli.EXIT_BACKEND_UNAVAILABLE == 3
    captured = capsys.readouterr()
    assert "no usable GPU here (test)" in captured.err and "Traceback" not in captured.err
    assert captured.out == ""


def test_reference_disagreement_exits_4(capsys, monkeypatch):
    monkeypatch.setattr(study, "BATCHED_PROBLEMS", ())
    real = scipy.optimize.nnls

    def off(a, b, **kw):  # SciPy's answer moved off the optimum
        x, rnorm = real(a, b, **kw)
        return x + 1e-3, rnorm

    monkeypatch.setattr(scipy.optimize, "nnls", off)
    assert cli.main(QUICK) == cli.EXIT_REFERENCE_MISMATCH == 4
    captured = capsys.readouterr()
    assert "DISAGREE" in captured.out and "(b) l0" in captured.out  # printed all the same
    assert "differ by" in captured.err


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


def test_format_says_when_the_library_is_slower_and_what_ran():
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
        "n_iter": 4,
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
    # sweeps ran: no claim that the speed-up is the active set alone
    assert "did 4 MSM sweeps" in text and "not the Matrix Splitting Method" not in text
    assert study.WHERE_MSM in text


def test_batched_data_kinds():
    c, d = study.batched_data("unmixing", (12, 4), 7, seed=0)
    assert c.shape == (12, 4) and d.shape == (12, 7) and np.all(c > 0)
    c, d = study.batched_data("dense", (6, 3), 5, seed=0)
    assert np.all(c >= 0) and np.all(d >= 0)
    c, d = study.batched_data("spectra", (30, 6), 5, seed=0)
    assert c.shape == (30, 6) and d.shape == (30, 5) and np.all(c >= 0)
    assert np.all(c.max(axis=0) > 0.5) and c.max() <= 1  # a Gaussian peak per column
    assert list(np.argmax(c, axis=0)) == sorted(np.argmax(c, axis=0))  # left to right
    with pytest.raises(ValueError, match="kind"):
        study.batched_data("nope")


def test_batched_data_is_benchmarks_data():
    # benchmarks/bench_nnls.py's make_problem, written out: the README's table and the
    # demo measure the same problems for the same seed
    rng = np.random.default_rng(5)
    c = rng.uniform(size=(12, 4))
    x = rng.dirichlet(0.3 * np.ones(4), size=9).T
    d = c @ x + 0.01 * rng.normal(size=(12, 9))
    got = study.batched_data("unmixing", (12, 4), 9, seed=5)
    assert np.array_equal(got[0], c) and np.array_equal(got[1], d)
    rng = np.random.default_rng(5)
    t = np.linspace(0, 1, 30)[:, None]
    c = np.exp(-0.5 * ((t - np.linspace(0.02, 0.98, 6)) / 0.02) ** 2)
    x = np.abs(rng.normal(size=(6, 7))) * (rng.uniform(size=(6, 7)) < 0.3)
    d = c @ x + 0.01 * rng.normal(size=(30, 7))
    got = study.batched_data("spectra", (30, 6), 7, seed=5)
    assert np.array_equal(got[0], c) and np.array_equal(got[1], d)


def test_batched_problems_are_the_readme_shapes():
    # the lead's README table is generated for these (name, m, n, r, scipy columns)
    shapes = {name: (m, n, r) for name, m, n, r, _ in study.BATCHED_PROBLEMS}
    assert shapes == {
        "dense": (500, 100, 1000),
        "unmixing": (200, 20, 100_000),
        "spectra": (300, 60, 5000),
    }
    for name, _, _, r, sub in study.BATCHED_PROBLEMS:
        assert name in study.BATCHED_KINDS and 0 < sub <= r


def test_nnls_size_zero_skips_and_one_problem_replaces_the_default(capsys, monkeypatch):
    monkeypatch.setattr(study, "BATCHED_PROBLEMS", TINY)
    argv = ["demo", "--size", "8", "12", "--iters", "3", "--no-plot"]
    assert cli.main([*argv, "--nnls-size", "25", "6", "9"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert list(rows) == ["uniform"] and rows["uniform"]["r"] == "9"
    assert cli.main([*argv, "--nnls-size", "0", "0", "0"]) == 0
    assert "Batched NNLS" not in capsys.readouterr().out


def test_python_dash_m_entry_point():
    proc = subprocess.run(
        [sys.executable, "-m", "msm_gpu", "demo", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0
    assert "--lam" in proc.stdout and "--tol" in proc.stdout and "--no-plot" in proc.stdout
