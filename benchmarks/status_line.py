"""README's status line, counted from the GPU result rows committed under benchmarks/results/<date>-<gpu>/rows/.

    python benchmarks/status_line.py

Prints one line: the latest date a row was started, and per GPU the cells that have at least one ok row (a cell:
a cell identity, fwbench.core.identity), linked to the GPU's results page (docs/results-<gpu>.md).
README.md's generated block is its output (benchmarks/docblocks.py checks it), so the line cannot claim more
than the rows hold. Reads rows with pyarrow only (no framework import).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
sys.path.insert(0, str(REPO / "runner"))

from fwbench.core.identity import CellIdentity  # noqa: E402
from fwbench.core.results import read_row  # noqa: E402

# Letters whose names start with a vowel sound: "an H100", "an A100", "a B200".
AN_LETTERS = set("AEFHILMNORSX")


@dataclass
class GpuResults:
    name: str  # as the rows name the device, e.g. "NVIDIA H100 80GB HBM3"
    cells: set[CellIdentity] = field(default_factory=set)
    ok_rows: int = 0
    dates: set[str] = field(default_factory=set)

    @property
    def short(self) -> str:
        """'NVIDIA H100 80GB HBM3' -> 'H100': what the docs call the GPU, and its page's name."""
        found = re.search(r"\b([A-Z]{1,3}\d{1,4}\w*)\b", self.name)
        return found.group(1) if found else self.name.removeprefix("NVIDIA ").strip()

    @property
    def page(self) -> str:
        return f"docs/results-{self.short.lower()}.md"


def gpu_results(results: Path = RESULTS) -> dict[str, GpuResults]:
    """Per GPU (the ok rows' device_name), over every results folder that holds rows."""
    found: dict[str, GpuResults] = {}
    for path in sorted(results.glob("*/rows/**/*.parquet")):
        row = read_row(path)
        if not row or row.get("status") != "ok" or row.get("device") == "cpu":
            continue
        name = row.get("device_name") or row.get("device_model") or "GPU"
        gpu = found.setdefault(name, GpuResults(name))
        gpu.cells.add(CellIdentity.of_row(row))
        gpu.ok_rows += 1
        gpu.dates.add(f"{row['started_at']:%Y-%m-%d}")
    return found


def status_line(found: dict[str, GpuResults]) -> str:
    if not found:
        return "**Status:** no GPU results yet."
    latest = max(date for gpu in found.values() for date in gpu.dates)
    parts = []
    for gpu in sorted(found.values(), key=lambda gpu: -len(gpu.cells)):
        article = "an" if gpu.short[:1] in AN_LETTERS else "a"
        where = f"[results]({gpu.page})" if (REPO / gpu.page).is_file() else gpu.name
        cells = f"{len(gpu.cells)} cell{'s' if len(gpu.cells) != 1 else ''}"
        parts.append(f"{cells} ran on {article} {gpu.short}: {where}")
    return f"**Status ({latest}):** " + "; ".join(parts) + "."


def main() -> int:
    print(status_line(gpu_results()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
