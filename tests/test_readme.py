"""The README is the contract: every ```python block in it runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for previous in BLOCKS[:index]:  # later blocks may use names defined earlier
        exec(compile(previous, f"README block {BLOCKS.index(previous)}", "exec"), namespace)
    exec(compile(BLOCKS[index], f"README block {index}", "exec"), namespace)
