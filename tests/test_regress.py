"""The regression gate (benchmarks/regress.py): its comparison, and that it catches a slowdown.

The gate's numbers are ratios of two things timed in turn in one process; these tests do
not assert a speed, they check the gate's logic on given numbers, that a planted
slowdown of the kind that once went unnoticed (the no-increase guard forming the residual
C X - D more than once) makes ``compare`` report a regression, and that the README's
headline table is the one the saved JSON renders.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import regress  # noqa: E402
from regress import Metric  # noqa: E402


def test_compare_flags_only_what_got_worse_beyond_tolerance_and_slack():
    base = {
        "nnls/a": Metric(0.10),
        "nnls/b": Metric(0.10),
        "first_call/nnls": Metric(0.20, "s"),
        "solve/x/per_iter": Metric(1.3, "gemm"),
        "gone": Metric(1.0),
    }
    new = {
        "nnls/a": Metric(0.119),  # +19%: within 20%
        "nnls/b": Metric(0.125),  # +25%: a regression
        "first_call/nnls": Metric(0.35, "s"),  # +75% but within 20% + 0.15 s
        "solve/x/per_iter": Metric(1.75, "gemm"),  # above 1.3 * 1.2 + 0.15
        "fresh": Metric(5.0),
    }
    rows, bad = regress.compare(base, new)
    assert bad == ["nnls/b", "solve/x/per_iter"]
    verdicts = {row[0]: row[4] for row in rows}
    assert verdicts["gone"] == "not measured" and verdicts["fresh"] == "new (no baseline)"
    assert verdicts["nnls/a"] == "ok" and verdicts["first_call/nnls"] == "ok"


def test_a_new_metric_that_is_not_exact_fails_the_gate():
    rows, bad = regress.compare({}, {"nmf/x": Metric(math.inf), "nmf/y": Metric(0.4)})
    assert bad == ["nmf/x"]


def test_metrics_are_matched_to_the_cell_that_measured_them(tmp_path):
    # nmf_extras measures "nmf/regularised ...": by name alone it belonged to no cell, so
    # its baseline was dropped from the comparison and a worse value passed as "new"
    reg = Metric(0.47, cell="nmf_extras")
    assert regress.cell_of("nmf/regularised", ["nmf_extras"], reg) == "nmf_extras"
    assert regress.cell_of("nmf/regularised", ["nmf"], reg) is None
    assert regress.cell_of("nnls/dense", ["nnls/dense"]) == "nnls/dense"  # by name
    path = tmp_path / "baseline.json"
    regress.save_baseline(path, "full", {"nmf/regularised": reg}, ["nmf_extras"])
    loaded, _ = regress.load_baseline(path, "full")
    assert loaded["nmf/regularised"].cell == "nmf_extras"
    # saving another cell keeps it; saving its own cell replaces it
    regress.save_baseline(path, "full", {"nmf/digits": Metric(0.6, cell="nmf")}, ["nmf"])
    assert set(regress.load_baseline(path, "full")[0]) == {"nmf/regularised", "nmf/digits"}
    regress.save_baseline(path, "full", {}, ["nmf_extras"])
    assert set(regress.load_baseline(path, "full")[0]) == {"nmf/digits"}
    _, bad = regress.compare(loaded, {"nmf/regularised": Metric(0.9, cell="nmf_extras")})
    assert bad == ["nmf/regularised"]


def test_a_wrong_answer_is_a_regression_and_a_better_one_is_not():
    assert regress.regressed(Metric(0.1), Metric(math.inf))
    assert not regress.regressed(Metric(0.1), Metric(0.01))
    assert not regress.regressed(Metric(math.inf), Metric(0.5))  # a baseline that failed


def test_save_and_load_keep_other_cells_and_sections(tmp_path):
    path = tmp_path / "baseline.json"
    regress.save_baseline(path, "quick", {"nnls/a": Metric(0.1, details={"r": 5})}, ["nnls/a"])
    regress.save_baseline(path, "quick", {"nmf/x": Metric(0.5)}, ["nmf"])
    regress.save_baseline(path, "full", {"nnls/a": Metric(0.2)}, ["nnls/a"])
    quick, header = regress.load_baseline(path, "quick")
    assert set(quick) == {"nnls/a", "nmf/x"} and quick["nnls/a"].details == {"r": 5}
    assert header["machine"] and "load_average" in header
    assert regress.load_baseline(path, "full")[0]["nnls/a"].value == 0.2
    assert json.loads(path.read_text())["quick"]["metrics"]["nmf/x"]["value"] == 0.5


@pytest.mark.slow  # about 10 s: a SciPy loop and 20 000 columns, twice
def test_a_planted_second_objective_evaluation_fails_the_gate(monkeypatch):
    # the regression the gate was built for: the no-increase guard forming the residual
    # of every column several times (it cost 4x the solve on the unmixing shape)
    from msm_gpu.finish import columns

    def measure():
        return regress.cell_nnls("unmixing", quick=True, r=20_000, n_sub=100)

    base = measure()
    original = columns.no_increase

    def planted(xp, a, r, x_old, x_new, penalty, design=None):
        if design is not None:
            for _ in range(3):  # the old guard: F of both points, in float64 copies
                design.objective(x_new, penalty)
        return original(xp, a, r, x_old, x_new, penalty, design)

    monkeypatch.setattr(columns, "no_increase", planted)
    slow = measure()
    _, bad = regress.compare(base, slow)
    assert bad == ["nnls/unmixing"], (base, slow)


def test_the_readme_table_is_the_one_the_saved_json_renders():
    if not regress.BASELINE.exists():
        pytest.fail("benchmarks/regress_baseline.json is missing: run regress.py --save")
    assert regress.render_readme(write=False) == regress.README.read_text(), (
        "the README's headline table differs from benchmarks/regress_baseline.json: "
        "python benchmarks/regress.py --render"
    )
    assert regress.render_docs_page(write=False) == regress.DOCS_PAGE.read_text()


def test_time_to_reference_reads_the_run_s_history():
    # the first iteration within 1e-3 of the reference (or below it), plus the fit's time
    # outside its loop; inf where no iteration got there
    import bench_nmf_beta

    history = [(0.0, 10.0), (0.1, 5.0), (0.2, 2.0015), (0.3, 1.5), (0.4, 1.4)]
    wall = 0.45  # 0.05 s outside the loop
    assert bench_nmf_beta.time_to_reference(history, wall, 2.0) == pytest.approx(0.25)
    assert bench_nmf_beta.time_to_reference(history, wall, 1.5) == pytest.approx(0.35)
    assert bench_nmf_beta.time_to_reference(history, wall, 20.0) == pytest.approx(0.05)
    assert bench_nmf_beta.time_to_reference(history, wall, 1.0) == math.inf
