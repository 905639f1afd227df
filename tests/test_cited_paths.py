"""Every file the README, the docs and the code's comments cite exists.

Issue 52: the docs named ``backends/jit.py`` (the file is ``msm_gpu/backends/cpu/jit.py``),
``docs/cpu_runtime.md`` and a tests' ``DESIGN.md``, none of which exist.  A citation is a
path with a folder of this repository (``docs/...``, ``msm_gpu/...``, ``benchmarks/...``)
or a Markdown link; it counts as found relative to the repository root or to the citing
file's folder (Markdown links, Sphinx toctrees), or, for a path inside the package,
relative to ``msm_gpu/`` (the docs say ``backends/cpu/jit.py`` for short).
"""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Where citations are looked for.
SOURCES = ("README.md", "docs", "msm_gpu", "kernels", "benchmarks", "tests", "examples", ".ci")
SUFFIXES = ("py", "md", "rst", "cu", "cuh", "json", "toml", "sh", "txt", "yml", "yaml", "csv")
#: A path that starts with a folder of the repository (or of the package), ends in a
#: known suffix, and stands on its own (not part of a URL or of a longer word).
PATH = re.compile(
    r"(?<![\w/.:-])((?:docs|msm_gpu|benchmarks|tests|examples|kernels|backends|finish|solvers"
    r"|apps|factorization|glm|dask|demo|_input|penalties|devtools|\.ci)/[\w./-]*?\.(?:"
    + "|".join(SUFFIXES)
    + r"))(?![\w/])"
)
#: A Markdown link or image to a relative target (no scheme, no anchor-only link).
LINK = re.compile(r"\]\((?!https?:|mailto:|#)([^)\s#]+)(?:#[^)]*)?\)")
#: A bare file name in capitals, as in "see DESIGN.md": such a file must exist somewhere.
CAPITALS = re.compile(r"(?<![\w/.-])([A-Z][A-Z_]+\.md)\b")
#: A line holding this is not checked (a test's fixture paths, a syntax placeholder).
IGNORE = "cited-paths: ignore"
#: What the tools write at run time or the docs build makes: cited, never committed.
GENERATED = (
    "benchmarks/out/",
    "benchmarks/results/",
    "docs/_build/",
    "docs/auto_examples/",
    "auto_examples/",
    "docs/_generated/",
    "docs/api/generated/",
)
#: Generated files inside committed folders (the .gitignore's patterns for them).
GENERATED_FILES = ("docs/benchmarks/benchopt/*.png",)  # drawn by docs/conf.py at build


def _files(root: Path):
    for name in SOURCES:
        path = root / name
        if path.is_file():
            yield path
        elif path.is_dir():
            for f in sorted(path.rglob("*")):
                if f.is_file() and f.suffix.lstrip(".") in SUFFIXES + ("",):
                    if not any(part.startswith((".", "_build")) for part in f.parts[-3:-1]):
                        yield f


def _exists(root: Path, citing: Path, target: str) -> bool:
    target = target.rstrip(".,:;")
    if target.startswith(GENERATED) or any(g in target for g in GENERATED):
        return True
    candidates = [root / target, citing.parent / target, root / "msm_gpu" / target]
    for c in candidates:
        rel = os.path.relpath(c, root).replace(os.sep, "/")
        if any(fnmatch.fnmatch(rel, pattern) for pattern in GENERATED_FILES):
            return True
    return any(c.exists() for c in candidates)


def missing_citations(root: Path = ROOT) -> list[str]:
    """'file: cited path' for every citation under ``root`` whose file does not exist."""
    root = Path(root)
    names = {p.name for p in root.rglob("*.md")}
    missing = []
    for f in _files(root):
        if f.resolve() == Path(__file__).resolve():
            continue  # this file's examples of wrong paths
        try:
            text = f.read_text()
        except UnicodeDecodeError:
            continue
        # a line that names a path on purpose (a fixture, a placeholder) says so
        text = "\n".join(line for line in text.splitlines() if IGNORE not in line)
        cited = set(PATH.findall(text))
        if f.suffix in (".md", ".rst"):
            cited |= {t for t in LINK.findall(text) if "." in Path(t).name}
        for target in sorted(cited):
            if not _exists(root, f, target):
                missing.append(f"{f.relative_to(root)}: {target}")
        for name in sorted(set(CAPITALS.findall(text))):
            if name not in names:
                missing.append(f"{f.relative_to(root)}: {name}")
    return missing


def test_every_cited_path_exists():
    assert missing_citations() == []


def test_a_removed_file_is_reported(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "msm_gpu" / "backends" / "cpu").mkdir(parents=True)
    (tmp_path / "msm_gpu" / "backends" / "cpu" / "jit.py").write_text("# the kernel cache\n")
    (tmp_path / "docs" / "other.md").write_text("# other\n")
    (tmp_path / "README.md").write_text(
        "See msm_gpu/backends/cpu/jit.py, [the page](docs/other.md) and "
        "backends/cpu/jit.py; https://example.org/docs/gone.md is a URL.\n"
    )
    assert missing_citations(tmp_path) == []
    (tmp_path / "docs" / "other.md").unlink()
    (tmp_path / "README.md").write_text(
        (tmp_path / "README.md").read_text() + "And DESIGN.md, backends/jit.py.\n"
    )
    assert missing_citations(tmp_path) == [
        "README.md: backends/jit.py",
        "README.md: docs/other.md",
        "README.md: DESIGN.md",
    ]


def test_a_generated_figure_may_be_cited_before_it_is_drawn(tmp_path):
    (tmp_path / "docs" / "benchmarks").mkdir(parents=True)
    (tmp_path / "docs" / "benchmarks" / "page.md").write_text(
        "![curves](benchopt/benchmark_nnls.png) ![gone](benchopt/gone.svg)\n"
    )
    assert missing_citations(tmp_path) == ["docs/benchmarks/page.md: benchopt/gone.svg"]
