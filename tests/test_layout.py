"""The package's shape: the import graph keeps its floors, the public names are documented.

The floor checker (``python -m msm_gpu.devtools.layers``) is run on the package, and on
small planted packages to show that it catches an upward import and a cycle.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap

import pytest

import msm_gpu as mg
from msm_gpu.devtools import layers


def test_package_import_graph_is_clean():
    assert layers.check() == []


def test_layers_command_exits_zero():
    out = subprocess.run(
        [sys.executable, "-m", "msm_gpu.devtools.layers"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "import graph clean" in out.stdout


def _plant(tmp_path, files):
    root = tmp_path / layers.PACKAGE
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    for folder in {p.parent for p in root.rglob("*.py")} | {root}:
        (folder / "__init__.py").touch()
    return root


def test_checker_reports_an_upward_import(tmp_path):
    root = _plant(
        tmp_path,
        {
            "penalties/rows.py": "from ..solvers import loop\n",
            "solvers/loop.py": "X = 1\n",
        },
    )
    problems = layers.check(root)
    assert len(problems) == 1
    assert "imports upward" in problems[0] and "msm_gpu.solvers.loop" in problems[0]


def test_checker_reports_a_deferred_upward_import(tmp_path):
    root = _plant(
        tmp_path,
        {
            "_input/problem.py": "def f():\n    from msm_gpu import _api\n",
            "_api.py": "X = 1\n",
        },
    )
    assert any("imports upward" in p for p in layers.check(root))


def test_checker_reports_a_cycle_inside_one_part(tmp_path):
    root = _plant(
        tmp_path,
        {
            "solvers/a.py": "from . import b\n",  # cited-paths: ignore (a fixture)
            "solvers/b.py": "from . import a\n",  # cited-paths: ignore
        },
    )
    problems = layers.check(root)
    assert problems == ["import cycle: msm_gpu.solvers.a -> msm_gpu.solvers.b"]


def test_checker_accepts_downward_imports(tmp_path):
    root = _plant(
        tmp_path,
        {"solvers/loop.py": "from ..penalties import rows\n", "penalties/rows.py": "X = 1\n"},
    )
    assert layers.check(root) == []


def test_a_part_on_no_floor_is_named():
    with pytest.raises(KeyError, match="newpart"):
        layers.floor_of("newpart")


# -- the public namespace ----------------------------------------------------------------


@pytest.mark.parametrize("name", mg.__all__)
def test_every_public_name_resolves_and_has_a_docstring(name):
    obj = getattr(mg, name)
    if inspect.ismodule(obj):
        assert obj.__doc__
        return
    assert inspect.getdoc(obj), f"msm_gpu.{name} has no docstring"


FRONT_DOORS = ["solve", "least_squares", "nnls", "minimize", "sparse_code", "denoise"]


@pytest.mark.parametrize("name", FRONT_DOORS)
def test_front_door_parameters_are_documented(name):
    """Every public parameter of a front door appears in its numpy-style docstring."""
    func = getattr(mg, name)
    doc = inspect.getdoc(func)
    assert "Parameters" in doc and "Returns" in doc
    for param in inspect.signature(func).parameters.values():
        if param.name.startswith("_") or param.kind is param.VAR_KEYWORD:
            continue
        assert param.name in doc, f"{name}: parameter {param.name!r} is not documented"
