"""Write images/Dockerfile.classic: images/Dockerfile for Docker's classic builder (no BuildKit).

The classic builder refuses `RUN --mount=...` ("the --mount option requires BuildKit"), which images/Dockerfile
uses for its shared uv cache. The classic file is the same build with those flags removed: each RUN that had a
cache mount already deletes the cache folder when it is not a mount point, so no layer grows. It is generated,
never edited, so the two cannot drift; tests/test_images.py checks that it is current.

    python3 images/tools/classic_dockerfile.py           write it
    python3 images/tools/classic_dockerfile.py --check   exit 1 if it is out of date
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

IMAGES = Path(__file__).resolve().parent.parent
SOURCE = IMAGES / "Dockerfile"
TARGET = IMAGES / "Dockerfile.classic"

HEADER = ("# GENERATED from images/Dockerfile by images/tools/classic_dockerfile.py; do not edit.\n"
          "# The same build for Docker's classic builder (no BuildKit): the RUN cache mounts are removed, so every\n"
          "# download comes from the registry again. Select it with FWBENCH_DOCKERFILE=images/Dockerfile.classic\n"
          "# (compose) or docker build -f images/Dockerfile.classic.\n")

# `--mount=...` directly after RUN (BuildKit's form; several may follow each other).
MOUNT = re.compile(r"^(RUN)((?:\s+--mount=\S+)+)[ \t]*(\\\n)?[ \t]*", re.M)


def classic(text: str) -> str:
    def drop_mounts(match: re.Match) -> str:
        return f"{match.group(1)} "
    converted = MOUNT.sub(drop_mounts, text)
    if "--mount=" in converted:
        raise SystemExit("classic_dockerfile: a --mount= flag that is not right after RUN; cannot convert")
    return HEADER + converted


def main(argv: list[str]) -> int:
    wanted = classic(SOURCE.read_text())
    if argv == ["--check"]:
        if not TARGET.is_file() or TARGET.read_text() != wanted:
            print("images/Dockerfile.classic is out of date: run python3 images/tools/classic_dockerfile.py",
                  file=sys.stderr)
            return 1
        return 0
    if argv:
        print("usage: python3 images/tools/classic_dockerfile.py [--check]", file=sys.stderr)
        return 2
    TARGET.write_text(wanted)
    print(f"wrote {TARGET.relative_to(IMAGES.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
