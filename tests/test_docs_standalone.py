"""The docs stand alone: no citation of paths outside the repository, and every relative link resolves."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "runner" / "fwbench" / "core" / "registry.py",
        ROOT / "runner" / "fwbench" / "core" / "models.py"]
LINK = re.compile(r"\]\(([^)#\s]+)")


def test_no_paths_outside_the_repository():
    for path in DOCS:
        text = path.read_text()
        assert "shared/" not in text and "../reference" not in text, path
        for target in LINK.findall(text):
            if "://" in target:
                continue
            resolved = (path.parent / target).resolve()
            assert resolved.is_relative_to(ROOT) and resolved.exists(), (path, target)
