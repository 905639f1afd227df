"""The package's import graph checked against its floors: ``python -m msm_gpu.devtools.layers``.

Every part of the package (a top-level module or a subpackage) sits on one floor; a module
may import from its own part or from a part on a lower floor, never from a higher one, and
the graph of modules has no cycle.  Imports inside functions count too: a deferred import
is still a dependency.  Exit status 0 when the graph is clean, 1 otherwise (each offending
import printed with its file and line).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

#: The floors, lowest first; each part imports only from its own floor and those below.
FLOORS = (
    ("arrays", "result"),  # foundations: array helpers, the result type
    ("penalties",),  # the separable h
    ("backends",),  # CPU (Numba) and CUDA kernels and their launchers
    ("_input",),  # checking and rescaling the user's data
    ("solvers",),  # the iteration loop, MSM, proximal gradient, the active sets
    ("finish",),  # the exact finish and the design form
    ("options",),  # the options of a solve
    ("column_blocks",),  # a batch solved block by block, its workspace bounded
    ("run",),  # one in-memory solve, from the user's arrays to the result
    ("glm",),  # losses and proximal Newton
    ("factorization",),  # NMF's numerics
    ("dask",),  # scale-out over column blocks
    ("_api",),  # the front doors: solve, least_squares, nnls
    ("apps",),  # NMF, sparse coding, denoising, logistic regression
    ("__init__", "__main__", "demo"),  # the public namespace; the demo uses it as a user does
)
#: Parts outside the floors: they import nothing of the package at run time.
OUTSIDE = ("devtools",)

PACKAGE = "msm_gpu"


def floor_of(part: str) -> int:
    for level, parts in enumerate(FLOORS):
        if part in parts:
            return level
    raise KeyError(f"{part!r} is on no floor: add it to msm_gpu.devtools.layers.FLOORS")


def modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module of the package under ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: set[str]):
    """(line, imported module) for every import of the package in one module."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), str(path))
    here = name.split(".") if is_package else name.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.split(".")[0] == PACKAGE:
                target = node.module
            else:
                continue
            for alias in node.names:  # "from . import x" may name a submodule
                sub = f"{target}.{alias.name}"
                yield node.lineno, sub if sub in known else target


def part_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def check(root: Path | None = None) -> list[str]:
    """The problems of the package's import graph (empty when it is clean)."""
    root = Path(__file__).resolve().parent.parent if root is None else root
    mods = modules(root)
    known = set(mods)
    problems = []
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        src = part_of(name)
        for line, target in imports(name, path, known):
            while target not in known and "." in target:
                target = target.rsplit(".", 1)[0]
            if target == name:
                continue
            graph[name].add(target)
            dst = part_of(target)
            if src in OUTSIDE or dst in OUTSIDE:
                if src != dst:
                    problems.append(f"{path}:{line}: {name} imports {target} ({dst} stands apart)")
                continue
            if src != dst and floor_of(dst) > floor_of(src):
                problems.append(
                    f"{path}:{line}: {name} (floor {floor_of(src)}, {src}) imports upward "
                    f"{target} (floor {floor_of(dst)}, {dst})"
                )
    problems.extend(f"import cycle: {' -> '.join(cycle)}" for cycle in cycles(graph))
    return problems


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def main() -> int:
    problems = check()
    for line in problems:
        print(line)
    if not problems:
        print(f"{PACKAGE}: import graph clean ({len(FLOORS)} floors, no cycle)")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
