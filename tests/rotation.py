"""Which stacks of a slow integration matrix a test run covers (CI time; docs/development.md#ci).

A few integration fixtures run the same check on every stack, each cell a real framework process. Those fixtures run
some stacks every time (`always`) and the others by rotation, `per_run` at a time, chosen from the commit hash as
.ci/run chooses its images: successive commits cover every stack, and one commit always runs the same ones.
FWBENCH_TEST_ROTATION=all runs every stack; an integer picks that rotation; unset, the commit's (0 outside git).
A test whose stack a run leaves out skips, naming the stacks that ran and how to run them all.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

from tests.conftest import REPO_ROOT

VARIABLE = "FWBENCH_TEST_ROTATION"


def rotation_index() -> int | None:
    """This run's rotation: None for every stack (FWBENCH_TEST_ROTATION=all), else an integer."""
    value = os.environ.get(VARIABLE, "").strip()
    if value == "all":
        return None
    if value:
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"{VARIABLE}={value!r}: expected 'all' or an integer") from None
    try:
        commit = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                                text=True, timeout=30).stdout.strip()
        return int(commit, 16)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return 0


def rotated(stacks: Sequence[str], *, always: Sequence[str] = (), per_run: int = 1) -> list[str]:
    """`always`, plus `per_run` of the other stacks by this run's rotation (every stack with none), in `stacks`'
    order."""
    index = rotation_index()
    others = [stack for stack in stacks if stack not in always]
    if index is None or per_run >= len(others):
        return list(stacks)
    picked = {others[(index + offset) % len(others)] for offset in range(per_run)}
    return [stack for stack in stacks if stack in always or stack in picked]


def rotated_part(parts: Sequence[Sequence[str]], *, turn: int) -> list[str]:
    """One of `parts` by this run's rotation, advancing every `turn` rotations (so that the `turn` stacks a fixture
    rotates over each run every part before the next part comes up); every part's members with no rotation."""
    index = rotation_index()
    if index is None:
        return [member for part in parts for member in part]
    return list(parts[(index // turn) % len(parts)])


def skip_reason(stack: str, ran: Sequence[str]) -> str:
    return (f"{stack} is not in this run's rotation (ran: {', '.join(ran)}; {VARIABLE}=all runs every stack)")
