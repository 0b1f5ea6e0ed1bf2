"""MkDocs hook: the site's home page is README.md itself, served as `index.md`.

README.md links to the pages as `docs/<page>.md`; on the site they sit beside the home page, so those links
lose their `docs/` prefix. Nothing is copied into docs/: the home page cannot drift from the README.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File, Files

README = Path(__file__).resolve().parents[2] / "README.md"
DOCS_LINK = re.compile(r"\]\(docs/")


def home_markdown(readme: str) -> str:
    """README.md's text with its links into docs/ made relative to the site's root."""
    return DOCS_LINK.sub("](", readme)


def on_files(files: Files, config) -> Files:
    files.append(File.generated(config, "index.md", content=home_markdown(README.read_text(encoding="utf-8"))))
    return files
