"""fwbench: reproducible Keras 3 / Keras 2 / native PyTorch benchmarks."""

from __future__ import annotations

import re
from pathlib import Path


def _version() -> str:
    """The version pyproject.toml declares: read from it in a checkout (the local engine imports the checkout, where
    no fwbench distribution may be installed, and an editable install's metadata keeps the version it was installed
    at), else from the installed distribution's metadata (an image)."""
    package = Path(__file__).resolve().parent
    pyproject = package.parents[1] / "pyproject.toml"
    if package.parent.name == "runner" and pyproject.is_file():
        declared = _project_version(pyproject.read_text())
        if declared:
            return declared
    from importlib import metadata

    try:
        return metadata.version("fwbench")
    except metadata.PackageNotFoundError:
        return "unknown"


def _project_version(pyproject: str) -> str | None:
    """[project] version = "..." (a regular expression: tomllib is not in Python 3.10, and the file is ours)."""
    project = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", pyproject, flags=re.M | re.S)
    declared = re.search(r'^version\s*=\s*"([^"]+)"', project.group(1), flags=re.M) if project else None
    return declared.group(1) if declared else None


__version__ = _version()
