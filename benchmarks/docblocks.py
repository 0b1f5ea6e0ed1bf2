"""Generated blocks in the docs: each names the command that renders it from result files, and can be checked.

A block in a Markdown file (docs/*.md, README.md) looks like

    <!-- BEGIN generated: python benchmarks/verdict_error_rates.py --render-rank benchmarks/results/X/verdict-rank.json -->
    ...the command's standard output...
    <!-- END generated -->

    python benchmarks/docblocks.py --check          # every block equals its command's output now (exit 1 if not)
    python benchmarks/docblocks.py --write [FILES]  # re-render every block in place

A command is `python benchmarks/<script>.py ARGS...` (or `python -m fwbench...` for a renderer in the package), run from the repository root with this interpreter; it must
read result files (rows, JSON under benchmarks/results/) and print Markdown, never measure. tests/test_generated_docs.py
runs --check, so a figure in a block cannot drift from the file it was made from.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"<!-- BEGIN generated: (?P<command>[^\n]*?) -->\n(?P<body>.*?)<!-- END generated -->", re.S)


class BadBlock(ValueError):
    pass


@dataclass
class Block:
    path: Path
    command: str
    body: str
    start: int
    end: int


def blocks(path: Path) -> list[Block]:
    text = path.read_text()
    found = [Block(path, m["command"], m["body"], m.start("body"), m.end("body")) for m in BLOCK.finditer(text)]
    if text.count("<!-- BEGIN generated:") != len(found):
        raise BadBlock(f"{path}: a '<!-- BEGIN generated:' without an END")
    return found


def argv(command: str) -> list[str]:
    words = shlex.split(command)
    script = len(words) >= 2 and words[1].startswith("benchmarks/") and words[1].endswith(".py")
    module = len(words) >= 3 and words[1] == "-m" and words[2].split(".")[0] in ("fwbench", "fwbench_aggregator")
    if not words or words[0] != "python" or not (script or module):
        raise BadBlock(f"not a renderer command (python benchmarks/<script>.py or python -m fwbench...): {command!r}")
    return [sys.executable, *words[1:]]


def render(block: Block, root: Path = REPO) -> str:
    done = subprocess.run(argv(block.command), cwd=root, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise BadBlock(f"{block.path}: {block.command!r} failed: {done.stderr.strip()[-500:]}")
    return done.stdout.rstrip("\n") + "\n"


def markdown_files(root: Path = REPO) -> list[Path]:
    return sorted((root / "docs").glob("*.md")) + [root / "README.md"]


def check(paths: list[Path], root: Path = REPO) -> list[str]:
    """One line per block whose text differs from what its command prints now."""
    stale = []
    for path in paths:
        for block in blocks(path):
            if render(block, root) != block.body:
                stale.append(f"{path.relative_to(root)}: stale block from {block.command!r}")
    return stale


def write(paths: list[Path], root: Path = REPO) -> int:
    changed = 0
    for path in paths:
        text = path.read_text()
        for block in reversed(blocks(path)):  # from the end: earlier offsets stay valid
            body = render(block, root)
            if body != block.body:
                text, changed = text[:block.start] + body + text[block.end:], changed + 1
        path.write_text(text)
    return changed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--write", action="store_true")
    parser.add_argument("files", nargs="*", type=Path)
    args = parser.parse_args()
    paths = [p.resolve() for p in args.files] or markdown_files()
    try:
        if args.write:
            print(f"{write(paths)} block(s) re-rendered")
            return 0
        stale = check(paths)
    except BadBlock as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for line in stale:
        print(line, file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
