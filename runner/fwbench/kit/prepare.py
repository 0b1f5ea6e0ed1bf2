"""`fwbench kit prepare`, here (with network) before a window: the wheelhouse made where it is missing or differs
from the lock, the commit recorded for the host (whose copy of the repository may carry no .git, or a stale one),
and the device call printed: the one command a window runs there, with the host's stock Python and no fwbench
installed (this checkout's runner/ and aggregator/ on PYTHONPATH)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from fwbench.core.atomic import write_atomically
from fwbench.kit import wheelhouse
from fwbench.kit.layout import DEFAULT_KIT_DIR, REPO, KitError, KitFolders
from fwbench.kit.source import git_source

DEVICE_COMMAND = ('PYTHONUNBUFFERED=1 PYTHONPATH=runner:aggregator python3 -m fwbench.cli kit window --preset paper '
                  '--budget-s 540 --export "$OUT"')


def shown(path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def prepare(folders: KitFolders, *, python_version: str = wheelhouse.HOST_PYTHON,
            update_lock: bool = False) -> list[str]:
    """The lines to print: the wheelhouse, the commit, the device call."""
    tag = wheelhouse.python_tag(python_version)
    lines = []
    if update_lock or wheelhouse.differing(folders.wheels, tag):
        entries, total = wheelhouse.build(folders.wheels, python_version, update_lock=update_lock)
        lines += [f"{entry['filename']:<60} {entry['bytes'] / 2**20:6.2f} MiB  sha256 {entry['sha256'][:16]}..."
                  for entry in entries]
        lines.append(f"wheelhouse: {len(entries)} wheels, {total / 2**20:.2f} MiB (limit "
                     f"{wheelhouse.LIMIT_BYTES / 2**20:.0f} MiB) in {folders.wheels}")
    entries = wheelhouse.locked_wheels(tag)
    source = {**git_source(), "prepared_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    if not source["git_revision"]:
        raise KitError("no git commit here: prepare from a git checkout")
    write_atomically(folders.source, json.dumps(source, indent=2) + "\n")
    size = sum(entry["bytes"] for entry in entries)
    lines.append(f"wheelhouse ok ({len(entries)} wheels for {tag}, {size / 2**20:.1f} MiB); commit "
                 f"{source['git_revision'][:12]}" + (" with uncommitted changes (commit first: the results name this "
                                                     "commit)" if source["git_dirty"] else ""))
    command = DEVICE_COMMAND + ("" if folders.root == DEFAULT_KIT_DIR else f" --kit-dir {shown(folders.root)}")
    lines.append(f"device call: carry [\"{shown(folders.wheels)}\", \"{shown(folders.source)}\"], timeout_s 600, "
                 f"from the repository's root:\n  {command}")
    return lines
