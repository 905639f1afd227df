"""The README and the user guide are the contract: every ```python block runs, and prints
what it says.

A ```python block may be followed by an ```output block: what the block prints, line by
line.  ``...`` in an output line matches anything (timings, machine-dependent values); a
number matches a printed number within 1.5 units of its last shown digit (so the README
may round), an integer exactly; everything else must match character for character.

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
NUMBER = r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?"


def _tolerance(shown: str) -> float:
    """Half-again a unit of the last digit of a printed float (0 for an integer)."""
    mantissa, _, exponent = shown.lower().partition("e")
    if "." not in mantissa:
        return 0.0 if not exponent else 1.5 * 10.0 ** int(exponent)
    decimals = len(mantissa.split(".")[1])
    return 1.5 * 10.0 ** (int(exponent or 0) - decimals)


def line_matches(expected: str, got: str) -> str | None:
    """None if ``got`` matches the ``expected`` output line, else why not."""
    parts = re.split(rf"(\.\.\.|{NUMBER})", expected.strip())
    pattern, numbers = "", []
    for i, part in enumerate(parts):
        if i % 2 == 0:
            pattern += re.escape(part)
        elif part == "...":
            pattern += ".*?"
        else:
            pattern += f"({NUMBER})"
            numbers.append(part)
    match = re.fullmatch(pattern, got.strip())
    if match is None:
        return f"{got.strip()!r} does not have the form {expected.strip()!r}"
    for shown, printed in zip(numbers, match.groups(), strict=True):
        if abs(float(printed) - float(shown)) > _tolerance(shown):
            return f"printed {printed}, the README says {shown} (in {got.strip()!r})"
    return None


def test_readme_has_examples_with_outputs():
    assert len(BLOCKS) >= 1
    assert sum(output is not None for _, output in BLOCKS) >= 1


def test_user_guide_has_examples_with_outputs():
    blocks = [block for path in GUIDE for block in FILES[path]]
    assert len(blocks) >= 5
    assert sum(output is not None for _, output in blocks) >= 5


def test_line_matching_rules():
    assert line_matches("345.74 10 True (100, 50)", "345.7442959 10 True (100, 50)") is None
    assert line_matches("345.74 10 True", "345.7642959 10 True") is not None  # 2 units off
    assert line_matches("345.74 10 True", "345.74 11 True") is not None  # integers exact
    assert line_matches("1.5e-07 ok", "1.6e-07 ok") is None
    assert line_matches("1.5e-07 ok", "1.7e-07 ok") is not None
    assert line_matches("True ... direct", "True 7.9e-17 direct") is None
    assert line_matches("True ... direct", "False 7.9e-17 direct") is not None


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
