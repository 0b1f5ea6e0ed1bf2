"""Where the GPU kit keeps its files, and the one error it reports.

The kit runs from a checkout of the repository (the GPU host receives a copy of it and has no fwbench installed):
the kit's folder (.gpu-kit/ by default), the published results (benchmarks/results/), the pin sets (images/) and
users' model files are found from the checkout's root.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
DATA = Path(__file__).resolve().parent / "data"
LOCK = DATA / "wheelhouse.lock.json"  # the wheelhouse's files and SHA-256, per Python version
SIMULATED_IMAGE = DATA / "simulated-image.txt"  # what the host's image has (tests/test_gpu_kit.py builds it)
RESULTS = REPO / "benchmarks" / "results"
DEFAULT_KIT_DIR = REPO / ".gpu-kit"
# The files a window brings back (the host returns at most 8); the rows and the check cells' rows are packed into
# rows.tar.gz.
EXPORTED = ("rows.tar.gz", "report.md", "host.json", "nvidia-smi.txt", "kit-state.json", "checks.txt", "doctor.txt",
            "kit.log")
ROW_FOLDERS = ("rows", "checks")


class KitError(Exception):
    """A kit failure the user can act on: one `error: ...` line, exit 1."""


def checkout() -> Path:
    """The repository the kit runs from (KitError for an installed fwbench, which has none)."""
    if not ((REPO / "pyproject.toml").is_file() and (REPO / "runner" / "fwbench").is_dir()):
        raise KitError("the GPU kit runs from a checkout of the repository (PYTHONPATH=runner:aggregator), not from "
                       "an installed fwbench")
    return REPO


@dataclass(frozen=True)
class KitFolders:
    """The kit's folder (`--kit-dir`: the wheelhouse, the installed wheels, the shared data, fwbench's home and the
    commit `prepare` recorded) and the window's folder (`--out`: rows, checks, report and the kit's own files)."""

    root: Path
    out: Path

    @classmethod
    def at(cls, root: Path | None = None, out: Path | None = None) -> "KitFolders":
        root = (root or DEFAULT_KIT_DIR).resolve()
        return cls(root, (out or root / "out").resolve())

    @property
    def wheels(self) -> Path:
        return self.root / "wheels"

    @property
    def site(self) -> Path:
        return self.root / "site"  # where the wheels are installed (--no-index --no-deps), put on PYTHONPATH

    @property
    def data(self) -> Path:
        return self.root / "data"  # fwbench's shared input data

    @property
    def home(self) -> Path:
        return self.root / "home"  # FWBENCH_HOME of the cells

    @property
    def source(self) -> Path:
        return self.root / "source.json"  # the commit `prepare` recorded (the host's copy may carry no .git)

    @property
    def state(self) -> Path:
        return self.out / "kit-state.json"

    @property
    def log(self) -> Path:
        return self.out / "kit.log"

    @property
    def rows(self) -> Path:
        return self.out / "rows"

    @property
    def checks(self) -> Path:
        return self.out / "checks"
