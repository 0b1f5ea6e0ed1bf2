"""A minimal document model rendered twice: Markdown (report.md) and self-contained HTML (report.html).

Building the report once as blocks and rendering it twice keeps the two formats from drifting apart.
"""

from __future__ import annotations

import base64
import html
import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Paragraph:
    text: str
    kind: str = "text"  # text, warning or note: HTML styles them, Markdown prefixes warnings


@dataclass
class BulletList:
    items: list[str]
    kind: str = "text"


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    css_class: str = "results"
    collapsible: str | None = None  # HTML: put the table in a <details> with this summary


@dataclass
class Folded:
    """Long detail kept out of the reader's way: HTML folds it into a <details> here; Markdown, which has
    no folding, says how many items there are here and lists them at the end of the document."""

    summary: str
    blocks: list
    count: int


@dataclass
class Image:
    path: Path  # PNG inside the report dir
    alt: str


@dataclass
class Document:
    title: str
    blocks: list = field(default_factory=list)

    def add(self, *blocks) -> None:
        self.blocks.extend(blocks)


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(doc: Document, report_dir: Path) -> str:
    lines = [f"# {doc.title}", ""]
    folded = []
    for block in doc.blocks:
        if isinstance(block, Folded):
            lines += [f"{block.summary}: {block.count}, listed at the end.", ""]
            folded.append(block)
        else:
            lines += _markdown_block(block, report_dir)
    for block in folded:
        lines += ["## " + block.summary, ""]
        for inner in block.blocks:
            lines += _markdown_block(inner, report_dir)
    return "\n".join(lines)


def _markdown_block(block, report_dir: Path) -> list[str]:
    if isinstance(block, Heading):
        return ["#" * block.level + " " + block.text, ""]
    if isinstance(block, Paragraph):
        prefix = "**Warning:** " if block.kind == "warning" else ""
        return [prefix + block.text, ""]
    if isinstance(block, BulletList):
        prefix = "⚠ " if block.kind == "warning" else ""
        return [f"- {prefix}{item}" for item in block.items] + [""]
    if isinstance(block, Table):
        return (["| " + " | ".join(_md_cell(h) for h in block.headers) + " |",
                 "|" + "|".join("---" for _ in block.headers) + "|"]
                + ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in block.rows] + [""])
    if isinstance(block, Image):
        return [f"![{block.alt}]({block.path.relative_to(report_dir).as_posix()})", ""]
    return []


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; background: #fff; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #bbb; padding: 3px 8px; }
th { background: #e8eef7; }
td { text-align: right; } td:first-child { text-align: left; }
table.text td { text-align: left; }
.warning { color: #8a4b00; background: #fff4e0; padding: 4px 8px; }
.note { color: #555; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0; }
"""


def to_html(doc: Document) -> str:
    """Self-contained HTML: plots are embedded as base64 so the file can be mailed or archived alone."""
    e = html.escape
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', f"<title>{e(doc.title)}</title>",
             f"<style>{_CSS}</style></head><body>", f"<h1>{e(doc.title)}</h1>"]
    parts += [_html_block(block) for block in doc.blocks]
    parts.append(f"<script>{_SORT_JS}</script></body></html>")
    return "\n".join(parts)


# A table cell sorts as a number only when its text starts with one, after optional whitespace and a ratio's "x"
# ("x1.32 [1.10–1.58]"): "21.0 [20.1–22.3]", "+46%", "-5%", "1.2x". Anything else sorts as text, after the numbers,
# so "— (no keras2-tensorflow [xla] cell)" is not read as the 2 in the name inside it. The script below uses this
# very pattern.
SORT_NUMBER = r"^\s*x?([+\-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+\-]?\d+)?)"

# Click a column header to sort its table (again: the other way). Inline, so the report stays one file that needs
# no network.
_SORT_JS = """
var SORT_NUMBER = new RegExp(%s);
document.querySelectorAll("table").forEach(function (table) {
  table.querySelectorAll("thead th").forEach(function (th, column) {
    th.title = "sort"; th.style.cursor = "pointer";
    th.addEventListener("click", function () {
      var body = table.tBodies[0], rows = Array.from(body.rows), up = th.dataset.order !== "up";
      function key(row) {
        var text = row.cells[column] ? row.cells[column].textContent.trim() : "";
        var number = SORT_NUMBER.exec(text);
        return number ? parseFloat(number[1]) : text.toLowerCase();
      }
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        if (typeof x !== typeof y) { return typeof x === "number" ? -1 : 1; }
        return (x < y ? -1 : x > y ? 1 : 0) * (up ? 1 : -1);
      });
      rows.forEach(function (row) { body.appendChild(row); });
      th.dataset.order = up ? "up" : "down";
    });
  });
});
""" % json.dumps(SORT_NUMBER)


def _html_block(block) -> str:
    e = html.escape
    if isinstance(block, Heading):
        return f"<h{block.level}>{e(block.text)}</h{block.level}>"
    if isinstance(block, Paragraph):
        return f'<p class="{block.kind}">{e(block.text)}</p>'
    if isinstance(block, BulletList):
        items = "".join(f"<li>{e(item)}</li>" for item in block.items)
        return f'<ul class="{block.kind}">{items}</ul>'
    if isinstance(block, Table):
        head = "".join(f"<th>{e(h)}</th>" for h in block.headers)
        body = "".join("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in row) + "</tr>" for row in block.rows)
        table = f'<table class="{block.css_class}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
        if block.collapsible:
            table = f"<details><summary>{e(block.collapsible)}</summary>{table}</details>"
        return table
    if isinstance(block, Folded):
        inner = "".join(_html_block(b) for b in block.blocks)
        return f"<details><summary>{e(block.summary)} ({block.count})</summary>{inner}</details>"
    if isinstance(block, Image):
        data = base64.b64encode(block.path.read_bytes()).decode("ascii")
        return f'<img alt="{e(block.alt)}" src="data:image/png;base64,{data}">'
    return ""
