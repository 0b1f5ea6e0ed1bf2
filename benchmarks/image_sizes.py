"""Image size vs the installed size of the stack's own wheels (target: image <= 1.15 x wheels).

    python benchmarks/image_sizes.py [--variant cpu] [--pin-set current] [--json FILE]

Needs a Docker engine and the built images (docker compose -f compose.cpu.yaml build). Prints a
Markdown table: image size (as `docker image ls` counts it), installed size of the lock file's packages
(the venv's site-packages), and their ratio; the difference is the OS, Python, compiler and fwbench.
`--json FILE` also writes the run as benchmarks/measurement_log.py's shape (rows: image, image_gb, wheels_gb, ratio),
which `python benchmarks/render_measurements.py FILE` renders (docs/docker.md's table).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

STACKS = ("native-torch", "keras3-tensorflow", "keras3-jax", "keras3-torch", "keras2-tensorflow")
TARGET_RATIO = 1.15


def gb(n_bytes: int) -> str:
    return f"{n_bytes / 1e9:.2f} GB"


def json_record(rows: list[dict], args: argparse.Namespace, started) -> dict:
    """The run as a measurement log: its rows, settings and target."""
    import measurement_log

    worst = max((row["ratio"] for row in rows if row.get("ratio") is not None), default=None)
    return measurement_log.record(
        "image_sizes.py", rows, started=started, settings={"pin set": args.pin_set, "variant": args.variant},
        target=f"image <= {TARGET_RATIO} x installed wheels",
        figures=None if worst is None else [["worst ratio", worst, ".2f"]])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="cpu")
    parser.add_argument("--pin-set", default="current")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the run as a measurement log")
    args = parser.parse_args()
    import docker

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import measurement_log

    started = measurement_log.now()
    client = docker.from_env()
    print("| image | image size | installed wheels | ratio |")
    print("|---|---|---|---|")
    worst = 0.0
    rows = []
    for stack in STACKS:
        name = f"fwbench/{stack}:{args.pin_set}-{args.variant}"
        try:
            image = client.images.get(name)
        except docker.errors.ImageNotFound:
            print(f"| `{name}` | not built | | |")
            rows.append({"image": name, "note": "not built"})
            continue
        output = client.containers.run(
            image.id, entrypoint=["python", "-c"], remove=True,
            command=["import sysconfig, subprocess; "
                     "print(subprocess.check_output(['du', '-sb', sysconfig.get_paths()['purelib']]).split()[0].decode())"])
        wheels = int(output.decode().strip())
        ratio = image.attrs["Size"] / wheels
        worst = max(worst, ratio)
        print(f"| `{name}` | {gb(image.attrs['Size'])} | {gb(wheels)} | {ratio:.2f} |")
        rows.append({"image": name, "image_gb": image.attrs["Size"] / 1e9, "wheels_gb": wheels / 1e9,
                     "ratio": ratio})
    print(f"\nworst ratio {worst:.2f} (target <= {TARGET_RATIO})")
    if args.json:
        measurement_log.write(args.json, json_record(rows, args, started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
