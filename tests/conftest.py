"""Shared fixtures. Integration tests use the real stack environments of the local engine
(built on first use, cached under $FWBENCH_HOME or ~/.cache/fwbench)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FWBENCH = [sys.executable, "-m", "fwbench.cli"]
REPO_ROOT = Path(__file__).resolve().parents[1]


def locked_version(stack_id: str, pin_set: str = "current") -> str:
    """The version of a stack's framework its environment installs (images/<stack>/<pin-set>/ lock file; the
    local engine and the image install it), so tests follow every lock refresh."""
    from fwbench.core import registry

    framework = registry.get_stack(stack_id).framework
    lock = REPO_ROOT / "images" / stack_id / pin_set / "requirements-cpu.lock"
    for line in lock.read_text().splitlines():
        name, _, version = line.split("#", 1)[0].strip().partition("==")
        if name.strip().lower() == framework:
            return version.split()[0].strip()
    raise AssertionError(f"{lock} does not pin {framework}")


def run_fwbench(*args: str, timeout: float = 3600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*FWBENCH, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


@pytest.fixture(autouse=True)
def _no_terminal_size(monkeypatch):
    """Tables are printed at their full width when there is no terminal; a COLUMNS inherited from whoever runs the
    tests (a CI runner sets 80) would make rich wrap them, and the tests read whole phrases."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


@pytest.fixture(scope="session")
def shared_data(tmp_path_factory) -> Path:
    """One shared data directory for every integration test, like a real run."""
    from fwbench.core import data

    directory = tmp_path_factory.mktemp("fwbench-data")
    data.generate(directory, "tiny")
    return directory


HOG = "import time\nend = time.time() + 120\nwhile time.time() < end: pass"


@pytest.fixture
def cpu_hogs():
    """One busy-looping process per core: whatever else runs, a cell beside them is competing."""
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(os.cpu_count() or 1)]
    import time

    time.sleep(0.3)
    yield hogs
    for hog in hogs:
        hog.kill()
        hog.wait()


@pytest.fixture
def key_pair(tmp_path):
    """A throwaway SSH signing key and the allowed-signers file naming it publisher@fwbench."""
    if shutil.which("ssh-keygen") is None:
        pytest.skip("no ssh-keygen")
    key = tmp_path / "keys" / "publisher"
    key.parent.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "publisher", "-f", str(key)], check=True)
    allowed = tmp_path / "keys" / "allowed_signers"
    allowed.write_text(f"publisher@fwbench {key.with_suffix('.pub').read_text()}")
    return key, allowed
