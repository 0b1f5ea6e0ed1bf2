"""A minimal document model rendered twice: Markdown (report.md) and self-contained HTML (report.html).

Building the report once as blocks and rendering it twice keeps the two formats from drifting apart.
"""

from __future__ import annotations

import base64
import html
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
    for block in doc.blocks:
        if isinstance(block, Heading):
            lines += ["#" * block.level + " " + block.text, ""]
        elif isinstance(block, Paragraph):
            prefix = "**Warning:** " if block.kind == "warning" else ""
            lines += [prefix + block.text, ""]
        elif isinstance(block, BulletList):
            prefix = "⚠ " if block.kind == "warning" else ""
            lines += [f"- {prefix}{item}" for item in block.items] + [""]
        elif isinstance(block, Table):
            lines.append("| " + " | ".join(_md_cell(h) for h in block.headers) + " |")
            lines.append("|" + "|".join("---" for _ in block.headers) + "|")
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in block.rows]
            lines.append("")
        elif isinstance(block, Image):
            lines += [f"![{block.alt}]({block.path.relative_to(report_dir).as_posix()})", ""]
    return "\n".join(lines)


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
    for block in doc.blocks:
        if isinstance(block, Heading):
            parts.append(f"<h{block.level}>{e(block.text)}</h{block.level}>")
        elif isinstance(block, Paragraph):
            parts.append(f'<p class="{block.kind}">{e(block.text)}</p>')
        elif isinstance(block, BulletList):
            items = "".join(f"<li>{e(item)}</li>" for item in block.items)
            parts.append(f'<ul class="{block.kind}">{items}</ul>')
        elif isinstance(block, Table):
            head = "".join(f"<th>{e(h)}</th>" for h in block.headers)
            body = "".join("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in row) + "</tr>" for row in block.rows)
            table = f'<table class="{block.css_class}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
            if block.collapsible:
                table = f"<details><summary>{e(block.collapsible)}</summary>{table}</details>"
            parts.append(table)
        elif isinstance(block, Image):
            data = base64.b64encode(block.path.read_bytes()).decode("ascii")
            parts.append(f'<img alt="{e(block.alt)}" src="data:image/png;base64,{data}">')
    parts.append("</body></html>")
    return "\n".join(parts)
