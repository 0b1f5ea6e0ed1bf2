"""The commit the kit runs. `prepare` records it beside the wheelhouse (source.json), because the host's copy of the
repository may carry no .git, or a stale one (seen there: its HEAD was the session's first commit, not the one that
ran); the kit declares it to every cell (its rows' source_commit)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from fwbench.kit.layout import REPO


def git_source() -> dict:
    """This checkout's commit and whether files differ from it (None where there is no git or no .git)."""
    def git(*argv: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(REPO), *argv], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    revision, changes = git("rev-parse", "HEAD"), git("status", "--porcelain", "--untracked-files=no")
    return {"git_revision": revision.strip() if revision else None,
            "git_dirty": None if changes is None else bool(changes.strip())}


def source_revision(source: Path) -> dict:
    """The commit the kit runs: what `prepare` wrote to `source` where it did, else git's, else FWBENCH_GIT_REVISION;
    with where it was read and what git says beside it."""
    found = git_source()
    if source.is_file():
        saved = json.loads(source.read_text())
        return {"git_revision": saved.get("git_revision"), "git_dirty": saved.get("git_dirty"),
                "git_revision_from": f"{source.name} (prepared {saved.get('prepared_at')})",
                "git_revision_seen_by_git": found["git_revision"]}
    if found["git_revision"]:
        return {**found, "git_revision_from": "git"}
    revision = os.environ.get("FWBENCH_GIT_REVISION")
    return {"git_revision": revision, "git_dirty": None,
            "git_revision_from": "FWBENCH_GIT_REVISION" if revision else "nowhere (no .git, no source.json)"}


def declared_commit(source: Path) -> str | None:
    """source_revision's commit, without asking git where prepare's record is there: kit_environment reads it
    before every cell, and only the commit goes to the cells."""
    if source.is_file():
        return json.loads(source.read_text()).get("git_revision")
    return source_revision(source)["git_revision"]
