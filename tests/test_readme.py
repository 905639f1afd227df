"""The README and the user guide are the contract: every ```python block runs, and prints
exactly what it says.

A ```python block may be followed by an ```output block: what the block prints, line by
line, compared character for character (leading and trailing blanks aside).  Examples
print with a fixed format (``f"{res.fun:.6f}"``) so that what the page shows is what a
user sees; a value that depends on the machine (a time) is not printed.

The README keeps one short example; the others live in the user guide's pages
(``docs/user_guide/*.md``), checked the same way.  Blocks run in order within a file,
later blocks using the names of earlier ones; every file starts afresh.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
GUIDE = sorted((ROOT / "docs" / "user_guide").glob("*.md"))
TEXT = README.read_text()


def _blocks(text: str) -> list[tuple[str, str | None]]:
    """(code, expected output or None) of every python block of ``text``, in order."""
    return [
        (code, output or None)
        for code, output in re.findall(
            r"```python\n(.*?)```\n(?:\s*```output\n(.*?)```)?", text, flags=re.S
        )
    ]


#: (code, expected output or None) of every python block of the README, in order
BLOCKS = _blocks(TEXT)
#: file -> its blocks, the README first
FILES = {README: BLOCKS, **{path: _blocks(path.read_text()) for path in GUIDE}}
CASES = [
    pytest.param(path, index, id=f"{path.relative_to(ROOT)}-{index}")
    for path, blocks in FILES.items()
    for index in range(len(blocks))
]


def line_matches(expected: str, got: str) -> str | None:
    """None if ``got`` is the ``expected`` output line (blanks at either end aside), else
    why not."""
    if got.strip() == expected.strip():
        return None
    return f"printed {got.strip()!r}, the page shows {expected.strip()!r}"


def test_readme_has_examples_with_outputs():
    assert len(BLOCKS) >= 1
    assert sum(output is not None for _, output in BLOCKS) >= 1


def test_user_guide_has_examples_with_outputs():
    blocks = [block for path in GUIDE for block in FILES[path]]
    assert len(blocks) >= 5
    assert sum(output is not None for _, output in blocks) >= 5


def test_line_matching_is_literal():
    assert line_matches("F = 345.744296, 0 MSM sweeps", "F = 345.744296, 0 MSM sweeps ") is None
    assert line_matches("F = 345.744296", "F = 345.744297") is not None  # one digit off
    assert line_matches("F = 345.744296", "F = 345.74429590175697") is not None  # unrounded
    assert line_matches("True ... direct", "True 7.9e-17 direct") is not None  # no wildcard


@pytest.mark.parametrize(("path", "index"), CASES)
def test_readme_block_runs(path, index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocks = FILES[path]
    where = path.relative_to(ROOT)
    namespace: dict = {}
    for i, (previous, _) in enumerate(blocks[:index]):  # later blocks use earlier names
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(previous, f"{where} block {i}", "exec"), namespace)
    code, expected = blocks[index]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, f"{where} block {index}", "exec"), namespace)
    if expected is None:
        return
    got = [line for line in printed.getvalue().splitlines() if line.strip()]
    want = [line for line in expected.splitlines() if line.strip()]
    assert len(got) == len(want), f"printed {len(got)} lines, {where} shows {len(want)}"
    for w, g in zip(want, got, strict=True):
        why = line_matches(w, g)
        assert why is None, f"{where}: {why}"
