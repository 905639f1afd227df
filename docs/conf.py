"""Sphinx configuration of the msm-gpu documentation.

Build: ``pip install -e ".[docs]" && sphinx-build -W --keep-going -b html docs docs/_build/html``
(CI does exactly this).  The example gallery (``examples/``) runs at build time; the
benchmark plots are drawn at build time from the saved results in ``docs/benchmarks/``
(``docs/_ext/benchdata.py``; the benchopt curves by ``benchmarks/benchopt/plot_results.py``).
Nothing generated is committed: ``docs/_build``, ``docs/_generated``, ``docs/auto_examples``,
``docs/api/generated`` and the benchopt PNGs are in .gitignore.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import msm_gpu

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

# The examples draw with matplotlib off-screen; the kernels' Numba threads are the
# library's own business, but keep BLAS from oversubscribing the build machine.
os.environ.setdefault("MPLBACKEND", "Agg")

project = "msm-gpu"
author = "the msm-gpu developers"
copyright = "the msm-gpu developers"  # noqa: A001 (Sphinx's name)
release = msm_gpu.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
    "benchdata",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
templates_path = ["_templates"]
exclude_patterns = [
    "_build",
    "_generated",
    "benchmarks/*.json",
    "auto_examples/*.ipynb",
    "auto_examples/*.py",
    "auto_examples/*.zip",
    "auto_examples/*.codeobj.json",
]

# -- API reference ------------------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = False
autodoc_typehints = "none"  # the numpydoc sections already give the types
add_module_names = False

# numpydoc renders the docstrings' sections; the checks of docstring style are off (the
# library's docstrings follow the numpydoc layout without every validation rule), and the
# class templates list the members themselves.
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_validation_checks: set[str] = set()
numpydoc_xref_param_type = False
numpydoc_attributes_as_param_list = True

# -- Markdown pages (README-style user guide, design notes) ---------------------------------
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# -- Example gallery --------------------------------------------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": str(HERE.parent / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "within_subsection_order": "gallery_order.ExampleOrder",
    "image_scrapers": ("matplotlib",),
    "download_all_examples": False,
    "remove_config_comments": True,
    "capture_repr": (),
    "min_reported_time": 0,
    "show_memory": False,
    "show_signature": False,
    "doc_module": ("msm_gpu",),
    "backreferences_dir": "api/generated/backreferences",
    "matplotlib_animations": False,
}

# -- HTML -----------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"msm-gpu {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 7,
    "secondary_sidebar_items": ["page-toc"],
}
html_sidebars = {"**": ["sidebar-nav-bs"], "index": []}
html_static_path: list[str] = []
html_show_sourcelink = False


#: inline markup that docutils would misread in the library's plain-text docstrings:
#: ``lam |x|`` (a substitution reference to docutils) and ``n_iter_`` (a hyperlink
#: reference).  Escaped after numpydoc has rendered the sections, outside inline literals
#: and roles, so the docstrings themselves can stay plain text.
_LITERAL = re.compile(r"(``.+?``|:[\w:]+:`[^`]*`|`[^`]*`_{0,2})")
_BARS = re.compile(r"(?<![\w\\|])\|([^|\s](?:[^|]*?[^|\s])?)\|(?![\w|])")
_TRAILING_UNDERSCORE = re.compile(r"(?<![\w\\*])([A-Za-z]\w*?[A-Za-z0-9])_(?![\w`*])")


def _escape_plain_text(app, what, name, obj, options, lines):
    skip_indent = None  # inside a literal block or a directive: its parent's indentation
    doctest = False
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        indent = len(line) - len(stripped)
        if not stripped:
            doctest = False
            continue
        if skip_indent is not None and indent > skip_indent:
            continue
        skip_indent = None
        if stripped.startswith(">>>") or doctest:
            doctest = True
            continue
        if stripped.startswith(".. ") or stripped.endswith("::"):
            skip_indent = indent  # the block's content follows, indented deeper
            if stripped.startswith(".. "):
                continue
        pieces = _LITERAL.split(line)
        for j in range(0, len(pieces), 2):  # even pieces lie outside literals and roles
            text = _BARS.sub(r"\\|\1\\|", pieces[j])
            pieces[j] = _TRAILING_UNDERSCORE.sub(r"\1\\_", text)
        lines[i] = "".join(pieces)


def _skip_member(app, what, name, obj, skip, options):
    """Leave out scikit-learn's generated metadata-routing methods (``set_fit_request``
    and the like): they are scikit-learn's, documented there, and cite its glossary."""
    if re.fullmatch(r"set_\w+_request", name):
        return True
    return None


def _check_api_reference(app):
    """Every name of ``msm_gpu.__all__`` must appear in the API reference (a warning, so
    ``-W`` fails the build when a public name is added without being documented)."""
    text = (HERE / "api.rst").read_text()
    listed = set(re.findall(r"^\s{3}(\w+(?:\.\w+)?)\s*$", text, flags=re.M))
    listed |= {name.split(".")[0] for name in listed}
    missing = sorted(set(msm_gpu.__all__) - listed)
    if missing:
        from sphinx.util import logging

        logging.getLogger(__name__).warning(
            "api.rst: public names missing from the API reference: %s", ", ".join(missing)
        )


def _benchopt_curves(app):
    """The benchopt pages' curves (docs/benchmarks/benchopt/*.png), drawn from the saved
    result files by benchmarks/benchopt/plot_results.py (pandas and pyarrow read them)."""
    import contextlib
    import importlib.util
    import io

    path = HERE.parent / "benchmarks" / "benchopt" / "plot_results.py"
    spec = importlib.util.spec_from_file_location("_benchopt_plot_results", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with contextlib.redirect_stdout(io.StringIO()):  # the tables it prints are on the page
        module.main([])


def setup(app):
    app.connect("builder-inited", _check_api_reference)
    app.connect("builder-inited", _benchopt_curves)
    app.connect("autodoc-skip-member", _skip_member)
    # after numpydoc's own handler (priority 500) has turned the sections into markup
    app.connect("autodoc-process-docstring", _escape_plain_text, priority=900)
