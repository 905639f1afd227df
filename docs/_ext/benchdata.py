"""Sphinx extension: benchmark tables and plots drawn from saved results at build time.

A result file (JSON, under ``docs/benchmarks/``) holds what was measured and where::

    {
      "title": "...", "command": "python benchmarks/...", "machine": "...",
      "date": "YYYY-MM-DD", "software": "...", "notes": "...",
      "columns": [{"key": "r", "label": "r", "fmt": "{:d}", "star": "r_extrapolated"}, ...],
      "rows": [{"r": 1000, ...}, ...],
      "plots": [{"x": ["problem", "dtype"], "x_prefix": {"problem": "C "},
                 "series": [{"key": ..., "label": ...}],
                 "ylabel": "...", "log": true, "title": "...",
                 "hlines": [{"y": 1.5, "label": "target"}], "ylim": [lo, hi]}]
    }

``.. benchmark:: <path of a JSON file>`` renders its provenance (machine, date, command,
software), the table (``fmt`` is a format string, ``star`` names a boolean field that
appends ``*``, missing values show as an en dash) and each plot: grouped bars, one group
per distinct ``x`` (its fields on separate lines, each after its ``x_prefix``); where
several rows share an ``x`` (repeated runs) the bar is their median and a whisker spans
their range.  The PNGs are drawn into ``docs/_generated/`` (not committed) whenever the
page is read; the JSON file is a dependency of the page, so editing it rebuilds the page.
Options: ``:no-table:``, ``:no-plots:``.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from docutils.parsers.rst import directives
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

GENERATED = "_generated/benchmarks"
REQUIRED = ("title", "command", "machine", "date", "columns", "rows")


def _cell(row: dict, column: dict) -> str:
    value = row.get(column["key"])
    if value is None:
        return "\u2013"
    fmt = column.get("fmt")
    text = fmt.format(value) if fmt else str(value)
    if column.get("star") and row.get(column["star"]):
        text += "\\*"
    return text


def _table(data: dict) -> list[str]:
    lines = [".. list-table::", "   :header-rows: 1", ""]
    lines.append("   * - " + data["columns"][0]["label"])
    lines += ["     - " + c["label"] for c in data["columns"][1:]]
    for row in data["rows"]:
        cells = [_cell(row, c) for c in data["columns"]]
        lines.append("   * - " + cells[0])
        lines += ["     - " + cell for cell in cells[1:]]
    return lines + [""]


def _plot(data: dict, spec: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    groups: dict[str, list[dict]] = {}
    for row in data["rows"]:
        prefix = spec.get("x_prefix", {})
        label = "\n".join(
            textwrap.fill(f"{prefix.get(k, '')}{row[k]}", spec.get("label_width", 16))
            for k in spec["x"]
        )
        groups.setdefault(label, []).append(row)
    series = spec["series"]
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=spec.get("figsize", (max(6.0, 0.9 * len(groups) + 2), 3.6)))
    for i, s in enumerate(series):
        values = [
            [r[s["key"]] for r in rows if r.get(s["key"]) is not None] for rows in groups.values()
        ]
        centre = np.array([np.median(v) if v else np.nan for v in values])
        low = np.array([min(v) if v else np.nan for v in values])
        high = np.array([max(v) if v else np.nan for v in values])
        xs = np.arange(len(groups)) + (i - (len(series) - 1) / 2) * width
        spread = any(len(v) > 1 for v in values)
        ax.bar(
            xs,
            centre,
            width,
            label=s["label"],
            yerr=np.vstack([centre - low, high - centre]) if spread else None,
            capsize=2 if spread else 0,
        )
    for line in spec.get("hlines", []):
        ax.axhline(line["y"], color="k", ls="--", lw=0.8, label=line.get("label"))
    if spec.get("log"):
        ax.set_yscale("log")
    if spec.get("ylim"):
        ax.set_ylim(*spec["ylim"])
    ax.set_xticks(np.arange(len(groups)), list(groups), fontsize=8)
    ax.set_ylabel(spec["ylabel"])
    ax.set_title(spec.get("title", data["title"]), fontsize=10)
    ax.legend(fontsize=8, ncols=spec.get("legend_columns", 1))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


class BenchmarkDirective(SphinxDirective):
    """``.. benchmark:: path/to/result.json`` (path relative to the page, or /-rooted)."""

    required_arguments = 1
    option_spec = {"no-table": directives.flag, "no-plots": directives.flag}

    def run(self):
        rel, path = self.env.relfn2path(self.arguments[0], self.env.docname)
        self.env.note_dependency(rel)
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise self.error(f"benchmark: cannot read {rel}: {exc}") from exc
        missing = [k for k in REQUIRED if k not in data]
        if missing:
            raise self.error(f"benchmark: {rel} lacks {', '.join(missing)}")

        lines = [
            f"**{data['title']}**",
            "",
            f"| Machine: {data['machine']}",
            f"| Date: {data['date']}",
            f"| Command: ``{data['command']}``",
        ]
        if data.get("software"):
            lines.append(f"| Software: {data['software']}")
        lines.append(f"| Data: ``docs/{rel}``")
        lines.append("")
        if data.get("notes"):
            lines += [data["notes"], ""]
        if "no-table" not in self.options:
            lines += _table(data)
        if "no-plots" not in self.options:
            stem = Path(rel).stem
            for i, spec in enumerate(data.get("plots", [])):
                name = f"{GENERATED}/{stem}-{i}.png"
                _plot(data, spec, Path(self.env.srcdir) / name)
                lines += [
                    f".. figure:: /{name}",
                    f"   :alt: {spec.get('title', data['title'])}",
                    "",
                ]
        return self.parse_text_to_nodes("\n".join(lines))


def setup(app):
    app.add_directive("benchmark", BenchmarkDirective)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
