"""The kit's status lines: on stdout as they happen and, during a window, in its kit.log beside the cells' output."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

# Where log() also appends its lines, while a window runs (window sets and clears it).
LOG_PATH: Path | None = None


def log(message: str) -> None:
    line = f"[kit {datetime.now(timezone.utc):%H:%M:%S}] {message}"
    print(line, flush=True)
    if LOG_PATH is not None:
        with open(LOG_PATH, "a") as handle:
            handle.write(line + "\n")
