"""The window's report: `fwbench aggregate` over its rows, in its own process with the kit's path."""

from __future__ import annotations

import subprocess
import sys

from fwbench.kit.install import kit_environment
from fwbench.kit.layout import REPO, KitError, KitFolders
from fwbench.kit.log import log


def aggregate(folders: KitFolders, timeout_s: float = 300.0) -> None:
    """report/report.md from every row of the window's folder (KitError when aggregate fails or overruns)."""
    if not any(folders.rows.rglob("*.parquet")):
        log("no rows yet: no report")
        return
    try:
        done = subprocess.run([sys.executable, "-m", "fwbench.cli", "aggregate", str(folders.rows), "-o",
                               str(folders.out / "report")], env=kit_environment(folders), capture_output=True,
                              text=True, cwd=REPO, timeout=max(timeout_s, 10))
    except subprocess.TimeoutExpired:
        raise KitError(f"fwbench aggregate did not finish in {timeout_s:.0f} s") from None
    if done.returncode != 0:
        raise KitError(f"fwbench aggregate failed: {(done.stderr or done.stdout).strip()[-400:]}")
    log(f"report: {folders.out / 'report' / 'report.md'}")
